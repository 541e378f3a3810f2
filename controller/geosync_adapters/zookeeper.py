"""One region's ZooKeeper configuration store through kazoo: reads, one-shot watches, compare-and-set writes.

Why an adapter: the policy mirror writes straight into a region's ZooKeeper, where nothing validates or
serialises its writes but the node version. Every write here is therefore compare-and-set: create only
if absent, set or delete only at the version that was read, optionally fenced by a second node (the
mirror's leadership lock) in the same multi-op transaction. kazoo reports a failed transaction by putting
error *objects* into the result list rather than raising (a stale version does not raise), so every
result is checked. kazoo's errors become the project's: ``ZkStale`` (re-read and decide again),
``ZkUnavailable`` (connection or session trouble: retry later), ``ZkRefused`` (permanent).

Authentication (``ZkAuth``; docs/deployment/security.md, "ZooKeeper authentication"): with digest credentials
the session authenticates, and every node the store creates gets an ACL giving that identity all rights and
nobody else any (or read, ``world_read``): GeoSync's own nodes (the mirror's lock and checkpoint) cannot be
written or deleted by another client. Nodes Pulsar also manages (policies) are created ``public``, world-open,
as Pulsar creates them itself without ZooKeeper authentication. The password never reaches a log: kazoo logs
its authentication request at DEBUG, and this module's logger redacts it.

Watches are ZooKeeper's one-shot data and child watches, re-armed by the next read of the node. Their
callbacks run on kazoo's event thread, so they only hand a ``Fired`` value to ``notify`` (which must not
block; the mirror passes a queue's ``put``). Watches do not survive a session expiry: a caller that sees
``LOST`` then ``CONNECTED`` (``on_state``) must read everything again, which re-arms them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.recipe.lock import Lock
from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from geosync_core.errors import PermanentError, TemporaryError

log = logging.getLogger("geosync.zookeeper")

DIGEST = "digest"
SCHEMES = (DIGEST,)


@dataclass(frozen=True)
class ZkAuth:
    """Digest credentials of the agent's ZooKeeper identity (``user``), and who else may read its nodes."""

    user: str
    password: str = field(repr=False)
    world_read: bool = False

    def acl(self) -> list[ACL]:
        """The ACL of the nodes this identity creates: all rights for it, none (or read) for anyone else."""
        own = make_digest_acl(self.user, self.password, all=True)
        return [own, make_acl("world", "anyone", read=True)] if self.world_read else [own]

    def credential(self) -> str:
        return f"{self.user}:{self.password}"


class _Redact(logging.Filter):
    """Replaces the credentials of every authenticated store in this module's records (kazoo logs its
    requests, the authentication one included, at DEBUG through the logger it is given)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            hidden = message
            for secret in self.secrets:
                hidden = hidden.replace(secret, "<redacted>")
            if hidden != message:
                record.msg, record.args = hidden, ()
        return True


_REDACT = _Redact()
log.addFilter(_REDACT)


class ZkError(Exception):
    """A ZooKeeper operation failed; ``path`` names the node."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class ZkUnavailable(ZkError, TemporaryError):
    """Not connected, session expired or lost, or the server did not answer in time."""


class ZkStale(ZkError, TemporaryError):
    """The node is not what the caller read: other version, created or deleted meanwhile. Re-read."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message, path=path)
        self.delay = 0.0


class ZkNoParent(ZkError, TemporaryError):
    """A create failed because the parent node does not exist (yet)."""


class ZkNotEmpty(ZkError, TemporaryError):
    """A delete failed because the node still has children."""


class ZkFenced(ZkError, TemporaryError):
    """The fencing node (e.g. the caller's leadership lock) is gone or changed: stop writing."""


class ZkRefused(ZkError, PermanentError):
    """Authentication, ACL or argument errors: retrying will not help."""


@dataclass(frozen=True)
class Node:
    """A node's bytes and the parts of its ``Stat`` that callers use."""

    value: bytes
    version: int
    mtime_ms: int
    children: int = 0


@dataclass(frozen=True)
class Fired:
    """A watch fired: ``kind`` is ``"data"`` or ``"children"``; ``event`` is ZooKeeper's event type name."""

    path: str
    kind: str
    event: str


_UNAVAILABLE = (
    kx.ConnectionClosedError,
    kx.SessionExpiredError,
    kx.SessionMovedError,
    kx.OperationTimeoutError,
    kx.RequestTimeoutError,
    kx.ZookeeperStoppedError,
    kx.ConnectionLoss,
    kx.ConnectionDropped,
    kx.ThrottledOpError,
    kx.CancelledError,
)


def translate(error: BaseException, *, op: str, path: str) -> ZkError:
    """The project error for a kazoo error (or error object from a transaction result)."""
    name = type(error).__name__
    message = f"zookeeper {op} {path}: {name}"
    if isinstance(error, kx.BadVersionError | kx.NodeExistsError):
        return ZkStale(message, path=path)
    if isinstance(error, kx.NotEmptyError):
        return ZkNotEmpty(message, path=path)
    if isinstance(error, kx.NoNodeError):
        return ZkStale(message, path=path) if op in ("set", "delete") else ZkNoParent(message, path=path)
    if isinstance(error, (*_UNAVAILABLE, TimeoutError)):
        return ZkUnavailable(message, path=path)
    if isinstance(error, kx.ZookeeperError):
        return ZkRefused(f"{message}: {error}", path=path)
    return ZkUnavailable(f"{message}: {error}", path=path)


class _Lock(Lock):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's lock recipe, whose release does not wait for a ZooKeeper that does not answer."""

    def release(self) -> bool:
        if not self.client.connected:
            self.is_acquired = False
            return False
        return bool(super().release())


class Store:
    """One region's ZooKeeper. ``notify`` receives fired watches; ``auth``: authenticate, and create nodes
    with that identity's ACL (module docstring); ``client`` may be injected (tests)."""

    def __init__(
        self,
        hosts: str,
        *,
        session_timeout_s: float = 10.0,
        notify: Callable[[Fired], None] | None = None,
        auth: ZkAuth | None = None,
        client: Any = None,
    ) -> None:
        self.hosts = hosts
        self.notify = notify
        self.auth = auth
        self.op_timeout_s = 2 * session_timeout_s
        """How long one call may wait for ZooKeeper's answer (see ``_wait``)."""
        self._watchers: dict[str, Callable[[WatchedEvent], None]] = {}
        options: dict[str, Any] = {}
        if auth is not None:
            _REDACT.secrets.update((auth.credential(), auth.password))
            options = {"auth_data": [(DIGEST, auth.credential())], "default_acl": auth.acl()}
        # kazoo retries a command (a lock's release, for one) until ZooKeeper answers, by default for ever:
        # a region whose ZooKeeper hangs would hold the caller, and the agent's watchdog would take it for
        # stuck. A command that has not gone through in two session timeouts fails instead.
        retry = {
            "max_tries": -1,
            "delay": 0.1,
            "backoff": 2,
            "max_delay": 2.0,
            "deadline": 2 * session_timeout_s,
        }
        self.client: Any = client or KazooClient(
            hosts=hosts, timeout=session_timeout_s, logger=log, command_retry=retry, **options
        )

    # -- session -----------------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 15.0) -> None:
        try:
            self.client.start(timeout=timeout_s)
        except Exception as e:  # kazoo raises its own timeout type, or socket errors
            raise ZkUnavailable(f"zookeeper {self.hosts}: not connected within {timeout_s} s: {e}") from e

    def stop(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception as e:  # closing a half-broken client must not mask the caller's error
            log.debug("closing zookeeper client: %s", e)

    def on_state(self, listener: Callable[[str], None]) -> None:
        """Call ``listener`` with ``"LOST"``, ``"SUSPENDED"`` or ``"CONNECTED"``, on kazoo's thread."""

        def relay(state: KazooState) -> None:
            listener(str(state))

        self.client.add_listener(relay)

    @property
    def connected(self) -> bool:
        return bool(self.client.connected)

    @property
    def session_id(self) -> int | None:
        sid = self.client.client_id
        return None if sid is None else int(sid[0])

    def _wait(self, pending: Any) -> Any:
        """The outcome of a call kazoo started (its ``*_async`` form) within ``op_timeout_s``: kazoo queues
        a call made while it reconnects, and its synchronous form would hold the caller until ZooKeeper
        answers again, however long that takes (the agent's watchdog would then take the mirror for stuck).
        A call that times out raises (``translate``: unavailable), and is dropped with the client."""
        return pending.get(timeout=self.op_timeout_s)

    # -- reads -------------------------------------------------------------------------------------

    def _watcher(self, kind: str) -> Callable[[WatchedEvent], None] | None:
        # One function per kind, reused: kazoo keeps a path's watchers in a set until the next change fires
        # them, so a new closure per read would add one more watcher (and one more notification, and one
        # more read) every time a path is read again before it changes.
        notify = self.notify
        if notify is None:
            return None
        cached = self._watchers.get(kind)
        if cached is not None:
            return cached

        def fired(event: WatchedEvent) -> None:
            if event.path:
                notify(Fired(event.path, kind, str(event.type)))

        self._watchers[kind] = fired
        return fired

    def read(self, path: str, *, watch: bool = False) -> Node | None:
        """The node, or ``None`` if absent. ``watch``: notify on its next change (or creation)."""
        watcher = self._watcher("data") if watch else None
        try:
            value, stat = self._wait(self.client.get_async(path, watch=watcher))
        except kx.NoNodeError:
            if watcher is not None:
                try:
                    self._wait(self.client.exists_async(path, watch=watcher))  # a creation fires it
                except Exception as e:
                    raise translate(e, op="exists", path=path) from e
            return None
        except Exception as e:
            raise translate(e, op="get", path=path) from e
        return Node(value or b"", stat.version, stat.mtime, stat.numChildren)

    def children(self, path: str, *, watch: bool = False) -> list[str]:
        """The names of ``path``'s children, sorted; ``[]`` if the node is absent."""
        try:
            watcher = self._watcher("children") if watch else None
            return sorted(self._wait(self.client.get_children_async(path, watch=watcher)))
        except kx.NoNodeError:
            return []
        except Exception as e:
            raise translate(e, op="children", path=path) from e

    # -- compare-and-set writes ----------------------------------------------------------------------

    def write(
        self,
        path: str,
        value: bytes | None,
        *,
        expected: Node | None,
        fence: tuple[str, int] | None = None,
        ephemeral: bool = False,
        public: bool = False,
    ) -> None:
        """Make ``path`` hold ``value`` (``None``: no node) if it still is ``expected`` (``None``: absent).

        ``fence`` is ``(path, version)`` of a node that must be unchanged for the write to happen (checked
        in the same transaction). Deleting an absent node that was expected absent does nothing.
        ``public``: a node created is world-open (one Pulsar manages too), not this identity's.
        """
        if value is None and expected is None:
            return
        txn = self.client.transaction()
        if fence is not None:
            txn.check(fence[0], fence[1])
        if expected is None:
            op = "create"
            txn.create(path, value, ephemeral=ephemeral, acl=OPEN_ACL_UNSAFE if public else None)
        elif value is None:
            op = "delete"
            txn.delete(path, version=expected.version)
        else:
            op = "set"
            txn.set_data(path, value, version=expected.version)
        try:
            results = self._wait(txn.commit_async())
        except Exception as e:
            raise translate(e, op=op, path=path) from e
        self._check(results, op=op, path=path, fenced=fence is not None)

    @staticmethod
    def _check(results: list[Any], *, op: str, path: str, fenced: bool) -> None:
        # A failed multi-op returns one error object per operation: the one that failed, and
        # RolledBackError for the others. Nothing raises, so a stale version would pass unnoticed.
        errors = [r for r in results if isinstance(r, BaseException)]
        if not errors:
            return
        if fenced and not isinstance(results[0], kx.RolledBackError):
            raise ZkFenced(f"zookeeper {op} {path}: fence failed ({type(results[0]).__name__})", path=path)
        cause = next((r for r in errors if not isinstance(r, kx.RolledBackError)), errors[0])
        raise translate(cause, op=op, path=path) from cause

    def lock(self, path: str, identifier: str) -> Any:
        """kazoo's ``Lock`` recipe on ``path``: leader election among a region's agents. Its ``release``
        gives up at once while the client is not connected: the lock's node is ephemeral and ends with the
        session, which ``stop`` closes (kazoo would hold the caller until ZooKeeper answers again)."""
        return _Lock(self.client, path, identifier)

    def try_acquire(self, lock: Any, *, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``lock``; False if another holder keeps it."""
        try:
            return bool(lock.acquire(timeout=timeout_s))
        except kx.LockTimeout:
            return False
        except Exception as e:
            raise translate(e, op="lock", path=str(lock.path)) from e

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents if absent (for GeoSync's own nodes, never for policies)."""
        try:
            self._wait(self.client.ensure_path_async(path))
        except Exception as e:
            raise translate(e, op="ensure", path=path) from e

    def secure(self, path: str) -> int:
        """Give ``path`` and every node below it this identity's ACL where it differs (nodes created before
        authentication was configured, or by another tool); how many were changed. Nothing without auth."""
        if self.auth is None:
            return 0
        acl, changed, pending = self.auth.acl(), 0, [path]
        while pending:
            node = pending.pop()
            try:
                current, stat = self._wait(self.client.get_acls_async(node))
                if sorted(current) != sorted(acl):
                    self._wait(self.client.set_acls_async(node, acl, version=stat.aversion))
                    changed += 1
                children = self._wait(self.client.get_children_async(node))
                pending.extend(f"{node.rstrip('/')}/{child}" for child in children)
            except kx.NoNodeError:
                continue  # an ephemeral lock node gone meanwhile
            except Exception as e:
                raise translate(e, op="acl", path=node) from e
        return changed
