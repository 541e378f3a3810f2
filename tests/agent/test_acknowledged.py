"""``core.acknowledged``: what consumers acknowledged (the feed's ``acked`` blocks) and the claim's own part.

Tables for the jumps of issue 45 (each adds nothing to the claim), properties against a model of messages
((entry, index) pairs in one ledger): ``own_part`` is the intersection, ``absorb`` the union.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from geosync_agent.core import acknowledged, checkpoint
from geosync_agent.core.acknowledged import NOTHING, absorb, own_part
from geosync_agent.core.subscriptions import Subscription
from geosync_core import ackstates
from geosync_core.batches import BatchAcks
from geosync_core.pluginapi import AckedSet, BatchState
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range, RangeSet

L = 7
ENTRIES = 12
SIZES = {e: (3 if e % 4 == 1 else 1) for e in range(ENTRIES)}
"""Entries 1, 5 and 9 are batches of 3; the others single messages."""


def p(e: int) -> Position:
    return Position(L, e)


def size_of(position: Position) -> int | None:
    return SIZES.get(position.entry) if position.ledger == L else None


def messages(state: AckState) -> set[tuple[int, int]]:
    return {(e, i) for e in range(ENTRIES) for i in range(SIZES[e]) if state.acks_message(p(e), i)}


def block(
    ranges: list[tuple[int, int]] = (),  # type: ignore[assignment]
    cumulative: int | None = None,
    batches: dict[int, list[int]] | None = None,
    overflowed: bool = False,
) -> AckedSet:
    return AckedSet(
        "persistent://t/ns/x",
        "s",
        RangeSet.of(Range(p(a), p(b)) for a, b in ranges),
        None if cumulative is None else p(cumulative),
        tuple(BatchState(p(e), tuple(u)) for e, u in sorted((batches or {}).items())),
        overflowed,
    )


# -- tables: the jumps claim nothing -------------------------------------------------------------


def test_a_subscription_first_seen_claims_nothing_from_its_cursor() -> None:
    # created at Latest: the cursor starts at entry 8, nobody acknowledged anything
    assert messages(own_part(AckState(p(8)), None)) == set()


def test_jumps_add_nothing_and_consumers_acknowledgements_do() -> None:
    acked, _ = absorb(None, block(ranges=[(2, 4)]), size_of)  # a consumer acknowledged entries 3 and 4
    cursor = AckState(p(10))  # then clear-backlog / skip / expiry / reset moved the mark-delete to 10
    assert messages(own_part(cursor, acked)) == {(3, 0), (4, 0)}


def test_never_more_than_the_cursor() -> None:
    acked, _ = absorb(None, block(cumulative=6), size_of)
    cursor = AckState(p(2)).ack(p(4))  # the cursor was rewound below it, or not read yet
    assert messages(own_part(cursor, acked)) == messages(cursor)


def test_a_cumulative_acknowledgement_of_a_batch_index() -> None:
    # cumulative at 5:1 -> cumulative 4 plus batch 5 with indexes 0 and 1
    acked, left_out = absorb(None, block(cumulative=4, batches={5: [2]}), size_of)
    assert left_out == ()
    cursor = AckState.of(p(4), batches=[(p(5), BatchAcks.of(3, [0, 1]))])
    assert own_part(cursor, acked) == cursor


def test_a_batch_of_unknown_size_is_left_out_and_handed_back() -> None:
    b = block(batches={30: [1]})
    acked, left_out = absorb(None, b, size_of)
    assert (acked, left_out) == (NOTHING, b.batches)


def test_blocks_accumulate_and_batch_indexes_complete_an_entry() -> None:
    acked, _ = absorb(None, block(batches={1: [2]}), size_of)
    acked, _ = absorb(acked, block(batches={1: [0, 1]}), size_of)
    assert p(1) in acked


def test_an_overflowed_block_is_a_subset_taken_as_it_is() -> None:
    acked, _ = absorb(None, block(ranges=[(2, 3)], overflowed=True), size_of)
    assert messages(own_part(AckState(p(9)), acked)) == {(3, 0)}


def test_modes() -> None:
    assert acknowledged.CLAIMS_FROM == ("cursor", "acknowledgements")


# -- properties ----------------------------------------------------------------------------------


@st.composite
def states(draw: st.DrawFn) -> AckState:
    md = draw(st.integers(-1, ENTRIES - 1))
    whole = draw(st.sets(st.integers(0, ENTRIES - 1)))
    partial = {}
    for e in draw(st.sets(st.sampled_from([1, 5, 9]))):
        partial[p(e)] = BatchAcks.of(3, draw(st.sets(st.integers(0, 2), min_size=1, max_size=2)))
    mark = Position(-1, -1) if md < 0 else p(md)
    return AckState.of(mark, [Range.single(p(e)) for e in whole], partial)


@st.composite
def blocks(draw: st.DrawFn) -> AckedSet:
    whole = draw(st.sets(st.integers(0, ENTRIES - 1)))
    cumulative = draw(st.none() | st.integers(0, ENTRIES - 1))
    batches = {
        e: sorted(draw(st.sets(st.integers(0, 2), min_size=1, max_size=2)))
        for e in draw(st.sets(st.sampled_from([1, 5, 9])))
    }
    return AckedSet(
        "persistent://t/ns/x",
        "s",
        RangeSet.of(Range.single(p(e)) for e in whole),
        None if cumulative is None else p(cumulative),
        tuple(BatchState(p(e), tuple(u)) for e, u in sorted(batches.items())),
    )


def block_messages(b: AckedSet) -> set[tuple[int, int]]:
    out = {(e, i) for e in range(ENTRIES) for i in range(SIZES[e]) if p(e) in b.ranges}
    if b.cumulative is not None:
        out |= {(e, i) for e in range(b.cumulative.entry + 1) for i in range(SIZES[e])}
    for bs in b.batches:
        out |= {(bs.position.entry, i) for i in range(3) if i not in bs.unacked}
    return out


@given(states(), states())
def test_own_part_is_the_intersection(cursor: AckState, acked: AckState) -> None:
    assert messages(own_part(cursor, acked)) == messages(cursor) & messages(acked)


@given(states())
def test_own_part_of_nothing_is_nothing_and_of_itself_is_itself(cursor: AckState) -> None:
    assert messages(own_part(cursor, None)) == set()
    assert own_part(cursor, cursor) == cursor


@given(states(), blocks())
def test_absorb_is_the_union(acked: AckState, b: AckedSet) -> None:
    grown, left_out = absorb(acked, b, size_of)
    assert left_out == ()
    assert messages(grown) == messages(acked) | block_messages(b)


@given(states(), blocks())
def test_absorb_without_sizes_never_takes_away_nor_adds_a_batch_index(acked: AckState, b: AckedSet) -> None:
    grown, left_out = absorb(acked, b, lambda _: None)
    assert left_out == b.batches
    assert messages(acked) <= messages(grown) <= messages(acked) | block_messages(b)


# -- the checkpoint ------------------------------------------------------------------------------


def _wire(sub: Subscription) -> dict[str, object]:
    wire: dict[str, object] = json.loads(
        json.dumps(
            {
                **checkpoint.subscription_fields(sub),
                "received": ackstates.acks_to_json(sub.received),
                "published": None,
                "cursor": None if sub.cursor is None else checkpoint.cursor_to_wire(sub.cursor),
            }
        )
    )
    return wire


@given(states())
def test_the_set_comes_back_from_the_checkpoint(acked: AckState) -> None:
    sub = Subscription("persistent://t/ns/x", "s", cursor=AckState(p(9)))
    sub.acked = acked
    assert checkpoint.subscription_from_wire(_wire(sub)).acked == acked


def test_an_older_checkpoint_restores_an_empty_set() -> None:
    old = _wire(Subscription("persistent://t/ns/x", "s", cursor=AckState(p(9))))
    del old["acked"]
    back = checkpoint.subscription_from_wire(old)
    assert back.acked is None
    assert messages(own_part(back.cursor or NOTHING, back.acked)) == set()
