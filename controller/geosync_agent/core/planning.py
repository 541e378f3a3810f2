"""Planning: which subscriptions' cursor changes a round makes, and with what plans.

The apply step of a round (``stepping.ApplyDue``, round step 5) asks ``plan_round`` once. Per tracked topic
not covered by snapshot mode it looks at the subscriptions something happened to (``core.quiet``; every one
when the log changed in a way their claims may see), and per subscription looked at it decides: the last
plan still holds (``core.applying``'s checks: only entries nobody claims were appended, or consumers here
moved on from a plan that had nothing to do), or it waits (not announced, its cursor not read yet, below
what the tail forgot, a rewind made elsewhere to follow first, the wait after a costly plan), or it is
planned now (``geosync_core.syncing.plan_apply``, per-key order kept for Key_Shared, batch indexes left out
where they cannot be written). What comes out is values (``Planned``): the plans to write, the effects to
carry out at once (subscriptions to create, cursors to reset to follow a rewind), counters and notices for
the shell to count and log. ``core.stepping`` turns the plans into the writes of one path or the other and
says what the plugin's answers leave to the admin API; the shell carries the effects out and folds their
outcomes back (``folding``), and decides none of this.

The subscriptions' records (``Subscription``: what was planned from, waits, why one waits) and the topics'
``Walked`` are updated here as the decisions are made, as ``core.publishing`` does for claims. The CPU a
plan takes is read with the meter the round's ``Now`` carries (none in tests and the simulator).

Invariants (tests in ``tests/agent/test_core_planning.py``):

* a subscription not announced here is never planned; one that does not exist here is asked to be created
  unless it was deleted here on purpose, and is not planned;
* nothing is planned from a cursor below entries the tail forgot: the subscription is parked (below what
  the budget made it forget) or the tail is read again (``stale``);
* a rewind made in another region is never followed while claims are made of acknowledgements (decision
  0015), and only once it is known what claims are made of;
* a plan that asks for nothing is no work (no write of either path), and a subscription whose plan is work
  is looked at again next round (restless);
* after a plan that took CPU, the subscription is not planned again for log or cursor changes alone before
  ``pauses.plan_wait`` of it has passed, but at once for new claims or claims naming entries just read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from geosync_agent.core import applying, logview, quiet
from geosync_agent.core.applying import (
    Appended,
    appended_above,
    claims_name_appended,
    moved_on_from_nothing,
    names_any,
    only_unclaimed_appended,
    plan_end,
)
from geosync_agent.core.effects import (
    CreateSubscription,
    Effect,
    ResetCursor,
)
from geosync_agent.core.logview import LogView
from geosync_agent.core.now import Now
from geosync_agent.core.pauses import note_heavy, plan_wait
from geosync_agent.core.subscriptions import BEFORE_ALL, Feed, SubKey, Subscription, SubsTable
from geosync_core import syncing, translating
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


class Topic(Protocol):
    """A tracked topic partition as planning reads it (the shell's ``agentstate.TopicState``)."""

    @property
    def tail(self) -> LogView:
        """Its log as this region's reader read it."""
        ...

    walked: quiet.Walked | None


class Tracked(Protocol):
    """The part of the agent's state most of the core's steps read and change: the tracked topics, their
    subscriptions, the feed's bookkeeping (``agentstate.AgentState`` has it; each step's protocol adds what
    else it reads)."""

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    @property
    def subs(self) -> SubsTable: ...

    @property
    def feed(self) -> Feed: ...


Work = dict[SubKey, tuple[Subscription, Topic, syncing.ApplyPlan]]
"""Plans to write, by key: the subscription, its topic, the plan."""


@dataclass(frozen=True, slots=True)
class Parked:
    """``state`` was parked now: its mark-delete lies below the entries its tail forgot over the budget of
    entries held (up to ``floor``); it is not synced until it catches up."""

    state: Subscription
    mark_delete: Position
    floor: Position


@dataclass(frozen=True, slots=True)
class NotFollowed:
    """A rewind made in another region is not followed for ``state``: claims here are made of what consumers
    acknowledged (decision 0015), so its cursor stays."""

    state: Subscription


Notice = Parked | NotFollowed
"""What a decision made that people should read of (the shell logs it)."""


@dataclass(slots=True)
class Planned:
    """A round's plans: ``work``, the cursor changes to write (by key: the subscription, its topic, the
    plan); ``effects``, what to carry out at once (subscriptions to create, cursors to reset); ``counts``,
    what to add to the agent's counters; ``notices``, what to log."""

    work: Work = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    notices: list[Notice] = field(default_factory=list)


def plan_round(
    topics: Mapping[str, Topic],
    subs: SubsTable,
    *,
    now: Now,
    covered: Callable[[str], bool],
    heavy_plans: dict[SubKey, Subscription],
    batch_writes: bool,
    acknowledgements: bool,
    claims_known: bool,
) -> Planned:
    """The apply step's decisions for every tracked topic (see the module docstring). ``covered``: whether
    snapshot mode covers a topic (planned there, not here); ``heavy_plans``: the subscriptions whose last plan
    was heavy (``pauses.note_heavy``, kept up to date here); ``batch_writes``: batch indexes can be written;
    ``acknowledgements``: claims are made of what consumers acknowledged; ``claims_known``: it is known what
    claims are made of (``AgentState.claims_acknowledgements``, ``claims_known``)."""
    planned = Planned()
    appended: Appended = {}  # the round's appended origins per (topic, end), shared by its subscriptions
    heavy = subs.still_held(heavy_plans)
    unlooked = 0
    for topic, group in list(subs.by_topic(existing_only=False).items()):
        touched = subs.touched.pop(topic, None)
        ts = topics.get(topic)
        if ts is None or covered(topic):
            if ts is not None:
                ts.walked = None  # what changed meanwhile was not kept: looked at whole again
            continue
        # Only the subscriptions something happened to, unless the log changed in a way their claims might
        # see (``core.quiet``): looking at every one was a round's largest fixed cost.
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
        names = quiet.to_look_at(walked, touched or (), quiet.log_unchanged(walked, tail, appended))
        if names is None:
            looked = group
        else:
            looked = [s for n in names if (s := subs.get((topic, n))) is not None]
            unlooked += len(group) - len(looked)
        restless = _plan_topic(
            ts,
            looked,
            planned,
            appended,
            now,
            heavy_plans=heavy_plans,
            heavy=heavy,
            batch_writes=batch_writes,
            acknowledgements=acknowledgements,
            claims_known=claims_known,
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
        planned.counts["apply_looks_skipped"] += unlooked
    return planned


def _plan_topic(
    ts: Topic,
    group: list[Subscription],
    planned: Planned,
    appended: Appended,
    now: Now,
    *,
    heavy_plans: dict[SubKey, Subscription],
    heavy: int,
    batch_writes: bool,
    acknowledgements: bool,
    claims_known: bool,
) -> list[str]:
    """The decisions for some of a tracked topic's subscriptions, into ``planned``. Returned: the names of
    those left with something to do that time alone may change (``core.quiet``'s restless ones)."""
    tail = ts.tail
    work, counts = planned.work, planned.counts
    skipped = 0
    restless: list[str] = []
    # the origins appended above the last end looked at (subscriptions planned together share it)
    seen_end: Position | None = None
    seen_origins: list[Origin] | None = None
    for state in group:
        if not state.announced:
            continue
        # Most subscriptions are looked at every round for nothing (every topic grows all the time): first
        # the cheapest test that says so, the claims and the cursor planned from being the very objects held
        # now (what ``applying.only_unclaimed_appended`` finds for these, without building anything).
        # Spelled out here on purpose: calling ``claims_and_log_as_planned`` instead made the walk a third
        # slower (``bench/agent_cpu.py``'s last lines, a: 11.1 -> 15.1 ms).
        planned_from, cursor, received = state.planned, state.cursor, state.received
        if (
            planned_from is not None
            and cursor is not None
            and planned_from[0] is cursor
            and planned_from[2] is received
            and state.pending_move is None
            and state.exists
        ):
            if planned_from[1] == tail.version:
                continue
            end = state.planned_end
            if end is not None and state.planned_rewrites == tail.rewrites:
                if end is not seen_end:
                    seen_end, seen_origins = end, appended_above(appended, tail, end)
                if seen_origins is not None and not names_any(received, seen_origins):
                    state.planned = (cursor, tail.version, received)
                    state.planned_end = plan_end(tail)
                    skipped += 1
                    continue
        if not state.exists:
            if not state.deleted_here:
                planned.effects.append(CreateSubscription(state.key))
                restless.append(state.name)
            continue
        if state.cursor is None:
            state.waiting = "its cursor has not been read here yet"
            continue
        # First: nothing else is looked at for the thousands of subscriptions where nothing changed (the
        # comparison is by identity first: ``_observe`` keeps an unchanged cursor's object).
        basis = (state.cursor, tail.version, state.received)
        if state.planned is not None and state.pending_move is None:
            if basis == state.planned:
                continue
            if only_unclaimed_appended(state, tail, appended):
                # The same plan again (every topic grows all the time: planning each of its subscriptions
                # again at every new entry was most of the apply step).
                state.planned = basis
                state.planned_end = plan_end(tail)
                counts["plans_skipped_for_unclaimed_entries"] += 1
                continue
            if state.planned_nothing and moved_on_from_nothing(state, tail, appended):
                # Consumers here acknowledged, and what others claim was all acknowledged here before: in
                # the consuming region, every acknowledgement moved a cursor that was planned again.
                state.planned = basis
                state.planned_end = plan_end(tail)
                counts["plans_skipped_for_moves_on"] += 1
                continue
        if behind_forgotten(tail, state, state.cursor, planned):
            state.waiting = "parked" if state.parked else "the topic is being read again"
            restless.append(state.name)
            continue
        if state.follow and acknowledgements:
            # Taken before the feed first answered: claims are made of what consumers acknowledged, so the
            # rewind is not followed (decision 0015) and the cursor stays; what consumers here acknowledged
            # before it belongs to the older generation.
            state.follow = False
            state.acked = None
            counts["rewinds_not_followed"] += 1
            planned.notices.append(NotFollowed(state))
        elif state.follow and not claims_known:
            state.waiting = "a rewind made elsewhere: followed once the feed tells what claims are"
            restless.append(state.name)
            continue
        if state.follow:
            reset = follow_rewind(state, tail, planned)
            if reset is not None:
                planned.effects.append(reset)
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
            and not claims_name_appended(state, tail, appended)
        ):
            restless.append(state.name)
            continue  # only the log or the cursor moved since a plan that took long: see PLAN_WAIT_FACTOR
        state.planned = basis
        state.planned_end = plan_end(tail)
        state.planned_rewrites = tail.rewrites
        state.waiting = ""
        if not state.received.by_region and not state.received.partials:
            # Nobody claimed anything: nothing to apply, and no need to walk the log (a subscription nobody
            # consumes anywhere would otherwise be planned over its whole backlog every round).
            plan = syncing.ApplyPlan(None, ())
        else:
            started = now.cpu()  # its CPU, as for publishes (``observing._publish``)
            plan = syncing.plan_apply(
                tail.index,
                state.cursor,
                remote=state.received,
                log=tail.stretches_above(state.cursor.mark_delete),
                size_of=tail.size_of,
                budget=logview.LOG_WINDOW,
            )
            counts["plans_made"] += 1
            # Key_Shared: what others claim behind a key's earlier message still unacknowledged here waits
            # (a rebuilt region's claims pass what its new life never had: invariant 6).
            plan = applying.keeping_key_order(state, tail, plan)
            if plan.held:
                counts["claims_held_for_key_order"] += plan.held
                state.waiting = f"{plan.held} claimed messages wait behind earlier ones of their keys"
            state.plan_took = took = now.cpu() - started
            note_heavy(heavy_plans, state, took)
            state.plan_after = now.mono + plan_wait(took, heavy=heavy)
        state.planned_nothing = plan.is_empty and plan.complete and plan.blocked_by is None and not plan.held
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
        counts["plans_skipped_for_unclaimed_entries"] += skipped
    return restless


def behind_forgotten(
    log: LogView, state: Subscription, cursor: AckState, planned: Planned | None = None
) -> bool | Parked:
    """Whether ``cursor`` (``state``'s) lies below entries ``log`` already forgot (a subscription created at
    the earliest message after the others moved on, or rewound): nothing is planned or claimed for it.
    Below what the budget of entries held made the tail forget, it is parked until it catches up (the
    ``Parked`` notice when parked now, counted into ``planned`` if given); else the tail is to be read again
    from the earliest message (``log.stale``, done by the next round)."""
    forgotten = log.forgot_above(cursor.mark_delete)
    if forgotten is None:
        state.parked = False
        return False
    budget_floor = log.budget_floor
    if budget_floor is not None and cursor.mark_delete < budget_floor:
        if state.parked:
            return True
        state.parked = True
        parked = Parked(state, cursor.mark_delete, budget_floor)
        if planned is not None:
            planned.counts["subscriptions_parked"] += 1
            planned.notices.append(parked)
        return parked
    if not log.stale:
        log.stale = True
        log.stale_reason = (
            f"subscription {state.name!r} is at {cursor.mark_delete}, below the entries forgotten up to "
            f"{forgotten} once every subscription known then had acknowledged them"
        )
    return True


def follow_rewind(state: Subscription, log: LogView, planned: Planned) -> ResetCursor | None:
    """The rewind that makes ``state``'s cursor acknowledge no more than its newer claims: back to the end of
    the longest prefix of the log they acknowledge (the claims' holes above it are applied after, as
    always). None when no rewind is needed (``follow`` cleared) or the tail has not read as far as the
    cursor acknowledged yet (``follow`` kept)."""
    assert state.cursor is not None
    if behind_forgotten(log, state, AckState.of(BEFORE_ALL), planned):
        return None  # the new claims may unacknowledge entries the tail forgot: it reads them again first
    if log.last is None or log.last < state.cursor.reach:
        return None
    state.follow = False
    own = translating.to_origin_acks(log.index, state.cursor)
    if not isinstance(own, translating.Translation) or own.acks.merge(state.received) == state.received:
        return None
    plan = syncing.plan_apply(
        log.index,
        AckState.of(BEFORE_ALL),
        remote=state.received,
        log=log.positions_above(BEFORE_ALL),
        size_of=log.size_of,
    )
    return ResetCursor(state.key, plan.new_mark_delete)
