"""The policy mirror's held deletions on an in-memory store: mark, check, then delete, and nothing destroyed;
and a peer's policy events speak only for that peer.

The real ZooKeeper and brokers are in integration_tests/test_mirror_deletions.py.
"""

from __future__ import annotations

import json

import pytest

from geosync_adapters import adminhttp, signing
from geosync_adapters import zookeeper as zk
from geosync_agent import mirrorholds
from geosync_agent.config import AgentConfig
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirror import EVENT_KIND
from geosync_agent.mirroring import Mirror
from geosync_agent.mirrorlocal import SessionLost
from geosync_core import envelopes, policies
from geosync_core.clocks import Hlc
from geosync_core.policies import Record
from tests.agent.fakezk import FakeStore, leading

NS = "/admin/policies/shop/orders"
TENANT = "/admin/policies/shop"
DOC = json.dumps({"replication_clusters": ["a", "b"], "message_ttl_in_seconds": 60}).encode()
TENANT_DOC = b'{"allowedClusters": ["a", "b", "c"]}'
DELETION = Record(NS, None, Hlc(1_700_000_000_000, 0, "a"))


def _own(namespace: str) -> frozenset[str]:
    return frozenset({"geosync-control"})


def _store() -> FakeStore:
    store = FakeStore()
    store.add(TENANT, TENANT_DOC)
    store.add(NS, DOC)
    store.add("/managed-ledgers/shop/orders/persistent/geosync-control")
    store.add("/managed-ledgers/shop/orders/persistent/__change_events")
    return store


class _Brokers:
    """The region's admin API: what its brokers list (the metadata store may be another ZooKeeper)."""

    def __init__(self, topics: tuple[str, ...] = (), *, down: bool = False) -> None:
        self.topics = list(topics)
        self.down = down

    def every_topic(self, namespace: str) -> list[str]:
        if self.down:
            raise adminhttp.AdminTemporary("connection refused")
        return [t for t in self.topics if t.startswith(f"persistent://{namespace}/")]

    def namespaces(self, tenant: str) -> list[str]:
        if self.down:
            raise adminhttp.AdminTemporary("connection refused")
        return sorted({t.split("://")[1].rsplit("/", 1)[0] for t in self.topics if f"://{tenant}/" in t})


def _destroy(store: FakeStore, event: Record = DELETION, brokers: _Brokers | None = None) -> None:
    """A fresh mirror of region b on ``store`` receives ``event``; raises ``mirrorholds.Held`` with the
    reason when it holds it."""
    mirror, _ = _mirror(store, brokers or _Brokers(("persistent://shop/orders/geosync-control",)))
    _receive(mirror, event)
    if event.path in mirror.holds:
        raise mirrorholds.Held(mirror.holds[event.path])


@pytest.mark.parametrize(
    "topic",
    [
        "/managed-ledgers/shop/orders/persistent/keep",
        "/managed-ledgers/shop/orders/persistent/keep-partition-0",
        "/admin/partitioned-topics/shop/orders/persistent/keep",
        "/admin/partitioned-topics/shop/orders/non-persistent/keep",
    ],
)
def test_a_namespace_holding_a_topic_is_not_deleted(topic: str) -> None:
    store = _store()
    store.add(topic)
    with pytest.raises(mirrorholds.Held, match="1 topic"):
        _destroy(store)
    assert store.nodes[NS][0] == DOC
    assert store.log == []


def test_a_topic_only_the_brokers_know_holds_the_deletion() -> None:
    """A region whose metadata store is another ZooKeeper than the mirror's: its brokers list the topic."""
    store = _store()
    with pytest.raises(mirrorholds.Held, match="keep"):
        _destroy(store, brokers=_Brokers(("persistent://shop/orders/keep-partition-0",)))
    assert store.log == []


def test_brokers_that_cannot_answer_hold_the_deletion() -> None:
    store = _store()
    with pytest.raises(mirrorholds.Held, match="cannot list"):
        _destroy(store, brokers=_Brokers(down=True))
    assert store.nodes[NS][0] == DOC


def test_a_namespace_with_only_system_and_geosync_topics_is_marked_then_deleted() -> None:
    store = _store()
    _destroy(store)
    assert NS not in store.nodes
    (mark_path, mark), (delete_path, deleted) = store.log
    assert (mark_path, delete_path, deleted) == (NS, NS, None)
    assert mark is not None
    assert json.loads(mark)["deleted"] is True


def test_a_topic_created_after_the_mark_keeps_the_namespace_as_it_was() -> None:
    store = _store()

    def a_producer_arrives(path: str, value: bytes | None) -> None:
        if value is not None and json.loads(value).get("deleted"):
            store.add("/managed-ledgers/shop/orders/persistent/late")

    store.after_write = a_producer_arrives
    with pytest.raises(mirrorholds.Held, match="late"):
        _destroy(store)
    assert json.loads(store.nodes[NS][0]) == json.loads(DOC)


def test_a_tenant_is_held_by_its_namespaces_and_by_orphaned_managed_ledgers() -> None:
    store = _store()
    tenant_deletion = Record(TENANT, None, Hlc(1_700_000_000_001, 0, "a"))
    with pytest.raises(mirrorholds.Held, match="namespace"):
        _destroy(store, tenant_deletion, _Brokers())
    with pytest.raises(mirrorholds.Held, match="elsewhere"):  # the brokers know one the store lacks
        _destroy(store, tenant_deletion, _Brokers(("persistent://shop/elsewhere/t",)))
    del store.nodes[NS]  # policies gone (as the bug left them), ledgers still here
    store.add("/managed-ledgers/shop/orders/persistent/keep")
    with pytest.raises(mirrorholds.Held, match="orders"):
        _destroy(store, tenant_deletion, _Brokers())
    del store.nodes["/managed-ledgers/shop/orders/persistent/keep"]
    _destroy(store, tenant_deletion, _Brokers())
    assert TENANT not in store.nodes


class _Producer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


SIGNERS = {r: signing.generate(f"{r}-1") for r in "abc"}
RING = envelopes.Keyring.of(
    {r: {s.key_id: signing.parse_public(s.public(), where=r)} for r, s in SIGNERS.items()}
)


def _mirror(
    store: FakeStore, brokers: _Brokers | None = None, *, admin_api: bool = False
) -> tuple[Mirror, _Producer]:
    """A mirror of region b leading on ``store``; what its brokers list is ``brokers`` (by default none),
    or with ``admin_api`` what the region's admin API answers (``AgentConfig.admin_client``)."""
    config = AgentConfig(
        region="b", admin_url="http://fake", service_url="pulsar://fake", zookeeper="127.0.0.1:1"
    )
    clock = iter(range(1_800_000_000_000, 1_900_000_000_000, 60_000))  # a minute a step: rechecks are due
    listing = None if admin_api else brokers or _Brokers()
    mirror = Mirror(config, envelopes.Keys(SIGNERS["b"], RING), wall_ms=lambda: next(clock), brokers=listing)
    producer = _Producer()
    replica = {
        TENANT: Record(TENANT, TENANT_DOC, Hlc(1_600_000_000_000, 0, "b")),
        NS: Record(NS, DOC, Hlc(1_600_000_000_000, 1, "b")),
    }
    leading(mirror, store, producer, registered={r: frozenset() for r in "abc"}, replica=replica)
    for region in "abc":
        store.add(f"/admin/clusters/{region}")  # what a recheck reads again
    return mirror, producer


def _receive(mirror: Mirror, record: Record) -> str:
    """A peer's ``record`` received by ``mirror``: "applied", "held" or "parked"."""
    counters = dict(mirror.counters)
    sender = record.stamp.region
    _SEQS[sender] = _SEQS.get(sender, 0) + 1
    mirror.receive(_event_from(sender, record, seq=_SEQS[sender]))
    for outcome in ("applied", "held", "held_applied", "parked"):
        if mirror.counters[outcome] > counters.get(outcome, 0):
            return "applied" if outcome == "held_applied" else outcome
    return "held" if record.path in mirror.holds else "unchanged"


_SEQS: dict[str, int] = {}


def test_the_mirror_holds_the_deletion_keeps_local_edits_here_and_applies_it_once_drained() -> None:
    store = _store()
    store.add("/managed-ledgers/shop/orders/persistent/keep")
    mirror, producer = _mirror(store)
    assert _receive(mirror, DELETION) == "held"
    assert "keep" in mirror.snapshot()["held"][NS]
    assert mirror.replica()[NS] == DELETION  # the deletion is the policy everywhere
    assert store.nodes[NS][0] == DOC  # and the region keeps its namespace

    # A local edit of the held namespace stays here: last writer wins must not bring it back everywhere.
    edited = json.dumps({"replication_clusters": ["a", "b"], "message_ttl_in_seconds": 5}).encode()
    store.nodes[NS] = (edited, store.nodes[NS][1] + 1)
    mirror.feed(ev.Fired(NS))
    mirror.feed(ev.Reconnected())
    assert producer.sent == []
    assert mirror.counters["held_local_edits"] >= 1

    # The same deletion delivered again changes nothing; once drained, a recheck applies it.
    assert _receive(mirror, DELETION) != "applied"
    assert NS in mirror.holds
    mirror.feed(ev.Tick())
    assert NS in store.nodes
    del store.nodes["/managed-ledgers/shop/orders/persistent/keep"]
    mirror.feed(ev.Tick())
    assert NS not in store.nodes
    assert mirror.snapshot()["held"] == {}
    assert mirror.snapshot()["parked"] == []


def test_a_newer_document_from_any_region_ends_the_hold() -> None:
    store = _store()
    store.add("/managed-ledgers/shop/orders/persistent/keep")
    mirror, _ = _mirror(store)
    assert _receive(mirror, DELETION) == "held"
    again = json.dumps({"replication_clusters": ["a", "b"], "message_ttl_in_seconds": 7}).encode()
    assert _receive(mirror, Record(NS, again, Hlc(1_700_000_000_500, 0, "c"))) == "applied"
    assert store.nodes[NS][0] == again
    assert mirror.snapshot()["held"] == {}
    with pytest.raises(zk.ZkError):  # nothing left to release: the fake refuses a stale delete
        store.write(NS, None, expected=None)


class _Id:
    def serialize(self) -> bytes:
        return b"id"


class _Message:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def data(self) -> bytes:
        return self._data

    def message_id(self) -> _Id:
        return _Id()


def _event_from(sender: str, record: Record, seq: int) -> _Message:
    envelope = envelopes.Envelope(
        kind=EVENT_KIND, region=sender, seq=seq, sent_at_ms=0, payload=policies.event_to_payload(record)
    )
    return _Message(envelopes.seal(SIGNERS[sender], envelope))


def test_a_peer_speaks_only_for_its_own_policy_edits() -> None:
    """A validly signed event from a carrying a deletion stamped as c's changes nothing (invariant 3); the
    same deletion stamped as a's own is applied (the namespace holds nothing here)."""
    store = _store()
    mirror, _ = _mirror(store)
    mirror.receive(_event_from("a", Record(NS, None, Hlc(1_700_000_000_000, 0, "c")), seq=1))
    assert mirror.counters["rejected_malformed"] == 1
    assert store.nodes[NS][0] == DOC
    assert mirror.replica()[NS].value == DOC
    mirror.receive(_event_from("a", Record(NS, None, Hlc(1_700_000_000_000, 0, "a")), seq=2))
    assert NS not in store.nodes


def test_each_call_to_the_brokers_in_a_held_deletions_check_is_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frozen region makes every admin call of the check time out: each that ends tells the liveness
    watchdog the mirror is getting on (it is failing, not stuck)."""
    store = _store()
    mirror, _ = _mirror(store, admin_api=True)
    monkeypatch.setattr(AgentConfig, "admin_client", lambda self, **_kw: _Brokers(down=True))
    beats: list[int] = []
    mirror.progress = lambda: beats.append(1)
    assert _receive(mirror, DELETION) == "held"
    assert len(beats) >= 1
    assert "cannot list" in mirror.snapshot()["held"][NS]


def test_a_term_led_on_a_fence_another_session_took_writes_nothing() -> None:
    """Every store write of a term is fenced by its leadership's lock node (``Mirror.lead_on``): once the
    node is another session's, a peer's deletion that nothing here holds ends the term and deletes nothing."""
    store = _store()
    mirror, producer = _mirror(store)
    mirror.lead_on(store, fence=("/fence", 0), producer=producer)  # type: ignore[arg-type]
    store.nodes["/fence"] = (b"", 1)  # the lock node is another session's now
    with pytest.raises(SessionLost, match="no longer the leader"):
        _receive(mirror, DELETION)
    assert store.nodes[NS][0] == DOC
    assert store.log == []
