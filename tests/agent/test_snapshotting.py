"""Snapshot mode's state stays bounded: a topic whose subscriptions never move caches at most
``max_cached`` snapshots, and ``retain`` forgets topics the runtime no longer tracks (deleted ones).
Markers read are refused when copied into another topic or replayed into their own."""

from __future__ import annotations

import itertools
import json

from geosync_agent.effects import AdminMove
from geosync_agent.runtime import Now
from geosync_agent.snapshotting import MAX_CACHED, MarkerWork, Snapshotting
from geosync_core import envelopes, markers, snapshots
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import KEYS as REGION_KEYS
from tests.agent.fakes import FakeRegion, Harness

TOPIC = "persistent://geo/snap-ab/t"


def _snapshotting(max_cached: int = MAX_CACHED) -> Snapshotting:
    return Snapshotting(
        region="a",
        keys=REGION_KEYS["a"],
        namespaces=("geo/snap-*",),
        interval_s=1.0,
        timeout_s=30.0,
        first_seq=0,
        new_id=map(str, itertools.count()).__next__,
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


def test_covers_answers_per_topic_and_forgets_topics_no_longer_tracked() -> None:
    s = _snapshotting()
    plain = "persistent://geo/ab/orders"
    assert s.covers(TOPIC)
    assert not s.covers(plain)
    assert s.covers(TOPIC)  # remembered: the same answer
    assert not s.covers(plain)
    assert s.covered == {TOPIC: True, plain: False}
    s.retain([TOPIC])
    assert s.covered == {TOPIC: True}


KEYS = REGION_KEYS["b"]
OTHER = "persistent://geo/snap-ab/other"


def _read(s: Snapshotting, topic: str, sealed: tuple[dict[str, str], bytes], at: int) -> MarkerWork:
    """``sealed`` read in ``topic``; the update's subscription exists there with its cursor at the start
    (so a move is never a no-op: whatever is refused is refused by the checks, not by the cursor)."""
    properties, data = sealed
    return s.on_read(
        topic,
        -1,
        Position(5, at),
        properties,
        data,
        markers_allowed=True,
        subscription_state=lambda _: (True, AckState(Position(9, 0))),
        now_ms=0,
    )


def _update_from_b(
    topic: str, seq: int, *, sender: str = "b", to: str = "a", keys: envelopes.Keys = KEYS
) -> tuple[dict[str, str], bytes]:
    update = markers.Update(subscription="billing", region=sender, positions=((to, Position(9, 40)),))
    return markers.encode_marker(keys.signer, update, topic=topic, seq=seq, sent_at_ms=0)


def test_a_marker_copied_into_another_topic_is_refused_as_misplaced() -> None:
    """Someone allowed to produce on OTHER copies b's genuine update there: the subscription of the same
    name on OTHER must not move (before topic binding it moved to a's position of TOPIC)."""
    s = _snapshotting()
    sealed = _update_from_b(TOPIC, seq=1)
    copied = _read(s, OTHER, sealed, at=1)
    assert copied.rejected == envelopes.Rejected(envelopes.Reason.MISPLACED)
    assert copied.effects == ()
    genuine = _read(s, TOPIC, sealed, at=2)
    assert genuine.rejected is None
    assert [e.move for e in genuine.effects if isinstance(e, AdminMove)] == [Position(9, 40)]


def test_a_marker_replayed_into_its_own_topic_is_refused() -> None:
    s = _snapshotting()
    first, later = _update_from_b(TOPIC, seq=10), _update_from_b(TOPIC, seq=11)
    assert _read(s, TOPIC, first, at=1).rejected is None
    assert _read(s, TOPIC, later, at=2).rejected is None
    replayed = _read(s, TOPIC, first, at=3)
    assert replayed.rejected == envelopes.Rejected(envelopes.Reason.REPLAYED)
    assert replayed.effects == ()
    # Guards are per topic partition: the same sequence numbers on another topic are that topic's own.
    assert _read(s, OTHER, _update_from_b(OTHER, seq=10), at=1).rejected is None
    s.retain([TOPIC])
    assert set(s.guards) == {TOPIC}


def test_own_markers_read_again_after_a_restart_are_not_refused() -> None:
    """A restarted agent finds its snapshots again by re-reading its topics; its own markers skip the
    guard."""
    s = _snapshotting()
    snap = markers.Snapshot(
        snapshot_id="s1", region="a", local_position=Position(5, 1), positions=(("b", Position(9, 1)),)
    )
    sealed = markers.encode_marker(REGION_KEYS["a"].signer, snap, topic=TOPIC, seq=3, sent_at_ms=0)
    for at in (2, 2):
        assert _read(s, TOPIC, sealed, at=at).rejected is None
    assert len(s.topics[TOPIC].cache) == 1


def test_marker_guards_survive_a_restart_in_the_checkpoint() -> None:
    b = Harness.build(FakeRegion("b", {}))
    from_a = _update_from_b(TOPIC, seq=10, sender="a", to="b", keys=REGION_KEYS["a"])
    assert _read(b.agent.snapshots, TOPIC, from_a, at=1).rejected is None
    guards = dict(b.agent.snapshots.guards)
    assert guards  # the update from another region was admitted
    state = json.loads(json.dumps(b.agent.checkpoint()))
    again = Harness.build(FakeRegion("b", {}))
    again.agent.restore(state, Now(again.clock, again.clock))
    assert again.agent.snapshots.guards == guards
