"""Applying a plan to a cursor: what the admin API is asked to do, and when a write settles a plan.

``geosync_core.syncing.plan_apply`` says what a subscription's cursor must acknowledge here; this says how
that is carried out where the broker plugin cannot write it (the admin API moves mark-delete through a
gate, one move in flight at a time, and acknowledges holes only while no application consumer is
connected), and when a plugin write has done all a plan asked so that it need not be made again.

Most subscriptions need no new plan in a round (every topic grows all the time): a plan holds while the
claims and the cursor it was made from are the ones held and the entries appended since are ones the claims
do not name. Those checks are here too, over the tail's log as ``Log`` describes it.

Where batch indexes cannot be written (the admin API only, or brokers without batch-index acknowledgements)
a plan's batch indexes are left out and counted, not retried every round.

A Key_Shared subscription's plan keeps per-key order here (``keeping_key_order``): what the claims
acknowledge behind an earlier message of its key and origin still unacknowledged here waits
(``keyorder.key_ordered_plan``; a rebuilt region's claims pass what its new life never received).

Invariants (tests in ``tests/agent/test_core_applying.py``): a mark-delete moves only through the gate
(``pacing.may_move``); a plan with nothing to move and no holes asks for nothing; a write settles a plan
only when the plan was whole (not cut short by its budget, not stopped at an entry not indexed yet) and the
cursor it answered holds what the plan was made from and what it wrote; a plan is kept for appended entries
only when the claims name none of them, and never when more than ``tuning.APPENDED_CHECK_MAX`` were
appended or entries already indexed changed; a plan without its batch indexes counts as unapplied exactly
the messages of those batches the cursor has not acknowledged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from geosync_agent.core import tuning
from geosync_agent.core.effects import SHADOW_PREFIX, AdminMove
from geosync_agent.core.subscriptions import BEFORE_ALL, Subscription
from geosync_core import keyorder, pacing, syncing
from geosync_core.indexing import OriginIndex
from geosync_core.origins import Origin, OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


class Log(Protocol):
    """What the apply step reads of a topic's log as this region's tail has read it (``logview.LogView``)."""

    topic: str
    index: OriginIndex
    last: Position | None
    """The last entry read (None: none yet)."""
    sizing: Position | None
    """The last entry, while its batch's size is still being counted."""
    version: int
    """Bumped whenever entries are indexed."""
    rewrites: int
    """Bumped whenever entries already indexed change."""
    unresolved: list[Position]
    """Entries read whose origin could not be named yet (in order)."""

    def stretches_above(self, floor: Position) -> syncing.Stretches: ...


class KeyedLog(Log, Protocol):
    """The log with what its entries' keys are, for a Key_Shared subscription's plans."""

    def positions_above(self, floor: Position) -> list[Position]: ...

    def key_of(self, position: Position) -> str | None: ...

    def key_of_message(self, position: Position, index: int) -> str | None: ...

    def size_of(self, position: Position) -> int | None: ...

    def origin_region_of(self, position: Position) -> str | None: ...


def keeping_key_order(state: Subscription, log: KeyedLog, plan: syncing.ApplyPlan) -> syncing.ApplyPlan:
    """``plan`` (made from ``state``'s cursor over ``log``) as it may be written here: unchanged unless the
    subscription is Key_Shared (seen so here, or claims said so), else less what it acknowledges behind an
    earlier message of its key and origin still unacknowledged here (``keyorder.key_ordered_plan``, over the
    first entries above the mark-delete the log gives; ``held`` counts what waits)."""
    if not state.key_shared or plan.is_empty or state.cursor is None:
        return plan
    return keyorder.key_ordered_plan(
        plan,
        state.cursor,
        log.positions_above(state.cursor.mark_delete),
        log.key_of,
        size_of=log.size_of,
        key_of_message=log.key_of_message,
        origin_of=log.origin_region_of,
    )


Appended = dict[tuple[str, Position], list[Origin] | None]
"""A round's ``appended_origins`` per (topic, end): the same for every subscription planned at that end."""
_NOTHING = syncing.ApplyPlan(None, ())


def admin_move(
    state: Subscription,
    plan: syncing.ApplyPlan,
    *,
    partition: int,
    region: str,
    now: float,
    min_interval_s: float,
    skip_by_ids: bool,
) -> AdminMove | None:
    """The admin-API change for ``plan``: mark-delete only through the move gate (one move in flight, at
    most one per ``min_interval_s``), holes above it; None when there is nothing to ask for now."""
    target = plan.new_mark_delete
    move = None
    if target is not None and pacing.may_move(
        state.pending_move,
        current=None if state.cursor is None else state.cursor.mark_delete,
        target=target,
        now=now,
        min_interval_s=min_interval_s,
    ):
        move = target
    if not plan.individual_acks:
        state.pending_holes = 0
        if move is None:
            return None
    return AdminMove(
        key=state.key,
        partition=partition,
        move=move,
        holes=plan.individual_acks,
        skip_by_ids=skip_by_ids,
        consumers=state.consumers,
        shadow_name=f"{SHADOW_PREFIX}{region}",
    )


def settle_plan(state: Subscription, plan: syncing.ApplyPlan) -> bool:
    """The plugin wrote ``plan``: if the cursor it answered holds what the plan was made from and what it
    wrote (``syncing.carried_out``), take that cursor as planned (with the log and claims the plan was made
    from), and say so. Planning it again would find nothing to do; at 10,000 subscriptions that second plan
    was made for every write, a round later. Not when the plan was cut short by its budget or stopped at an
    entry not indexed yet: the next plan may go on from there; nor when it held claims back for per-key order
    (``held``): consumers here acknowledging what held them frees them."""
    planned = state.planned
    if (
        planned is None
        or planned[0] is None
        or state.cursor is None
        or not plan.complete
        or plan.blocked_by is not None
        or plan.held
    ):
        return False
    if not syncing.carried_out(state.cursor, planned[0], plan):
        return False
    state.planned = (state.cursor, planned[1], planned[2])
    state.planned_nothing = True  # what planning it again would find
    state.behind_since = None
    return True


def plan_end(log: Log) -> Position | None:
    """The log's end a plan is made up to (``Subscription.planned_end``): None while its last entry's size is
    still being counted (a plan may have left that entry's partial claims unused)."""
    return None if log.sizing is not None else log.last


def names_any(received: OriginAcks, origins: list[Origin]) -> bool:
    """Whether the claims ``received`` name (whole or in part) any of ``origins``."""
    return any(origin in received or received.batch(origin) is not None for origin in origins)


def appended_origins(log: Log, end: Position) -> list[Origin] | None:
    """The origins of the entries ``log`` holds above ``end`` (None: more than APPENDED_CHECK_MAX)."""
    origins: list[Origin] = []
    seen = 0
    for ledger, first, last in log.stretches_above(end).items:
        seen += last - first + 1
        if seen > tuning.APPENDED_CHECK_MAX:
            return None
        for entry in range(first, last + 1):
            origin = log.index.origin_of(Position(ledger, entry))
            if origin is not None:
                origins.append(origin)
    return origins


def appended_above(appended: Appended, log: Log, end: Position) -> list[Origin] | None:
    """``appended_origins`` of ``log`` above ``end``, read once a round (kept in ``appended``): the same for
    every subscription of the topic planned at the same end."""
    key = (log.topic, end)
    if key in appended:
        return appended[key]
    origins = appended[key] = appended_origins(log, end)
    return origins


def claims_name_appended(state: Subscription, log: Log, appended: Appended) -> bool | None:
    """Whether the claims received name (whole or in part) an entry the log appended since ``state``'s
    last plan; None: not known (no plan yet, or more than APPENDED_CHECK_MAX entries appended)."""
    end = state.planned_end
    if end is None:
        return None
    origins = appended_above(appended, log, end)
    return None if origins is None else names_any(state.received, origins)


def claims_and_log_as_planned(state: Subscription, log: Log, appended: Appended) -> bool:
    """Whether ``state``'s last plan was made from the claims it holds and from its topic's log as it is,
    but for entries appended since whose origins the claims do not name, whole or in part: those change
    no plan (an entry nobody claims stops the mark-delete where the log's end stopped it before, and is
    acknowledged by nobody). Looks at no more than APPENDED_CHECK_MAX new entries (more: no)."""
    planned = state.planned
    if planned is None or planned[2] is not state.received or state.planned_rewrites != log.rewrites:
        return False
    return planned[1] == log.version or claims_name_appended(state, log, appended) is False


def only_unclaimed_appended(state: Subscription, log: Log, appended: Appended) -> bool:
    """Whether only the log grew since ``state``'s last plan, by entries whose origins the claims received
    do not name (``claims_and_log_as_planned``, with the cursor planned from)."""
    planned = state.planned
    return (
        planned is not None and planned[0] == state.cursor and claims_and_log_as_planned(state, log, appended)
    )


def moved_on_from_nothing(state: Subscription, log: Log, appended: Appended) -> bool:
    """Whether ``state``'s last plan (empty, see ``planned_nothing``) holds for its cursor now: the claims
    and the log it was made from (``claims_and_log_as_planned``), and a cursor that holds everything the
    planned one did (``syncing.carried_out`` of an empty plan)."""
    planned = state.planned
    if planned is None or planned[0] is None or state.cursor is None:
        return False
    return claims_and_log_as_planned(state, log, appended) and syncing.carried_out(
        state.cursor, planned[0], _NOTHING
    )


def claimed_to(cursor: AckState, log: Log) -> Position:
    """How far ``cursor``'s translation through ``log``'s index reached: its mark-delete, capped below the
    entries the tail had not read or could not place yet (``Subscription.claimed_to``)."""
    if log.last is None:
        return BEFORE_ALL
    reached = min(cursor.mark_delete, log.last)
    if log.unresolved and log.unresolved[0] <= reached:
        first = log.unresolved[0]
        return Position(first.ledger, first.entry - 1)
    return reached


def without_batch_indexes(plan: syncing.ApplyPlan, cursor: AckState) -> tuple[syncing.ApplyPlan, int, int]:
    """``plan`` without its batch-index acknowledgements, where they cannot be written, and what stays
    unacknowledged for that: the batches, and their messages ``cursor`` has not acknowledged (a failover
    here delivers those again)."""
    if not plan.batch_acks:
        return plan, 0, 0
    messages = sum(
        len(acks.indexes()) - len(cursor.acked_indexes(p, acks.size).indexes()) for p, acks in plan.batch_acks
    )
    return replace(plan, batch_acks=()), len(plan.batch_acks), messages
