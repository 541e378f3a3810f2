"""Applying a plan to a cursor: what the admin API is asked to do, and when a write settles a plan.

``geosync_core.syncing.plan_apply`` says what a subscription's cursor must acknowledge here; this says how
that is carried out where the broker plugin cannot write it (the admin API moves mark-delete through a
gate, one move in flight at a time, and acknowledges holes only while no application consumer is
connected), and when a plugin write has done all a plan asked so that it need not be made again.

Invariants (tests in ``tests/agent/test_core_applying.py``): a mark-delete moves only through the gate
(``pacing.may_move``); a plan with nothing to move and no holes asks for nothing; a write settles a plan
only when the plan was whole (not cut short by its budget, not stopped at an entry not indexed yet) and the
cursor it answered holds what the plan was made from and what it wrote.
"""

from __future__ import annotations

from geosync_agent.core.effects import SHADOW_PREFIX, AdminMove
from geosync_agent.core.subscriptions import Subscription
from geosync_core import pacing, syncing


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
    entry not indexed yet: the next plan may go on from there."""
    planned = state.planned
    if (
        planned is None
        or planned[0] is None
        or state.cursor is None
        or not plan.complete
        or plan.blocked_by is not None
    ):
        return False
    if not syncing.carried_out(state.cursor, planned[0], plan):
        return False
    state.planned = (state.cursor, planned[1], planned[2])
    state.planned_nothing = True  # what planning it again would find
    state.behind_since = None
    return True
