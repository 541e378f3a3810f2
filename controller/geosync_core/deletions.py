"""Which mirrored changes would destroy a region's data, and when the region may apply them anyway.

Pulsar's broker refuses to delete a namespace that still holds topics (409 "Cannot delete non empty
namespace") and a tenant that still holds namespaces; it marks a namespace ``deleted`` first, checks, and only
then deletes, so that a topic created meanwhile is refused rather than lost. The policy mirror writes a peer's
change straight into the local store, where none of those checks run. So before it applies a change that
destroys, it asks what the region holds that the change would destroy, and holds the change while anything is
there (invariant 8 of the design). These are the rules; ``geosync_agent.mirrorholds`` reads the store and
carries them out.

A change **destroys** when applying it makes the region's brokers delete or refuse topics: deleting a tenant
or a namespace document that exists here, or writing a namespace document marked ``deleted`` over one that is
not. Ordinary edits (TTL, retention, quotas) do not; a namespace policy that leaves the region out is refused
before this by ``allowedclusters.reject_event_regions``.

What a namespace **holds** is every topic in it (persistent managed ledgers, partitioned-topic metadata of
both domains) except Pulsar's system topics and GeoSync's own control and policy-event topics. A tenant holds
its namespaces. Topics are counted whatever their backlog, as the broker counts them.

Invariants (each is a test in ``tests/core/test_deletions.py``):

1. Only deletions of existing tenant or namespace documents, and namespace documents newly marked
   ``deleted``, destroy; every other record, and any record for a path the store does not hold, does not.
2. A destroying change whose path holds anything is held, with a reason naming what it holds; one whose path
   holds nothing proceeds, and a namespace is marked before it is deleted (mark, check, then delete).
3. A topic found after the mark undoes the mark and holds the change: nothing the region held is destroyed.
4. System topics and GeoSync's own topics never hold a deletion; any other name does, whatever it looks like.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from geosync_core.policies import PathClass, Record, classify

DELETED_FIELD = "deleted"

# Local names Pulsar keeps for itself (SystemTopicNames): the namespace event topic and transaction state.
_SYSTEM_NAMES = frozenset(
    {
        "__change_events",
        "__transaction_buffer_snapshot",
        "__transaction_buffer_snapshot_segments",
        "__transaction_buffer_snapshot_indexes",
    }
)
_SYSTEM_SUFFIXES = ("__transaction_pending_ack",)
_PARTITION = re.compile(r"-partition-\d+$")
_HEX = re.compile(r"[0-9A-Fa-f]{2}")


def is_marked_deleted(doc: bytes | None) -> bool:
    """Whether a namespace document carries Pulsar's ``"deleted": true`` mark (unreadable ones do not)."""
    if doc is None:
        return False
    try:
        parsed = json.loads(doc)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get(DELETED_FIELD) is True


def mark_deleted(doc: bytes) -> bytes:
    """The namespace document with Pulsar's deletion mark set, every other field untouched.

    Raises ``ValueError`` for a document that is not a JSON object (Pulsar could not read it either)."""
    parsed = json.loads(doc)
    if not isinstance(parsed, dict):
        raise ValueError("a namespace document must be a JSON object")
    parsed[DELETED_FIELD] = True
    return json.dumps(parsed, separators=(",", ":")).encode()


def destroys(event: Record, current: bytes | None) -> bool:
    """Whether writing ``event`` over a store holding ``current`` at its path would destroy data here."""
    kind = classify(event.path)
    if current is None or kind not in (PathClass.TENANT, PathClass.NAMESPACE):
        return False
    if event.value is None:
        return True
    return kind is PathClass.NAMESPACE and is_marked_deleted(event.value) and not is_marked_deleted(current)


def local_name(stored: str) -> str:
    """A topic's local name as a store child names it (URL-encoded as Java's ``URLEncoder`` does, which
    Pulsar's ``Codec`` uses; maybe a partition)."""
    return _PARTITION.sub("", _url_decoded(stored))


def _url_decoded(text: str) -> str:
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%" and _HEX.fullmatch(text[i + 1 : i + 3]):
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
            continue
        out += b" " if char == "+" else char.encode()
        i += 1
    return out.decode("utf-8", errors="replace")


def is_system_topic(name: str) -> bool:
    return name in _SYSTEM_NAMES or name.endswith(_SYSTEM_SUFFIXES)


def user_topics(stored_names: Iterable[str], *, own: frozenset[str] = frozenset()) -> list[str]:
    """The topics among a namespace's store children that a deletion would destroy, sorted, one per topic."""
    names = {local_name(n) for n in stored_names}
    return sorted(n for n in names if not is_system_topic(n) and n not in own)


@dataclass(frozen=True)
class Contents:
    """What the local region holds under a tenant or namespace path."""

    topics: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()

    def why_held(self) -> str | None:
        """Why a deletion must wait, or ``None`` when nothing here would be destroyed."""
        parts = []
        if self.namespaces:
            parts.append(f"{len(self.namespaces)} namespace(s): {_few(self.namespaces)}")
        if self.topics:
            parts.append(f"{len(self.topics)} topic(s): {_few(self.topics)}")
        return "this region still holds " + "; ".join(parts) if parts else None


def _few(names: tuple[str, ...], shown: int = 5) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


@dataclass(frozen=True)
class Hold:
    reason: str


@dataclass(frozen=True)
class Mark:
    """Write this marked document first (compare-and-set), then look again."""

    doc: bytes


@dataclass(frozen=True)
class Unmark:
    """A topic appeared after the mark: write back the document as it was, and hold."""

    doc: bytes
    reason: str


@dataclass(frozen=True)
class Apply:
    """Nothing here would be destroyed: write the record (delete, for a tombstone)."""


Step = Hold | Mark | Unmark | Apply


def next_step(event: Record, current: bytes | None, contents: Contents, *, unmarked: bytes | None) -> Step:
    """The next step of applying a destroying ``event`` to a store holding ``current`` at its path.

    ``contents`` is what the region holds there, read after ``current``; ``unmarked`` is the document as it
    was before this procedure marked it (``None`` while it has not).
    """
    reason = contents.why_held()
    if reason is not None:
        return Unmark(unmarked, reason) if unmarked is not None else Hold(reason)
    needs_mark = (
        classify(event.path) is PathClass.NAMESPACE
        and event.value is None
        and current is not None
        and not is_marked_deleted(current)
        and unmarked is None
    )
    if needs_mark and current is not None:
        try:
            return Mark(mark_deleted(current))
        except ValueError:
            pass  # a document Pulsar itself cannot read: there is no mark to write
    return Apply()
