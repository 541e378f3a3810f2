from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core import syncing
from geosync_core.batches import BatchAcks
from geosync_core.indexing import OriginIndex
from geosync_core.keyorder import key_ordered
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range
from geosync_core.syncing import ApplyPlan, Stretches, applied, carried_out, plan_apply
from geosync_core.translating import Reason, Translation, Untranslatable, to_origin_acks

from .strategies import batch_acks, fast, local_logs, origin_streams, size_of_origin

Log = list[tuple[Position, Origin]]


def P(text: str) -> Position:
    return Position.parse(text)


def O(region: str, text: str) -> Origin:  # noqa: E743
    return Origin(region, P(text))


def indexed(log: Log) -> OriginIndex:
    index = OriginIndex()
    for local, origin in log:
        index.append(local, origin)
    return index


@st.composite
def cursors(draw: st.DrawFn, log: Log) -> AckState:
    """A cursor over ``log``: a mark-delete at or before some entry, and random individual acks above."""
    positions = [local for local, _ in log]
    if not positions:
        return AckState(P("1:-1"))
    cut = draw(st.integers(0, len(positions)))
    md = positions[cut - 1] if cut else Position(positions[0].ledger, -1)
    return AckState(md).ack(*draw(st.lists(st.sampled_from(positions), max_size=len(positions))))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Log, OriginIndex, AckState, OriginAcks]:
    """A local log, an index that misses some of it, a local cursor and what remote regions acked."""
    log = draw(local_logs())
    hidden = draw(st.sets(st.sampled_from(range(len(log))), max_size=3)) if log else set()
    index = indexed([entry for i, entry in enumerate(log) if i not in hidden])
    local = draw(cursors(log))
    claimed = draw(st.lists(st.sampled_from([o for _, o in log]), max_size=len(log))) if log else []
    remote = OriginAcks.of(
        [(o.region, [Span(o.position.ledger, o.position.entry, o.position.entry)]) for o in claimed]
        + [("c", [Span(9, 0, 5)]), ("z", [Span(1, 0, 99)])]  # claims about messages this region lacks
    )
    return log, index, local, remote


# --- to_origin_acks ---------------------------------------------------------------------------------


def test_translation_of_an_empty_index_is_not_indexed() -> None:
    assert to_origin_acks(OriginIndex(), AckState(P("3:5"))) == Untranslatable(Reason.NOT_INDEXED)


def test_translation_table() -> None:
    index = indexed(
        [(P(f"5:{e}"), O("a", f"1:{e}")) for e in range(4)]  # own messages 5:0..5:3 -> a/1:0..1:3
        + [(P(f"5:{e}"), O("b", f"1:{e + 6}")) for e in range(4, 8)]  # replicated from b, same ledger id 1
        + [(P("6:0"), O("a", "1:4"))]
    )
    cursor = AckState.parse("5:1", "[(5:2..5:5],(5:6..6:0]]")
    result = to_origin_acks(index, cursor)
    assert result == Translation(
        OriginAcks.of({"a": [Span(1, 0, 1), Span(1, 3, 4)], "b": [Span(1, 10, 11), Span(1, 13, 13)]}),
        P("5:0"),
        P("6:0"),
    )


def test_translation_never_claims_unindexed_entries() -> None:
    index = indexed([(P("5:3"), O("b", "2:0"))])
    result = to_origin_acks(index, AckState(P("9:9")))
    assert isinstance(result, Translation)
    assert result.acks == OriginAcks.of({"b": [Span(2, 0, 0)]})


@settings(fast, max_examples=40)
@given(st.data())
def test_translation_claims_exactly_the_acked_indexed_entries(data: st.DataObject) -> None:
    log = data.draw(local_logs())
    cursor = data.draw(cursors(log))
    index = indexed(log)
    result = to_origin_acks(index, cursor)
    if not log:
        assert result == Untranslatable(Reason.NOT_INDEXED)
        return
    assert isinstance(result, Translation)
    for local, origin in log:
        assert (origin in result.acks) == (local in cursor)
    assert result.acks.count() == sum(local in cursor for local, _ in log)


# --- plan_apply -------------------------------------------------------------------------------------


def test_plan_table_moves_mark_delete_then_acks_individually() -> None:
    log = [(P(f"4:{e}"), O("b", f"1:{e}")) for e in range(8)]
    index = indexed(log)
    local = AckState.parse("4:0", "[(4:5..4:6]]")
    remote = OriginAcks.of({"b": [Span(1, 0, 2), Span(1, 4, 4), Span(1, 7, 7)]})
    plan = plan_apply(index, local, remote=remote, log=[p for p, _ in log])
    assert plan == ApplyPlan(P("4:2"), (P("4:4"), P("4:7")), None)
    assert applied(local, plan) == AckState.parse("4:2", "[(4:3..4:4],(4:5..4:7]]")


def test_unindexed_entry_blocks_mark_delete_and_is_not_acked() -> None:
    index = indexed([(P("4:0"), O("b", "1:0")), (P("4:2"), O("b", "1:2"))])
    remote = OriginAcks.of({"b": [Span(1, 0, 5)]})
    plan = plan_apply(index, AckState(P("4:-1")), remote=remote, log=[P("4:0"), P("4:1"), P("4:2")])
    assert plan == ApplyPlan(P("4:0"), (P("4:2"),), blocked_by=P("4:1"))


def test_entries_left_out_of_the_log_are_passed_over() -> None:
    # 4:1 is a marker: brokers never dispatch it and acknowledge it themselves.
    index = indexed([(P("4:0"), O("b", "1:0")), (P("4:2"), O("b", "1:1"))])
    remote = OriginAcks.of({"b": [Span(1, 0, 1)]})
    plan = plan_apply(index, AckState(P("4:-1")), remote=remote, log=[P("4:0"), P("4:2")])
    assert plan == ApplyPlan(P("4:2"), ())


def test_log_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError, match="increasing order"):
        plan_apply(OriginIndex(), AckState(P("1:-1")), remote=OriginAcks(), log=[P("1:1"), P("1:0")])


@settings(fast, max_examples=40)
@given(scenarios())
def test_plan_invariants(scenario: tuple[Log, OriginIndex, AckState, OriginAcks]) -> None:
    log, index, local, remote = scenario
    positions = [p for p, _ in log]
    plan = plan_apply(index, local, remote=remote, log=positions)
    after = applied(local, plan)

    def allowed(p: Position) -> bool:
        origin = index.origin_of(p)
        return p in local or (origin is not None and origin in remote)

    # NO LOSS and exactness: afterwards the log's acknowledged entries are exactly the allowed ones.
    assert [p for p in positions if p in after] == [p for p in positions if allowed(p)]
    assert all(allowed(p) and p not in local for p in plan.individual_acks)
    # MONOTONE
    assert plan.new_mark_delete is None or plan.new_mark_delete > local.mark_delete
    assert all(p in after for p in positions if p in local)
    assert all(plan.new_mark_delete is None or p > plan.new_mark_delete for p in plan.individual_acks)
    # never on a guess: an unindexed, unacked entry is never passed.
    unknown = [p for p in positions if index.origin_of(p) is None and p not in local]
    if unknown and plan.new_mark_delete is not None:
        assert plan.new_mark_delete < unknown[0]
    if plan.blocked_by is not None:
        assert plan.blocked_by == unknown[0]
    # IDEMPOTENT
    assert plan_apply(index, after, remote=remote, log=positions).is_empty


@settings(fast, max_examples=100)
@given(scenarios(), st.data())
def test_plan_by_ranges_is_the_plan_entry_by_entry(
    scenario: tuple[Log, OriginIndex, AckState, OriginAcks], data: st.DataObject
) -> None:
    """Without parts of batches on either side, ``plan_apply`` plans range by range (``_plan_whole``): the
    same plan as the walk entry by entry, whatever the log leaves out, the index misses, the claims' spans
    cover (a piece of a run, several runs, other ledgers) and the budget allows."""
    log, index, local, remote = scenario
    positions = [p for p, _ in log]
    left_out = data.draw(st.sets(st.sampled_from(range(len(log))), max_size=3)) if log else set()
    shown = [p for i, p in enumerate(positions) if i not in left_out]
    wide = data.draw(
        st.lists(
            st.builds(
                lambda region, ledger, first, n: (region, [Span(ledger, first, first + n)]),
                st.sampled_from(("a", "b", "c")),
                st.sampled_from((1, 2, 3)),
                st.integers(0, 9),
                st.integers(0, 4),
            ),
            max_size=3,
        )
    )
    # Claims on the entries right above the mark-delete (else it rarely moves: the cursor holds none of them).
    ahead = [o for p, o in log if p > local.mark_delete][: data.draw(st.integers(0, 6))]
    wide += [(o.region, [Span(o.position.ledger, o.position.entry, o.position.entry)]) for o in ahead]
    claims = remote.merge(OriginAcks.of(wide)) if wide else remote
    budget = data.draw(st.none() | st.integers(0, 6))
    by_ranges = syncing._plan_whole(index, local, claims, Stretches.of(shown), budget=budget)
    for size_of in (None, sizes(log)):
        assert by_ranges == syncing._plan_by_entry(
            index, local, claims, Stretches.of(shown), size_of=size_of, budget=budget
        )
    assert plan_apply(index, local, remote=claims, log=shown, budget=budget) == by_ranges


def test_plan_by_ranges_spends_its_budget_as_the_walk_does() -> None:
    """Pieces longer than what the budget leaves are cut: the mark-delete stops inside a claimed span."""
    log = [(P(f"4:{e}"), O("a", f"7:{e}")) for e in range(10)]
    index = indexed(log)
    remote = OriginAcks.of({"a": [Span(7, 0, 9)]})
    plan = plan_apply(index, AckState(P("4:-1")), remote=remote, log=[p for p, _ in log], budget=4)
    assert (plan.new_mark_delete, plan.complete) == (P("4:3"), False)
    held = AckState(P("4:-1")).ack(P("4:9"))
    plan = plan_apply(
        index, held, remote=OriginAcks.of({"a": [Span(7, 0, 8)]}), log=[p for p, _ in log], budget=9
    )
    assert (plan.new_mark_delete, plan.complete) == (P("4:9"), True)


@settings(fast, max_examples=30)
@given(st.data())
def test_sync_between_two_regions_acks_the_same_messages(data: st.DataObject) -> None:
    streams = data.draw(origin_streams())
    log_x, log_y = data.draw(local_logs(streams)), data.draw(local_logs(streams))
    cursor_x = data.draw(cursors(log_x))
    index_y = indexed(log_y)
    translation = to_origin_acks(indexed(log_x), cursor_x)
    remote = translation.acks if isinstance(translation, Translation) else OriginAcks()
    start = Position(log_y[0][0].ledger, -1) if log_y else P("1:-1")
    local_y = AckState(start)
    after = applied(local_y, plan_apply(index_y, local_y, remote=remote, log=[p for p, _ in log_y]))
    acked_x = {o for p, o in log_x if p in cursor_x}
    assert {o for p, o in log_y if p in after} == acked_x


def test_key_ordered_drops_acks_behind_an_unacked_entry_of_the_same_key() -> None:
    log = [P(f"3:{e}") for e in range(1, 7)]
    keys = {P("3:1"): "k", P("3:2"): "j", P("3:3"): "k", P("3:4"): "j", P("3:5"): "k", P("3:6"): "x"}
    # 3:1 (k) is unacknowledged; the later k entries 3:3 and 3:5 must not be claimed; j and x are fine.
    cursor = AckState.of(P("3:0")).ack(P("3:2"), P("3:3"), P("3:4"), P("3:5"), P("3:6"))
    kept = key_ordered(cursor, log, keys.__getitem__)
    assert kept == AckState.of(P("3:0")).ack(P("3:2"), P("3:4"), P("3:6"))


@settings(fast, max_examples=60)
@given(
    st.lists(st.sampled_from("abc"), min_size=1, max_size=30),
    st.data(),
)
def test_key_ordered_claims_a_per_key_prefix_subset(keys: list[str], data: st.DataObject) -> None:
    log = [Position(5, e) for e in range(len(keys))]
    key_of = dict(zip(log, keys, strict=True)).__getitem__
    acked = [p for p in log if data.draw(st.booleans())]
    md_index = data.draw(st.integers(-1, len(log) - 1))
    cursor = AckState.of(Position(5, md_index)).ack(*acked)
    kept = key_ordered(cursor, log, key_of)
    assert kept.mark_delete == cursor.mark_delete
    assert all(p in cursor for p in log if p in kept)  # a subset: never claims what was not acknowledged
    for key in set(keys):
        mine = [p for p in log if key_of(p) == key and p > cursor.mark_delete]
        flags = [p in kept for p in mine]
        assert flags == sorted(flags, reverse=True), f"claims for {key} are not a prefix: {flags}"
    assert key_ordered(kept, log, key_of) == kept  # idempotent


def test_key_ordered_treats_an_unknown_key_as_any_key() -> None:
    log = [P(f"3:{e}") for e in range(1, 5)]
    cursor = AckState.of(P("3:0")).ack(P("3:3"), P("3:4"))
    keys: dict[Position, str | None] = {P("3:1"): "k", P("3:2"): None, P("3:3"): "j", P("3:4"): "k"}
    # 3:2's key is unknown and it is unacknowledged: nothing after it may be claimed.
    assert key_ordered(cursor, log, keys.__getitem__) == AckState.of(P("3:0"))
    keys[P("3:2")] = "j"
    # now 3:3 (j) is behind the unacknowledged 3:2 (j), and 3:4 (k) behind 3:1 (k)
    assert key_ordered(cursor, log, keys.__getitem__) == AckState.of(P("3:0"))
    cursor = cursor.ack(P("3:2"))
    assert key_ordered(cursor, log, keys.__getitem__) == AckState.of(P("3:0")).ack(P("3:2"), P("3:3"))


def test_key_ordered_blocks_a_key_only_within_its_origin() -> None:
    """Decision 0016: two origins' messages of one key sit in opposite orders in two regions' logs, so only
    an earlier unacknowledged message of the same key and origin holds an acknowledgement back."""
    log = [P(f"3:{e}") for e in range(1, 5)]
    keys = dict.fromkeys(log, "k")
    origins = {P("3:1"): "b", P("3:2"): "c", P("3:3"): "b", P("3:4"): "c"}
    cursor = AckState.of(P("3:0")).ack(P("3:2"), P("3:3"), P("3:4"))
    # b's 3:1 is unacknowledged: b's 3:3 is held back, c's 3:2 and 3:4 are not
    kept = key_ordered(cursor, log, keys.__getitem__, origin_of=origins.__getitem__)
    assert kept == AckState.of(P("3:0")).ack(P("3:2"), P("3:4"))
    # without origins every entry is of one origin, as before
    assert key_ordered(cursor, log, keys.__getitem__) == AckState.of(P("3:0"))


def test_key_ordered_an_unknown_origin_or_key_could_be_any() -> None:
    log = [P(f"3:{e}") for e in range(1, 4)]
    keys: dict[Position, str | None] = {P("3:1"): "k", P("3:2"): "k", P("3:3"): "j"}
    origins: dict[Position, str | None] = {P("3:1"): None, P("3:2"): "c", P("3:3"): "c"}
    cursor = AckState.of(P("3:0")).ack(P("3:2"), P("3:3"))
    # 3:1 of key k and unknown origin could be c's: c's 3:2 (k) is held back; 3:3 (j) is free
    kept = key_ordered(cursor, log, keys.__getitem__, origin_of=origins.__getitem__)
    assert kept == AckState.of(P("3:0")).ack(P("3:3"))
    # 3:1 of origin b and unknown key blocks every key of b only
    keys[P("3:1")], origins[P("3:1")] = None, "b"
    kept = key_ordered(cursor, log, keys.__getitem__, origin_of=origins.__getitem__)
    assert kept == cursor
    origins[P("3:3")] = "b"
    kept = key_ordered(cursor, log, keys.__getitem__, origin_of=origins.__getitem__)
    assert kept == AckState.of(P("3:0")).ack(P("3:2"))


@settings(fast, max_examples=80)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["x", "y", None])), max_size=20),
    st.data(),
)
def test_key_ordered_claims_a_prefix_per_key_and_origin(
    shape: list[tuple[str | None, str | None]], data: st.DataObject
) -> None:
    log = [Position(5, e) for e in range(len(shape))]
    origin_of = {p: o for p, (o, _) in zip(log, shape, strict=True)}.__getitem__
    key_of = {p: k for p, (_, k) in zip(log, shape, strict=True)}.__getitem__
    cursor = AckState.of(Position(5, -1)).ack(*(p for p in log if data.draw(st.booleans())))
    kept = key_ordered(cursor, log, key_of, origin_of=origin_of)
    assert all(p in cursor for p in log if p in kept)  # a subset

    def same(x: str | None, y: str | None) -> bool:
        return x is None or y is None or x == y

    for n, p in enumerate(log):
        if p in kept:  # every earlier message it could share a key and an origin with is claimed too
            assert all(
                e in kept for e in log[:n] if same(origin_of(e), origin_of(p)) and same(key_of(e), key_of(p))
            )
    assert key_ordered(kept, log, key_of, origin_of=origin_of) == kept  # idempotent


# --- batched entries: message granularity --------------------------------------------------------------


def sizes(log: Log) -> Callable[[Position], int | None]:
    """The local batch size of each entry: its origin's (replication keeps batch layout)."""
    by_local = {local: size_of_origin(origin) for local, origin in log}
    return by_local.get


@st.composite
def batched_cursors(draw: st.DrawFn, log: Log) -> AckState:
    """A cursor over ``log`` with some entries acknowledged in part."""
    cursor = draw(cursors(log))
    size_of = sizes(log)
    picked = draw(st.lists(st.sampled_from([p for p, _ in log]), max_size=len(log))) if log else []
    return cursor.ack_batches((p, draw(batch_acks(size_of(p) or 1))) for p in picked)


@st.composite
def batched_scenarios(draw: st.DrawFn) -> tuple[Log, OriginIndex, AckState, OriginAcks]:
    """As ``scenarios``, with partly acknowledged entries locally and partial claims remotely (a few of
    them, wrongly, one index larger than the batch)."""
    log, index, _, remote = draw(scenarios())
    local = draw(batched_cursors(log))
    partials = []
    for origin in draw(st.lists(st.sampled_from([o for _, o in log]), max_size=len(log))) if log else []:
        n = size_of_origin(origin) + draw(st.sampled_from((0, 0, 0, 1)))
        partials.append((origin.region, [(origin.position, draw(batch_acks(n)))]))
    return log, index, local, remote.merge(OriginAcks.of({}, partials))


def message_list(log: Log) -> list[tuple[Position, int]]:
    size_of = sizes(log)
    return [(p, i) for p, _ in log for i in range(size_of(p) or 1)]


def test_translation_names_batch_indexes_at_the_origin() -> None:
    index = indexed([(P("5:0"), O("a", "1:0")), (P("5:1"), O("b", "1:7"))])
    cursor = AckState.of(P("5:0"), batches=[(P("5:1"), BatchAcks.of(4, [0, 3]))])
    result = to_origin_acks(index, cursor)
    assert isinstance(result, Translation)
    assert result.acks == OriginAcks.of({"a": [Span(1, 0, 0)]}, {"b": [(P("1:7"), BatchAcks.of(4, [0, 3]))]})


@settings(fast, max_examples=40)
@given(st.data())
def test_translation_claims_exactly_the_acked_messages(data: st.DataObject) -> None:
    log = data.draw(local_logs())
    cursor = data.draw(batched_cursors(log))
    result = to_origin_acks(indexed(log), cursor)
    if not log:
        return
    assert isinstance(result, Translation)
    origin_of = dict(log)
    for p, i in message_list(log):
        assert result.acks.acks_message(origin_of[p], i) == cursor.acks_message(p, i)
    assert result.acks.count() == sum(p in cursor for p, _ in log)


def test_plan_table_with_batches() -> None:
    log = [(P(f"4:{e}"), O("b", f"1:{e}")) for e in range(4)]
    index = indexed(log)
    size_of = {P("4:0"): 3, P("4:1"): 3, P("4:2"): None, P("4:3"): 2}.get
    local = AckState.of(
        P("4:-1"), batches=[(P("4:0"), BatchAcks.of(3, [0])), (P("4:1"), BatchAcks.of(3, [2]))]
    )
    remote = OriginAcks.of(
        {"b": [Span(1, 2, 2)]},
        {
            "b": [
                (P("1:0"), BatchAcks.of(3, [1, 2])),
                (P("1:1"), BatchAcks.of(3, [0])),
                (P("1:3"), BatchAcks.of(2, [1])),
            ]
        },
    )
    plan = plan_apply(index, local, remote=remote, log=[p for p, _ in log], size_of=size_of)
    # 4:0 is complete with local {0} and remote {1, 2}; 4:1 grows to {0, 2}; 4:2 is whole remotely but the
    # mark-delete stops at 4:1 with a message unacknowledged; 4:3 gets index 1.
    assert plan == ApplyPlan(
        P("4:0"), (P("4:2"),), None, ((P("4:1"), BatchAcks.of(3, [0, 2])), (P("4:3"), BatchAcks.of(2, [1])))
    )
    after = applied(local, plan)
    assert after == AckState.of(
        P("4:0"),
        [Range.single(P("4:2"))],
        [(P("4:1"), BatchAcks.of(3, [0, 2])), (P("4:3"), BatchAcks.of(2, [1]))],
    )
    assert plan_apply(index, after, remote=remote, log=[p for p, _ in log], size_of=size_of).is_empty
    # Without sizes, remote partial claims are not used; the cursor's own partials keep their size.
    plain = plan_apply(index, local, remote=remote, log=[p for p, _ in log])
    assert plain == ApplyPlan(P("4:0"), (P("4:2"),), None, ((P("4:1"), BatchAcks.of(3, [0, 2])),))


def test_a_size_only_the_cursor_implies_never_completes_an_entry() -> None:
    """The tail does not know 4:0's size (being read, or the client does not say); the cursor lists indexes 0
    and 2 unacknowledged, so it reads as a batch of 3, but it holds 5 (3 and 4 unacknowledged in the origin
    too). A claim of 0 and 2 must neither complete it nor be written as a batch ack with every index set."""
    log = [(P("4:0"), O("b", "1:0")), (P("4:1"), O("b", "1:1"))]
    index = indexed(log)
    local = AckState.of(P("4:-1"), batches=[(P("4:0"), BatchAcks.of(3, [1]))])
    remote = OriginAcks.of({"b": [Span(1, 1, 1)]}, {"b": [(P("1:0"), BatchAcks.of(5, [0, 1, 2]))]})
    unknown = plan_apply(index, local, remote=remote, log=[P("4:0"), P("4:1")], size_of=lambda _p: None)
    assert unknown == ApplyPlan(None, (P("4:1"),), None, ())
    known = plan_apply(index, local, remote=remote, log=[P("4:0"), P("4:1")], size_of={P("4:0"): 5}.get)
    assert known == ApplyPlan(None, (P("4:1"),), None, ((P("4:0"), BatchAcks.of(5, [0, 1, 2])),))


@settings(fast, max_examples=60)
@given(batched_scenarios(), st.booleans())
def test_plan_invariants_at_message_level(
    scenario: tuple[Log, OriginIndex, AckState, OriginAcks], with_sizes: bool
) -> None:
    log, index, local, remote = scenario
    positions = [p for p, _ in log]
    size_of = sizes(log) if with_sizes else None
    plan = plan_apply(index, local, remote=remote, log=positions, size_of=size_of)
    after = applied(local, plan)

    def allowed(p: Position, i: int) -> bool:
        origin = index.origin_of(p)
        return local.acks_message(p, i) or (origin is not None and remote.acks_message(origin, i))

    msgs = message_list(log)
    # NO LOSS: never a message that neither the cursor nor a remote claim acknowledged.
    assert all(allowed(p, i) for p, i in msgs if after.acks_message(p, i))
    assert all(allowed(p, i) for p in plan.individual_acks for i in range(sizes(log)(p) or 1))
    if with_sizes:  # exactness: every allowed message is acknowledged afterwards
        assert [m for m in msgs if after.acks_message(*m)] == [m for m in msgs if allowed(*m)]
    # MONOTONE, and the mark-delete never passes an entry with an unacknowledged message
    assert all(after.acks_message(p, i) for p, i in msgs if local.acks_message(p, i))
    assert plan.new_mark_delete is None or plan.new_mark_delete > local.mark_delete
    if plan.new_mark_delete is not None:
        assert all(allowed(p, i) for p, i in msgs if p <= plan.new_mark_delete)
    # batch acks: above the new mark-delete, partial, growing the local set
    floor = plan.new_mark_delete or local.mark_delete
    for p, acks in plan.batch_acks:
        assert p > floor
        assert acks.is_partial
        assert acks.union(local.acked_indexes(p, acks.size)) == acks != local.acked_indexes(p, acks.size)
    # IDEMPOTENT
    again = plan_apply(index, after, remote=remote, log=positions, size_of=size_of)
    assert again.is_empty, again


@settings(fast, max_examples=30)
@given(st.data())
def test_sync_between_two_regions_acks_the_same_messages_in_batches(data: st.DataObject) -> None:
    streams = data.draw(origin_streams())
    log_x, log_y = data.draw(local_logs(streams)), data.draw(local_logs(streams))
    cursor_x = data.draw(batched_cursors(log_x))
    translation = to_origin_acks(indexed(log_x), cursor_x)
    remote = translation.acks if isinstance(translation, Translation) else OriginAcks()
    start = Position(log_y[0][0].ledger, -1) if log_y else P("1:-1")
    local_y = AckState(start)
    plan = plan_apply(indexed(log_y), local_y, remote=remote, log=[p for p, _ in log_y], size_of=sizes(log_y))
    after = applied(local_y, plan)
    origin_x, origin_y = dict(log_x), dict(log_y)
    acked_x = {(origin_x[p], i) for p, i in message_list(log_x) if cursor_x.acks_message(p, i)}
    assert {(origin_y[p], i) for p, i in message_list(log_y) if after.acks_message(p, i)} == acked_x


def test_key_ordered_per_message_in_a_batch() -> None:
    log = [P("3:1"), P("3:2")]
    size_of = {P("3:1"): 3, P("3:2"): 2}.get
    keys = {
        (P("3:1"), 0): "k",
        (P("3:1"), 1): "j",
        (P("3:1"), 2): "k",
        (P("3:2"), 0): "j",
        (P("3:2"), 1): "x",
    }
    # 3:1 index 1 (j) is unacknowledged: 3:2's j message must not be claimed; 3:1's k messages and x are fine.
    cursor = AckState.of(P("3:0"), batches=[(P("3:1"), BatchAcks.of(3, [0, 2]))]).ack(P("3:2"))
    kept = key_ordered(cursor, log, lambda p: None, size_of=size_of, key_of_message=lambda p, i: keys[p, i])
    assert kept == AckState.of(
        P("3:0"), batches=[(P("3:1"), BatchAcks.of(3, [0, 2])), (P("3:2"), BatchAcks.of(2, [1]))]
    )
    # within one entry: a lower index of the same key unacknowledged blocks a higher one
    cursor = AckState.of(P("3:0"), batches=[(P("3:1"), BatchAcks.of(3, [1, 2]))])
    kept = key_ordered(cursor, log, lambda p: None, size_of=size_of, key_of_message=lambda p, i: keys[p, i])
    assert kept == AckState.of(P("3:0"), batches=[(P("3:1"), BatchAcks.of(3, [1]))])
    # one key per entry (key_of) when no per-message keys are given
    kept = key_ordered(cursor, log, lambda p: "k", size_of=size_of)
    assert kept == AckState.of(P("3:0"))


@settings(fast, max_examples=60)
@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from("abc")), min_size=1, max_size=12), st.data())
def test_key_ordered_claims_a_per_key_prefix_of_messages(
    shape: list[tuple[int, str]], data: st.DataObject
) -> None:
    log = [Position(5, e) for e in range(len(shape))]
    size_of = {p: n for p, (n, _) in zip(log, shape, strict=True)}.get
    keys = {
        (p, i): data.draw(st.sampled_from([shape[p.entry][1], "a", "b", None]))
        for p in log
        for i in range(size_of(p) or 1)
    }
    msgs = list(keys)
    md_index = data.draw(st.integers(-1, len(log) - 1))
    cursor = AckState.of(Position(5, md_index)).ack_batches(
        (p, BatchAcks.of(size_of(p) or 1, [i])) for p, i in msgs if data.draw(st.booleans())
    )
    kept = key_ordered(cursor, log, lambda p: None, size_of=size_of, key_of_message=lambda p, i: keys[p, i])
    assert kept.mark_delete == cursor.mark_delete
    assert all(cursor.acks_message(*m) for m in msgs if kept.acks_message(*m))  # a subset
    above = [m for m in msgs if m[0] > cursor.mark_delete]
    for n, (m, key) in enumerate((m, keys[m]) for m in above):
        if not kept.acks_message(*m):
            continue
        # every earlier message of the same key (or of an unknown key) is claimed too
        earlier = above[:n]
        assert all(kept.acks_message(*e) for e in earlier if keys[e] is None or key is None or keys[e] == key)
    assert (
        key_ordered(kept, log, lambda p: None, size_of=size_of, key_of_message=lambda p, i: keys[p, i])
        == kept
    )


def test_a_dropped_ack_of_an_unknown_key_blocks_what_follows() -> None:
    log = [P(f"3:{e}") for e in range(1, 4)]
    keys: dict[Position, str | None] = {P("3:1"): "a", P("3:2"): None, P("3:3"): "b"}
    cursor = AckState.of(P("3:0")).ack(P("3:2"), P("3:3"))
    # 3:2 cannot be claimed (3:1 of key a is unacknowledged and 3:2 could be of key a); unclaimed, it could
    # be of key b too, so 3:3 cannot be claimed either.
    assert key_ordered(cursor, log, keys.__getitem__) == AckState.of(P("3:0"))


# --- joined local spans -----------------------------------------------------------------------------


def own_log(log: Log) -> Log:
    """``log`` as region a's own log: a's messages are named by their local position there."""
    return [(p, Origin("a", p) if o.region == "a" else o) for p, o in log]


def test_with_both_regions_producing_the_own_spans_are_one_per_ledger() -> None:
    log = [(P(f"5:{e}"), O("a", f"5:{e}") if e % 2 == 0 else O("b", f"2:{e}")) for e in range(10)]
    everything = AckState.parse("5:9", "[]")
    plain = to_origin_acks(indexed(log), everything)
    joined = to_origin_acks(indexed(log), everything, local="a")
    assert isinstance(plain, Translation)
    assert isinstance(joined, Translation)
    assert len(plain.acks.spans("a")) == 5
    assert joined.acks.spans("a") == (Span(5, 0, 8),)  # from a's first message to its last
    assert joined.acks.spans("b") == plain.acks.spans("b")
    # an unacknowledged message of a's (5:8) ends a span; one of b's (5:5) does not: it is not a's to claim
    again = to_origin_acks(indexed(log), AckState.parse("5:4", "[(5:5..5:7]]"), local="a")
    assert isinstance(again, Translation)
    assert again.acks.spans("a") == (Span(5, 0, 6),)
    assert again.acks.spans("b") == (Span(2, 1, 1), Span(2, 3, 3), Span(2, 7, 7))


@settings(fast, max_examples=60)
@given(st.data())
def test_joined_spans_claim_the_same_messages_and_nothing_that_is_a_message(data: st.DataObject) -> None:
    full = own_log(data.draw(local_logs()))
    hidden = data.draw(st.sets(st.sampled_from(range(len(full))), max_size=3)) if full else set()
    log = [entry for i, entry in enumerate(full) if i not in hidden]  # entries not indexed break spans
    cursor = data.draw(cursors(log))
    index = indexed(log)
    plain = to_origin_acks(index, cursor)
    joined = to_origin_acks(index, cursor, local="a")
    if not log:
        assert joined == plain
        return
    assert isinstance(plain, Translation)
    assert isinstance(joined, Translation)
    for local, origin in log:
        assert (origin in joined.acks) == (local in cursor)
    for region in ("b", "c"):
        assert joined.acks.spans(region) == plain.acks.spans(region)
    assert len(joined.acks.spans("a")) <= len(plain.acks.spans("a"))
    known = dict(full)
    for span in joined.acks.spans("a"):
        for e in range(span.first, span.last + 1):
            named = index.origin_of(Position(span.ledger, e))
            assert named is not None  # never across an entry the index does not name
            # an extra position is another region's copy: origin (a, p) names no message
            assert named.region != "a" or Position(span.ledger, e) in cursor
            assert known[Position(span.ledger, e)] == named


# --- translating only above what was claimed --------------------------------------------------------


@settings(fast, max_examples=80)
@given(st.data())
def test_translating_above_what_was_claimed_adds_up_to_the_whole_translation(data: st.DataObject) -> None:
    """The agent translates a cursor only above ``claimed_to`` (everything the cursor acknowledged at or
    below it is in the published claims already): that part merged with the claims of the part below names
    exactly the messages a whole translation names, with or without joined own spans."""
    log = own_log(data.draw(local_logs()))
    cursor = data.draw(cursors(log))
    index = indexed(log)
    below = [Position(-1, -1), *(local for local, _ in log if local <= cursor.mark_delete)]
    above = data.draw(st.sampled_from(below))
    for local in (None, "a"):
        whole = to_origin_acks(index, cursor, local=local)
        part = to_origin_acks(index, cursor, local=local, above=above)
        if not log:
            assert part == whole
            continue
        assert isinstance(whole, Translation)
        assert isinstance(part, Translation)
        earlier = to_origin_acks(index, AckState.of(above), local=local)
        claims = part.acks if not isinstance(earlier, Translation) else earlier.acks.merge(part.acks)
        for entry, origin in log:
            assert (origin in claims) == (entry in cursor) == (origin in whole.acks)
        if local is None:
            assert claims == whole.acks
        else:  # spans start at ``above`` to join those below: as compact as the whole translation
            assert len(claims.spans("a")) <= len(whole.acks.spans("a"))
            for span in part.acks.spans("a"):
                for e in range(span.first, span.last + 1):
                    named = index.origin_of(Position(span.ledger, e))
                    if named is None:  # only at or below ``above``: acknowledged if it is a's at all
                        assert Position(span.ledger, e) <= above
                    else:
                        assert named.region != "a" or Position(span.ledger, e) in cursor
        for p, origin in log:  # nothing at or below ``above`` is translated again
            if p <= above and origin.region != "a":
                assert origin not in part.acks


def test_entries_of_a_retired_incarnation_are_claimed_under_its_retired_name_only() -> None:
    index = OriginIndex()
    for e in range(4):
        index.append(Position(9, e), Origin("a", Position(5, e)))
    index.retire("a", "a#old")
    for e in range(4, 6):
        index.append(Position(9, e), Origin("a", Position(5, e - 4)))  # the rebuilt a's 5:0, 5:1
    cursor = AckState.of(Position(9, 5))
    translated = to_origin_acks(index, cursor, local="b")
    assert isinstance(translated, Translation)
    assert translated.acks == OriginAcks.of({"a": [Span(5, 0, 1)], "a#old": [Span(5, 0, 3)]})


def entry_by_entry(
    index: OriginIndex,
    local: AckState,
    remote: OriginAcks,
    log: list[Position],
    size_of: Callable[[Position], int | None] | None,
) -> ApplyPlan:
    """``plan_apply``'s rule stated one entry at a time, as it was before it passed over acknowledged
    stretches: the oracle for the fast walk."""
    mark_delete, individual, batches, blocked_by, advancing = None, [], [], None, True
    for p in log:
        if p in local and p <= local.mark_delete:
            continue
        origin = index.origin_of(p)
        acked = p in local or (origin is not None and origin in remote)
        grown = None
        known = None if size_of is None else size_of(p)
        partial = local.batch(p)
        size = known if known is not None and known > 1 else (partial.size if partial is not None else 1)
        if not acked and origin is not None and (size > 1 or known == 1):
            mine = local.acked_indexes(p, size)
            grown = mine.union(remote.acked_indexes(origin, size))
            acked = grown.is_full and not (size_of is not None and known != size)
            grown = None if (grown.is_full and not acked) or grown == mine else grown
        if acked and advancing:
            mark_delete = p
        elif acked:
            if p not in local:
                individual.append(p)
        else:
            if grown is not None:
                batches.append((p, grown))
            if advancing:
                advancing, blocked_by = False, (p if origin is None else None)
    return ApplyPlan(mark_delete, tuple(individual), blocked_by, tuple(batches))


@settings(fast, max_examples=100)
@given(batched_scenarios(), st.data())
def test_the_walk_over_stretches_plans_what_the_entry_by_entry_rule_does(
    scenario: tuple[Log, OriginIndex, AckState, OriginAcks], data: st.DataObject
) -> None:
    log, index, local, remote = scenario
    positions = [p for p, _ in log]
    # Entries the broker never dispatches (markers) are left out of the log: stretches break there.
    left_out = data.draw(st.sets(st.sampled_from(range(len(log))), max_size=4)) if log else set()
    listed = [p for i, p in enumerate(positions) if i not in left_out]
    stretches = Stretches.of(listed)
    assert list(stretches) == listed
    for size_of in (None, sizes(log)):
        expected = entry_by_entry(index, local, remote, listed, size_of)
        assert plan_apply(index, local, remote=remote, log=stretches, size_of=size_of) == expected
        assert plan_apply(index, local, remote=remote, log=listed, size_of=size_of) == expected
    # A budget stops the walk after that many entries not held here whole: the plan is the one over the log
    # cut there (the entries held here before the cut cost nothing of it), marked incomplete if it was cut.
    budget = data.draw(st.integers(0, 4))
    looked = [p for p in listed if p not in local]
    cut = listed if len(looked) <= budget else [p for p in listed if p < looked[budget]]
    expected = replace(entry_by_entry(index, local, remote, cut, sizes(log)), complete=len(looked) <= budget)
    assert (
        plan_apply(index, local, remote=remote, log=stretches, size_of=sizes(log), budget=budget) == expected
    )


@settings(fast, max_examples=300)
@given(batched_scenarios(), st.data())
def test_a_plan_carried_out_leaves_nothing_to_plan(
    scenario: tuple[Log, OriginIndex, AckState, OriginAcks], data: st.DataObject
) -> None:
    """What lets the agent skip planning again after a write landed, and for a cursor that consumers moved
    on from an empty plan: a complete plan not blocked by an entry not indexed yet, once carried out (and
    with anything acknowledged on top), plans nothing more from the same claims over the same log. And
    ``carried_out`` tells a cursor that lacks anything the plan wrote or the planned cursor held."""
    log, index, local, remote = scenario
    positions = [p for p, _ in log]
    size_of = sizes(log)
    plan = plan_apply(index, local, remote=remote, log=positions, size_of=size_of)
    after = applied(local, plan)
    extra = data.draw(st.lists(st.sampled_from(positions), max_size=3)) if positions else []
    further = after.ack(*extra)
    for cursor in (after, further):
        assert carried_out(cursor, local, plan)
        if plan.complete and plan.blocked_by is None:
            again = plan_apply(index, cursor, remote=remote, log=positions, size_of=size_of)
            # At most a mark-delete over entries the cursor holds already (across a ledger's end, which a
            # broker passes itself): nothing for a write to acknowledge.
            assert not again.individual_acks, again
            assert not again.batch_acks, again
            moved = again.new_mark_delete
            assert moved is None or all(p in cursor for p in positions if p <= moved), again
            if cursor is after:
                assert again.is_empty, again
    for written in plan.individual_acks:
        short = replace(plan, individual_acks=tuple(p for p in plan.individual_acks if p != written))
        assert not carried_out(applied(local, short), local, plan)
    for at, _ in plan.batch_acks:
        short = replace(plan, batch_acks=tuple(b for b in plan.batch_acks if b[0] != at))
        assert not carried_out(applied(local, short), local, plan)
    if plan.new_mark_delete is not None and plan.new_mark_delete > local.mark_delete:
        assert not carried_out(local, local, plan)


def test_carried_out_needs_the_planned_cursor_s_batch_indexes_too() -> None:
    """A broker that forgot a partly acknowledged batch (Pulsar 4.0.8 on a topic reload) answers a cursor
    without it: the plan it carried out is not enough, the batch must be written again."""
    base = AckState.of(P("1:0")).ack_batches([(P("1:3"), BatchAcks(4, 0b0011))])
    plan = ApplyPlan(None, (P("1:5"),))
    assert carried_out(applied(base, plan), base, plan)
    forgot = AckState.of(P("1:0")).ack(P("1:5"))
    assert not carried_out(forgot, base, plan)
    more = forgot.ack_batches([(P("1:3"), BatchAcks(4, 0b0111))])
    assert carried_out(more, base, plan)


class _CountingIndex(OriginIndex):
    """An origin index that counts the entries asked about one by one."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def origin_of(self, local: Position) -> Origin | None:
        self.asked += 1
        return super().origin_of(local)


def test_a_plan_over_a_long_backlog_looks_only_at_what_could_be_acknowledged() -> None:
    """b's copy of a subscription with 100,000 entries of backlog, of which a acknowledged the first ten and
    one far above: b plans at every claim received, so a plan must not walk the backlog entry by entry."""
    index = _CountingIndex()
    for e in range(100_000):
        index.append(Position(9, e), Origin("a", Position(5, e)))
    remote = OriginAcks.of({"a": [Span(5, 0, 9), Span(5, 50_000, 50_000)]})
    local = AckState.of(Position(9, -1))
    log = Stretches(((9, 0, 99_999),))
    plan = plan_apply(index, local, remote=remote, log=log, size_of=lambda _p: None)
    assert plan == ApplyPlan(Position(9, 9), (Position(9, 50_000),), None, ())
    assert index.asked <= 20, f"{index.asked} entries looked at one by one"
    # The budget still counts the entries passed over: a plan limited to 1,000 stops before the far claim.
    assert plan_apply(index, local, remote=remote, log=log, budget=1_000) == ApplyPlan(
        Position(9, 9), (), complete=False
    )
