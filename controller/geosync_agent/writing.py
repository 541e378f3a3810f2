"""Applying: the round's cursor changes carried out as ``core.planning`` decides them.

Round steps 3 and 5 (``runtime``). The apply step asks ``core.planning.plan_round`` which subscriptions to
create, reset or write and with what plans; it counts and logs what that reports, carries out the creations
and resets at once, and sends the plans as plugin cursor writes (landed at the next round's start by
``land_writes``) or admin-API moves (``core.planning.admin_moves``). ``land_writes`` folds the writes'
outcomes (``folding``) and moves through the admin API what the plugin left (``core.planning.unwritten``).
What is decided here: only I/O's own questions (the sidecar's ownership asked again when a broker says a
topic is not loaded, a first write that found no plugin read again).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_agent import effects as fx
from geosync_agent.agentstate import Now, TopicState
from geosync_agent.core import planning
from geosync_agent.core.subscriptions import SubKey, Subscription
from geosync_agent.folding import Folding
from geosync_core import pluginapi, syncing
from geosync_core.capabilities import Capability

log = logging.getLogger("geosync.agent")


class Writing(Folding):
    """Planning and writing cursor changes (round steps 3 and 5)."""

    # -- 5. apply ----------------------------------------------------------------------------------

    def apply(self, now: Now) -> None:
        """Carry out what ``core.planning`` decides for this round: create and reset at once, then write the
        plans through the plugin (their outcomes landed by the next round's ``land_writes``) or move them
        through the admin API."""
        plugin_writes = self.caps.usable(Capability.PLUGIN_CURSOR_WRITES, now=now.mono)
        planned = planning.plan_round(
            self.topics,
            self.subs,
            now=now,
            covered=self.snapshots.covers,
            heavy_plans=self.heavy_plans,
            batch_writes=plugin_writes and self.caps.usable(Capability.BATCH_ACKS, now=now.mono),
            acknowledgements=self.claims_acknowledgements(),
            claims_known=self.claims_known(),
        )
        for name, n in planned.counts.items():
            self.stats.inc(name, n)
        for notice in planned.notices:
            self._notice(notice)
        self._perform(planned.effects, now)
        work = planned.work
        if work and plugin_writes:
            writes = planning.plugin_writes(work, self.feed, now_mono=now.mono)
            # Their outcomes are folded before the next round's observe step (``land_writes``): the loop
            # reads its tails and control topics meanwhile instead of waiting on the broker (at 10,000
            # subscriptions that wait was about a sixth of the applying region's rounds).
            self.writes_in_flight = (self.effector.start_plugin_writes(writes), work)
            return
        self._admin_moves(work, now)

    def land_writes(self, now: Now) -> None:
        """Fold the outcomes of the cursor writes the last apply step sent (waiting for them if need be), and
        move through the admin API the subscriptions the plugin could not write. Before ``observe``: a cursor
        a write answered must not be taken after a newer one the feed reported."""
        if self.writes_in_flight is None:
            return
        outcomes_of, work = self.writes_in_flight
        self.writes_in_flight = None
        try:
            outcomes = outcomes_of()
        except BaseException:
            for state, _, _ in work.values():
                state.planned = None  # not known written: planned again
            raise
        tried = self.caps.get(Capability.PLUGIN_CURSOR_WRITES) is not None
        for outcome in outcomes:
            self._fold(outcome, now)
            if planning.settled(work, outcome):
                self.stats.inc("plans_settled_by_writes")
        rest = planning.unwritten(work, outcomes, self._moved_away(outcomes, now))
        if rest and not tried and self.caps.get(Capability.PLUGIN_CURSOR_WRITES) is False:
            # The plugin's first writes found no plugin: they were planned from cursors claims did not
            # have read again (``_take_claims``: plugin writes answer the cursor), so they are read now,
            # in this round's polls, and planned again for the admin API.
            for state, ts, _ in rest.values():
                state.planned = None
                ts.poll = replace(ts.poll, next_at=0.0)
            return
        self._admin_moves(rest, now)

    def _admin_moves(
        self, work: dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]], now: Now
    ) -> None:
        moves: list[fx.Effect] = [
            *planning.admin_moves(
                work.values(),
                region=self.config.region,
                now_mono=now.mono,
                min_interval_s=self.config.min_apply_interval_s,
                skip_by_ids=self.caps.usable(Capability.SKIP_BY_IDS, now=now.mono),
            )
        ]
        self._perform(moves, now)

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
