"""What consumers acknowledged, as the plugin's feed tells it, through the core's entry
(``core.stepping.step`` with ``AckedRead``, round step 1): blocks absorbed, held, waiting or dropped, and
which subscriptions are looked at again, from values only: events in, values out. One test per invariant
``core.absorbing`` states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from geosync_agent.core import stepping, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import Feed, Subscription, SubsTable
from geosync_core.pluginapi import AckedSet, BatchState
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .test_core_planning import SUB, TOPIC, Topic, copies


@dataclass
class State:
    """The agent's state as ``acked`` blocks read it (``absorbing.Absorbing``)."""

    topics: dict[str, Topic] = field(default_factory=lambda: {TOPIC: Topic(copies(6))})
    subs: SubsTable = field(default_factory=SubsTable)
    feed: Feed = field(default_factory=Feed)


def tracked(cursor: int | None = 1) -> State:
    state = State()
    sub = Subscription(TOPIC, SUB, cursor=None if cursor is None else AckState.of(Position(9, cursor)))
    state.subs[sub.key] = sub
    return state


def up_to(entry: int, *batches: BatchState) -> AckedSet:
    return AckedSet(TOPIC, SUB, cumulative=Position(9, entry), batches=batches)


def read(
    state: State,
    *blocks: AckedSet,
    lost: int = 0,
    reported: Mapping[str, Mapping[str, AckState]] | None = None,
    owned: bool = True,
    mono: float = 100.0,
) -> stepping.Absorbed:
    event = stepping.AckedRead(blocks, lost, reported or {}, owned=lambda _t: owned)
    return stepping.step(state, event, Now(mono, 1_000.0 + mono))


def test_a_block_grows_what_consumers_acknowledged_and_looks_again_with_the_cursor_held() -> None:
    state = tracked()
    sub = state.subs[(TOPIC, SUB)]
    absorbed = read(state, up_to(3))
    assert sub.acked == AckState.of(Position(9, 3))
    assert absorbed.looks == [(TOPIC, SUB, sub.cursor)]
    assert state.feed.held_looks == {(TOPIC, SUB)}
    assert state.feed.acked
    assert read(state, up_to(3)).looks == []  # nothing grew
    reported = read(tracked(), up_to(3), reported={TOPIC: {SUB: AckState.of(Position(9, 3))}})
    assert reported.looks == []  # the answer's report is looked at instead


def test_a_block_for_a_subscription_not_tracked_yet_is_held_for_a_while_then_dropped() -> None:
    state = State()
    absorbed = read(state, up_to(3))
    assert (TOPIC, SUB) in state.feed.held
    assert absorbed.out.counts["acked_blocks_dropped"] == 0
    sub = Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, 1)))
    state.subs[sub.key] = sub
    read(state, mono=101.0)
    assert sub.acked == AckState.of(Position(9, 3))  # taken once it is tracked
    late = State()
    read(late, up_to(3))
    dropped = read(late, mono=100.0 + tuning.HELD_ACKED_S)
    assert dropped.out.counts["acked_blocks_dropped"] == 1
    assert late.feed.held == {}


def test_a_block_for_a_topic_another_broker_owns_is_dropped() -> None:
    state = tracked()
    absorbed = read(state, up_to(3), owned=False)
    assert absorbed.out.counts["acked_blocks_dropped"] == 1
    assert state.subs[(TOPIC, SUB)].acked is None


def test_a_batch_the_tail_has_not_read_waits_and_one_it_cannot_size_is_left_out() -> None:
    state = tracked()
    unread = BatchState(Position(9, 40), (1, 2))
    absorbed = read(state, up_to(3, unread))
    assert state.feed.waiting == {(TOPIC, SUB): (unread,)}
    assert absorbed.out.counts["acked_batches_left_out"] == 0
    unsized = BatchState(Position(9, 4), (1,))  # read, but not as a batch: no size
    left = read(tracked(), up_to(3, unsized))
    assert left.out.counts["acked_batches_left_out"] == 1


def test_blocks_the_plugin_dropped_are_counted_and_noticed() -> None:
    state = tracked()
    read(state, up_to(1), lost=2)
    absorbed = read(state, up_to(2), lost=5)
    assert absorbed.out.counts["acked_blocks_lost"] == 3
    assert absorbed.lost is not None
    assert absorbed.lost.blocks == 3
    assert read(state, up_to(3), lost=5).lost is None
