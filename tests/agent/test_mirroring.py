"""The policy mirror's own pure parts: the checkpoint it hands the next leadership term, and its scope.
Its behaviour against ZooKeeper and Pulsar is proven in integration_tests/test_policy_mirror.py."""

from __future__ import annotations

import zlib

import pytest

from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import CHECKPOINT_MAGIC, Checkpoint, Mirror, decode_checkpoint, encode_checkpoint
from geosync_core import envelopes
from geosync_core.clocks import Hlc
from geosync_core.policies import Record


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
    )


def test_a_checkpoint_survives_the_round_trip() -> None:
    cp = _checkpoint()
    assert decode_checkpoint(encode_checkpoint(cp)) == cp


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a checkpoint",
        CHECKPOINT_MAGIC + b"not zlib",
        CHECKPOINT_MAGIC + zlib.compress(b'{"v": 2}'),
        CHECKPOINT_MAGIC + zlib.compress(b'{"v": 1, "records": []}'),
        CHECKPOINT_MAGIC + zlib.compress(b"[1, 2]"),
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
    mirror = Mirror(config, envelopes.Keys.shared(b"k" * 32))
    assert mirror.in_scope("/admin/policies/geo")
    assert mirror.in_scope("/admin/policies/geo/ab")
    assert mirror.in_scope("/admin/policies/shop/orders")
    assert not mirror.in_scope("/admin/policies/geo-private/ns")
    assert not mirror.in_scope("/admin/policies/public/default")
    assert not mirror.in_scope("/admin/policies/other/ns")
    assert not mirror.in_scope("/admin/clusters/a")
