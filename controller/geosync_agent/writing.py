"""Applying: each subscription's cursor change planned and written.

Round steps 3 and 5 (``runtime``): per topic, plan each subscription's cursor change
(``geosync_core.syncing.plan_apply``, skipped where ``core.applying`` says nothing changed), send plugin
cursor writes (landed at the next round's start by ``land_writes``), gate admin-API moves
(``core.applying``) and follow rewinds. The writes' outcomes are folded back into the state by
``folding``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_agent import effects as fx
from geosync_agent.agentstate import Now, TopicState
from geosync_agent.core import applying, logview, quiet
from geosync_agent.core.applying import (
    appended_above,
    claims_name_appended,
    moved_on_from_nothing,
    names_any,
    only_unclaimed_appended,
    plan_end,
)
from geosync_agent.core.pauses import note_heavy, plan_wait
from geosync_agent.core.subscriptions import (
    BEFORE_ALL,
    SubKey,
    Subscription,
)
from geosync_agent.folding import Folding
from geosync_core import pluginapi, pluginwrites, syncing, translating
from geosync_core.capabilities import REPROBE_S, Capability
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")


class Writing(Folding):
    """Planning and writing cursor changes (round steps 3 and 5)."""

    # -- 5. apply ----------------------------------------------------------------------------------

    def apply(self, now: Now) -> None:
        self._appended = {}
        plugin_writes = self.caps.usable(Capability.PLUGIN_CURSOR_WRITES, now=now.mono)
        batch_writes = plugin_writes and self.caps.usable(Capability.BATCH_ACKS, now=now.mono)
        work: dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]] = {}
        creates: list[fx.Effect] = []
        heavy = self.subs.still_held(self.heavy_plans)
        subs, unlooked = self.subs, 0
        for topic, group in list(subs.by_topic(existing_only=False).items()):
            touched = subs.touched.pop(topic, None)
            # Per topic: whether snapshot mode covers it, and its state (None: not tracked).
            ts = self.topics.get(topic)
            if ts is None or self.snapshots.covers(topic):
                if ts is not None:
                    ts.walked = None  # what changed meanwhile was not kept: looked at whole again
                continue
            # Only the subscriptions something happened to, unless the log changed in a way their claims
            # might see (``core.quiet``): at 10,000 subscriptions looking at every one was a round's largest
            # fixed cost.
            walked, tail = ts.walked, ts.tail
            if (
                touched is None
                and walked is not None
                and not walked.restless
                and walked.log is tail
                and walked.version == tail.version
                and walked.rewrites == tail.rewrites
            ):
                unlooked += len(group)
                continue
            names = quiet.to_look_at(walked, touched or (), quiet.log_unchanged(walked, tail, self._appended))
            if names is None:
                looked = group
            else:
                looked = [s for n in names if (s := subs.get((topic, n))) is not None]
                unlooked += len(group) - len(looked)
            restless = self._apply_topic(
                ts, looked, work, creates, now, heavy=heavy, batch_writes=batch_writes
            )
            subs.touched.pop(topic, None)  # what the look itself set
            ts.walked = quiet.after_look(
                ts.walked,
                ts.tail,
                whole=names is None,
                looked=(s.received for s in looked),
                restless=restless,
                quiet=(s.name for s in looked),
            )
        if unlooked:
            self.stats.inc("apply_looks_skipped", unlooked)
        self._perform(creates, now)
        if work and plugin_writes:
            # plan_apply puts every individual ack above the new mark-delete (a core invariant, tested). A
            # plugin that checks it is told the mark-delete each plan was made from: it writes nothing on a
            # cursor an operator has moved back since (a reset the feed does not report), and answers it.
            checked = (
                self.feed.write_version >= pluginwrites.WRITE_VERSION
                and now.mono - self.feed.planned_from_refused_at >= REPROBE_S
            )
            writes = [
                fx.PluginAck(
                    key,
                    plan.new_mark_delete,
                    plan.individual_acks,
                    plan.batch_acks,
                    planned_from=_planned_from(state) if checked else None,
                )
                for key, (state, _, plan) in work.items()
            ]
            # Their outcomes are folded before the next round's observe step (``land_writes``): the loop
            # reads its tails and control topics meanwhile instead of waiting on the broker (at 10,000
            # subscriptions that wait was about a sixth of the applying region's rounds).
            self.writes_in_flight = (self.effector.start_plugin_writes(writes), work)
            return
        self._admin_moves(work, now)

    def _apply_topic(
        self,
        ts: TopicState,
        group: list[Subscription],
        work: dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]],
        creates: list[fx.Effect],
        now: Now,
        *,
        heavy: int,
        batch_writes: bool,
    ) -> list[str]:
        """The apply step for some of a tracked topic's subscriptions: what to create, and the plans to carry
        out (into ``work``). Returned: the names of those left with something to do that time alone may
        change (``core.quiet``'s restless ones: looked at again next round)."""
        tail = ts.tail
        skipped = 0
        restless: list[str] = []
        # the origins appended above the last end looked at (subscriptions planned together share it)
        seen_end: Position | None = None
        seen_origins: list[Origin] | None = None
        for state in group:
            if not state.announced:
                continue
            # At 10,000 subscriptions most are looked at every round for nothing (every topic grows all the
            # time): first the cheapest test that says so, the claims and the cursor planned from being the
            # very objects held now (what ``applying.only_unclaimed_appended`` finds for these, without
            # building anything). Spelled out here on purpose: calling ``claims_and_log_as_planned`` instead
            # made the walk a third slower (``bench/agent_cpu.py``'s last lines, a: 11.1 -> 15.1 ms).
            planned, cursor, received = state.planned, state.cursor, state.received
            if (
                planned is not None
                and cursor is not None
                and planned[0] is cursor
                and planned[2] is received
                and state.pending_move is None
                and state.exists
            ):
                if planned[1] == tail.version:
                    continue
                end = state.planned_end
                if end is not None and state.planned_rewrites == tail.rewrites:
                    if end is not seen_end:
                        seen_end, seen_origins = end, appended_above(self._appended, tail, end)
                    if seen_origins is not None and not names_any(received, seen_origins):
                        state.planned = (cursor, tail.version, received)
                        state.planned_end = plan_end(tail)
                        skipped += 1
                        continue
            if not state.exists:
                if not state.deleted_here:
                    creates.append(fx.CreateSubscription(state.key))
                    restless.append(state.name)
                continue
            if state.cursor is None:
                state.waiting = "its cursor has not been read here yet"
                continue
            # First: nothing else is looked at for the thousands of subscriptions where nothing changed (the
            # comparison is by identity first: ``_observe`` keeps an unchanged cursor's object).
            basis = (state.cursor, ts.tail.version, state.received)
            if state.planned is not None and state.pending_move is None:
                if basis == state.planned:
                    continue
                if only_unclaimed_appended(state, ts.tail, self._appended):
                    # The same plan again (every topic grows all the time: planning each of its
                    # subscriptions again at every new entry was most of the apply step at 10,000 of them).
                    state.planned = basis
                    state.planned_end = plan_end(ts.tail)
                    self.stats.inc("plans_skipped_for_unclaimed_entries")
                    continue
                if state.planned_nothing and moved_on_from_nothing(state, ts.tail, self._appended):
                    # Consumers here acknowledged, and what others claim was all acknowledged here before:
                    # in the consuming region, every acknowledgement moved a cursor that was planned again.
                    state.planned = basis
                    state.planned_end = plan_end(ts.tail)
                    self.stats.inc("plans_skipped_for_moves_on")
                    continue
            if self._behind_forgotten(ts, state, state.cursor):
                state.waiting = "parked" if state.parked else "the topic is being read again"
                restless.append(state.name)
                continue
            if state.follow and self.claims_acknowledgements():
                # Taken before the feed first answered: claims are made of what consumers acknowledged, so
                # the rewind is not followed (decision 0015) and the cursor stays; what consumers here
                # acknowledged before it belongs to the older generation.
                state.follow = False
                state.acked = None
                self.stats.inc("rewinds_not_followed")
                log.info("%s on %s: the rewind elsewhere is not followed here", state.name, state.topic)
            elif state.follow and not self.claims_known():
                state.waiting = "a rewind made elsewhere: followed once the feed tells what claims are"
                restless.append(state.name)
                continue
            if state.follow:
                reset = self._follow_rewind(state, ts, now)
                if reset is not None:
                    creates.append(reset)
                if reset is not None or state.follow:
                    state.waiting = "following a rewind made in another region"
                    restless.append(state.name)
                    continue
            if (
                state.planned is not None
                and state.planned[2] is state.received
                and state.pending_move is None
                and now.mono < state.plan_after
                # A copy read after the claim that names it is news as the claim was: planned at once.
                and not claims_name_appended(state, ts.tail, self._appended)
            ):
                restless.append(state.name)
                continue  # only the log or the cursor moved since a plan that took long: see PLAN_WAIT_FACTOR
            state.planned = basis
            state.planned_end = plan_end(ts.tail)
            state.planned_rewrites = ts.tail.rewrites
            state.waiting = ""
            if not state.received.by_region and not state.received.partials:
                # Nobody claimed anything: nothing to apply, and no need to walk the log (a subscription
                # nobody consumes anywhere would otherwise be planned over its whole backlog every round).
                plan = syncing.ApplyPlan(None, ())
            else:
                started = now.cpu()  # its CPU, as for publishes (``_publish``)
                plan = syncing.plan_apply(
                    ts.tail.index,
                    state.cursor,
                    remote=state.received,
                    log=ts.tail.stretches_above(state.cursor.mark_delete),
                    size_of=ts.tail.size_of,
                    budget=logview.LOG_WINDOW,
                )
                self.stats.inc("plans_made")
                # Key_Shared: what others claim behind a key's earlier message still unacknowledged here
                # waits (a rebuilt region's claims pass what its new life never had: invariant 6).
                plan = applying.keeping_key_order(state, ts.tail, plan)
                if plan.held:
                    self.stats.inc("claims_held_for_key_order", plan.held)
                    state.waiting = f"{plan.held} claimed messages wait behind earlier ones of their keys"
                state.plan_took = took = now.cpu() - started
                note_heavy(self.heavy_plans, state, took)
                state.plan_after = now.mono + plan_wait(took, heavy=heavy)
            state.planned_nothing = (
                plan.is_empty and plan.complete and plan.blocked_by is None and not plan.held
            )
            state.unapplied_batches = state.unapplied_batch_messages = 0
            if plan.batch_acks and not batch_writes:
                # Batch indexes cannot be written here: counted, not retried every round.
                plan, batches, messages = applying.without_batch_indexes(plan, state.cursor)
                state.unapplied_batches, state.unapplied_batch_messages = batches, messages
            if plan.is_empty:
                state.pending_holes = 0
                state.pending_move = None
                state.behind_since = None
                continue
            if state.behind_since is None:
                state.behind_since = now.wall
            work[state.key] = (state, ts, plan)
            restless.append(state.name)
        if skipped:
            self.stats.inc("plans_skipped_for_unclaimed_entries", skipped)
        return restless

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
            if isinstance(outcome, fx.CursorWritten) and not outcome.stale and outcome.key in work:
                state, _, plan = work[outcome.key]
                if applying.settle_plan(state, plan):
                    self.stats.inc("plans_settled_by_writes")
        handled = {
            o.key
            for o in outcomes
            if isinstance(o, fx.CursorWritten) or (isinstance(o, fx.NotWritten) and not o.fallback)
        }
        handled |= self._moved_away(outcomes, now)
        rest = {k: v for k, v in work.items() if k not in handled}
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
        moves: list[fx.Effect] = []
        skip_by_ids = self.caps.usable(Capability.SKIP_BY_IDS, now=now.mono)
        for state, ts, plan in work.values():
            move = applying.admin_move(
                state,
                plan,
                partition=ts.tail.partition,
                region=self.config.region,
                now=now.mono,
                min_interval_s=self.config.min_apply_interval_s,
                skip_by_ids=skip_by_ids,
            )
            if move is not None:
                moves.append(move)
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

    def _follow_rewind(self, state: Subscription, ts: TopicState, now: Now) -> fx.ResetCursor | None:
        """The rewind that makes ``state``'s cursor acknowledge no more than its newer claims: back to the end
        of the longest prefix of the log they acknowledge (the claims' holes above it are applied after, as
        always). None when no rewind is needed (``follow`` cleared) or the tail has not read as far as the
        cursor acknowledged yet (``follow`` kept)."""
        assert state.cursor is not None
        if self._behind_forgotten(ts, state, AckState.of(BEFORE_ALL)):
            return None  # the new claims may unacknowledge entries the tail forgot: it reads them again first
        tail = ts.tail
        if tail.last is None or tail.last < state.cursor.reach:
            return None
        state.follow = False
        own = translating.to_origin_acks(tail.index, state.cursor)
        if not isinstance(own, translating.Translation) or own.acks.merge(state.received) == state.received:
            return None
        plan = syncing.plan_apply(
            tail.index,
            AckState.of(BEFORE_ALL),
            remote=state.received,
            log=tail.positions_above(BEFORE_ALL),
            size_of=tail.size_of,
        )
        return fx.ResetCursor(state.key, plan.new_mark_delete)


def _planned_from(state: Subscription) -> Position | None:
    """The mark-delete of the cursor ``state``'s plan was made from (``Subscription.planned``'s first part,
    the cursor it held when planning), None if there was none."""
    planned = state.planned
    cursor = state.cursor if planned is None or planned[0] is None else planned[0]
    return None if cursor is None else cursor.mark_delete
