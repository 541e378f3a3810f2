"""An in-memory ZooKeeper for the policy mirror's unit tests: what it uses of ``zk.Store``; and a mirror
leading on one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from geosync_adapters import zookeeper as zk
from geosync_agent.core.mirroring import Term
from geosync_core.policies import Record


class Crash(Exception):
    """The fake store's stand-in for the process dying at a chosen write."""


class FakeStore:
    """What ``StateNodes`` uses of ``zk.Store``, in memory: versions, compare-and-set, a fence, and a crash
    injected before the n-th write. A fake is enough for the shapes; the real ZooKeeper tests are in
    integration_tests/test_policy_mirror.py and test_mirror_deletions.py. ``after_write`` runs after each
    successful write (a change made by someone else in between)."""

    def __init__(self, *, max_node_bytes: int = 1024 * 1024) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {"/fence": (b"", 0)}
        self.max_node_bytes = max_node_bytes
        self.crash_at: int | None = None
        self.writes = 0
        self.log: list[tuple[str, bytes | None]] = []
        self.after_write: Callable[[str, bytes | None], None] | None = None

    def read(self, path: str, *, watch: bool = False) -> zk.Node | None:
        held = self.nodes.get(path)
        return None if held is None else zk.Node(held[0], held[1], 0)

    def children(self, path: str, *, watch: bool = False) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            {p[len(prefix) :] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix) :]}
        )

    def ensure_path(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.nodes.setdefault("/" + "/".join(parts[:i]), (b"", 0))

    def write(
        self,
        path: str,
        value: bytes | None,
        *,
        expected: zk.Node | None,
        fence: tuple[str, int] | None = None,
        public: bool = False,
    ) -> None:
        self.writes += 1
        if self.crash_at is not None and self.writes >= self.crash_at:
            raise Crash(path)
        if fence is not None and self.nodes.get(fence[0], (b"", -1))[1] != fence[1]:
            raise zk.ZkFenced("fence gone", path=path)
        held = self.nodes.get(path)
        if (held is None) != (expected is None) or (
            held is not None and expected and held[1] != expected.version
        ):
            raise zk.ZkStale("stale", path=path)
        if value is None:
            if self.children(path):
                raise zk.ZkNotEmpty(f"{path} has children", path=path)
            del self.nodes[path]
        else:
            assert len(value) <= self.max_node_bytes, f"{path}: {len(value)} bytes is over jute.maxbuffer"
            assert path.rsplit("/", 1)[0] in self.nodes, f"{path}: no parent"
            self.nodes[path] = (value, 0 if held is None else held[1] + 1)
        self.log.append((path, value))
        if self.after_write is not None:
            self.after_write(path, value)

    def add(self, path: str, value: bytes = b"") -> None:
        """A node someone else made (a broker), with its parents."""
        self.ensure_path(path.rsplit("/", 1)[0])
        self.nodes[path] = (value, 0)


def leading(
    mirror: Any,
    store: FakeStore,
    producer: Any,
    *,
    registered: dict[str, frozenset[str]] | None = None,
    replica: dict[str, Record] | None = None,
) -> None:
    """``mirror`` (a ``geosync_agent.mirroring.Mirror``) in a leadership term on ``store``, caught up: its
    term leads with ``replica`` and ``registered``, publishing through ``producer``; events go in with
    ``feed``."""
    store.ensure_path(mirror.config.mirror_root)
    mirror.lead_on(store, fence=None, producer=producer)
    mirror.term = Term(
        mirror.settings,
        phase="leading",
        registered=registered or {},
        counters=mirror.counters,
        next_recheck_ms=mirror.wall_ms() + mirror.settings.recheck_ms,
    )
    mirror.term.cp.replica = dict(replica or {})
