"""What the cursor writes did, folded into the state through the core's entry (``core.stepping.step`` with
``Written`` and ``Moved``, over ``core.landing``): from values only, one event per batch of outcomes.

One test per invariant ``core.landing`` states.
"""

from __future__ import annotations

from geosync_agent.core import generations, stepping
from geosync_agent.core.effects import (
    PLANNED_FROM_REFUSED,
    AdminMoved,
    CursorWritten,
    NotWritten,
    Outcome,
)
from geosync_agent.core.logview import LogView
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Work
from geosync_agent.core.stepped import MoveFailed, WriteStale
from geosync_agent.core.subscriptions import Subscription, SubsTable
from geosync_core import pacing, pluginapi
from geosync_core.batches import BatchAcks
from geosync_core.capabilities import REPROBE_S
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .test_core_planning import State, Topic  # the state as the apply step reads it (``landing.Landing`` too)

TOPIC = "persistent://geo/ab/orders"
NOW = Now(100.0, 1_100.0)


def world(*names: str) -> tuple[State, list[Subscription]]:
    subs = SubsTable()
    states = []
    for name in names:
        state = Subscription(TOPIC, name, cursor=AckState.of(Position(9, 1)), received=OriginAcks.of({}))
        state.active = True
        state.planned = (state.cursor, 0, OriginAcks.of({}))
        subs[state.key] = state
        states.append(state)
    return State({TOPIC: Topic(LogView(TOPIC, -1))}, subs), states


def report(state: Subscription, entry: int, *batches: pluginapi.BatchState) -> pluginapi.CursorReport:
    return pluginapi.CursorReport(TOPIC, state.name, Position(9, entry), "[]", batches)


def written(
    agent: State,
    outcomes: list[Outcome],
    *,
    covered: bool = False,
    judged: bool = True,
) -> stepping.Stepped:
    work: Work = {}
    event = stepping.Written(
        work, outcomes, covered=lambda topic: covered, judged=judged, acknowledgements=False
    )
    return stepping.step(agent, event, NOW)


def moved(agent: State, outcomes: list[AdminMoved], *, covered: bool = False) -> stepping.Stepped:
    return stepping.step(agent, stepping.Moved(outcomes, lambda topic: covered), NOW)


def moving(state: Subscription) -> None:
    """An admin-API move of ``state`` waiting to be seen, holes held back."""
    state.pending_move = pacing.PendingMove(Position(9, 2), 90.0)
    state.pending_holes = 3


def test_a_write_takes_the_cursor_it_answered_and_clears_the_move_and_holes_it_supersedes() -> None:
    agent, (state,) = world("w")
    moving(state)
    batch = pluginapi.BatchState(Position(9, 5), (2, 3))
    out = written(agent, [CursorWritten(state.key, report(state, 4, batch), True, 2, batch_indexes=2)])
    assert state.cursor == AckState.of(Position(9, 4)).ack_batches(
        ((Position(9, 5), BatchAcks.of(4, [0, 1])),)
    )
    assert (state.pending_move, state.pending_holes, state.last_applied_at) == (None, 0, NOW.wall)
    assert out.counts == {
        "plugin_acks": 1,
        "mark_delete_moves": 1,
        "holes_acked": 2,
        "batch_indexes_acked": 2,
    }


def test_a_write_below_what_was_seen_is_a_rewind_unless_covered_or_not_judged_this_round() -> None:
    for covered, judged, taken in ((False, True, True), (True, True, False), (False, False, False)):
        agent, (state,) = world("w")
        state.seen_any = AckState.of(Position(9, 6))
        generation = state.generation
        out = written(
            agent, [CursorWritten(state.key, report(state, 2), False, 0)], covered=covered, judged=judged
        )
        assert state.cursor == AckState.of(Position(9, 2))  # taken either way: it is what the broker holds
        assert (state.generation > generation) is taken, (covered, judged)
        assert out.counts["rewinds"] == int(taken)
        assert [type(n) for n in out.notices] == ([generations.RewindTaken] if taken else [])


def test_a_refused_write_is_planned_again_and_one_the_plugin_could_not_take_keeps_its_plan() -> None:
    agent, (refused, elsewhere, checked) = world("x", "y", "z")
    outcomes: list[Outcome] = [
        NotWritten(refused.key, fallback=False, reason="refused: bad_request"),
        NotWritten(elsewhere.key, fallback=True, reason="not_loaded"),
        NotWritten(checked.key, fallback=False, reason=PLANNED_FROM_REFUSED),
    ]
    out = written(agent, outcomes)
    assert refused.planned is None
    assert elsewhere.planned is not None  # the admin API writes it (``Landed``)
    assert checked.planned is None
    assert agent.feed.planned_from_refused_at == NOW.mono  # not sent for REPROBE_S
    assert NOW.mono - agent.feed.planned_from_refused_at < REPROBE_S
    assert out.counts == {"apply_errors": 2, "plugin_planned_from_refused": 1}


def test_a_stale_write_is_counted_and_noticed() -> None:
    agent, (state,) = world("w")
    stale = CursorWritten(state.key, report(state, 0), moved=False, holes=0, stale=True)
    out = written(agent, [stale])
    assert out.counts["plugin_writes_stale"] == 1
    assert out.notices == [WriteStale(state, Position(9, 0))]
    assert state.cursor == AckState.of(Position(9, 0))  # as it is: planned again from it


def test_an_admin_move_that_failed_or_found_the_subscription_gone_is_planned_again() -> None:
    agent, (failed, gone) = world("x", "y")
    out = moved(
        agent,
        [
            AdminMoved(failed.key, "mark_delete_moves", None, False, 0, 0, 0, error="503"),
            AdminMoved(
                gone.key, "mark_delete_moves", None, False, 0, 2, 0, error="no longer exists", gone=True
            ),
        ],
    )
    assert (failed.planned, gone.planned) == (None, None)
    assert out.absent == [gone]  # taken as a discovery pass that no longer finds it, not retried
    assert out.notices == [
        MoveFailed(failed, "503", gone=False),
        MoveFailed(gone, "no longer exists", gone=True),
    ]
    assert out.counts == {"apply_errors": 1}


def test_an_admin_move_waits_for_the_broker_to_show_it_unless_snapshot_mode_covers_the_topic() -> None:
    for covered in (False, True):
        agent, (state,) = world("w")
        out = moved(
            agent,
            [AdminMoved(state.key, "mark_delete_moves", Position(9, 4), True, 1, 2, 0)],
            covered=covered,
        )
        pending = None if covered else pacing.PendingMove(Position(9, 4), NOW.mono)
        assert state.pending_move == pending
        assert state.pending_holes == 2  # held back: consumers connected
        assert state.last_applied_at == NOW.wall
        assert out.counts == {"mark_delete_moves": 1, "expire_busy": 1, "holes_acked": 1}
