"""Policy documents mirrored between regions whose configuration stores are isolated (PIP-136, done outside).

Pulsar's built-in synchronizer cannot run on a ZooKeeper-mode standalone, compares a broker's wall clock
with ZooKeeper's mtime, keeps no tombstones (an old update resurrects a deleted node) and never sees direct
ZooKeeper writes. GeoSync mirrors instead: each region's agent turns changes found in its store into
events stamped with a hybrid logical clock, and applies other regions' events last writer wins.

What is mirrored (``classify``): the tenant and namespace documents of the configuration store,
``/admin/policies/{tenant}`` (``TenantInfo``) and ``/admin/policies/{tenant}/{namespace}`` (``Policies``,
which carries PIP-321's ``allowed_clusters``). With a shared configuration store every cluster sees these,
so mirroring them restores the shared-store view.

What is never mirrored, because it describes one region (Pulsar keeps it in the local metadata store, or
it names that region's own machines and switches): ``/admin/local-policies`` (bundle split, bookie and
anti-affinity groups of this region), ``/admin/clusters`` (each region registers its peers with URLs and
credentials as seen from that region), ``/admin/flags`` (``policies-readonly`` freezes one store for
maintenance), ``/admin/configuration`` (dynamic broker configuration), ``/namespace`` (ephemeral bundle
ownership), ``/loadbalance``, ``/managed-ledgers``, ``/ledgers`` and ``/schemas`` (data plane: ledger ids
and cursors only mean something to this region's BookKeeper). Other configuration-store data
(partitioned-topic metadata, v1 namespaces, PIP-469 topic policies) is not mirrored yet.

A stamp is an ``Hlc``: it names the region that made the change, so last writer wins orders records by
(hybrid logical timestamp, region name); on equal timestamps the larger region name wins, like Pulsar's
code and unlike the PIP-136 text. A deletion is a record whose value is ``None`` (a tombstone).

Echo is suppressed twice: ``apply_remote`` answers ``IGNORE_SAME`` to a record it already holds, and
``local_change`` makes no event when the store holds the bytes the replica already has, which is what the
store watch reports right after the agent wrote a remote record.

Changes made while no agent watched (agent down, or before GeoSync was installed) carry no stamp of ours;
``scan_store`` dates them by ZooKeeper's mtime, raised just above the held record where needed, so that a
region whose store was filled long ago does not beat a later edit elsewhere merely by being scanned later.

Invariants (each is a test in ``tests/core/test_policies.py``):

1. ``merge`` is commutative, associative and idempotent.
2. Applying any set of records in any order, with duplicates, ends in the same replica: the merge of them.
3. A replica never goes back: what ``apply_remote`` keeps for a path ranks at least as high as before.
4. Paths outside the mirrored families are never applied and never produce events.
5. No echo: after applying a remote record, reporting the same bytes as a local change makes no event,
   and mirrors exchanging events until none are left in flight quiesce with identical stores.
6. A local change's stamp is above what the replica held for its path, so it wins everywhere; that holds
   for changes ``scan_store`` finds too, after which the replica matches the store and a second scan finds
   nothing.
7. ``diff`` lists exactly the paths whose values differ between regions.
8. The JSON helpers change only the field they write; ``event_from_payload(event_to_payload(r)) == r``
   and ``event_from_payload`` never raises, whatever it is given.
9. A collected tombstone resurrects nothing: with each region's events arriving in the order it stamped
   them, a replica that runs ``collect_tombstones`` at any point ends with the same values as one that
   keeps every tombstone.

Tombstones are kept until every region is past them (``collect_tombstones``). A tombstone is only needed
to make an older record for its path lose; once the mirror has received, from every peer region, an event
stamped above the tombstone, no older record can come from that region any more, because a region stamps
its events from one hybrid logical clock and the event topic delivers each region's events in the order it
published them. One kind of event is dated otherwise: a change found by ``scan_store`` carries ZooKeeper's
mtime, which may be older than the region's newest stamp. Such a change was made while no agent watched,
and each leadership term scans before it publishes anything else, so it is older than the newest stamp we
hold from that region by at most the time an agent was away; the age floor (``ttl_ms``, days) covers that
and any clock skew between regions. A region that never sent an event keeps every tombstone.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from geosync_core.clocks import Hlc, decode, encode, receive

TENANT_ADMIN_ROLES = "adminRoles"
TENANT_ALLOWED_CLUSTERS = "allowedClusters"
NAMESPACE_REPLICATION_CLUSTERS = "replication_clusters"
NAMESPACE_ALLOWED_CLUSTERS = "allowed_clusters"

PAYLOAD_VERSION = 1

_POLICIES_ROOT = "/admin/policies"
_REGION_LOCAL_ROOTS = (
    "/admin/local-policies",
    "/admin/clusters",
    "/admin/flags",
    "/admin/configuration",
    "/namespace",
    "/loadbalance",
    "/managed-ledgers",
    "/ledgers",
    "/schemas",
)
_SEGMENT = re.compile(r"[-=:.\w]+", re.ASCII)  # Pulsar's NamedEntity rule for tenant and namespace names


class PathClass(enum.Enum):
    TENANT = "tenant"
    NAMESPACE = "namespace"
    REGION_LOCAL = "region-local"
    NOT_MIRRORED = "not-mirrored"

    @property
    def mirrored(self) -> bool:
        return self in (PathClass.TENANT, PathClass.NAMESPACE)


def classify(path: str) -> PathClass:
    """Which family a configuration-store path belongs to; only tenants and namespaces are mirrored."""
    if any(path == root or path.startswith(root + "/") for root in _REGION_LOCAL_ROOTS):
        return PathClass.REGION_LOCAL
    if not path.startswith(_POLICIES_ROOT + "/"):
        return PathClass.NOT_MIRRORED
    segments = path[len(_POLICIES_ROOT) + 1 :].split("/")
    if not all(_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments):
        return PathClass.NOT_MIRRORED
    return {1: PathClass.TENANT, 2: PathClass.NAMESPACE}.get(len(segments), PathClass.NOT_MIRRORED)


@dataclass(frozen=True)
class Record:
    """The latest known state of one path: its bytes, or ``None`` for a deletion (a tombstone)."""

    path: str
    value: bytes | None
    stamp: Hlc


Replica = Mapping[str, Record]
"""A region's view of the mirrored paths: ``path -> Record`` with ``replica[p].path == p``."""


@dataclass(frozen=True)
class Malformed:
    """Input that could not be understood, and why; an expected non-result, not an exception."""

    reason: str


def _rank(record: Record) -> tuple[Hlc, bool, bytes]:
    # The stamp decides. Equal stamps with different content only come from a region whose clock was
    # reset; ranking the content too keeps every replica converging on the same choice anyway.
    return record.stamp, record.value is not None, record.value or b""


def merge(a: Replica, b: Replica) -> dict[str, Record]:
    """Both replicas' knowledge: per path, the record that wins last writer wins."""
    merged = dict(a)
    for path, record in b.items():
        held = merged.get(path)
        if held is None or _rank(record) > _rank(held):
            merged[path] = record
    return merged


class Decision(enum.Enum):
    """What ``apply_remote`` decided, and so what the runtime must do to its store."""

    APPLY_WRITE = "apply-write"  # write the record's bytes (compare-and-set)
    APPLY_DELETE = "apply-delete"  # delete the node; a node already missing is success
    IGNORE_OLDER = "ignore-older"  # we hold a newer record for the path
    IGNORE_SAME = "ignore-same"  # we hold this very record: a duplicate, or our own echo
    IGNORE_UNMIRRORED = "ignore-unmirrored"  # the path is region-local or not mirrored


def apply_remote(replica: Replica, event: Record) -> tuple[Replica, Decision]:
    """Fold a record received from the event topic into ``replica``, last writer wins."""
    if not classify(event.path).mirrored:
        return replica, Decision.IGNORE_UNMIRRORED
    held = replica.get(event.path)
    if held == event:
        return replica, Decision.IGNORE_SAME
    if held is not None and _rank(held) > _rank(event):
        return replica, Decision.IGNORE_OLDER
    decision = Decision.APPLY_DELETE if event.value is None else Decision.APPLY_WRITE
    return {**replica, event.path: event}, decision


def local_change(
    replica: Replica, path: str, *, value: bytes | None, stamp: Hlc
) -> tuple[Replica, Record | None]:
    """Record that the local store now holds ``value`` at ``path`` (``None``: no node); the event to publish.

    No event when the replica already holds these bytes: that is the store reporting a remote record the
    agent just applied (echo), or a write that changed nothing. ``stamp`` is a fresh local ``tick`` of a
    clock that has ``receive``d every applied record's stamp, so it is above the held one.
    """
    if not classify(path).mirrored:
        return replica, None
    held = replica.get(path)
    if value == (held.value if held else None):
        return replica, None
    if held is not None and stamp <= held.stamp:
        raise ValueError(f"stamp {encode(stamp)} is not above {encode(held.stamp)} held for {path}")
    event = Record(path, value, stamp)
    return {**replica, path: event}, event


def collect_tombstones(
    replica: Replica,
    *,
    seen: Mapping[str, Hlc],
    peers: Iterable[str],
    now_ms: int,
    ttl_ms: int,
    keep: Iterable[str] = (),
) -> tuple[dict[str, Record], list[str]]:
    """``replica`` without the tombstones every region is past; the paths collected.

    ``seen`` maps each region to the highest stamp received from it; ``peers`` are the regions whose events
    must be past a tombstone (every one that may still send); a tombstone goes when it is older than
    ``ttl_ms`` at ``now_ms`` and below ``seen`` of every peer. ``keep``: paths never collected now (the
    mirror passes those with a parked event, which the tombstone must still beat).
    """
    floors = [seen.get(region) for region in set(peers)]
    if any(floor is None for floor in floors):
        return dict(replica), []
    kept = set(keep)
    gone = [
        path
        for path, record in replica.items()
        if record.value is None
        and path not in kept
        and record.stamp.wall_ms + ttl_ms < now_ms
        and all(record.stamp < floor for floor in floors if floor is not None)
    ]
    collected = set(gone)
    return {p: r for p, r in replica.items() if p not in collected}, sorted(gone)


def stamp_found_change(held: Record | None, *, mtime_ms: int, region: str) -> Hlc:
    """A stamp for a change found in the store with no stamp of ours (made while no agent watched).

    ZooKeeper's mtime dates it as well as anything can; it must still rank above the held record, or the
    change would lose to the state it replaced. The runtime ``receive``s the result into its clock.
    """
    found = Hlc(mtime_ms, 0, region)
    if held is None or found > held.stamp:
        return found
    return Hlc(held.stamp.wall_ms, held.stamp.logical + 1, region)


def scan_store(
    replica: Replica, clock: Hlc, *, found: Mapping[str, tuple[bytes, int]], now_ms: int
) -> tuple[Replica, Hlc, list[Record]]:
    """The events for what changed in the store while no agent watched it, and the clock that saw them.

    ``found`` maps every node of the mirrored families now in the store to (bytes, ZooKeeper mtime); a
    held path missing from it was deleted. Deletions leave no mtime, so they get the least winning stamp.
    """
    events = []
    for path in sorted(found.keys() | replica.keys()):
        held = replica.get(path)
        value, mtime_ms = found.get(path, (None, 0))
        if not classify(path).mirrored or value == (held.value if held else None):
            continue
        event = Record(path, value, stamp_found_change(held, mtime_ms=mtime_ms, region=clock.region))
        replica = {**replica, path: event}
        clock = receive(clock, event.stamp, now_ms=now_ms)
        events.append(event)
    return replica, clock, events


def digest(value: bytes | None) -> str | None:
    """A short fingerprint of a value for humans comparing regions; ``None`` for no node."""
    return None if value is None else hashlib.sha256(value).hexdigest()[:16]


@dataclass(frozen=True)
class Disagreement:
    """A path whose value differs between regions: region -> digest (``None``: absent or deleted)."""

    path: str
    digests: Mapping[str, str | None]


def diff(replicas: Mapping[str, Replica]) -> list[Disagreement]:
    """Every path on which the given regions' replicas hold different values, sorted by path."""
    paths = sorted({path for replica in replicas.values() for path in replica})
    found = []
    for path in paths:
        digests = {
            region: digest(record.value if (record := replica.get(path)) else None)
            for region, replica in sorted(replicas.items())
        }
        if len(set(digests.values())) > 1:
            found.append(Disagreement(path, digests))
    return found


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number out of range: {text}")
    return number


def _reject_constant(name: str) -> float:
    raise ValueError(f"not JSON: {name}")


def _load_object(doc: bytes) -> dict[str, object] | Malformed:
    try:
        parsed = json.loads(doc.decode("utf-8"), parse_float=_finite, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        return Malformed(f"not a JSON document: {e}")
    if not isinstance(parsed, dict):
        return Malformed("not a JSON object")
    return parsed


def read_names(doc: bytes, field: str) -> frozenset[str] | Malformed:
    """The set of names in ``field`` of a policy document (absent or null: empty)."""
    obj = _load_object(doc)
    if isinstance(obj, Malformed):
        return obj
    names = obj.get(field)
    if names is None:
        return frozenset()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return Malformed(f"{field} is not a list of names")
    return frozenset(names)


def write_names(doc: bytes, field: str, *, names: Iterable[str]) -> bytes | Malformed:
    """``doc`` with ``field`` set to the sorted ``names``; every other field and the key order are kept."""
    obj = _load_object(doc)
    if isinstance(obj, Malformed):
        return obj
    obj[field] = sorted(set(names))
    # Compact UTF-8, as Pulsar's Jackson writes it, so that unchanged documents stay byte-identical.
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def event_to_payload(event: Record) -> dict[str, object]:
    """The versioned dict form of a record, for the envelope that signs it."""
    value = None if event.value is None else base64.b64encode(event.value).decode("ascii")
    return {"v": PAYLOAD_VERSION, "path": event.path, "stamp": encode(event.stamp), "value": value}


def event_from_payload(payload: object) -> Record | Malformed:
    """The record a payload carries, or why it carries none. Never raises."""
    if not isinstance(payload, Mapping):
        return Malformed("payload is not an object")
    if set(payload) != {"v", "path", "stamp", "value"}:
        return Malformed(f"payload fields are {sorted(map(str, payload))}")
    version = payload["v"]
    if type(version) is not int or version != PAYLOAD_VERSION:
        return Malformed(f"unsupported payload version {version!r}")
    path, stamp_text, value_text = payload["path"], payload["stamp"], payload["value"]
    if not isinstance(path, str):
        return Malformed("path is not a string")
    stamp = decode(stamp_text) if isinstance(stamp_text, str) else None
    if stamp is None:
        return Malformed("stamp is not an encoded hybrid logical timestamp")
    if value_text is None:
        return Record(path, None, stamp)
    if not isinstance(value_text, str):
        return Malformed("value is neither null nor base64 text")
    try:
        value = base64.b64decode(value_text.encode("ascii"), validate=True)
    except ValueError:  # binascii.Error and UnicodeEncodeError are ValueErrors
        return Malformed("value is not base64")
    if base64.b64encode(value).decode("ascii") != value_text:
        return Malformed("value is not canonical base64")
    return Record(path, value, stamp)
