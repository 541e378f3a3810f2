"""The policy mirror's events and effects: what a leadership term (``geosync_agent.core.mirroring``) is fed
and what it asks the shell to do, as values. See ``core.mirroring`` for the protocol.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from geosync_core import allowedclusters, deletions, envelopes, policies
from geosync_core.policies import Record

POLICIES_ROOT = "/admin/policies"


@dataclass(frozen=True)
class Node:
    """A store node as read: its bytes, its version (for compare-and-set) and its mtime."""

    value: bytes
    version: int
    mtime_ms: int = 0


@dataclass(frozen=True)
class Scope:
    """The tenants mirrored: those matching ``tenants`` and not ``exclude`` (fnmatch patterns)."""

    tenants: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ("public", "pulsar")

    def tenant(self, tenant: str) -> bool:
        return any(fnmatch.fnmatchcase(tenant, p) for p in self.tenants) and not any(
            fnmatch.fnmatchcase(tenant, p) for p in self.exclude
        )

    def __call__(self, path: str) -> bool:
        """Whether ``path`` is a mirrored tenant or namespace path of a tenant in scope."""
        if not policies.classify(path).mirrored:
            return False
        return self.tenant(path[len(POLICIES_ROOT) + 1 :].split("/", 1)[0])


@dataclass(frozen=True)
class Settings:
    region: str
    scope: Scope = Scope()
    recheck_ms: int = 10_000
    tombstone_ttl_ms: int = 7 * 24 * 3600 * 1000


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """An envelope read from the event topic (opened by the shell with the keyring), at ``position``."""

    opened: envelopes.Envelope | envelopes.Rejected
    position: bytes


@dataclass(frozen=True)
class CaughtUp:
    """The drain asked for has fed every envelope the topic held (as ``Received``)."""


@dataclass(frozen=True)
class Fired:
    """A watch fired on ``path``: its data, or (``children``) its list of children."""

    path: str
    children: bool = False


@dataclass(frozen=True)
class Reconnected:
    """The ZooKeeper session is back after a suspension: watches may have been missed."""


@dataclass(frozen=True)
class Tick:
    """The shell's timer: the term does what is due at ``now_ms``."""


@dataclass(frozen=True)
class NodeRead:
    path: str
    node: Node | None


@dataclass(frozen=True)
class ChildrenListed:
    path: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Wrote:
    path: str


class Failure(enum.Enum):
    STALE = "stale"  # the node is not the one expected any more
    NO_PARENT = "no-parent"
    NOT_EMPTY = "not-empty"  # a deletion of a node with children
    FENCED = "fenced"  # the leadership lock node is gone: no longer the leader
    OTHER = "other"


@dataclass(frozen=True)
class WriteFailed:
    path: str
    failure: Failure
    detail: str = ""


@dataclass(frozen=True)
class ContentsListed:
    """What the region holds under ``path``, or (``contents`` ``None``) why that cannot be said now."""

    path: str
    contents: deletions.Contents | None
    reason: str = ""


@dataclass(frozen=True)
class Walked:
    """Every in-scope node the store holds, with watches armed on them and their parents."""

    found: Mapping[str, Node]


@dataclass(frozen=True)
class ClustersRead:
    registered: allowedclusters.Registered


Answer = NodeRead | ChildrenListed | Wrote | WriteFailed | ContentsListed | Walked | ClustersRead
Event = Received | CaughtUp | Fired | Reconnected | Tick | Answer


# -- effects --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenReader:
    """Read the event topic from ``position`` (``None``: from the beginning)."""

    position: bytes | None


@dataclass(frozen=True)
class ReadClusters:
    """Read the clusters registered here; answer ``ClustersRead``."""


@dataclass(frozen=True)
class Drain:
    """Feed every envelope the topic holds now as ``Received``, then ``CaughtUp`` (events, not answers: the
    term takes each as it comes)."""


@dataclass(frozen=True)
class Walk:
    """Walk the store's in-scope nodes (``scope``), arming watches; answer ``Walked``."""

    scope: Scope


@dataclass(frozen=True)
class ReadNode:
    """Read ``path`` (arming its watch); answer ``NodeRead``."""

    path: str


@dataclass(frozen=True)
class ListChildren:
    """List ``path``'s children (arming the watch); answer ``ChildrenListed``."""

    path: str


@dataclass(frozen=True)
class WriteNode:
    """Make ``path`` hold ``value`` (``None``: no node) if it is still ``expected``, fenced by the
    leadership; answer ``Wrote`` or ``WriteFailed``."""

    path: str
    value: bytes | None
    expected: Node | None


@dataclass(frozen=True)
class ListContents:
    """Ask what the region holds under the tenant or namespace ``path``; answer ``ContentsListed``."""

    path: str


@dataclass(frozen=True)
class Publish:
    """Seal ``record`` as a policy event and publish it, or end the term."""

    record: Record
    seq: int
    sent_at_ms: int


@dataclass(frozen=True)
class SaveCheckpoint:
    """Write the checkpoint's bytes (compare-and-set, fenced), or end the term."""

    data: bytes


@dataclass(frozen=True)
class Lead:
    """The term is caught up: it leads, and reads the topic from now on."""


@dataclass(frozen=True)
class StepDown:
    """End the term: no longer the leader, or the store failed under it."""

    reason: str


@dataclass(frozen=True)
class Note:
    """Something for the log: ``level`` is ``"info"`` or ``"warning"``."""

    level: str
    text: str


Effect = (
    OpenReader
    | ReadClusters
    | Drain
    | Walk
    | ReadNode
    | ListChildren
    | WriteNode
    | ListContents
    | Publish
    | SaveCheckpoint
    | Lead
    | StepDown
    | Note
)
