"""The policy mirror's own pure parts: the checkpoint it hands the next leadership term, where that lives
in ZooKeeper (one node or parts, on a fake store here), and its scope. Its behaviour against ZooKeeper and
Pulsar is proven in integration_tests/test_policy_mirror.py."""

from __future__ import annotations

import json
import os
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_adapters import zookeeper as zk
from geosync_agent.config import AgentConfig
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirror import CHECKPOINT_MAGIC, Checkpoint, decode_checkpoint, encode_checkpoint
from geosync_agent.mirroring import Mirror
from geosync_agent.mirrorstate import POINTER_MAGIC, StateNodes, decode_pointer, split
from geosync_core import envelopes, policies
from geosync_core.clocks import Hlc
from geosync_core.errors import TemporaryError
from geosync_core.policies import Record
from tests.agent.fakes import KEYS
from tests.agent.fakezk import Crash, FakeStore, leading


def _checkpoint() -> Checkpoint:
    return Checkpoint(
        replica={
            "/admin/policies/geo": Record("/admin/policies/geo", b'{"a":1}', Hlc(1_700_000_000_000, 2, "a")),
            "/admin/policies/geo/ab": Record("/admin/policies/geo/ab", None, Hlc(1_700_000_000_001, 0, "b")),
        },
        clock=Hlc(1_700_000_000_002, 5, "a"),
        seq=41,
        guard=envelopes.ReplayGuard((("b", 17), ("c", 3))),
        reader=b"\x08\x01\x10\x02",
        parked={"/admin/policies/x": Record("/admin/policies/x", b"{}", Hlc(1_700_000_000_003, 0, "c"))},
        seen={"b": Hlc(1_700_000_000_001, 0, "b"), "c": Hlc(1_699_999_999_000, 3, "c")},
    )


def test_a_checkpoint_survives_the_round_trip() -> None:
    cp = _checkpoint()
    assert decode_checkpoint(encode_checkpoint(cp)) == cp


def test_a_version_1_checkpoint_is_still_read() -> None:
    """Written before version 2 added ``seen``: read with none, so no tombstone goes until peers speak."""
    cp = _checkpoint()
    doc = json.loads(zlib.decompress(encode_checkpoint(cp)[len(CHECKPOINT_MAGIC) :]))
    doc["v"] = 1
    del doc["seen"]
    old = CHECKPOINT_MAGIC + zlib.compress(json.dumps(doc).encode())
    cp.seen = {}
    assert decode_checkpoint(old) == cp


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a checkpoint",
        CHECKPOINT_MAGIC + b"not zlib",
        CHECKPOINT_MAGIC + zlib.compress(b'{"v": 2}'),
        CHECKPOINT_MAGIC + zlib.compress(b'{"v": 1, "records": []}'),
        CHECKPOINT_MAGIC + zlib.compress(b"[1, 2]"),
        CHECKPOINT_MAGIC + zlib.compress(b'{"v": 3}'),
    ],
)
def test_an_unreadable_checkpoint_means_starting_afresh(data: bytes) -> None:
    assert decode_checkpoint(data) is None


def test_scope_follows_the_tenant_patterns() -> None:
    config = AgentConfig(
        region="a",
        admin_url="http://fake",
        service_url="pulsar://fake",
        zookeeper="127.0.0.1:1",
        mirror_tenants=("geo*", "shop"),
        mirror_exclude_tenants=("public", "pulsar", "geo-private"),
    )
    mirror = Mirror(config, KEYS["a"])
    assert mirror.in_scope("/admin/policies/geo")
    assert mirror.in_scope("/admin/policies/geo/ab")
    assert mirror.in_scope("/admin/policies/shop/orders")
    assert not mirror.in_scope("/admin/policies/geo-private/ns")
    assert not mirror.in_scope("/admin/policies/public/default")
    assert not mirror.in_scope("/admin/policies/other/ns")
    assert not mirror.in_scope("/admin/clusters/a")


# -- where the checkpoint lives: one node, or parts behind a pointer -----------------------------------------


def _nodes(store: FakeStore, budget: int = 1000) -> StateNodes:
    store.ensure_path("/m")
    return StateNodes(store, "/m", budget=budget, fence=("/fence", 0))  # type: ignore[arg-type]


def _big_checkpoint(n: int, seed: int = 7) -> Checkpoint:
    rng = random.Random(seed)
    replica = {}
    for i in range(n):
        path = f"/admin/policies/t{i % 97}/ns{i}"
        value = None if i % 3 == 0 else json.dumps({"bundles": rng.getrandbits(64), "i": i}).encode()
        replica[path] = Record(path, value, Hlc(1_700_000_000_000 + i, rng.randrange(4), "abc"[i % 3]))
    return Checkpoint(replica=replica, clock=Hlc(1_800_000_000_000, 0, "a"), seq=n)


def test_a_checkpoint_within_the_budget_stays_one_node_in_the_version_1_shape() -> None:
    store = FakeStore()
    data = encode_checkpoint(_checkpoint())
    written = _nodes(store, budget=len(data)).write(data, expected=None)
    assert written.value == data
    assert data.startswith(CHECKPOINT_MAGIC)
    assert store.children("/m") == ["state"]
    assert _nodes(store).read() == (written, data)


def test_a_large_checkpoint_round_trips_through_parts_none_over_the_budget() -> None:
    budget = 64 * 1024
    store = FakeStore(max_node_bytes=budget)
    cp = _big_checkpoint(20_000)
    data = encode_checkpoint(cp)
    assert len(data) > 3 * budget
    nodes = _nodes(store, budget=budget)
    state = nodes.write(data, expected=None)
    pointer = decode_pointer(state.value)
    assert pointer is not None
    assert pointer.parts == len(split(data, budget)) > 3
    node, back = nodes.read()
    assert node == state
    assert back == data
    assert back is not None
    assert decode_checkpoint(back) == cp


@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=6), crash_at=st.integers(1, 25))
@settings(deadline=None, max_examples=150)
def test_a_crash_anywhere_in_a_write_leaves_the_old_or_the_new_checkpoint_whole(
    sizes: list[int], crash_at: int
) -> None:
    """Writes of inline and split checkpoints in turn; one crashes at a chosen store write. What is read
    afterwards is exactly the last checkpoint written in full or the one that crashed, never a mix, and the
    next write (a new term, re-reading ``state``) leaves no orphan parts."""
    store = FakeStore()
    nodes = _nodes(store)
    checkpoints = [os.urandom(size) for size in sizes]
    whole = None
    state = None
    for i, data in enumerate(checkpoints):
        if i == len(checkpoints) - 1:
            store.crash_at = store.writes + crash_at
        try:
            state = nodes.write(data, expected=state)
            whole = data
        except Crash:
            break
    store.crash_at = None
    state, back = nodes.read()
    assert back in (whole, checkpoints[-1])
    nodes.write(b"after", expected=state)
    assert store.children("/m/parts") == []
    assert nodes.read()[1] == b"after"


def test_a_write_from_a_deposed_leader_changes_nothing() -> None:
    store = FakeStore()
    nodes = _nodes(store)
    state = nodes.write(os.urandom(3000), expected=None)
    before = dict(store.nodes)
    store.nodes["/fence"] = (b"", 1)  # the lock node is another session's now
    with pytest.raises(zk.ZkFenced):
        nodes.write(os.urandom(3000), expected=state)
    assert {p: v for p, v in store.nodes.items() if p != "/fence"} == {
        p: v for p, v in before.items() if p != "/fence"
    }


def test_parts_that_do_not_match_the_pointer_are_refused() -> None:
    store = FakeStore()
    nodes = _nodes(store)
    nodes.write(os.urandom(3000), expected=None)
    pointer = decode_pointer(store.nodes["/m/state"][0])
    assert pointer is not None
    assert store.nodes["/m/state"][0].startswith(POINTER_MAGIC)
    part = f"/m/parts/{pointer.generation}/000001"
    store.nodes[part] = (b"x" + store.nodes[part][0][1:], 1)
    assert nodes.read()[1] is None
    del store.nodes[part]
    assert nodes.read()[1] is None


class _Message:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def data(self) -> bytes:
        return self._data

    def message_id(self) -> _Message:
        return self

    def serialize(self) -> bytes:
        return b"id"


def test_the_mirror_tracks_each_regions_newest_stamp_and_collects_what_every_peer_is_past() -> None:
    config = AgentConfig(
        region="a",
        admin_url="http://fake",
        service_url="pulsar://fake",
        zookeeper="127.0.0.1:1",
        mirror_tenants=("geo",),
        mirror_tombstone_ttl_s=1.0,
    )
    clock = iter(range(1_800_000_000_000, 1_900_000_000_000, 60_000))  # a minute a step: rechecks are due
    mirror = Mirror(config, KEYS["a"], wall_ms=lambda: next(clock))
    store = FakeStore()
    for region in "ab":
        store.add(f"/admin/clusters/{region}")
    gone = Record("/admin/policies/geo/old", None, Hlc(1_700_000_000_000, 0, "a"))
    leading(mirror, store, None, replica={gone.path: gone})
    mirror.feed(ev.Tick())
    assert gone.path in mirror.cp.replica  # b has not said anything yet
    for seq, wall in ((1, 1_600_000_000_000), (2, 1_700_000_000_001)):
        event = Record("/admin/policies/other/ns", b"{}", Hlc(wall, 0, "b"))  # out of scope: no store needed
        envelope = envelopes.Envelope(
            kind="policy-event", region="b", seq=seq, sent_at_ms=0, payload=policies.event_to_payload(event)
        )
        mirror.receive(_Message(envelopes.seal(KEYS["b"].signer, envelope)))
    assert mirror.cp.seen == {"b": Hlc(1_700_000_000_001, 0, "b")}
    mirror.feed(ev.Tick())
    assert mirror.cp.replica == {}
    assert mirror.counters["tombstones_collected"] == 1


class _Down:
    def send(self, data: bytes) -> None:
        raise TemporaryError("the event topic is unreachable")


def test_a_publish_that_fails_ends_the_term_and_leaves_its_state_unsaved() -> None:
    """The term counts a change as published when it asks for the publish: a term whose publish failed must
    not hand that state on, or the next term would never publish the change."""
    config = AgentConfig(
        region="a", admin_url="http://fake", service_url="pulsar://fake", zookeeper="127.0.0.1:1"
    )
    mirror = Mirror(config, KEYS["a"])
    store = FakeStore()
    store.add("/admin/policies/geo", b'{"allowedClusters":["a"]}')
    leading(mirror, store, _Down())
    with pytest.raises(TemporaryError):
        mirror.feed(ev.Fired("/admin/policies/geo"))
    assert mirror.interrupted
