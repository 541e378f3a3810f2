"""The effector's plugin writes (batches side by side) and discovery's pacing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import pytest

from geosync_adapters import adminhttp
from geosync_agent import discovering, recent
from geosync_agent import effects as fx
from geosync_agent.ports import Admin, Messaging
from geosync_agent.recent import PhaseTimes
from geosync_core import pluginapi, pluginwrites
from geosync_core.capabilities import Capability
from geosync_core.positions import Position


class Writes:
    """An admin client whose plugin writes wait until ``parties`` of them are in the broker at once."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=5)
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def plugin_write(self, items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckResult]:
        self.barrier.wait()  # broken (an error) unless the batches are in flight together
        with self.lock:
            self.batches.append([i.subscription for i in items])
        return [
            pluginwrites.AckResult(
                pluginapi.Status.OK,
                i.topic,
                i.subscription,
                cursor=pluginapi.CursorReport(i.topic, i.subscription, i.mark_delete or Position(1, 0), "[]"),
                acknowledged=1,
            )
            for i in items
        ]


def test_plugin_write_batches_go_out_side_by_side_and_every_outcome_comes_back() -> None:
    n = fx.PLUGIN_ACK_BATCH * 2 + 7  # three batches
    writes = Writes(parties=3)
    acks = [fx.PluginAck(("persistent://t/n/x", f"s{i}"), Position(1, i), (), ()) for i in range(n)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        effector = fx.Effector(
            admin_factory=lambda: cast(Admin, writes), messaging=cast(Messaging, None), pool=pool
        )
        outcomes = effector.perform(acks)
    assert sorted(len(b) for b in writes.batches) == [7, fx.PLUGIN_ACK_BATCH, fx.PLUGIN_ACK_BATCH]
    written = [o for o in outcomes if isinstance(o, fx.CursorWritten)]
    assert sorted(o.key[1] for o in written) == sorted(f"s{i}" for i in range(n))


@pytest.mark.parametrize(
    ("interval", "took", "wait"),
    [
        (10.0, 0.5, 10.0),  # fast passes: the configured interval
        (5.0, 6.5, 26.0),  # slow passes: busy at most a fifth of the time
        (5.0, 1.25, 5.0),  # exactly at the share
    ],
)
def test_discovery_rests_in_proportion_to_its_passes(interval: float, took: float, wait: float) -> None:
    assert discovering.pass_wait(interval, took) == pytest.approx(wait)


def test_phase_times_report_each_step_with_its_share() -> None:
    times = PhaseTimes(keep=3)
    for name, seconds in [
        ("observe", 0.3),
        ("apply", 0.1),
        ("observe", 0.5),
        ("observe", 0.1),
        ("observe", 0.9),
    ]:
        times.lap(name, time.monotonic() - seconds)
    report = times.report()
    assert set(report) == {"observe", "apply"}
    assert report["observe"]["max"] == pytest.approx(0.9, abs=0.05)  # of the last 3: 0.5, 0.1, 0.9
    assert report["observe"]["p50"] == pytest.approx(0.5, abs=0.05)
    assert report["apply"]["share"] == pytest.approx(0.1 / 1.6, abs=0.02)


def test_call_times_report_each_kind_and_keep_the_last_ones() -> None:
    calls = recent.CallTimes(keep=100)
    for i in range(300):
        calls.add("GET cursors", i / 1000)
    calls.add("POST acks", 2.5)
    report = calls.report()
    assert report["POST acks"] == {"n": 1, "p50": 2.5, "p99": 2.5, "max": 2.5}
    cursors = report["GET cursors"]
    assert cursors["n"] == 100  # the last 100: 0.200 to 0.299 s
    assert cursors["p50"] == pytest.approx(0.25)
    assert cursors["p99"] == pytest.approx(0.299)
    assert cursors["max"] == pytest.approx(0.299)


class Creations:
    """An admin client and a messaging client for creating subscriptions: counts the stats reads."""

    def __init__(self, existing: dict[str, set[str]], missing: set[str]) -> None:
        self.existing, self.missing = existing, missing
        self.stats_read: list[str] = []
        self.subscribed: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def topic_stats(self, topic: str) -> dict[str, object]:
        with self.lock:
            self.stats_read.append(topic)
        if topic in self.missing:
            raise adminhttp.AdminNotFound(f"404 {topic}")
        return {"subscriptions": {name: {} for name in self.existing.get(topic, set())}}

    def subscribe_at_earliest(self, topic: str, subscription: str, *, name: str) -> None:
        assert name == fx.CREATOR
        with self.lock:
            self.subscribed.append((topic, subscription))


def test_subscriptions_of_one_topic_are_created_after_one_read_of_its_stats_per_group() -> None:
    """10,000 subscriptions created as a region's traffic started read their topics' stats (~140 KB each with
    100 subscriptions) once per creation: now once per CREATES_PER_READ of one topic."""
    busy, gone = "persistent://t/n/busy", "persistent://t/n/gone"
    names = [f"s{i}" for i in range(fx.CREATES_PER_READ + 3)]
    fake = Creations(existing={busy: {"s0"}}, missing={gone})
    creates = [fx.CreateSubscription((busy, n)) for n in names] + [fx.CreateSubscription((gone, "x"))]
    with ThreadPoolExecutor(max_workers=4) as pool:
        effector = fx.Effector(
            admin_factory=lambda: cast(Admin, fake), messaging=cast(Messaging, fake), pool=pool
        )
        outcomes = effector.perform(creates)
    assert sorted(fake.stats_read) == [busy, busy, gone]  # two groups of busy's, one of gone's
    assert sorted(fake.subscribed) == sorted((busy, n) for n in names[1:])
    created = {o.key: o for o in outcomes if isinstance(o, fx.Created)}
    assert len(created) == len(creates)
    assert created[(busy, "s0")] == fx.Created((busy, "s0"), created=False, topic_missing=False)
    assert all(created[(busy, n)].created for n in names[1:])
    assert created[(gone, "x")] == fx.Created((gone, "x"), created=False, topic_missing=True)


class Holes:
    """An admin API and messaging for holes applied through the admin path: ``subscriptions`` answers each
    stats read in turn (the last one again), ``skip`` what skipByMessageIds does."""

    def __init__(self, subscriptions: list[dict[str, object]], skip: Exception | None) -> None:
        self.subscriptions = subscriptions
        self.skip = skip
        self.skipped: list[str] = []
        self.shadowed: list[tuple[str, tuple[Position, ...]]] = []

    def topic_stats(self, topic: str, **_: object) -> dict[str, object]:
        subs = self.subscriptions.pop(0) if len(self.subscriptions) > 1 else self.subscriptions[0]
        return {"subscriptions": subs}

    def skip_by_message_ids(self, topic: str, subscription: str, positions: list[tuple[int, int]]) -> None:
        self.skipped.append(subscription)
        if self.skip is not None:
            raise self.skip

    def shadow_ack(
        self, topic: str, subscription: str, *, partition: int, positions: list[Position], name: str
    ) -> None:
        self.shadowed.append((subscription, tuple(positions)))


def _holes(fake: Holes) -> list[fx.Outcome]:
    move = fx.AdminMove(
        ("persistent://t/n/x", "orders"),
        partition=-1,
        move=None,
        holes=(Position(5, 3), Position(5, 7)),
        skip_by_ids=True,
        consumers=0,
        shadow_name="geosync-shadow",
    )
    with ThreadPoolExecutor(max_workers=1) as pool:
        effector = fx.Effector(
            admin_factory=lambda: cast(Admin, fake), messaging=cast(Messaging, fake), pool=pool
        )
        return effector.perform([move])


IDLE: dict[str, object] = {"orders": {"consumers": []}}


def test_a_404_from_skip_by_message_ids_for_a_subscription_deleted_meanwhile_is_its_own_outcome() -> None:
    """Issue 45, case 1: a broker with PIP-423 answers 404 for a subscription that is gone. Read as 'no such
    API', the region fell back to a shadow consumer, which re-created the subscription (at Latest)."""
    fake = Holes([IDLE, {}], adminhttp.AdminNotFound("404 Subscription not found"))
    outcomes = _holes(fake)
    assert fake.skipped == ["orders"]
    assert fake.shadowed == []
    assert not any(isinstance(o, fx.Learned) for o in outcomes)
    [moved] = [o for o in outcomes if isinstance(o, fx.AdminMoved)]
    assert (moved.holes_acked, moved.held_back) == (0, 2)
    assert "no longer exists" in moved.error


def test_holes_for_a_subscription_deleted_here_create_nothing_and_acknowledge_nothing() -> None:
    fake = Holes([{"other": {"consumers": []}}], None)
    outcomes = _holes(fake)
    assert fake.skipped == []
    assert fake.shadowed == []
    [moved] = outcomes
    assert isinstance(moved, fx.AdminMoved)
    assert moved.holes_acked == 0
    assert moved.error


def test_a_404_from_a_broker_without_skip_by_message_ids_is_learned_and_holes_go_through_a_shadow() -> None:
    fake = Holes([IDLE], adminhttp.AdminNotFound("404 Not Found"))
    outcomes = _holes(fake)
    assert fx.Learned(Capability.SKIP_BY_IDS, False) in outcomes
    assert fake.shadowed == [("orders", (Position(5, 3), Position(5, 7)))]
    [moved] = [o for o in outcomes if isinstance(o, fx.AdminMoved)]
    assert (moved.holes_acked, moved.error) == (2, "")
