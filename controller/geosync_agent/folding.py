"""Folding: what the core and the parts ask for carried out, and each outcome folded back into the state.

The parts ask for I/O as effects (``geosync_agent.effects``) through ``_perform``, the seam ``agentstate``
declares; the effector carries them out. The admin-API moves' outcomes go to the core in one event per batch
(``stepping.Moved``); ``_fold`` takes what the brokers alone tell: a cursor reset, a subscription created, a
capability learned, a replicator unloaded.

Round steps 3 and 5 (``runtime``) are the core's entry (``core.stepping.step``) driven: the apply step hands
it an ``ApplyDue`` event; ``land_writes``, at the next round's start, hands the plugin writes' outcomes over
as they came (``Written``: the core takes the cursors they answered), then ``Landed``. What comes back is
carried out here and nothing else: its counters added, its notices logged, its effects performed, the plugin
writes sent (landed by the next round), topics polled at once, subscriptions a move found gone taken as
absent. What is asked here is only what I/O itself tells: which capabilities are usable now,
and in sidecar mode which topics a broker that refused a write as not loaded no longer owns.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_agent import effects as fx
from geosync_agent.agentstate import Now
from geosync_agent.core import stepped as stepped_
from geosync_agent.core import stepping, tuning
from geosync_agent.core.subscriptions import SubKey, Subscription
from geosync_agent.observing import Observing
from geosync_core import pluginapi
from geosync_core.capabilities import Capability

log = logging.getLogger("geosync.agent")


class Folding(Observing):
    """Carrying out effects and folding their outcomes back (every round step that asks for I/O), and the
    core's cursor changes (round steps 3 and 5)."""

    def _perform(self, effects: list[fx.Effect], now: Now) -> list[fx.Outcome]:
        if not effects:
            return []
        for effect in effects:
            if isinstance(effect, fx.Publish):
                self.stats.inc(effect.counter)
        outcomes = self.effector.perform(effects)
        moved: list[fx.AdminMoved] = []
        for outcome in outcomes:
            if isinstance(outcome, fx.AdminMoved):
                moved.append(outcome)
            else:
                self._fold(outcome, now)
        if moved:
            # The core folds the admin moves' outcomes (``stepping.Moved``), in one event.
            self._carry_out(stepping.step(self, stepping.Moved(moved, self.snapshots.covers), now), now)
        return outcomes

    def _fold(self, outcome: fx.Outcome, now: Now) -> None:
        """Fold what the brokers alone tell: a capability learned, a replicator unloaded, a subscription
        created, a cursor reset (the writes' and moves' outcomes are the core's: ``stepping.Written``,
        ``stepping.Moved``)."""
        if isinstance(outcome, fx.Learned):
            self.caps = self.caps.learned(outcome.capability, outcome.value, now=now.mono)
            return
        if isinstance(outcome, fx.Unloaded):
            if outcome.error:
                self.stats.inc("replicator_unload_errors")
                log.warning("could not unload %s (tried again later): %s", outcome.topic, outcome.error)
            else:
                self.stats.inc("replicator_unloads")
            return
        state = self.subs.get(outcome.key)
        if state is None:
            return
        if isinstance(outcome, fx.Created):
            if outcome.created:
                self.stats.inc("subscriptions_created")
                log.info("created subscription %s on %s at the earliest message", state.name, state.topic)
                state.cursor = None
            if not outcome.topic_missing:  # else the topic does not exist here yet; replication creates it
                state.confirm(now.mono)
                self.created.add(state.key)
                self.rediscover.set()
                self._poll_soon(state.topic)
        elif isinstance(outcome, fx.CursorReset):
            self._fold_reset(state, outcome, now)

    def _fold_reset(self, state: Subscription, outcome: fx.CursorReset, now: Now) -> None:
        if outcome.error:
            self.stats.inc("apply_errors")
            state.follow = True  # try again next round
            return
        self.stats.inc("cursors_rewound")
        log.info(
            "rewound %s on %s to %s, as another region did", state.name, state.topic, outcome.mark_delete
        )
        state.reset_to = (outcome.mark_delete, now.mono + tuning.REWIND_SETTLE_S)
        state.cursor = state.seen_feed = state.seen_any = None  # read it again before planning
        # A feed report still waiting for the tail shows the cursor from before: taken later, it would have
        # this region claim again, under the new generation, what the rewind took back.
        self.unobserved.pop(state.key, None)
        state.planned = state.pending_move = None
        state.last_applied_at = now.wall
        ts = self.topics.get(state.topic)
        if ts is not None:
            ts.poll = replace(ts.poll, next_at=0.0)

    # -- 5. apply ----------------------------------------------------------------------------------

    def apply(self, now: Now) -> None:
        """The apply step: ``stepping.ApplyDue`` with what is usable now, and what it returns carried out."""
        plugin_writes = self.caps.usable(Capability.PLUGIN_CURSOR_WRITES, now=now.mono)
        due = stepping.ApplyDue(
            plugin_writes=plugin_writes,
            batch_writes=plugin_writes and self.caps.usable(Capability.BATCH_ACKS, now=now.mono),
            skip_by_ids=self.caps.usable(Capability.SKIP_BY_IDS, now=now.mono),
            acknowledgements=self.claims_acknowledgements(),
            claims_known=self.claims_known(),
            covered=self.snapshots.covers,
        )
        self._carry_out(stepping.step(self, due, now), now)

    def land_writes(self, now: Now) -> None:
        """Hand the core the outcomes of the cursor writes the last apply step sent (waiting for them if need
        be), and carry out what it makes of them (``stepping.Written``, ``Landed``). Before ``observe``: a
        cursor a write answered must not be taken after a newer one the feed reported."""
        if self.writes_in_flight is None:
            return
        outcomes_of, work = self.writes_in_flight
        self.writes_in_flight = None
        try:
            outcomes = outcomes_of()
        except BaseException:
            stepping.step(self, stepping.Lost(work), now)
            raise
        tried = self.caps.get(Capability.PLUGIN_CURSOR_WRITES) is not None
        for outcome in outcomes:
            if isinstance(outcome, fx.Learned):  # the rest is the core's (``stepping.Written``)
                self._fold(outcome, now)
        written = stepping.Written(
            work,
            outcomes,
            covered=self.snapshots.covers,
            judged=self.judges_rewinds("write", now),
            acknowledgements=self.claims_acknowledgements(),
        )
        self._carry_out(stepping.step(self, written, now), now)
        landed = stepping.Landed(
            work,
            outcomes,
            moved_away=frozenset(self._moved_away(outcomes, now)),
            no_plugin=not tried and self.caps.get(Capability.PLUGIN_CURSOR_WRITES) is False,
            skip_by_ids=self.caps.usable(Capability.SKIP_BY_IDS, now=now.mono),
        )
        self._carry_out(stepping.step(self, landed, now), now)

    def _carry_out(self, stepped: stepping.Stepped, now: Now) -> None:
        """Do what a step asked, in its order (``stepping.Stepped``)."""
        for name, n in stepped.counts.items():
            self.stats.inc(name, n)
        for notice in stepped.notices:
            self._notice(notice)
        self._perform(stepped.effects, now)
        if stepped.writes:
            # Their outcomes are folded before the next round's observe step (``land_writes``): the loop
            # reads its tails and control topics meanwhile instead of waiting on the broker (at 10,000
            # subscriptions that wait was about a sixth of the applying region's rounds).
            self.writes_in_flight = (self.effector.start_plugin_writes(stepped.writes), stepped.work)
        self._perform(stepped.moves, now)
        for topic in stepped.poll_soon:
            ts = self.topics.get(topic)
            if ts is not None:
                ts.poll = replace(ts.poll, next_at=0.0)
        for topic, at in stepped.poll_by.items():
            ts = self.topics[topic]
            ts.poll = replace(ts.poll, next_at=min(ts.poll.next_at, at))
        for namespace, claim in stepped.claims:
            self.outgoing.setdefault(namespace, []).append(claim)
        for counter in stepped.rediscover:
            self._rediscover_soon(now, counter)
        for state in stepped.absent:
            self._absent(state, now.mono)

    def _notice(self, notice: stepping.Notice) -> None:
        """Log what a decision of the core reports: the writes' and moves' notices here, the others as
        ``indexing`` logs them."""
        state = notice.state
        if isinstance(notice, stepped_.WriteStale):
            log.info(
                "%s on %s: moved back to %s since the write was planned; planned again",
                state.name,
                state.topic,
                notice.mark_delete,
            )
        elif isinstance(notice, stepped_.MoveFailed) and notice.gone:
            log.info("%s", notice.error)
        elif isinstance(notice, stepped_.MoveFailed):
            log.warning("applying failed, will retry: %s", notice.error)
        else:
            super()._notice(notice)

    def _moved_away(self, outcomes: list[fx.Outcome], now: Now) -> set[SubKey]:
        """Sidecar mode: the writes the broker refused as ``not_loaded`` whose topic it no longer owns (asked
        again at once; those topics are handed off). The others fall back to the admin API, which loads an
        idle topic on its owner, this broker."""
        if self.ownership is None:
            return set()
        refused = {
            o.key
            for o in outcomes
            if isinstance(o, fx.NotWritten) and o.fallback and o.reason == pluginapi.Status.NOT_LOADED.value
        }
        if not refused:
            return set()
        self.ownership.refresh_now()
        self.own(now)
        return {key for key in refused if key[0] not in self.topics}
