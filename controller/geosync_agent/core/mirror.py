"""The policy mirror's state and decisions as values: what a leadership term hands the next, which received
events are taken, what a remote record does to this region's store, and which local changes are published.

The shell (``geosync_agent.mirroring``) reads ZooKeeper and the event topic, carries out each verdict (a
compare-and-set write, a hold, a publish) and feeds results back; the rules themselves are
``geosync_core.policies`` (last writer wins), ``geosync_core.allowedclusters`` (PIP-321 here) and
``geosync_core.deletions`` (nothing destroyed here).

Invariants (tests in ``tests/agent/test_mirror_core.py``):

1. An event is taken only from a valid envelope of its kind, whose record is stamped by the region that
   signed it (a region speaks only for its own edits), once (the replay guard), and in scope.
2. A remote record reaches the store only if it wins last writer wins, breaks no PIP-321 rule here, takes no
   namespace away from this region, and destroys nothing here; one that would destroy is held: taken as the
   policy (the replica holds it) but not written. A newer record that takes away a namespace whose deletion
   is held here is held in its place (found by the simulator: refused, it was dropped once the hold ended).
3. A change found in the store is published only if it differs from the replica and its path is not held.
4. ``decode_checkpoint(encode_checkpoint(cp)) == cp``; anything else decodes to ``None``.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_core import allowedclusters, clocks, deletions, envelopes, policies
from geosync_core.policies import Decision, Record, Replica

EVENT_KIND = "policy-event"
CHECKPOINT_MAGIC = b"GSM1"  # GeoSync mirror checkpoint: zlib-compressed JSON (document version 1 or 2)
CHECKPOINT_VERSION = 2  # 2 added "seen"; version 1 documents are read with none


@dataclass
class Checkpoint:
    """What a leadership term hands the next one, stored in the region's ZooKeeper."""

    replica: dict[str, Record] = field(default_factory=dict)
    clock: clocks.Hlc | None = None
    seq: int = 0
    guard: envelopes.ReplayGuard = field(default_factory=envelopes.ReplayGuard)
    reader: bytes | None = None
    parked: dict[str, Record] = field(default_factory=dict)
    """Remote records not applied yet, one per path: refused here for now, or held (see ``held``)."""
    seen: dict[str, clocks.Hlc] = field(default_factory=dict)
    """Per region, the highest stamp of any valid event received from it (tombstone collection)."""

    def held(self) -> set[str]:
        """Paths whose parked record is a held deletion: the one parked record the replica holds too."""
        return {p for p, e in self.parked.items() if self.replica.get(p) == e}


def encode_checkpoint(cp: Checkpoint) -> bytes:
    doc = {
        "v": CHECKPOINT_VERSION,
        "clock": None if cp.clock is None else clocks.encode(cp.clock),
        "seq": cp.seq,
        "guard": dict(cp.guard.highest),
        "reader": None if cp.reader is None else base64.b64encode(cp.reader).decode("ascii"),
        "records": [policies.event_to_payload(r) for _, r in sorted(cp.replica.items())],
        "parked": [policies.event_to_payload(r) for _, r in sorted(cp.parked.items())],
        "seen": {region: clocks.encode(stamp) for region, stamp in sorted(cp.seen.items())},
    }
    return CHECKPOINT_MAGIC + zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)


def decode_checkpoint(data: bytes) -> Checkpoint | None:
    """The checkpoint ``data`` holds, or ``None`` if it is not one we can read (then start afresh)."""
    if not data.startswith(CHECKPOINT_MAGIC):
        return None
    try:
        doc = json.loads(zlib.decompress(data[len(CHECKPOINT_MAGIC) :]))
        if not isinstance(doc, dict) or doc.get("v") not in (1, CHECKPOINT_VERSION):
            return None
        seen = {str(region): clocks.decode(text) for region, text in doc.get("seen", {}).items()}
        records = [policies.event_from_payload(p) for p in doc["records"]]
        parked = [policies.event_from_payload(p) for p in doc["parked"]]
        clock = None if doc["clock"] is None else clocks.decode(doc["clock"])
        return Checkpoint(
            replica={r.path: r for r in records if isinstance(r, Record)},
            clock=clock,
            seq=int(doc["seq"]),
            guard=envelopes.ReplayGuard(tuple(sorted((str(k), int(v)) for k, v in doc["guard"].items()))),
            reader=None if doc["reader"] is None else base64.b64decode(doc["reader"]),
            parked={r.path: r for r in parked if isinstance(r, Record)},
            seen={region: stamp for region, stamp in seen.items() if stamp is not None},
        )
    except (ValueError, KeyError, TypeError, AttributeError, zlib.error):
        return None


# -- events received ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taken:
    record: Record


@dataclass(frozen=True)
class Dropped:
    counter: str
    """What the shell counts it as."""


def receive(
    cp: Checkpoint, opened: envelopes.Envelope | envelopes.Rejected, *, in_scope: Callable[[str], bool]
) -> Taken | Dropped:
    """Whether an event read from the topic is taken (invariant 1); moves ``cp``'s replay guard and the
    newest stamp seen of its sender when it is valid, whether in scope or not."""
    if isinstance(opened, envelopes.Rejected):
        return Dropped(f"rejected_{opened.reason.value}")
    if opened.kind != EVENT_KIND:
        return Dropped("other_kinds")
    record = policies.event_from_payload(opened.payload)
    if isinstance(record, policies.Malformed) or record.stamp.region != opened.region:
        return Dropped("rejected_malformed")
    guard, admitted = cp.guard.admit(opened)  # only once the event is known valid
    if isinstance(admitted, envelopes.Rejected):
        return Dropped("rejected_replayed")
    cp.guard = guard
    newest = cp.seen.get(opened.region)
    if newest is None or record.stamp > newest:
        cp.seen[opened.region] = record.stamp
    return Taken(record) if in_scope(record.path) else Dropped("out_of_scope")


# -- remote records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ignore:
    """Older than, or the same as, what the replica holds (or not mirrored): nothing to do."""

    decision: Decision


@dataclass(frozen=True)
class Refuse:
    """Not applicable here for now (PIP-321, or it would take the namespace away): park and look again."""

    reason: str


@dataclass(frozen=True)
class ReportFirst:
    """The store changed and its watch has not been handled yet: report the change, then judge again."""


@dataclass(frozen=True)
class Hold:
    """It would destroy data here: take it as the policy (``replica``), write nothing until the region has
    drained."""

    replica: Replica


@dataclass(frozen=True)
class Write:
    """Write the record (delete, for a tombstone) with compare-and-set; ``replica`` once written."""

    replica: Replica


Verdict = Ignore | Refuse | ReportFirst | Hold | Write


def judge(
    cp: Checkpoint,
    event: Record,
    *,
    current: bytes | None,
    held: bool,
    local_region: str,
    registered: allowedclusters.Registered,
) -> Verdict:
    """What a remote record does to a store that holds ``current`` at its path (invariant 2); ``held``: a
    deletion of the path is held here, so the store is known to differ from the replica."""
    replica, decision = policies.apply_remote(cp.replica, event)
    if decision not in (Decision.APPLY_WRITE, Decision.APPLY_DELETE):
        return Ignore(decision)
    # A held path's store keeps the region's own document: that is what a new record must not take away.
    here = {**cp.replica, event.path: Record(event.path, current, event.stamp)} if held else cp.replica
    rejection = allowedclusters.reject_event_regions(
        event, replica=here, local_region=local_region, registered=registered
    )
    if rejection is not None:
        if (
            held
            and allowedclusters.reject_event_regions(
                event, replica=cp.replica, local_region=local_region, registered=registered
            )
            is None
        ):  # it takes away a namespace whose deletion is held here: it destroys as the deletion does
            return Hold(replica)
        return Refuse(rejection.reason)
    known = cp.replica.get(event.path)
    if not held and current != (None if known is None else known.value):
        return ReportFirst()
    if deletions.destroys(event, current):
        return Hold(replica)
    return Write(replica)


# -- local changes ----------------------------------------------------------------------------------


def found_locally(
    cp: Checkpoint, path: str, value: bytes | None, *, held: bool, tick: Callable[[], clocks.Hlc]
) -> tuple[Replica | None, Record | None, str]:
    """A change the store shows at ``path`` (invariant 3): the replica once the event is published, the
    event, and what to count. ``tick`` stamps it (a fresh tick of the mirror's clock), called only for news.
    The replica is the caller's to keep, after the publish: a change not published is not taken."""
    known = cp.replica.get(path)
    if value == (None if known is None else known.value):
        return None, None, "echo_or_unchanged"
    if held:
        return None, None, "held_local_edits"  # stays here: see geosync_agent.mirrorholds
    replica, event = policies.local_change(cp.replica, path, value=value, stamp=tick())
    return (replica, event, "local_changes") if event is not None else (None, None, "echo_or_unchanged")
