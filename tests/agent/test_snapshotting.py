"""Snapshot mode's state stays bounded: a topic whose subscriptions never move caches at most
``max_cached`` snapshots, and ``retain`` forgets topics the runtime no longer tracks (deleted ones)."""

from __future__ import annotations

import itertools

from geosync_agent.snapshotting import MAX_CACHED, Snapshotting
from geosync_core import envelopes, markers, snapshots
from geosync_core.positions import Position

TOPIC = "persistent://geo/snap-ab/t"


def _snapshotting(max_cached: int = MAX_CACHED) -> Snapshotting:
    return Snapshotting(
        region="a",
        keys=envelopes.Keys.shared(b"k" * 32),
        namespaces=("geo/snap-*",),
        interval_s=1.0,
        timeout_s=30.0,
        first_seq=0,
        max_cached=max_cached,
    )


def _complete_one(s: Snapshotting, topic: str, entry: int) -> None:
    """One snapshot of ``topic`` from start to completion: a's request, b's response read at ``entry``."""
    now = float(entry * 10)
    (request, _), *_ = s.due(topic, version=entry, regions=frozenset({"a", "b"}), now=now)
    assert isinstance(request, markers.SnapshotRequest)
    response = snapshots.respond(request, region="b", at=Position(9, entry))
    out = s.on_marker(topic, Position(5, entry), response, now_ms=int(now * 1000))
    assert any(isinstance(m, markers.Snapshot) for m, _ in out)


def test_a_topic_whose_subscription_never_moves_caches_at_most_max_cached() -> None:
    s = _snapshotting(max_cached=8)
    for entry in range(1, 201):
        _complete_one(s, TOPIC, entry)
    state = s.topics[TOPIC]
    assert state.completed == 200
    assert len(state.cache) <= 8
    kept = [snap.local_position.entry for snap in state.cache.snapshots]
    assert kept[-2:] == [199, 200]  # recent snapshots dense
    assert kept[0] == 1  # a subscription still at the start passes the oldest first
    assert all(b - a <= 2 * (200 - b) + 2 for a, b in itertools.pairwise(kept[1:]))  # older, sparser
    assert s.on_cursor(TOPIC, "stuck", Position(5, 0)) is None
    update = s.on_cursor(TOPIC, "slow", Position(5, 150))
    assert update is not None
    assert Position(9, 100) < dict(update.positions)["b"] <= Position(9, 150)  # b's position of that one


def test_snapshots_found_again_after_a_restart_are_bounded_too() -> None:
    s = _snapshotting(max_cached=4)
    for entry in range(1, 50):
        found = markers.Snapshot(
            snapshot_id=f"s{entry}",
            region="a",
            local_position=Position(5, entry),
            positions=(("b", Position(9, 1)),),
        )
        s.on_marker(TOPIC, Position(5, entry + 1), found, now_ms=0)
    assert len(s.topics[TOPIC].cache) == 4


def test_retain_forgets_topics_no_longer_tracked() -> None:
    s = _snapshotting()
    other = "persistent://geo/snap-ab/deleted"
    _complete_one(s, TOPIC, 1)
    _complete_one(s, other, 1)
    assert s.retain([TOPIC]) == [other]
    assert set(s.topics) == {TOPIC}
    assert s.status()["cached"] == 1
    assert s.retain([TOPIC]) == []
