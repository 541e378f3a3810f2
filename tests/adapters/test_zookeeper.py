"""The ZooKeeper adapter against a small in-memory stand-in for kazoo's client (no server, fast).

The real adapter is proven against each lab region's ZooKeeper in ``integration_tests``; these tests pin
what a healthy ZooKeeper rarely shows: a failed transaction reports error *objects* (a stale version does
not raise) and must still become ``ZkStale``; a failed fence is told apart; kazoo errors are translated
and chained; watch callbacks only hand a value over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo import exceptions as kx
from kazoo.protocol.states import KeeperState
from kazoo.retry import RetryFailedError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from geosync_adapters import zookeeper as zk
from geosync_core.errors import PermanentError, TemporaryError


@dataclass
class _Stat:
    version: int
    mtime: int
    numChildren: int = 0


class _Done:
    """A kazoo async result that is already in: the call's value, or the error it raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        try:
            self.value = call()
        except BaseException as e:
            self.error = e

    def get(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Txn:
    def __init__(self, fake: _FakeKazoo) -> None:
        self.fake = fake
        self.ops: list[tuple[Any, ...]] = []

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, version))

    def create(self, path: str, value: bytes, ephemeral: bool = False, acl: Any = None) -> None:
        self.ops.append(("create", path, value))
        self.fake.created_acls[path] = acl

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set", path, value, version))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", path, version))

    def commit(self) -> list[Any]:
        nodes = self.fake.nodes
        results: list[Any] = []
        failed = False
        for op in self.ops:
            kind, path = op[0], op[1]
            held = nodes.get(path)
            error: BaseException | None = None
            if kind == "check" and (held is None or held[1] != op[2]):
                error = kx.NoNodeError() if held is None else kx.BadVersionError()
            elif kind == "create" and held is not None:
                error = kx.NodeExistsError()
            elif (kind == "create" and path.rsplit("/", 1)[0] not in nodes) or (
                kind in ("set", "delete") and held is None
            ):
                error = kx.NoNodeError()
            elif (kind == "set" and held is not None and held[1] != op[3]) or (
                kind == "delete" and held is not None and held[1] != op[2]
            ):
                error = kx.BadVersionError()
            elif kind == "delete" and any(p.startswith(path + "/") for p in nodes):
                error = kx.NotEmptyError()
            results.append(error or True)
            failed = failed or error is not None
        if failed:  # like ZooKeeper: the failed op's error, RolledBackError for the others
            return [r if isinstance(r, BaseException) else kx.RolledBackError() for r in results]
        for op in self.ops:
            kind, path = op[0], op[1]
            if kind == "create":
                nodes[path] = (op[2], 0)
            elif kind == "set":
                nodes[path] = (op[2], nodes[path][1] + 1)
            elif kind == "delete":
                del nodes[path]
        return results

    def commit_async(self) -> _Done:
        return _Done(self.commit)


class _FakeKazoo:
    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {"/": (b"", 0), "/admin": (b"", 0)}
        self.watchers: dict[str, Callable[[Any], None]] = {}
        self.raise_on_get: BaseException | None = None
        self.connected = True
        self.client_id = (42, b"")
        self.created_acls: dict[str, Any] = {}

    def transaction(self) -> _Txn:
        return _Txn(self)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, _Stat]:
        if self.raise_on_get is not None:
            raise self.raise_on_get
        if watch:
            self.watchers[path] = watch
        if path not in self.nodes:
            raise kx.NoNodeError()
        value, version = self.nodes[path]
        children = sum(1 for p in self.nodes if p.rsplit("/", 1)[0] == path and p != path)
        return value, _Stat(version, 1000 + version, children)

    def exists(self, path: str, watch: Any = None) -> _Stat | None:
        if watch:
            self.watchers[path] = watch
        return None

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        if path not in self.nodes:
            raise kx.NoNodeError()
        return [p.rsplit("/", 1)[1] for p in self.nodes if p != path and p.rsplit("/", 1)[0] == path]

    def get_async(self, path: str, watch: Any = None) -> _Done:
        return _Done(lambda: self.get(path, watch))

    def exists_async(self, path: str, watch: Any = None) -> _Done:
        return _Done(lambda: self.exists(path, watch))

    def get_children_async(self, path: str, watch: Any = None) -> _Done:
        return _Done(lambda: self.get_children(path, watch))


@dataclass
class _Event:
    path: str
    type: str = "CHANGED"


@pytest.fixture
def fake() -> _FakeKazoo:
    return _FakeKazoo()


def test_create_set_delete_are_compare_and_set(fake: _FakeKazoo) -> None:
    store = zk.Store("fake", client=fake)
    store.write("/admin/x", b"1", expected=None)
    node = store.read("/admin/x")
    assert node == zk.Node(b"1", 0, 1000, 0)
    store.write("/admin/x", b"2", expected=node)
    assert store.read("/admin/x") == zk.Node(b"2", 1, 1001, 0)
    store.write("/admin/x", None, expected=store.read("/admin/x"))
    assert store.read("/admin/x") is None
    store.write("/admin/x", None, expected=None)  # deleting what is absent: nothing to do


def test_a_stale_version_reported_as_an_error_object_becomes_zkstale(fake: _FakeKazoo) -> None:
    store = zk.Store("fake", client=fake)
    store.write("/admin/x", b"1", expected=None)
    old = store.read("/admin/x")
    store.write("/admin/x", b"2", expected=old)
    with pytest.raises(zk.ZkStale) as caught:
        store.write("/admin/x", b"3", expected=old)
    assert isinstance(caught.value.__cause__, kx.BadVersionError)
    assert isinstance(caught.value, TemporaryError)
    assert fake.nodes["/admin/x"] == (b"2", 1)
    with pytest.raises(zk.ZkStale):
        store.write("/admin/x", b"3", expected=None)  # created meanwhile
    with pytest.raises(zk.ZkStale):
        store.write("/admin/y", None, expected=old)  # deleted meanwhile


def test_missing_parent_and_children_left_are_their_own_errors(fake: _FakeKazoo) -> None:
    store = zk.Store("fake", client=fake)
    with pytest.raises(zk.ZkNoParent):
        store.write("/admin/t/ns", b"{}", expected=None)
    store.write("/admin/t", b"{}", expected=None)
    store.write("/admin/t/ns", b"{}", expected=None)
    with pytest.raises(zk.ZkNotEmpty):
        store.write("/admin/t", None, expected=store.read("/admin/t"))


def test_a_failed_fence_is_told_apart_and_writes_nothing(fake: _FakeKazoo) -> None:
    store = zk.Store("fake", client=fake)
    store.write("/admin/lock", b"", expected=None)
    store.write("/admin/x", b"1", expected=None, fence=("/admin/lock", 0))
    with pytest.raises(zk.ZkFenced):
        store.write("/admin/x", b"2", expected=store.read("/admin/x"), fence=("/admin/gone", 0))
    assert fake.nodes["/admin/x"] == (b"1", 0)


@pytest.mark.parametrize(
    ("error", "expected", "kind"),
    [
        (kx.ConnectionLoss(), zk.ZkUnavailable, TemporaryError),
        (kx.SessionExpiredError(), zk.ZkUnavailable, TemporaryError),
        (kx.NoAuthError(), zk.ZkRefused, PermanentError),
    ],
)
def test_kazoo_errors_are_translated_and_chained(
    fake: _FakeKazoo, error: BaseException, expected: type, kind: type
) -> None:
    fake.raise_on_get = error
    with pytest.raises(expected) as caught:
        zk.Store("fake", client=fake).read("/admin/x")
    assert isinstance(caught.value, kind)
    assert caught.value.__cause__ is error


def test_reads_of_absent_nodes_are_values(fake: _FakeKazoo) -> None:
    store = zk.Store("fake", client=fake)
    assert store.read("/nope") is None
    assert store.children("/nope") == []


def test_watches_only_hand_a_value_to_notify(fake: _FakeKazoo) -> None:
    got: list[zk.Fired] = []
    store = zk.Store("fake", client=fake, notify=got.append)
    store.write("/admin/x", b"1", expected=None)
    store.read("/admin/x", watch=True)
    store.read("/admin/absent", watch=True)  # armed through exists(): a creation fires it
    fake.watchers["/admin/x"](_Event("/admin/x", "CHANGED"))
    fake.watchers["/admin/absent"](_Event("/admin/absent", "CREATED"))
    assert got == [zk.Fired("/admin/x", "data", "CHANGED"), zk.Fired("/admin/absent", "data", "CREATED")]


def test_public_nodes_are_created_world_open_others_with_the_stores_acl(fake: _FakeKazoo) -> None:
    """Policy nodes (``public``) stay manageable by the brokers; the rest take the client's default ACL
    (the agent's identity's, when authenticated: ``ZkAuth.acl``)."""
    store = zk.Store("fake", client=fake)
    store.write("/admin/policy", b"{}", expected=None, public=True)
    store.write("/admin/own", b"x", expected=None)
    assert fake.created_acls == {"/admin/policy": list(OPEN_ACL_UNSAFE), "/admin/own": None}


def test_digest_credentials_give_the_identity_every_right_and_others_none_or_read() -> None:
    auth = zk.ZkAuth("agent", "pw-never-shown")
    (own,) = auth.acl()
    assert (own.perms, own.id.scheme) == (Permissions.ALL, "digest")
    assert own.id.id.startswith("agent:")
    assert "pw-never-shown" not in own.id.id
    readable = zk.ZkAuth("agent", "pw-never-shown", world_read=True).acl()
    assert [(a.perms, a.id.scheme) for a in readable] == [
        (Permissions.ALL, "digest"),
        (Permissions.READ, "world"),
    ]
    assert "pw-never-shown" not in repr(auth)
    client = zk.Store("127.0.0.1:1", auth=auth).client
    assert client.default_acl == [own]
    assert (zk.DIGEST, "agent:pw-never-shown") in client.auth_data


def test_credentials_are_redacted_from_the_adapters_log(caplog: pytest.LogCaptureFixture) -> None:
    zk.Store("127.0.0.1:1", auth=zk.ZkAuth("agent", "pw-redact-me"))
    caplog.set_level(logging.DEBUG, logger="geosync.zookeeper")
    logging.getLogger("geosync.zookeeper").debug(
        "Sending request(xid=%s): %s", -4, "Auth(auth='agent:pw-redact-me')"
    )
    assert "pw-redact-me" not in caplog.text
    assert "<redacted>" in caplog.text


def test_a_command_retried_while_zookeeper_does_not_answer_gives_up_within_two_session_timeouts() -> None:
    """kazoo's own default retries a command (a lock's release) for ever while the connection is lost: a
    region whose ZooKeeper hung then held the policy mirror until the agent's watchdog ended it (issue 47)."""
    store = zk.Store("127.0.0.1:1", session_timeout_s=0.5)
    tries: list[float] = []
    outcome: list[BaseException] = []

    def lost() -> None:
        tries.append(time.monotonic())
        raise kx.ConnectionLoss()

    def release() -> None:
        try:
            store.client.retry(lost)
        except BaseException as e:
            outcome.append(e)

    started = time.monotonic()
    caller = threading.Thread(target=release, daemon=True)  # a daemon: left behind if it never returns
    caller.start()
    caller.join(5.0)
    assert not caller.is_alive(), "the retry never gave up"
    assert time.monotonic() - started < 3.0
    assert [type(e) for e in outcome] == [RetryFailedError]
    assert len(tries) > 1  # retried meanwhile


def test_a_call_zookeeper_does_not_answer_fails_within_two_session_timeouts() -> None:
    """kazoo queues a call made while it (re)connects and, in its synchronous form, holds the caller until
    ZooKeeper answers, however long: a frozen ZooKeeper held the policy mirror until its watchdog ended the
    agent (issue 47). Here nothing listens, and the client is put in the state of one whose connection
    dropped (reconnecting: kazoo's own attribute), in which kazoo queues every call."""
    store = zk.Store("127.0.0.1:1", session_timeout_s=0.25)
    store.client.start_async()
    store.client._state = KeeperState.CONNECTING
    outcomes: list[BaseException] = []

    def calls() -> None:
        for call in (
            lambda: store.read("/admin/policies/t"),
            lambda: store.children("/admin/policies"),
            lambda: store.write("/admin/policies/t", b"{}", expected=None),
        ):
            try:
                call()
            except BaseException as e:
                outcomes.append(e)

    try:
        started = time.monotonic()
        caller = threading.Thread(target=calls, daemon=True)  # a daemon: left behind if a call never returns
        caller.start()
        caller.join(10.0)
        assert not caller.is_alive(), "a call waited for ZooKeeper's answer for good"
        assert time.monotonic() - started < 5.0
        assert [type(e) for e in outcomes] == [zk.ZkUnavailable] * 3
        lock = store.lock("/geosync/leader", "a-1")
        lock.is_acquired = True  # as if acquired before the connection went
        assert lock.release() is False  # at once, not when ZooKeeper answers again
        assert not lock.is_acquired
    finally:
        store.stop()
