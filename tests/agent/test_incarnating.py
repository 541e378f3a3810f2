"""The region incarnation's ZooKeeper node (``geosync_agent.incarnating``) over a fake store; the lab test
``integration_tests/test_region_rebuilt.py`` reads and creates it on a real region's ZooKeeper."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import tenacity

from geosync_adapters import zookeeper as zk
from geosync_agent import incarnating
from geosync_core.incarnations import Incarnation

PATH = "/geosync/incarnation"


@dataclass
class FakeStore:
    nodes: dict[str, bytes] = field(default_factory=dict)
    race: bytes | None = None
    """Written by "another agent" between this one's read and its create."""

    def read(self, path: str) -> zk.Node | None:
        value = self.nodes.get(path)
        return None if value is None else zk.Node(value, 0, 0, 0)

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, b"")

    def write(self, path: str, value: bytes, *, expected: zk.Node | None) -> None:
        if self.race is not None:
            self.nodes[path], self.race = self.race, None
        if expected is None and path in self.nodes:
            raise zk.ZkStale(f"zookeeper create {path}: NodeExistsError", path=path)
        self.nodes[path] = value


def test_the_first_agent_creates_the_incarnation_and_later_ones_read_it() -> None:
    store = FakeStore()
    first, created = incarnating.read_or_create(store, PATH, now_ms=1234)  # type: ignore[arg-type]
    assert created
    assert first.created_ms == 1234
    again, created = incarnating.read_or_create(store, PATH, now_ms=9999)  # type: ignore[arg-type]
    assert (again, created) == (first, False)
    assert incarnating.decode(store.nodes[PATH]) == first


def test_an_agent_that_loses_the_race_to_create_it_takes_the_winners() -> None:
    winner = Incarnation(1000, "winner")
    store = FakeStore(race=incarnating.encode(winner))
    assert incarnating.read_or_create(store, PATH, now_ms=2000) == (winner, False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value", [b"", b"{}", b"\xff", b'{"version": 2, "created_ms": 1, "id": "a"}', b"[1]"]
)
def test_a_node_holding_something_else_is_not_overwritten(value: bytes) -> None:
    store = FakeStore({PATH: value})
    with pytest.raises(incarnating.IncarnationError, match="delete the node"):
        incarnating.read_or_create(store, PATH, now_ms=1)  # type: ignore[arg-type]
    assert store.nodes[PATH] == value


def test_a_zookeeper_that_stays_unreachable_stops_the_agent_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_wait = tenacity.wait_none()
    monkeypatch.setattr(tenacity, "wait_exponential", lambda **_: no_wait)
    with pytest.raises(incarnating.IncarnationError, match="metadata store"):
        incarnating.load("127.0.0.1:1", PATH, auth=None, now_ms=1, timeout_s=0.2)
