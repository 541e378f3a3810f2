"""Observing: cursors read from the plugin's feed and from ``internalStats`` polls, and claims published.

Round step 4 (``runtime``): cursors from the feed (only subscriptions consumers just acknowledged on) and
from polls paced by ``geosync_core.pacing``, taken by the core (``core.stepping.step`` with ``CursorsRead``:
rewinds judged), then the claims of the subscriptions the look chose decided by it (``ClaimsDue``) and
queued when they changed, to be sealed and sent by ``controlling``. What is left here: which topics are
read when (the feed's turns and what they leave, the polls due, their budget), a subscription's type
learned between the two (an admin call), snapshot mode's markers; after a poll, the core says when the
next is (``Polled``), given a random draw.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from geosync_adapters import adminhttp
from geosync_agent import calls
from geosync_agent.agentstate import Now, TopicState
from geosync_agent.core import reports, stepping, tuning
from geosync_agent.core.subscriptions import (
    Subscription,
)
from geosync_agent.feeding import Feeding
from geosync_core.capabilities import Capability
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")


class Observing(Feeding):
    """Cursors observed (feed, polls) and claims decided and published (round step 4)."""

    # -- 4. observe and publish ------------------------------------------------------------------

    def observe_feed(self, now: Now) -> None:
        """Take the cursors the plugin's feed reported, and send what moved at once: not after the polls (at
        10,000 subscriptions a saturated machine's polls took up to 2.9 s of a round). Before them: a poll
        cannot see batch indexes, and keeps those the feed reported (``_observe``).
        Within its budget (``over_budget``): the topics it did not get to wait for its next turn
        (``feed_left``), and are looked at first then."""
        self.heavy_publishes = self.subs.still_held(self.heavy_publishes_by)
        fed = self._read_feed(now)  # first: it starts tracking what it names that discovery has not found yet
        fed = self._with_left(fed)
        if fed:
            by_topic = self.subs.by_topic(existing_only=True, topics=fed)
            topics = list(fed)
            for i, topic in enumerate(topics):
                if i and self.over_budget(now):
                    self._leave(topics[i:], fed)
                    break
                cursors = fed[topic]
                ts = self.topics.get(topic)
                if ts is not None and self.outran_tail(ts, cursors) and self.tail_gone(ts, None, now):
                    continue
                self._observe(topic, by_topic[topic], cursors, force=False, now=now, polled=False)
        self._flush_states(now, announce=False)  # the polls' flush announces, where there is nothing to send

    def _leave(self, topics: list[str], fed: dict[str, dict[str, AckState]]) -> None:
        """Carry what the feed step read of ``topics`` and did not look at to its next turn (``feed_left``),
        with each subscription's cursor now: a write that sets another before then makes the report old."""
        held = self.feed.held_looks
        for topic in topics:
            self.feed_left[topic] = {
                name: (
                    cursor,
                    None if (state := self.subs.get((topic, name))) is None else state.cursor,
                    (topic, name) in held,
                )
                for name, cursor in fed[topic].items()
            }
        self.stats.inc("feed_turns_cut")
        self.stats.inc("feed_topics_left", len(topics))

    def _with_left(self, fed: dict[str, dict[str, AckState]]) -> dict[str, dict[str, AckState]]:
        """What the last feed step left (``feed_left``), first, with this read's ``fed`` over it: a newer
        report of a subscription replaces the one left, and a report left is not replaced by a held look
        (the cursor held here, which lacks what the report showed). A report left is dropped where a write
        set another cursor since (newer: the broker's after the write), and so is all that was left of a
        topic no longer tracked or owned here. A held look left is the cursor held now."""
        left, self.feed_left = self.feed_left, {}
        if not left:
            return fed
        held = self.feed.held_looks
        fresh_held = set(held)
        reports_left: set[tuple[str, str]] = set()
        out: dict[str, dict[str, AckState]] = {}
        for topic, looks in left.items():
            if topic not in self.topics or not self.owns(topic):
                continue
            for name, (reported, base, was_held) in looks.items():
                key = (topic, name)
                state = self.subs.get(key)
                if state is None or not state.exists or state.cursor is None:
                    continue
                if was_held:
                    held.add(key)
                elif state.cursor is not base:
                    self.stats.inc("feed_reports_left_superseded")
                    continue
                else:
                    reports_left.add(key)
                out.setdefault(topic, {})[name] = state.cursor if was_held else reported
        for topic, cursors in fed.items():
            for name, cursor in cursors.items():
                key = (topic, name)
                if key not in fresh_held:
                    held.discard(key)  # a report: no held look, even if one was left
                elif key in reports_left:
                    held.discard(key)  # the report left says more than the cursor held here
                    continue
                out.setdefault(topic, {})[name] = cursor
        return out

    def poll(self, now: Now) -> None:
        """Read the cursors due a poll (every one at its topic's resync, to publish them whole) through the
        admin API, and send what they changed. Within its budget (``over_budget``): the topics it did not get
        to stay due, and are polled first by its next turn (``polls_left``)."""
        period = self.resync_period()
        if self.sends_lost and self.publish_failing_since is None:
            # Sends failed and sending works again: what they carried goes out again soon, not a period on.
            self.sends_lost = False
            self.stats.inc("resyncs_after_lost_sends")
            for ts in self.topics.values():
                ts.resync_at = min(ts.resync_at, now.mono + self.rng.random() * tuning.RESYNC_AFTER_LOSS_S)
        # Only the topics due: sorting out the subscriptions that exist, for every topic, was most of an idle
        # round's polls at 10,000 subscriptions.
        # Not those whose feed reports wait for the feed step's next turn (``feed_left``): a report looked
        # at after a poll would be older than what the poll read. They are polled after it.
        tracked, left = self.topics, self.feed_left
        by_topic = self.subs.by_topic(
            existing_only=True,
            topics=[
                t
                for t in self.subs.by_topic(existing_only=False)
                if (seen := tracked.get(t)) is not None
                and now.mono >= min(seen.resync_at, seen.poll.next_at)
                and t not in left
            ],
        )
        # Each at its resync or its poll's time; first those the last turn did not get to. A turn polls
        # POLLS_AT_ONCE topics at a time until its budget is used (all at once where the round's time stands
        # still: nothing is cut there), and leaves the rest due for the next.
        earlier = [t for t in self.polls_left if t in by_topic]
        first = set(earlier)
        due = earlier + [t for t in by_topic if t not in first]
        self.polls_left = []
        at_once = tuning.POLLS_AT_ONCE if now.clock is not None else max(1, len(due))
        unreachable: list[str] = []
        for start in range(0, len(due), at_once):
            if start and self.over_budget(now):
                self.polls_left = due[start:]
                self.stats.inc("poll_turns_cut")
                break
            self._poll_some(due[start : start + at_once], by_topic, period, unreachable, now)
        if unreachable:
            self.stats.inc("polls_owner_unreachable", len(unreachable))
            log.warning(
                "the owners of %d topic(s) do not answer (%s...): their cursors are read again in %.0f s",
                len(unreachable),
                unreachable[0],
                tuning.STALLED_S,
            )
        self._flush_states(now)

    def _poll_some(
        self,
        due: list[str],
        by_topic: dict[str, list[Subscription]],
        period: float,
        unreachable: list[str],
        now: Now,
    ) -> None:
        """Poll the cursors of the topics ``due`` and take them (``_observe``); each at its resync publishes
        them whole (its next one ``period`` on). Topics whose owner does not answer go to ``unreachable``."""
        resync = set()
        for topic in due:
            ts = self.topics[topic]
            if now.mono >= ts.resync_at:
                resync.add(topic)
                ts.resync_at = now.mono + period
        if resync:
            self.stats.inc("cursor_polls_for_resyncs", len(resync))
        for topic, internal in zip(due, self.effector.map(self._internal_stats, due), strict=True):
            if isinstance(internal, adminhttp.OwnerUnreachable):
                # Its owner died: this topic waits (the others' polls, claims and writes go on).
                unreachable.append(topic)
                ts = self.topics[topic]
                ts.poll = replace(ts.poll, next_at=now.mono + tuning.STALLED_S)
                if topic in resync:
                    ts.resync_at = now.mono + tuning.STALLED_S
                continue
            if internal is None or self.tail_gone(self.topics[topic], internal, now):
                continue
            self.stats.inc("cursor_polls")
            if self.caps.get(Capability.PLUGIN_FEED) is not True:
                self.stats.inc("cursor_polls_without_feed")
            reloaded = self._reloaded(self.topics[topic], internal)
            cursors = {
                name: AckState.parse(
                    str(raw["markDeletePosition"]), str(raw.get("individuallyDeletedMessages") or "[]")
                )
                for name, raw in (internal.get("cursors") or {}).items()
            }
            states, force = by_topic[topic], topic in resync
            self._observe(topic, states, cursors, force=force, now=now, polled=True, reloaded=reloaded)

    def _reloaded(self, ts: TopicState, internal: dict[str, Any]) -> bool:
        """Whether the topic writes to another ledger than at the last poll: it was unloaded and loaded again
        (a bundle moved, a broker restarted) or rolled over. Either way the batch indexes its cursors showed
        are not trusted any more: Pulsar 4.0.8 forgets those of partly acknowledged entries on a reload, and a
        poll cannot see them (a roll-over only costs writing them again)."""
        ledger = reports.last_ledger(internal)
        reloaded = reports.reloaded(ts.ledger, ledger)
        ts.ledger = ledger if ledger is not None else ts.ledger
        if reloaded:
            self.stats.inc("topics_reloaded")
        return reloaded

    def _internal_stats(self, topic: str) -> dict[str, Any] | adminhttp.OwnerUnreachable | None:
        try:
            return self.effector.call(calls.InternalStats(topic))
        except adminhttp.AdminNotFound:
            return None
        except adminhttp.OwnerUnreachable as e:
            return e

    def _observe(
        self,
        topic: str,
        states: list[Subscription],
        cursors: dict[str, AckState],
        *,
        force: bool,
        now: Now,
        polled: bool,
        reloaded: bool = False,
    ) -> None:
        """Have the core take ``topic``'s cursors (name -> state; ``stepping.CursorsRead``) and decide the
        claims of what changed (``stepping.ClaimsDue``), learning a subscription's type between the two (an
        admin call); after a poll, schedule the next one."""
        cursor_set = self.subs.cursor_set.pop(topic, None)  # set elsewhere (writes) since the last look
        source, covered = "poll" if polled else "feed", self.snapshots.covers(topic)
        read = stepping.CursorsRead(
            topic,
            cursors,
            states,
            polled=polled,
            reloaded=reloaded,
            # The same for every subscription of the look: whether rewinds are judged in it.
            judged=not covered and self.judges_rewinds(source, now),
            acknowledgements=self.claims_acknowledgements(),
        )
        looked = stepping.step(self, read, now)
        self._carry_out(looked.out, now)
        if looked.learn_kinds:
            # Claims can never be taken back, so learn the subscription type (Key_Shared claims keep
            # per-key order) before the first claim, while the consumer that acknowledged is still there.
            self._learn_kinds(topic, states)
        due = stepping.ClaimsDue(
            topic,
            states,
            looked.reported,
            looked.moved,
            polled=polled,
            force=force,
            cursor_set=cursor_set,
            acknowledgements=self.claims_acknowledgements(),
            covered=covered,
        )
        decided = stepping.step(self, due, now)
        self._carry_out(decided, now)
        for sub in decided.snapshot:
            # After the tail forgot what every subscription acknowledged: below every cursor, so not what
            # snapshot mode reads (the entries above this one's).
            self._snapshot(sub, now)
        if polled:
            ended = stepping.Polled(
                topic,
                states,
                changed=looked.changed,
                doubted=looked.doubted,
                feed=self.caps.get(Capability.PLUGIN_FEED) is True,
                spread=self.rng.random(),  # after snapshot mode's draws, from the same generator
            )
            self._carry_out(stepping.step(self, ended, now), now)

    def _learn_kinds(self, topic: str, states: list[Subscription]) -> None:
        try:
            subs = self.effector.call(calls.TopicStats(topic)).get("subscriptions") or {}
        except (adminhttp.AdminNotFound, adminhttp.OwnerUnreachable):
            return  # learned at a later look
        for state in states:
            state.learn_kind(str((subs.get(state.name) or {}).get("type") or ""))

    def _publish(self, state: Subscription, *, force: bool, now: Now) -> bool:
        """Have the core decide ``state``'s claim (``stepping.Decide``: a tail caught up with its cursor,
        ``indexing``) and carry out what it says: the claim queued for this round's envelopes, or the cursor
        handed to snapshot mode. False: not decidable yet."""
        decide = stepping.Decide(
            state,
            force=force,
            acknowledgements=self.claims_acknowledgements(),
            covered=self.snapshots.covers(state.topic),
        )
        stepped = stepping.step(self, decide, now)
        self._carry_out(stepped, now)
        for sub in stepped.snapshot:
            self._snapshot(sub, now)
        return not stepped.undecided

    def _snapshot(self, state: Subscription, now: Now) -> None:
        """Snapshot mode takes ``state``'s cursor: its markers go out, if the entry filter hides them."""
        tail, cursor = self.topics[state.topic].tail, state.cursor
        assert cursor is not None  # decided only with a cursor
        update = self.snapshots.on_subscription(
            state.topic, state.name, cursor, tail.positions_above(cursor.mark_delete), tail.last
        )
        if update is not None and self._markers_allowed(now):
            sends = self.snapshots.publishing(state.topic, [(update, None)], now_ms=now.wall_ms)
            self._perform(list(sends), now)
