"""The snapshot state machine and cache (PIP-33 from outside the broker), by tables and properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.markers import Snapshot, SnapshotRequest, SnapshotResponse
from geosync_core.positions import Position
from geosync_core.snapshots import Aborted, Builder, Completed, SnapshotCache, on_response, respond, start

from .strategies import fast

T = 30_000


def P(text: str) -> Position:
    return Position.parse(text)


def answer(b: Builder, region: str, at: str) -> SnapshotResponse:
    return respond(
        SnapshotRequest(snapshot_id=b.snapshot_id, source_region=b.source, round=b.round),
        region=region,
        at=P(at),
    )


def test_two_regions_complete_in_one_round() -> None:
    b, effects = start("s1", source="a", remotes=frozenset({"b"}), now_ms=0)
    assert effects == [SnapshotRequest(snapshot_id="s1", source_region="a", round=1)]
    done, effects = on_response(b, answer(b, "b", "7:3"), local=P("5:9"), now_ms=10, timeout_ms=T)
    assert done is None
    snap = Snapshot(snapshot_id="s1", region="a", local_position=P("5:9"), positions=(("b", P("7:3")),))
    assert effects == [snap, Completed(snap)]


def test_three_regions_need_a_second_round_and_keep_first_round_positions() -> None:
    b, _ = start("s2", source="a", remotes=frozenset({"b", "c"}), now_ms=0)
    b1, eff = on_response(b, answer(b, "b", "7:3"), local=P("5:4"), now_ms=1, timeout_ms=T)
    assert b1 is not None
    assert eff == []
    b2, eff = on_response(b1, answer(b1, "c", "9:1"), local=P("5:6"), now_ms=2, timeout_ms=T)
    assert b2 is not None
    assert b2.round == 2
    assert eff == [SnapshotRequest(snapshot_id="s2", source_region="a", round=2)]
    b3, eff = on_response(b2, answer(b2, "c", "9:8"), local=P("5:10"), now_ms=3, timeout_ms=T)
    assert b3 is not None
    assert eff == []
    done, eff = on_response(b3, answer(b3, "b", "7:9"), local=P("5:12"), now_ms=4, timeout_ms=T)
    assert done is None
    snap = Snapshot(
        snapshot_id="s2", region="a", local_position=P("5:12"), positions=(("b", P("7:3")), ("c", P("9:1")))
    )
    assert eff == [snap, Completed(snap)]


def test_foreign_and_duplicate_responses_change_nothing() -> None:
    b, _ = start("s3", source="a", remotes=frozenset({"b", "c"}), now_ms=0)
    other = SnapshotResponse(snapshot_id="zz", source_region="a", region="b", position=P("1:1"))
    stranger = SnapshotResponse(snapshot_id="s3", source_region="a", region="x", position=P("1:1"))
    not_mine = SnapshotResponse(snapshot_id="s3", source_region="b", region="c", position=P("1:1"))
    for r in (other, stranger, not_mine):
        assert on_response(b, r, local=P("2:2"), now_ms=1, timeout_ms=T) == (b, [])
    b1, _ = on_response(b, answer(b, "b", "7:3"), local=P("5:4"), now_ms=1, timeout_ms=T)
    assert b1 is not None
    assert on_response(b1, answer(b, "b", "7:4"), local=P("5:5"), now_ms=2, timeout_ms=T) == (b1, [])


def test_a_region_that_never_answers_aborts_the_snapshot() -> None:
    b, _ = start("s4", source="a", remotes=frozenset({"b", "c"}), now_ms=0)
    b1, _ = on_response(b, answer(b, "b", "7:3"), local=P("5:4"), now_ms=1, timeout_ms=T)
    assert b1 is not None
    done, eff = on_response(b1, answer(b1, "c", "9:1"), local=P("5:6"), now_ms=T + 1, timeout_ms=T)
    assert done is None
    assert len(eff) == 1
    assert isinstance(eff[0], Aborted)
    assert "c" in eff[0].reason


@settings(fast, max_examples=60)
@given(st.permutations(["b", "c", "d"]), st.permutations(["b", "c", "d"]))
def test_completion_needs_every_region_in_every_round(first: list[str], second: list[str]) -> None:
    b, _ = start("s5", source="a", remotes=frozenset(first), now_ms=0)
    builder: Builder | None = b
    completed: list[Completed] = []
    local = 0
    for order in (first, second):
        for i, region in enumerate(order):
            assert builder is not None
            assert completed == []
            local += 1
            builder, eff = on_response(
                builder,
                answer(builder, region, f"{10 + local}:{i}"),
                local=Position(50, local),
                now_ms=local,
                timeout_ms=T,
            )
            completed += [e for e in eff if isinstance(e, Completed)]
    assert builder is None
    assert len(completed) == 1
    snap = completed[0].snapshot
    assert snap.local_position == Position(50, local)
    assert dict(snap.positions).keys() == {"b", "c", "d"}


def snap(at: str) -> Snapshot:
    return Snapshot(snapshot_id=at, region="a", local_position=P(at), positions=(("b", P("1:1")),))


def test_cache_hands_out_the_highest_passed_snapshot_once() -> None:
    cache = SnapshotCache().add(snap("5:10")).add(snap("5:2")).add(snap("5:30")).add(snap("5:10"))
    assert len(cache) == 3
    cache, got = cache.advanced(P("5:1"))
    assert got is None
    cache, got = cache.advanced(P("5:12"))
    assert got == snap("5:10")
    assert len(cache) == 1
    cache, got = cache.advanced(P("5:12"))
    assert got is None
    cache, got = cache.advanced(P("6:0"))
    assert got == snap("5:30")
    assert len(cache) == 0


@settings(fast, max_examples=60)
@given(st.lists(st.integers(0, 100), max_size=30), st.lists(st.integers(0, 100), max_size=10))
def test_cache_never_returns_a_snapshot_above_the_mark_delete(ats: list[int], mds: list[int]) -> None:
    cache = SnapshotCache()
    for e in ats:
        cache = cache.add(snap(f"5:{e}"))
    handed: list[Position] = []
    for md in sorted(mds):
        cache, got = cache.advanced(Position(5, md))
        if got is not None:
            assert got.local_position <= Position(5, md)
            assert all(s.local_position > Position(5, md) for s in cache.snapshots)
            handed.append(got.local_position)
    assert handed == sorted(set(handed))


def test_shared_cache_serves_each_subscription_without_consuming() -> None:
    cache = SnapshotCache().add(snap("5:2")).add(snap("5:10")).add(snap("5:30"))
    assert cache.latest_at_or_below(P("5:1")) is None
    assert cache.latest_at_or_below(P("5:10")) == snap("5:10")
    assert cache.latest_at_or_below(P("5:29")) == snap("5:10")
    assert len(cache) == 3
    pruned = cache.without_below(P("5:12"))
    assert pruned.snapshots == (snap("5:10"), snap("5:30"))
    assert pruned.latest_at_or_below(P("5:12")) == snap("5:10")


@settings(fast, max_examples=100)
@given(st.sets(st.integers(0, 500), max_size=120), st.integers(2, 40))
def test_a_thinned_cache_is_bounded_and_keeps_the_newest_and_the_oldest(ats: set[int], limit: int) -> None:
    cache = SnapshotCache()
    for e in sorted(ats):
        cache = cache.add(snap(f"5:{e}")).thinned(limit)
        assert len(cache) <= limit
        assert cache.snapshots[-1] == snap(f"5:{e}")
        assert cache.snapshots[0] == snap(f"5:{min(ats)}")
    kept = [s.local_position.entry for s in cache.snapshots]
    assert kept == sorted(kept)
    assert set(kept) <= ats


def test_a_thinned_cache_spaces_snapshots_by_age_and_still_serves_a_lagging_subscription() -> None:
    cache = SnapshotCache()
    for e in range(1, 1001):
        cache = cache.add(snap(f"5:{e}")).thinned(16)
    kept = [s.local_position.entry for s in cache.snapshots]
    assert kept[0] == 1
    assert kept[-3:] == [998, 999, 1000]
    for lag in (10, 100, 500):
        got = cache.latest_at_or_below(Position(5, 1000 - lag))
        assert got is not None
        assert got.local_position.entry >= 1000 - 2 * lag  # within about the lag itself below
    built = SnapshotCache(tuple(snap(f"5:{e}") for e in range(1, 40)))  # not by add: counted in order
    assert len(built.thinned(5)) == 5
