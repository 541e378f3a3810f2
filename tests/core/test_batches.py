from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.batches import MAX_BATCH_SIZE, BatchAcks, check_canonical, gather
from geosync_core.positions import Position

from .strategies import batch_acks, fast


def members(b: BatchAcks) -> frozenset[int]:
    return frozenset(i for i in range(-2, 10) if i in b)


def test_bit_i_is_batch_index_i() -> None:
    b = BatchAcks.of(8, [0, 2, 5])
    assert b == BatchAcks(8, 0b100101)
    assert b.hex() == "25"
    assert b.indexes() == (0, 2, 5)
    assert b.unacked_indexes() == (1, 3, 4, 6, 7)
    assert members(b) == {0, 2, 5}
    assert len(b) == 3
    assert b.is_partial


@pytest.mark.parametrize(("size", "acked"), [(0, 0), (-1, 0), (3, 8), (3, -1), (MAX_BATCH_SIZE + 1, 1)])
def test_impossible_sets_are_refused(size: int, acked: int) -> None:
    with pytest.raises(ValueError, match="not a batch ack set"):
        BatchAcks(size, acked)


def test_index_outside_the_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="outside a batch of 3"):
        BatchAcks.of(3, [3])


def test_empty_and_full_are_not_partial() -> None:
    assert BatchAcks(3, 0).is_empty
    assert not BatchAcks(3, 0).is_partial
    assert BatchAcks.whole(3).is_full
    assert not BatchAcks.whole(3).is_partial
    assert BatchAcks.whole(1) == BatchAcks(1, 1)


def test_pulsars_unacked_convention() -> None:
    # A cursor's ackSet has a bit for each index still to acknowledge.
    assert BatchAcks.from_unacked(5, [1, 3]) == BatchAcks.of(5, [0, 2, 4])
    assert BatchAcks.from_ack_set(5, [0b01010]) == BatchAcks.of(5, [0, 2, 4])
    assert BatchAcks.from_ack_set(3, []) == BatchAcks.whole(3)
    # Java's BitSet words are signed longs: bit 63 set is a negative word.
    assert BatchAcks.from_ack_set(65, [-1, 0]) == BatchAcks.of(65, [64])
    assert BatchAcks.from_ack_set(66, [0, 0b10]) == BatchAcks.of(66, [i for i in range(66) if i != 65])


@pytest.mark.parametrize("text", ["", "05", "A", "0x5", " 5", "5 ", "g", "-1", "10"])
def test_hex_accepts_only_the_canonical_spelling(text: str) -> None:
    with pytest.raises(ValueError, match="not a batch"):
        BatchAcks.from_hex(4, text)


def test_hex_of_a_large_batch() -> None:
    b = BatchAcks.of(MAX_BATCH_SIZE, [0, MAX_BATCH_SIZE - 1])
    assert BatchAcks.from_hex(MAX_BATCH_SIZE, b.hex()) == b
    with pytest.raises(ValueError, match="not a batch"):
        BatchAcks.from_hex(8, "1" + "0" * 2)


@fast
@given(batch_acks())
def test_indexes_and_hex_round_trip(b: BatchAcks) -> None:
    assert BatchAcks.of(b.size, b.indexes()) == b
    assert BatchAcks.from_hex(b.size, b.hex()) == b
    assert BatchAcks.from_unacked(b.size, b.unacked_indexes()) == b
    assert set(b.indexes()) | set(b.unacked_indexes()) == set(range(b.size))
    assert b.is_partial == (0 < len(b) < b.size)


@fast
@given(st.integers(1, 130), st.data())
def test_from_unacked_and_from_ack_set_agree(size: int, data: st.DataObject) -> None:
    unacked = data.draw(st.sets(st.integers(0, size - 1)))
    words = [sum(1 << (i - 64 * j) for i in unacked if 64 * j <= i < 64 * (j + 1)) for j in range(3)]
    signed = [w - (1 << 64) if w >= 1 << 63 else w for w in words]
    expected = BatchAcks.of(size, set(range(size)) - unacked)
    assert BatchAcks.from_unacked(size, unacked) == expected
    assert BatchAcks.from_ack_set(size, signed) == expected


@fast
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(batch_acks(n), batch_acks(n), batch_acks(n))))
def test_union_is_a_semilattice(abc: tuple[BatchAcks, BatchAcks, BatchAcks]) -> None:
    a, b, c = abc
    assert members(a.union(b)) == members(a) | members(b)
    assert a.union(b) == b.union(a)
    assert a.union(b).union(c) == a.union(b.union(c))
    assert a.union(a) == a


@fast
@given(batch_acks(), batch_acks(), batch_acks())
def test_union_of_different_sizes_stays_a_semilattice(a: BatchAcks, b: BatchAcks, c: BatchAcks) -> None:
    assert members(a.union(b)) == members(a) | members(b)
    assert a.union(b) == b.union(a)
    assert a.union(b).union(c) == a.union(b.union(c))
    assert a.union(b).within(a.size).acked & a.acked == a.acked


def test_gather_unites_repeats_and_check_canonical_refuses_disorder() -> None:
    p, q = Position(1, 0), Position(1, 1)
    assert gather([(p, BatchAcks.of(3, [0])), (q, BatchAcks.of(2, [1])), (p, BatchAcks.of(3, [2]))]) == {
        p: BatchAcks.of(3, [0, 2]),
        q: BatchAcks.of(2, [1]),
    }
    with pytest.raises(ValueError, match="not an entry"):
        gather([(Position(1, -1), BatchAcks(2, 1))])
    check_canonical(((p, BatchAcks(2, 1)), (q, BatchAcks(2, 2))))
    with pytest.raises(ValueError, match="not canonical"):
        check_canonical(((q, BatchAcks(2, 1)), (p, BatchAcks(2, 2))))
    with pytest.raises(ValueError, match="not a partial"):
        check_canonical(((p, BatchAcks(2, 3)),))
