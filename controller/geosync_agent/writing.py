"""Applying: the round's cursor changes, carried out as the core's ``stepping.step`` decides them.

Round steps 3 and 5 (``runtime``). The apply step hands the core an ``ApplyDue`` event; ``land_writes``, at
the next round's start, folds the plugin writes' outcomes into the state (``folding``) and hands them over
as ``Written`` and ``Landed``. What comes back is carried out here and nothing else: its counters added, its
notices logged, its effects performed through the ``Effector``, the plugin writes sent (landed by the next
round), topics polled at once. What is asked here is only what I/O itself tells: which capabilities are
usable now, and in sidecar mode which topics a broker that refused a write as not loaded no longer owns.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_agent import effects as fx
from geosync_agent.agentstate import Now
from geosync_agent.core import stepping
from geosync_agent.core.subscriptions import SubKey
from geosync_agent.folding import Folding
from geosync_core import pluginapi
from geosync_core.capabilities import Capability

log = logging.getLogger("geosync.agent")


class Writing(Folding):
    """Carrying out the core's cursor changes (round steps 3 and 5)."""

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
        """Fold the outcomes of the cursor writes the last apply step sent (waiting for them if need be), and
        carry out what the core makes of them (``stepping.Written``, ``Landed``). Before ``observe``: a cursor
        a write answered must not be taken after a newer one the feed reported."""
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
            self._fold(outcome, now)
        self._carry_out(stepping.step(self, stepping.Written(work, outcomes), now), now)
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
