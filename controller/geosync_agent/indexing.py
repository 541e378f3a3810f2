"""Indexing: each partition's reader queue drained into its origin index, and snapshot mode's markers.

Round step 1 (``runtime``): drain every tail (``tailing.Tail``) and step what it read (``core.naming``:
``EntriesRead``, then ``OriginsLooked`` for each lookup the core asks for, made here), read a tail
again from the earliest message when it can no longer answer for its topic (checkpoint not matching, a
subscription below what it forgot), have claims translated again once a tail caught up with a cursor, and
hand markers read to snapshot mode (``snapshotting``).
"""

from __future__ import annotations

import logging
from typing import Any

from geosync_adapters import adminhttp
from geosync_agent import (
    calls,
    snapshotting,
)
from geosync_agent.agentstate import Now, TopicState
from geosync_agent.core import generations, naming, planning, reports, stepping
from geosync_agent.tailing import Tail
from geosync_agent.tracking import Tracking
from geosync_core import pacing
from geosync_core.capabilities import Capability
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")


class Indexing(Tracking):
    """Draining tails into origin indexes, rebuilding stale ones, snapshot mode's markers (round step 1)."""

    # -- 2. index ----------------------------------------------------------------------------------

    def index(self, now: Now) -> None:
        # Untried counts as there: a restarted agent's first round reads the feed only once discovery named
        # the namespaces, and new messages made every topic due a poll meanwhile (the poll the checkpoint's
        # cursors spare). Found absent, every topic is polled at once (``_read_feed``).
        feed = self.caps.usable(Capability.PLUGIN_FEED, now=now.mono)
        grown: list[str] = []
        self.origin_lookups.now = now.mono  # the time of the lookups the resolver makes while draining
        self.origin_lookups.prefetch(ts.tail for ts in self.topics.values())
        # From where the last turn stopped, round the topics: one that used its budget leaves the rest for the
        # next turn (at least one topic a turn, so every reader queue is drained in its turn).
        topics = list(self.topics.items())
        start = next((i for i, (t, _) in enumerate(topics) if t == self.index_from), 0)
        self.index_from = None
        for i, (topic, ts) in enumerate(topics[start:] + topics[:start]):
            if i and self.over_budget(now):
                self.index_from = topic
                self.stats.inc("index_turns_cut")
                break
            malformed, spoofed = ts.tail.malformed, self.resolver.spoofed
            before = ts.tail.last
            taken = ts.tail.taken()
            drained = (
                self._named(ts, naming.EntriesRead(ts.tail, taken, self._records(ts), self.keys.keyring), now)
                if taken
                else 0
            )
            if ts.tail.stale:
                self._rebuild(ts, now)
                continue
            if (
                before is not None
                and ts.tail.last is not None
                and ts.tail.last.ledger != before.ledger
                and self.tail_gone(ts, None, now, read=before)
            ):
                continue  # the reader went on into the topic created again: read it from its start
            filled = (
                self._named(ts, naming.PendingDue(ts.tail, self._records(ts)), now) if ts.tail.pending else 0
            )
            if filled:
                self.stats.inc("origins_resolved_late", filled)
                log.info("%s: named the origin of %d entries on a retry", topic, filled)
                for state in self.subs.values():
                    if state.topic == topic and state.cursor is not None:
                        state.incomplete_at = -1  # its cursor may have acknowledged them: translate again
            if drained or filled:
                grown.append(topic)
                if not feed:
                    ts.poll = pacing.after_new_messages(
                        ts.poll, now=now.mono, base_s=self.config.poll_interval_s
                    )
            if ts.tail.malformed > malformed:
                self.stats.inc("malformed_stamps", ts.tail.malformed - malformed)
                log.warning("%s: skipped entries with a malformed source-position stamp", topic)
            if self.resolver.spoofed > spoofed:
                self.stats.inc("spoofed_stamps", self.resolver.spoofed - spoofed)
                log.warning(
                    "%s: entries published here carry a source-position stamp (set by an application): "
                    "indexed as local",
                    topic,
                )
            if ts.tail.markers:
                found, ts.tail.markers = ts.tail.markers, []
                for position, properties, data in found:
                    self._on_marker(ts, position, properties, data, now)
        if grown:
            self._translate_again(frozenset(grown), now)

    def _records(self, ts: TopicState) -> naming.Records:
        return self.origin_lookups.records(ts.tail.topic)

    def _named(self, ts: TopicState, event: naming.EntriesRead | naming.PendingDue, now: Now) -> int:
        """Step ``event`` (``core.naming``), making each lookup the core asks for and stepping its answer
        back, until it is done; how many entries it indexed."""
        got = stepping.step(self, event, now)
        hits = got.hits
        while got.wanted is not None:
            answer = self.origin_lookups.answer(got.wanted)
            looked = naming.OriginsLooked(ts.tail, got.wanted, answer, self._records(ts))
            got = stepping.step(self, looked, now)
            hits += got.hits
        if hits:
            self.stats.inc("origin_plugin_hits", hits)
        return got.entries

    def _notice(self, notice: stepping.Notice) -> None:
        """Log what a decision of the core reports."""
        state = notice.state
        if isinstance(notice, generations.Unconfirmed):
            log.info(
                "%s on %s: read again before it is judged a rewind; %s",
                state.name,
                state.topic,
                generations.describe(notice.rewind, notice.cursor),
            )
        elif isinstance(notice, generations.RewindTaken):
            rewind, cursor = notice.rewind, notice.cursor
            log.info(
                "%s on %s was %s here: its claims start again from this cursor (generation %d); judged %s; "
                "feed: epoch %s, seq %d, %s, acknowledgements %s",
                state.name,
                state.topic,
                "created again"
                if rewind.recreated
                else f"rewound from {rewind.seen and rewind.seen.mark_delete} to {cursor.mark_delete}",
                notice.generation,
                generations.describe(rewind, cursor),
                notice.epoch[:8] or "-",
                notice.seq,
                "answered this round"
                if notice.read_at == rewind.at
                else f"last answered {rewind.at - notice.read_at:.2f} s before"
                if notice.read_at >= 0
                else "never answered",
                "claimed" if notice.claimed else "not claimed",
            )
        elif isinstance(notice, generations.RewoundElsewhere) and notice.how == "deferred":
            log.info(
                "%s on %s was rewound in another region: followed only if claims here are the cursor's (the "
                "feed has not answered yet)",
                state.name,
                state.topic,
            )
        elif isinstance(notice, generations.RewoundElsewhere) and notice.how == "followed":
            log.info("%s on %s was rewound in another region: following it", state.name, state.topic)
        elif isinstance(notice, generations.RewoundElsewhere):
            log.info("%s on %s was rewound in another region: claims start again", state.name, state.topic)
        elif isinstance(notice, planning.Parked):
            log.warning(
                "%s / %s: parked: its mark-delete %s lies below the entries forgotten over the budget "
                "(up to %s); not synced until it catches up",
                state.topic,
                state.name,
                notice.mark_delete,
                notice.floor,
            )
        else:
            log.info("%s on %s: the rewind elsewhere is not followed here", state.name, state.topic)

    def tail_gone(
        self, ts: TopicState, internal: dict[str, Any] | None, now: Now, *, read: Position | None = None
    ) -> bool:
        """Whether the topic no longer holds what ``ts``'s tail read (``read``, by default its last entry, or
        the first entry its index holds; ``reports.read_gone``, from the topic's ``internalStats``, asked now
        when not given): deleted and created again. Its tail is then read again from the new topic's earliest
        message, and its cursors are not taken meanwhile: the new topic's first mark-delete (its new ledger,
        entry -1) lies above every entry of the old one, and a region that claims its cursor claimed them all
        (``tests/sim/test_topics_deleted.py``). An index whose first entries were trimmed by retention is read
        again too: only a re-read."""
        if internal is None:
            try:
                internal = self.effector.call(calls.InternalStats(ts.tail.topic))
            except adminhttp.AdminError:
                return False  # not known: the next poll asks
        held = [p for p in (ts.tail.last if read is None else read, ts.tail.index.first) if p is not None]
        gone_reads = [p for p in held if reports.read_gone(p, internal)]
        if not gone_reads:
            return False
        self.stats.inc("topics_recreated")
        gone = gone_reads[0].ledger
        ts.tail.stale_reason = (
            f"the topic no longer holds ledger {gone}, read here: deleted and created again"
        )
        self._rebuild(ts, now)
        return True

    def outran_tail(self, ts: TopicState, cursors: dict[str, AckState]) -> bool:
        """Whether a cursor's mark-delete lies in a ledger above the one the tail read last: a roll-over the
        tail has not reached yet, or a topic created again (``tail_gone`` tells which)."""
        last = ts.tail.last
        return last is not None and any(c.mark_delete.ledger > last.ledger for c in cursors.values())

    def _rebuild(self, ts: TopicState, now: Now) -> None:
        """The tail cannot answer for the topic any more: the checkpoint does not match it (its reader
        started below where the checkpoint stopped: deleted and re-created, region rebuilt), or a
        subscription lies below the entries it forgot. Read the topic again from its earliest message."""
        stale = ts.tail
        stale.close()
        if stale.stale_reason:
            self.stats.inc("topics_reread")
            log.warning(
                "%s: %s: reading the topic again from the earliest message", stale.topic, stale.stale_reason
            )
        else:
            self.stats.inc("checkpoint_topics_rebuilt")
            log.error(
                "%s: the checkpoint does not match the topic (it holds entries below %s, where the "
                "checkpoint stopped): rebuilding its origin index from the earliest message",
                stale.topic,
                stale.resume_at,
            )
        ts.tail = Tail(stale.topic, stale.partition)
        ts.tail.index.keep_retirements(stale.index.retirements())  # read again, old messages stay retired
        self.readers.open(ts.tail, now.mono)
        for state in self.subs.values():
            if state.topic == stale.topic:
                state.incomplete_at = -1
                state.planned = None  # plans are made from the new tail (its versions start again)

    def _translate_again(self, topics: frozenset[str], now: Now) -> None:
        """Claim what a translation left out once the tail has read as far as the cursor acknowledged
        (published with this round's states): a cursor that acknowledged a burst before the tail got to it
        waits for nothing else. Not at every step of the tail: under steady load cursors run just ahead of
        it all the time, and their next feed report translates them anyway."""
        for state in self.subs.values():
            if (
                state.incomplete_at is None
                or not state.exists
                or state.topic not in topics
                or state.cursor is None
            ):
                continue
            last = self.topics[state.topic].tail.last
            if last is not None and last >= state.cursor.reach:
                self._publish(state, force=False, now=now)

    # -- snapshot mode (the work itself is snapshotting's) ------------------------------------------

    def _markers_allowed(self, now: Now) -> bool:
        """Markers may be injected only where the entry filter hides them from applications."""
        if self.caps.get(Capability.ENTRY_FILTER) is not True and self.caps.usable(
            Capability.ENTRY_FILTER, now=now.mono
        ):
            try:
                snapshotting.check_entry_filter(self.effector.call(calls.RuntimeConfiguration()))
                self.caps = self.caps.learned(Capability.ENTRY_FILTER, True, now=now.mono)
            except snapshotting.FilterMissing as e:
                self.caps = self.caps.learned(Capability.ENTRY_FILTER, False, now=now.mono)
                self.stats.inc("snapshot_mode_refused")
                log.error("refusing snapshot mode for %s: %s", ", ".join(self.config.snapshot_namespaces), e)
        return self.caps.get(Capability.ENTRY_FILTER) is True

    def _on_marker(
        self, ts: TopicState, position: Position, properties: dict[str, str], data: bytes, now: Now
    ) -> None:
        topic = ts.tail.topic
        if not self.snapshots.covers(topic):
            self.stats.inc("markers_ignored")
            return

        def subscription_state(name: str) -> tuple[bool, AckState | None]:
            state = self.subs.get((topic, name))
            return (False, None) if state is None or not state.exists else (True, state.cursor)

        work = self.snapshots.on_read(
            topic,
            ts.tail.partition,
            position,
            properties,
            data,
            markers_allowed=self._markers_allowed(now),
            subscription_state=subscription_state,
            now_ms=now.wall_ms,
        )
        if work.rejected is not None:
            self._reject(work.rejected)
            return
        if work.update_for is not None:
            tracked = self._subscription(topic, work.update_for, exists=False)
            tracked.confirm(now.mono)
        self._perform(list(work.effects), now)

    def snapshot_round(self, now: Now) -> None:
        if not self.config.snapshot_namespaces:
            return
        covered = [(t, ts.tail.version) for t, ts in self.topics.items() if self.snapshots.covers(t)]
        if covered and self._markers_allowed(now):
            self._perform(
                list(self.snapshots.round(covered, self.namespaces, now_s=now.wall, now_ms=now.wall_ms)), now
            )
