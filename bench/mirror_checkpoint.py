"""Policy mirror checkpoint size and write/read time for a large mirror, before and after tombstones go.

Builds a checkpoint of ``--records`` policy records (namespace policies shaped like Pulsar's, a share of
them tombstones), measures its compressed size, then writes and reads it through ``mirrorstate.StateNodes``
on a lab region's real ZooKeeper (parts under a throwaway root, deleted afterwards); then collects the
tombstones as a mirror would once every peer is past them and older than the TTL, and measures again.

    python bench/mirror_checkpoint.py --lab /tmp/lab1 [--records 20000] [--tombstones 0.3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import time
import uuid
from collections.abc import Callable

from geosync_adapters import zookeeper as zk
from geosync_agent.core.mirror import Checkpoint, decode_checkpoint, encode_checkpoint
from geosync_agent.mirrorstate import DEFAULT_PART_BYTES, StateNodes, decode_pointer
from geosync_core import policies
from geosync_core.clocks import Hlc
from geosync_lab import labs

T0 = 1_700_000_000_000
REGIONS = ("a", "b", "c")


def _policies(rng: random.Random, i: int) -> bytes:
    """A namespace's ``Policies`` document, about the size and shape Pulsar writes."""
    bundles = sorted(rng.getrandbits(32) for _ in range(3))
    doc = {
        "auth_policies": {"namespace_auth": {f"role-{i % 50}": ["produce", "consume"]}},
        "replication_clusters": sorted(rng.sample(REGIONS, 2)),
        "allowed_clusters": list(REGIONS),
        "bundles": {
            "boundaries": ["0x00000000", *[f"0x{b:08x}" for b in bundles], "0xffffffff"],
            "numBundles": 4,
        },
        "backlog_quota_map": {},
        "clusterDispatchRate": {},
        "message_ttl_in_seconds": rng.choice([None, 3600, 86400]),
        "retention_policies": {"retentionTimeInMinutes": rng.randrange(10_000), "retentionSizeInMB": -1},
        "deleted": False,
        "encryption_required": False,
        "schema_auto_update_compatibility_strategy": "Full",
        "is_allow_auto_update_schema": True,
        "properties": {"team": f"team-{i % 300}", "cost-center": str(rng.randrange(10**6))},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def build(records: int, tombstone_share: float, seed: int = 17) -> Checkpoint:
    rng = random.Random(seed)
    replica = {}
    for i in range(records):
        path = f"/admin/policies/tenant-{i % 400}/ns-{i}"
        value = None if rng.random() < tombstone_share else _policies(rng, i)
        replica[path] = policies.Record(path, value, Hlc(T0 + i * 10, rng.randrange(3), rng.choice(REGIONS)))
    seen = {r: Hlc(T0 + records * 10 + 1, 0, r) for r in REGIONS}
    return Checkpoint(replica=replica, clock=Hlc(T0 + records * 10, 0, "a"), seq=records, seen=seen)


def _median_ms(action: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(nodes: StateNodes, state: list[zk.Node | None], cp: Checkpoint, rounds: int) -> dict[str, object]:
    """``state``: the ``state`` node as last written (one item, updated)."""
    data = encode_checkpoint(cp)

    def write() -> None:
        state[0] = nodes.write(data, expected=state[0])

    def read() -> None:
        _, back = nodes.read()
        assert back == data
        assert decode_checkpoint(back) == cp

    write_ms = _median_ms(write, rounds)
    read_ms = _median_ms(read, rounds)
    node = state[0]
    pointer = None if node is None else decode_pointer(node.value)
    return {
        "records": len(cp.replica),
        "tombstones": sum(1 for r in cp.replica.values() if r.value is None),
        "compressed_bytes": len(data),
        "nodes": 1 if pointer is None else 1 + pointer.parts,
        "encode_ms": round(_median_ms(lambda: encode_checkpoint(cp), rounds), 1),
        "decode_ms": round(_median_ms(lambda: decode_checkpoint(data), rounds), 1),
        "write_ms": round(write_ms, 1),  # the encoded bytes into ZooKeeper (parts, pointer, sweep)
        "read_ms": round(read_ms, 1),  # the parts' bytes, checked and decoded
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", default="lab", help="lab directory (its topology.json)")
    parser.add_argument("--region", default="a")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--tombstones", type=float, default=0.3, help="share of records that are tombstones")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    topology = labs.load(pathlib.Path(args.lab))
    store = zk.Store(topology.region(args.region).zookeeper)
    store.start()
    root = f"/geosync/bench-checkpoint-{uuid.uuid4().hex[:8]}"
    try:
        store.ensure_path(root)
        before = build(args.records, args.tombstones)
        kept, gone = policies.collect_tombstones(
            before.replica,
            seen=before.seen,
            peers=("b", "c"),
            now_ms=T0 + args.records * 10 + 8 * 86_400_000,
            ttl_ms=7 * 86_400_000,
        )
        after = Checkpoint(replica=kept, clock=before.clock, seq=before.seq, seen=before.seen)
        nodes = StateNodes(store, root)
        state: list[zk.Node | None] = [None]
        rows = {
            "before": measure(nodes, state, before, args.rounds),
            "after": measure(nodes, state, after, args.rounds),
        }
        print(json.dumps({"part_budget_bytes": DEFAULT_PART_BYTES, "collected": len(gone), **rows}, indent=2))
    finally:
        store.client.delete(root, recursive=True)
        store.stop()


if __name__ == "__main__":
    main()
