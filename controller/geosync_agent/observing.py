"""Observing: cursors read from the plugin's feed and from ``internalStats`` polls, and claims published.

Round step 4 (``runtime``): cursors from the feed (only subscriptions consumers just acknowledged on) and
from polls paced by ``geosync_core.pacing``; rewinds noticed (``core.generations``); each subscription's
claim decided (``geosync_core.claiming``) and queued when it changed, to be sealed and sent by
``controlling``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from geosync_adapters import admin as adm
from geosync_agent import calls
from geosync_agent.agentstate import Now, TopicState
from geosync_agent.controlling import Controlling
from geosync_agent.core import acknowledged, generations, reports, tuning
from geosync_agent.core.applying import claimed_to
from geosync_agent.core.pauses import note_heavy, publish_pause
from geosync_agent.core.subscriptions import (
    Subscription,
    claim_size,
    decided_already,
    forgettable_floor,
    undecided,
)
from geosync_agent.discovering import namespace_of, synced
from geosync_core import (
    claiming,
    envelopes,
    pacing,
    pluginapi,
)
from geosync_core.capabilities import Capability
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")


class Observing(Controlling):
    """Cursors observed (feed, polls) and claims decided and published (round step 4)."""

    # -- 4. observe and publish ------------------------------------------------------------------

    def observe_feed(self, now: Now) -> None:
        """Take the cursors the plugin's feed reported, and send what moved at once: not after the polls (at
        10,000 subscriptions a saturated machine's polls took up to 2.9 s of a round). Before them: a poll
        cannot see batch indexes, and keeps those the feed reported (``_observe``)."""
        self.heavy_publishes = self.subs.still_held(self.heavy_publishes_by)
        fed = self._read_feed(now)  # first: it starts tracking what it names that discovery has not found yet
        if fed:
            by_topic = self.subs.by_topic(existing_only=True, topics=fed)
            for topic, cursors in fed.items():
                ts = self.topics.get(topic)
                if ts is not None and self.outran_tail(ts, cursors) and self.tail_gone(ts, None, now):
                    continue
                self._observe(topic, by_topic[topic], cursors, force=False, now=now, polled=False)
        self._flush_states(now, announce=False)  # the polls' flush announces, where there is nothing to send

    def poll(self, now: Now) -> None:
        """Read the cursors due a poll (every one at its topic's resync, to publish them whole) through the
        admin API, and send what they changed."""
        resync = set()
        period = self.resync_period()
        if self.sends_lost and self.publish_failing_since is None:
            # Sends failed and sending works again: what they carried goes out again soon, not a period on.
            self.sends_lost = False
            self.stats.inc("resyncs_after_lost_sends")
            for ts in self.topics.values():
                ts.resync_at = min(ts.resync_at, now.mono + self.rng.random() * tuning.RESYNC_AFTER_LOSS_S)
        # Only the topics due: sorting out the subscriptions that exist, for every topic, was most of an idle
        # round's polls at 10,000 subscriptions.
        tracked = self.topics
        by_topic = self.subs.by_topic(
            existing_only=True,
            topics=[
                t
                for t in self.subs.by_topic(existing_only=False)
                if (seen := tracked.get(t)) is not None and now.mono >= min(seen.resync_at, seen.poll.next_at)
            ],
        )
        for topic in by_topic:
            ts = self.topics[topic]
            if now.mono >= ts.resync_at:
                resync.add(topic)
                ts.resync_at = now.mono + period
        if resync:
            self.stats.inc("cursor_polls_for_resyncs", len(resync))
        due = list(by_topic)  # each at its resync or its poll's time
        unreachable: list[str] = []
        for topic, internal in zip(due, self.effector.map(self._internal_stats, due), strict=True):
            if isinstance(internal, adm.OwnerUnreachable):
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
        if unreachable:
            self.stats.inc("polls_owner_unreachable", len(unreachable))
            log.warning(
                "the owners of %d topic(s) do not answer (%s...): their cursors are read again in %.0f s",
                len(unreachable),
                unreachable[0],
                tuning.STALLED_S,
            )
        self._flush_states(now)

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

    def _internal_stats(self, topic: str) -> dict[str, Any] | adm.OwnerUnreachable | None:
        try:
            return self.effector.call(calls.InternalStats(topic))
        except adm.AdminNotFound:
            return None
        except adm.OwnerUnreachable as e:
            return e

    def _read_feed(self, now: Now) -> dict[str, dict[str, AckState]]:
        """Cursor states of the subscriptions consumers acknowledged on since the last read, from the broker
        plugin's feed, with partly acknowledged batches (empty where the plugin is absent: polling then does
        all the work). A report naming a topic or subscription discovery has not found yet starts its
        tracking at once (a subscription created with its traffic); discovery is asked for a pass too, for
        what the feed does not tell (consumers, type)."""
        if not self.caps.usable(Capability.PLUGIN_FEED, now=now.mono):
            return {}
        if not self.namespaces:
            # Before discovery's first pass every report would be dropped as out of scope, and the feed
            # names each acknowledgement once: batch indexes acknowledged while the agent was down would
            # then be known to no poll (a poll cannot see them) and never claimed.
            return {}
        try:
            acked = self.config.claims_from == acknowledged.ACKNOWLEDGEMENTS
            feed = self.effector.call(calls.PluginFeed(self.feed.seq, self.feed.epoch, acked=acked))
        except (adm.AdminNotFound, adm.AdminForbidden) as e:
            if self.caps.get(Capability.PLUGIN_FEED) is not False:
                for ts in self.topics.values():
                    ts.poll = replace(ts.poll, next_at=0.0)  # their polls were paced for a feed
            self.caps = self.caps.learned(Capability.PLUGIN_FEED, False, now=now.mono)
            log.info("no acknowledgement feed from the broker plugin (%s); polling cursors instead", e)
            return {}
        except (adm.AdminError, pluginapi.PluginApiError) as e:
            self.stats.inc("feed_errors")
            self.part_outcome("acknowledgement feed", e, now.mono)
            log.warning("acknowledgement feed failed, polling meanwhile: %s", e)
            return {}
        self.part_outcome("acknowledgement feed", None, now.mono)
        if feed.epoch != self.feed.epoch:
            # The broker (re)started: what was acknowledged before it is only known to a poll, and a
            # cursor that lost its last acknowledgements in a crash moved back without a rewind. Not at the
            # agent's own first read: every topic is polled at its first round already (a second poll of
            # them all, a round later, was most of a restarted agent's rounds at 10,000 subscriptions).
            if self.feed.epoch:
                for ts in self.topics.values():
                    ts.poll = replace(ts.poll, next_at=0.0)
            self.feed.epoch = feed.epoch
            self.feed.acked_lost = 0  # counted since the broker started
            for sub in self.subs.values():
                # What consumers were seen acknowledging (``acked``) is kept: it happened. What the broker
                # held unread when it stopped is gone: re-delivered after a failover, never lost.
                sub.seen_feed = sub.seen_any = sub.fed = None
        self.caps = self.caps.learned(Capability.PLUGIN_FEED, True, now=now.mono)
        self.feed.seq = feed.seq
        self.stats.inc("feed_reads")
        if feed.cursors:
            self.feed.busy_until = now.mono + pacing.ACTIVE_FEED_S
        namespaces, config = self.namespaces, self.config
        dropped = reports.hold(
            self.unobserved,
            feed.cursors,
            in_scope=lambda topic, name: namespace_of(topic) in namespaces and synced(config, topic, name),
            cap=tuning.MAX_UNOBSERVED,
        )
        if dropped:
            self.stats.inc("feed_reports_dropped", dropped)
        out: dict[str, dict[str, AckState]] = {}
        unknown = False
        for key, report in list(self.unobserved.items()):
            topic, name = key
            if not self.owns(topic):
                del self.unobserved[key]  # moved off this broker: its new owner's agent reads the cursor
                continue
            state = self.subs.get(key)
            if topic not in self.topics or state is None or not state.exists:
                unknown = True
                self.stats.inc("tracked_from_feed")
                state = self._subscription(topic, name)
                state.confirm(now.mono)
            tracked = self._track_topic(topic, now)
            if now.mono < state.publish_after:
                # Its claims are large and their publish is paused: the report (the newest, replacing the one
                # before) waits here until the pause ends, instead of being read, checked for a rewind and
                # translated at every round for a publish that cannot go out yet (what a's agent spent its
                # time on while b was cut off, with tens of thousands of holes kept for good).
                self.stats.inc("feed_reports_deferred")
                continue
            if report.batches and not tracked.tail.has_read(max(b.position for b in report.batches)):
                continue  # the batch sizes are not known yet: the report waits for the tail
            del self.unobserved[key]
            fed = reports.as_read(report, tracked.tail)
            if state.fed is not None and state.fed[0] == fed and state.cursor == state.fed[1]:
                # The plugin's repeat within its settle time (at 10,000 subscriptions more than half of what
                # the feed reported): the same cursor read the same way again, and its topic looked at again.
                # Not once a write or a poll has set another cursor since: the report is news against that.
                self.stats.inc("feed_repeats_skipped")
                continue
            if report.batches_truncated:
                self.stats.inc("feed_batches_truncated")
            cursor = reports.cursor_of(report, tracked.tail)  # batch sizes from the tail
            state.fed = (fed, cursor)
            out.setdefault(topic, {})[name] = cursor
        if feed.acked is not None and self.config.claims_from == acknowledged.ACKNOWLEDGEMENTS:
            if feed.acked:
                # Kept until the next checkpoint is written: the next read confirms these blocks, and the
                # broker forgets them (checkpointing.Journal).
                self.journal.append(
                    {"epoch": feed.epoch, "seq": feed.seq, "acked": [b.to_wire() for b in feed.acked]}
                )
            replayed, self.feed.replay = self.feed.replay, ()
            self._take_acked((*replayed, *feed.acked), feed.acked_lost, out, now.mono)
        if unknown:
            self._rediscover_soon(now, "rediscover_for_feed")
        return out

    def _take_acked(
        self,
        blocks: tuple[pluginapi.AckedSet, ...],
        lost: int,
        out: dict[str, dict[str, AckState]],
        now: float,
    ) -> None:
        """Add the answer's ``acked`` blocks to what consumers were seen acknowledging, per subscription
        (``core.acknowledged``), and have those whose set grew published again (into ``out``, with the cursor
        held). A batch whose entry the tail has not read yet (its size unknown) waits for a later read.
        A block for a subscription not tracked here yet (its namespace not discovered yet, its topic not yet
        seen) is held for it up to tuning.HELD_ACKED_S: the plugin hands a block over once, and dropping it
        lost those acknowledgements for good (claims made of the cursor had the next poll to fall back on).
        Whatever cannot be taken makes the claims smaller, never larger: a block held too long or for a topic
        another broker owns now, a batch whose size the tail cannot tell once read, an
        ``overflowed`` block (a subset), a grown ``acked_lost`` (whole blocks the plugin dropped). Each is
        counted in the stats: re-delivery is possible after a failover."""
        self.feed.acked = True
        if lost > self.feed.acked_lost:
            self.stats.inc("acked_blocks_lost", lost - self.feed.acked_lost)
            log.warning(
                "the plugin dropped %d acknowledged blocks: those acknowledgements are not claimed "
                "(re-delivery possible after a failover)",
                lost - self.feed.acked_lost,
            )
        self.feed.acked_lost = lost
        waiting, self.feed.waiting = self.feed.waiting, {}
        again = tuple(pluginapi.AckedSet(t, n, batches=tuple(b)) for (t, n), b in waiting.items())
        held, self.feed.held = self.feed.held, {}
        since = {key: first for key, (first, _) in held.items()}
        for block in (*(b for _, bs in held.values() for b in bs), *blocks, *again):
            key = (block.topic, block.subscription)
            state = self.subs.get(key)
            ts = self.topics.get(block.topic)
            if ts is not None and not self.owns(block.topic):
                self.stats.inc("acked_blocks_dropped")  # another broker's now: its feed starts from there
                continue
            if state is None or not state.exists or ts is None:
                first = since.get(key, now)
                room = key in self.feed.held or len(self.feed.held) < tuning.MAX_UNOBSERVED
                if now - first < tuning.HELD_ACKED_S and room:
                    self.feed.held[key] = (first, (*self.feed.held.get(key, (first, ()))[1], block))
                else:
                    self.stats.inc("acked_blocks_dropped")
                continue
            if block.overflowed:
                self.stats.inc("acked_blocks_overflowed")
            grown, left_out = acknowledged.absorb(state.acked, block, ts.tail.size_of)
            tail = ts.tail
            wait = tuple(b for b in left_out if not tail.has_read(b.position))
            if wait:
                self.feed.waiting[key] = (*self.feed.waiting.get(key, ()), *wait)
            if len(wait) < len(left_out):
                self.stats.inc("acked_batches_left_out", len(left_out) - len(wait))
            if grown != state.acked:
                state.acked = grown
                if state.cursor is not None:
                    out.setdefault(block.topic, {}).setdefault(block.subscription, state.cursor)

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
        """Take ``topic``'s cursors (name -> state) and publish what changed; after a poll, schedule the
        next one. A poll cannot see batch indexes: it keeps the partly acknowledged batches the feed or a
        write last reported above the polled mark-delete (acknowledgements are never taken back), unless the
        topic was ``reloaded`` since: then none are taken as acknowledged, and the claims write them again."""
        changed = False
        moved: list[Subscription] = []
        cursor_set = self.subs.cursor_set.pop(topic, None)  # set elsewhere (writes) since the last look
        reported = states if polled else self.subs.existing(topic, cursors)  # not all: their cost at 10,000
        for state in reported:
            cursor = cursors.get(state.name)
            if cursor is None:
                continue
            rewind = (
                None
                if self.snapshots.covers(topic)
                else generations.rewound(
                    state, cursor, source="poll" if polled else "feed", now_mono=now.mono, now_wall=now.wall
                )
            )
            rewound = rewind is not None and self._took_rewind(state, rewind, cursor)
            if rewound:
                state.acked = None  # acknowledged before the rewind: maybe delivered again, not claimed
            if (
                polled
                and not rewound  # a rewind cleared the batch indexes acknowledged before it
                and not reloaded  # Pulsar may have forgotten them
                and state.cursor is not None
                and state.cursor.batches
                and cursor.mark_delete >= state.cursor.mark_delete  # not reset backwards by someone
            ):
                cursor = cursor.ack_batches(state.cursor.batches)
            if reloaded:
                state.planned = None  # planned from what the broker may have forgotten: write it again
            if cursor != state.cursor:
                changed = True
                moved.append(state)
                state.cursor = cursor
            # else the same value read again keeps its object: the apply step and the checkpoint tell an
            # unchanged subscription by identity (a poll parses all its topic's cursors anew)
        if any(not s.kind for s in moved):
            # Claims can never be taken back, so learn the subscription type (Key_Shared claims keep
            # per-key order) before the first claim, while the consumer that acknowledged is still there.
            self._learn_kinds(topic, states)
        # A poll publishes every state it read (a resync forces it); the feed the states it moved, and those
        # a write moved since they were decided or not decidable then (claims and tail follow them).
        claims, moved_ids = not self.snapshots.covers(topic), {id(s) for s in moved}
        ts, exact = self.topics[topic], self.claims_acknowledgements()
        unpublished: dict[str, None] = {}
        names = {**dict.fromkeys(s.name for s in reported), **(cursor_set or {}), **ts.unpublished}
        for state in states if polled else self.subs.existing(topic, names):
            if (
                polled or id(state) in moved_ids or (claims and undecided(state, exact, ts.tail.version))
            ) and not self._publish(state, force=force, now=now):
                unpublished[state.name] = None
        ts.unpublished = unpublished
        self.subs.cursor_set.pop(topic, None)  # what this look set itself
        floor = forgettable_floor(states, claims=claims)
        if floor is not None:
            ts.tail.forget_up_to(floor)
        if polled:
            ts.poll = pacing.after_poll(
                ts.poll,
                now=now.mono,
                base_s=self.config.poll_interval_s,
                feed=self.caps.get(Capability.PLUGIN_FEED) is True,
                changed=changed,
                pending_move=any(s.pending_move for s in states),
                consumers=any(s.consumers for s in states),
                spread=self.rng.random(),
            )
            paused = [
                s.publish_after for s in states if s.publish_after > now.mono and s.cursor != s.translated
            ]
            if paused:
                # The new schedule replaced the one ``_publish`` set for states acknowledged during a publish
                # pause: the poll that ends the earliest pause publishes them.
                ts.poll = replace(ts.poll, next_at=min(ts.poll.next_at, *paused))

    def _learn_kinds(self, topic: str, states: list[Subscription]) -> None:
        try:
            subs = self.effector.call(calls.TopicStats(topic)).get("subscriptions") or {}
        except (adm.AdminNotFound, adm.OwnerUnreachable):
            return  # learned at a later look
        for state in states:
            state.learn_kind(str((subs.get(state.name) or {}).get("type") or ""))

    def _publish(self, state: Subscription, *, force: bool, now: Now) -> bool:
        """Decide ``state``'s claim and queue it if it changed; False: not decidable yet (``_observe``)."""
        ts = self.topics.get(state.topic)
        if ts is None or state.cursor is None or state.follow:
            return False  # following a rewind: this cursor may acknowledge what the newer claims do not
        tail, cursor = ts.tail, state.cursor
        if tail.stale or self._behind_forgotten(ts, state, cursor):
            return False  # the tail is read again first (next round): claims made now could leave entries out
        if not force and now.mono < state.publish_after:
            # Claims too large to translate and send at every acknowledgement: the next due poll brings this
            # cursor back (it still differs from ``translated``), and with it everything acknowledged since.
            ts.poll = replace(ts.poll, next_at=min(ts.poll.next_at, state.publish_after))
            self.stats.inc("publishes_paused")
            return False
        # With claims_from: acknowledgements (and a feed that reports them), the claim is made of what
        # consumers acknowledged, limited to the cursor (core.acknowledged); else of the cursor.
        exact, covered = self.claims_acknowledgements(), self.snapshots.covers(state.topic)
        acked = state.acked if exact else None
        if not (force or covered) and decided_already(
            state, acknowledgements=exact, log_version=tail.version
        ):
            return True  # the same claim again (with claims_from: acknowledgements, at every poll before)
        own = acknowledged.own_part(cursor, acked) if exact else cursor
        if covered:
            update = self.snapshots.on_subscription(
                state.topic, state.name, cursor, tail.positions_above(cursor.mark_delete), tail.last
            )
            if update is not None and self._markers_allowed(now):
                sends = self.snapshots.publishing(state.topic, [(update, None)], now_ms=now.wall_ms)
                self._perform(list(sends), now)
            return True
        key_order = None
        if state.key_shared:
            key_order = claiming.KeyOrder(
                tail.positions_above(cursor.mark_delete),
                tail.key_of,
                size_of=tail.size_of,
                key_of_message=tail.key_of_message,
                origin_of=tail.origin_region_of,
            )
            if exact:
                # Per-key order is the cursor's (as in cursor mode), then limited to what consumers
                # acknowledged: entries others' claims moved here are no consumer's, and must not hold back
                # the keys' later messages (they are in the claims received already).
                own = acknowledged.own_part(key_order.ordered(cursor), state.acked)
                key_order = None
        # The cost is the loop thread's CPU (``Now.cpu``), not the wall time: on a saturated machine a GIL
        # switch alone (5 ms) made any publish or plan look heavy, and the pauses grew with every one
        # counted so.
        started = now.cpu()
        claim = claiming.decide(
            tail.index,
            own,
            received=state.received,
            published=state.published,
            last_translated=state.translated,
            force=force,
            key_order=key_order,
            index_grew=state.incomplete_at is not None and state.incomplete_at != tail.version,
            local=self.config.region,
            # Translated whole each time: what is claimed_to below the cursor's mark-delete need not be
            # in the claims (a jump moved it), and consumers' acknowledgements may arrive after the move.
            claimed_to=None if exact else state.claimed_to,
        )
        if claim is None:
            state.translated_from = (cursor, acked, exact, state.translated)
            return True
        if not state.active and claim.news:
            state.active = True  # acknowledged here first (messages, not forms): consumed here
        state.translated = own
        state.translated_from = (cursor, acked, exact, own)
        state.incomplete_at = None if claim.complete else tail.version
        if not claim.send:
            # Nothing beyond what others told us (typically: our cursor just caught up with their claims).
            state.published, state.claimed_to = claim.claims, claimed_to(cursor, tail)
            return True
        namespace = namespace_of(state.topic)
        if namespace not in self.namespaces:
            return True
        size = claim_size(claim.claims)
        sent = claim.claims
        if not force and size > tuning.NEWS_FROM_SPANS and state.published is not None:
            # Receivers merge claims and hold the published ones: large claims travel as their news between
            # resyncs (each resync sends them whole, for a receiver that missed some). Sent whole each time,
            # 4 subscriptions of ~30,000 spans wrote 845 MB an hour to a control topic, in entries of ~190 KB
            # that Pulsar 4.0.8's replicator then failed to read 1,000 at a time, for good.
            sent = claim.claims.news_since(state.published)
            self.stats.inc("states_sent_as_news")
        state.publish_took = took = now.cpu() - started
        note_heavy(self.heavy_publishes_by, state, took)
        state.publish_after = now.mono + publish_pause(size, took=took, heavy=self.heavy_publishes)
        self.outgoing.setdefault(namespace, []).append(
            envelopes.AckStateMessage(state.topic, state.name, self.config.region, sent, state.generation)
        )
        state.published, state.claimed_to = claim.claims, claimed_to(cursor, tail)
        return True
