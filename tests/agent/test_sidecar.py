"""Sidecar agents (``shard_by_ownership``) against fake ports: a sidecar syncs only the topics its broker's
bundles hold and keeps the claims of the others; a bundle that moves to its broker is taken over with the
claims received before; one that moves away is handed off, and a write its broker refuses as ``not_loaded``
is not redone through the admin API (the new owner's sidecar applies it). The lab test
``integration_tests/test_sidecar_agents.py`` proves the same against real brokers."""

from __future__ import annotations

import pytest

from geosync_agent import owning
from geosync_core.indexing import OriginRun
from geosync_core.ownership import topic_hash
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import AdminView, FakeRegion, Harness, message

NS = "geo/ab"
CONTROL = f"persistent://{NS}/geosync-control"
SUB = "billing"
LOWER, UPPER = f"{NS}/0x00000000_0x80000000", f"{NS}/0x80000000_0xffffffff"
ME, OTHER = "me:8080", "other:8080"


def _topic(upper: bool) -> str:
    return next(t for i in range(1000) if (topic_hash(t := f"persistent://{NS}/t{i}") >= 0x80000000) == upper)


MINE, THEIRS = _topic(False), _topic(True)
"""In b, MINE is in the bundle b's broker ME owns at first, THEIRS in the one OTHER owns."""
A_LOGS = {MINE: [Position(5, e) for e in range(4)], THEIRS: [Position(6, e) for e in range(4)]}
B_LOGS = {MINE: [Position(9, e) for e in range(4)], THEIRS: [Position(10, e) for e in range(4)]}


def carry(sender: Harness, receiver: Harness) -> int:
    sent = sender.sent_on(CONTROL)
    for data in sent:
        receiver.messaging.deliver(CONTROL, message(CONTROL, Position(77, 0), data=data))
    if CONTROL in sender.messaging.producers:
        sender.messaging.producers[CONTROL].sent.clear()
    return len(sent)


def deliver_copies(b: Harness, topic: str) -> None:
    for p, origin in zip(B_LOGS[topic], A_LOGS[topic], strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        b.messaging.deliver(topic, message(topic, p, properties=stamp, producer="a-1-0"))


def pair() -> tuple[Harness, Harness]:
    """a: one agent for the region; b: the sidecar of broker ME, which owns MINE's bundle, not THEIRS'."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={t: list(log) for t, log in A_LOGS.items()})
    b = FakeRegion(
        "b",
        {NS: ["a", "b"]},
        topics={t: list(log) for t, log in B_LOGS.items()},
        bundles={ME: [LOWER], OTHER: [UPPER]},
    )
    for region in (a, b):
        for topic, log in region.topics.items():
            region.cursors[(topic, SUB)] = AckState.of(Position(log[0].ledger, -1))
    for topic in A_LOGS:
        a.origin_runs[topic] = [OriginRun(A_LOGS[topic][0].ledger, 0, 4, "a")]
        b.origin_runs[topic] = [OriginRun(B_LOGS[topic][0].ledger, 0, 4, "a", A_LOGS[topic][0])]
    ha = Harness.build(a)
    hb = Harness.build(b, shard_by_ownership=True, broker_id=ME)
    for h in (ha, hb):
        h.discover()
        h.step()
        h.discover()
        h.step()
    for topic, log in A_LOGS.items():
        for p in log:
            ha.messaging.deliver(topic, message(topic, p))
    deliver_copies(hb, MINE)
    for h in (ha, hb):
        h.step()
    return ha, hb


def acknowledge_everywhere_in_a(a: Harness, b: Harness, n: int) -> None:
    for topic, log in A_LOGS.items():
        a.region.consumer_acks(topic, SUB, log[:n])
    a.step()
    assert carry(a, b) >= 1


def test_a_sidecar_syncs_only_what_its_broker_owns_and_keeps_the_other_claims() -> None:
    a, b = pair()
    assert set(b.agent.topics) == {MINE}
    acknowledge_everywhere_in_a(a, b, 2)
    b.step()
    assert b.region.cursors[(MINE, SUB)] == AckState.of(B_LOGS[MINE][1])
    assert b.region.cursors[(THEIRS, SUB)] == AckState.of(Position(10, -1))  # OTHER's sidecar applies it
    assert not [c for c in b.region.calls if c[0] in ("plugin_ack", "expire") and c[1] == THEIRS]
    assert b.agent.subs[(THEIRS, SUB)].received.by_region  # kept for a takeover
    assert [s["topic"] for s in b.agent.status()["synced"]] == [MINE]
    assert b.agent.status()["ownership"]["broker"] == ME


def test_a_bundle_moving_here_is_taken_over_with_the_claims_received_before() -> None:
    a, b = pair()
    acknowledge_everywhere_in_a(a, b, 3)
    b.step()
    changes = b.agent.stats.counters["ownership_changes"]
    b.region.bundles = {ME: [LOWER, UPPER], OTHER: []}
    b.step(3.0)  # the refresh is due: THEIRS is claimed and now owned
    assert THEIRS in b.agent.topics
    deliver_copies(b, THEIRS)
    b.step()
    b.step()
    assert b.region.cursors[(THEIRS, SUB)] == AckState.of(B_LOGS[THEIRS][2])
    assert b.agent.stats.counters["ownership_changes"] == changes + 1


def test_a_bundle_moving_away_is_handed_off_and_a_refused_write_is_not_redone_elsewhere() -> None:
    a, b = pair()
    acknowledge_everywhere_in_a(a, b, 1)
    b.step()
    # MINE's bundle moves to OTHER; before the next refresh is due, b's broker refuses the write.
    b.region.bundles = {ME: [], OTHER: [LOWER, UPPER]}
    b.region.not_loaded = {MINE}
    a.region.consumer_acks(MINE, SUB, A_LOGS[MINE][:3])
    a.step()
    carry(a, b)
    calls = len(b.region.calls)
    b.step(0.1)  # the write is refused (not loaded) ...
    b.step(0.01)  # ... and handed off when its outcome lands, not moved through the admin API
    assert MINE not in b.agent.topics
    assert b.agent.stats.counters["topics_handed_off"] == 1
    assert not [c for c in b.region.calls[calls:] if c[0] in ("expire", "ack")], b.region.calls[calls:]
    assert b.region.cursors[(MINE, SUB)] == AckState.of(B_LOGS[MINE][0])
    # The claims stay; what was seen of the cursor and published goes.
    state = b.agent.subs[(MINE, SUB)]
    assert state.received.by_region
    assert state.cursor is None
    assert state.published is None


def test_a_sidecar_that_cannot_tell_its_broker_syncs_nothing_and_says_why() -> None:
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={MINE: list(B_LOGS[MINE])}, bundles={OTHER: [LOWER]})
    h = Harness.build(b, shard_by_ownership=True, broker_id=ME)
    h.discover()
    h.step()
    h.discover()
    h.step()
    assert h.agent.topics == {}
    assert "ownership" in h.agent.parts_failing
    assert "broker_id me:8080 is not one of b's active brokers" in h.agent.parts_failing["ownership"][1]


def test_the_broker_is_found_from_its_runtime_configuration_or_port(monkeypatch: pytest.MonkeyPatch) -> None:
    b = FakeRegion("b", {NS: ["a", "b"]}, bundles={"10.0.0.1:8080": [], "10.0.0.2:8080": []})
    admin = AdminView(b)
    found = owning.Ownership("b", "http://localhost:8080")
    runtime = {"advertisedAddress": "10.0.0.2", "webServicePort": "Optional[8080]"}
    monkeypatch.setattr(b, "runtime_configuration", lambda: runtime)
    assert found.identify(admin) == "10.0.0.2:8080"
    monkeypatch.setattr(b, "runtime_configuration", dict)
    with pytest.raises(owning.OwnershipUnknown, match="set broker_id"):
        found.identify(admin)  # two brokers on port 8080: ambiguous
    b.bundles = {"10.0.0.1:8080": [], "10.0.0.2:8081": []}
    assert found.identify(admin) == "10.0.0.1:8080"


def test_only_claimed_topics_no_broker_owns_are_looked_up_and_not_too_often() -> None:
    b = FakeRegion("b", {NS: ["a", "b"]}, bundles={ME: [], OTHER: [LOWER]})
    admin = AdminView(b)
    ownership = owning.Ownership("b", "http://me:8080", configured=ME)
    ownership.refresh(admin, 0.0)
    ownership.refresh_region(admin, 0.0)
    assert not ownership.should_look_up(MINE, 0.0)  # OTHER owns it
    assert ownership.should_look_up(THEIRS, 0.0)  # nobody does
    assert not ownership.should_look_up(THEIRS, 1.0)
    assert ownership.should_look_up(THEIRS, owning.LOOKUP_S + 1)


def test_each_stuck_topic_is_unloaded_once_by_the_sidecar_of_the_broker_that_owns_it() -> None:
    b = FakeRegion(
        "b",
        {NS: ["a", "b"]},
        topics={**{t: list(log) for t, log in B_LOGS.items()}, CONTROL: [Position(77, 0)]},
        bundles={ME: [LOWER], OTHER: [UPPER]},
    )
    link = {"replicationBacklog": 9, "msgOutCount": 4, "msgRateOut": 0.0, "connected": True}
    b.replication = {topic: {"a": dict(link)} for topic in b.topics}
    sidecars = {
        broker: Harness.build(
            b,
            shard_by_ownership=True,
            broker_id=broker,
            replicator_stall_s=20.0,
            replicator_unload_after_s=30.0,
        )
        for broker in (ME, OTHER)
    }
    unloaded: dict[str, list[str]] = {}
    for broker, h in sidecars.items():
        for _ in range(4):  # 40 s: one unload each
            h.discover()
            h.step(10.0)
        unloaded[broker] = sorted(c[1] for c in b.calls if c[0] == "unload")
        b.calls.clear()
    upper = topic_hash(CONTROL) >= 0x80000000
    mine, theirs = [MINE], [THEIRS]
    (theirs if upper else mine).append(CONTROL)
    assert unloaded == {ME: sorted(mine), OTHER: sorted(theirs)}
