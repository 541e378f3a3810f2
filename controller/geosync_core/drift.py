"""Drift between regions, message by message: what the audit counts, defined once as values.

The Spark audit (``geosync_audit``) joins every region's copy of every message by its origin coordinates
and compares the regions' cursors. This module is the definition it implements: the same audit as a
single-process function over plain values (``audit``), used as the oracle in the Spark job's tests and as
the baseline in ``bench/audit.py``, plus the small rules the data source needs (origin region of a
replicated copy, read ranges of a log, topic names).

Terms. A *copy* is one message as stored in one region (local position, origin coordinates, key, publish
time). A message's *identity* is ``(topic, partition, origin region, origin ledger, origin entry, batch
index)``; copies of one message in different regions share it. A region *holds* a message when it has a
copy. A subscription *exists* in a region when that region has a durable cursor of that name on the
topic partition. ``acked(S, R, m)``: every copy of ``m`` in ``R`` lies at or below S's mark-delete in R or
inside one of its individually deleted ranges (entry granularity: brokers never show batch-index acks).

Definitions (per topic, summed over its partitions):

* **unsynced** ``(S, R, O)``: messages held by both R and O, where S exists in both, acknowledged by S in R
  and not in O. These are what consumers failing over from R to O get again: duplicates on failover.
* **sync lag** ``(S, R, O)`` in milliseconds: ``0`` if nothing is unsynced, else the publish time of the
  newest message acknowledged in R (among those O holds) minus that of the oldest unsynced one: how much
  of the stream's publish time O's acknowledgements trail R's.
* **lost** ``(S, R)``, only given a delivery log: messages acknowledged by S in R that no consumer of S
  received in any region (no delivery-log line for that subscription and origin coordinates; a line
  without ``batch_index`` covers the whole entry). A cursor moved by hand past undelivered messages
  (``expireMessages``, ``skip``, a reset forward) shows up here; an agent copying another region's
  consumer acknowledgements does not. The log is taken as complete for every audited subscription.
* **replication** ``(O, R)``, for each region R that the topic's namespace replicates to, R != O: of the
  messages originating in O (held by any audited region), those R lacks are *trimmed* if below the
  lowest origin position R holds from O (retention removed them), a *gap* if between R's lowest and
  highest (a hole in replication: never expected, since replication keeps each origin's order) and
  *lag* if above R's highest (still in flight). ``lag_ms`` is the audit time minus the publish time of
  the oldest lagging message (``0`` with no lag), as Pulsar's replication delay. ``duplicates`` counts
  extra copies of one identity in R (a replicator re-sent after a reconnect).
* **order violation**, given a delivery log: within one ``(topic, subscription, key, origin region)``,
  deliveries ordered by ``(delivered_at, origin position)`` across all regions, a delivery of a message
  whose origin position is below that of one delivered earlier. Messages of one origin have one order in
  every region, so a key that moves to another region on failover and goes back in that order breaks
  Key_Shared's per-key order. A redelivery of the same message is not a violation.

Copies whose origin region could not be named are left out of every count and reported as unresolved.

Invariants (each a test): ``unsynced`` is zero whenever two regions' cursors cover the same identities;
a region's lost count never exceeds what it acknowledged; trimmed + gaps + lag is exactly what R lacks;
``read_ranges`` covers every entry of a log once, in order, in ranges of at most ``max_entries``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from geosync_core.positions import Position
from geosync_core.rangesets import AckState

BROKER_GENERATED = re.compile(r"^(?P<cluster>.+)-\d+-\d+$")
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<n>[0-9]+)$")
_NAMESPACE = re.compile(r"^[a-z-]+://(?P<ns>[^/]+/[^/]+)/")

Identity = tuple[str, int, str, int, int, int]
"""``(topic, partition, origin region, origin ledger, origin entry, batch index)``."""


# -- names and rules the data source needs ---------------------------------------------------------


def split_partition(topic: str) -> tuple[str, int]:
    """``persistent://t/ns/x-partition-3`` -> ``(persistent://t/ns/x, 3)``; ``-1`` when not a partition."""
    match = _PARTITION.match(topic)
    return (match["base"], int(match["n"])) if match else (topic, -1)


def partition_name(topic: str, partition: int) -> str:
    return topic if partition < 0 else f"{topic}-partition-{partition}"


def namespace_of(topic: str) -> str:
    """``persistent://t/ns/x`` -> ``t/ns``; ``ValueError`` for a name without domain and namespace."""
    match = _NAMESPACE.match(topic)
    if match is None:
        raise ValueError(f"not a full topic name: {topic!r}")
    return match["ns"]


def producer_cluster(producer: str) -> str | None:
    """The cluster a broker-generated producer name (``<cluster>-<n>-<n>``) claims, else None."""
    match = BROKER_GENERATED.match(producer)
    return match["cluster"] if match else None


def origin_without_lookup(producer: str, verified: Mapping[str, str]) -> str | None:
    """The origin region of a replicated copy when the rules name it without asking the broker: a producer
    name already verified names its region. None means: read the entry's ``X-Pulsar-replicated-from`` header
    (then ``verified`` may learn the producer, when its broker-generated name claims the region the header
    named).

    The namespace's replication clusters are no rule: with two regions "the other one" looked safe, but the
    list changes (a region added or removed, topic-level or per-message replication clusters), and entries
    indexed or re-read under a list that does not match when they were written would be named after the
    wrong region; with colliding ledger ids a claim could then acknowledge an unrelated message."""
    return verified.get(producer)


def ledger_sizes(ledgers: Sequence[Mapping[str, object]], last_confirmed: str) -> list[tuple[int, int]]:
    """``(ledger id, entries)`` of a log from ``internalStats``: closed ledgers carry ``entries``; the open
    one reports 0 there, so its size comes from ``lastConfirmedEntry``."""
    lce = Position.parse(last_confirmed) if last_confirmed else Position(-1, -1)
    out: list[tuple[int, int]] = []
    for ledger in ledgers:
        lid = int(str(ledger["ledgerId"]))
        count = int(str(ledger.get("entries", 0) or 0))
        if lid == lce.ledger:
            count = max(count, lce.entry + 1)
        if count > 0:
            out.append((lid, count))
    return out


def read_ranges(ledgers: Sequence[tuple[int, int]], max_entries: int) -> list[tuple[Position, Position]]:
    """Split a log (``(ledger, entries)`` pairs, in order) into inclusive ranges of at most ``max_entries``
    entries; a range may span ledgers. Each range is read by one Spark task."""
    if max_entries < 1:
        raise ValueError(f"max_entries must be positive, not {max_entries}")
    ranges: list[tuple[Position, Position]] = []
    first: Position | None = None
    taken = 0
    for ledger, count in ledgers:
        entry = 0
        while entry < count:
            step = min(max_entries - taken, count - entry)
            if first is None:
                first = Position(ledger, entry)
            entry += step
            taken += step
            if taken == max_entries:
                ranges.append((first, Position(ledger, entry - 1)))
                first, taken = None, 0
        last_ledger, last_count = ledger, count
    if first is not None:
        ranges.append((first, Position(last_ledger, last_count - 1)))
    return ranges


# -- the audit as values ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Copy:
    """One message as stored in one region (the data source's row)."""

    region: str
    topic: str
    partition: int
    ledger: int
    entry: int
    batch_index: int
    origin_region: str | None
    origin_ledger: int
    origin_entry: int
    key: str | None = None
    publish_time: int = 0

    @property
    def identity(self) -> Identity | None:
        if self.origin_region is None:
            return None
        return (
            self.topic,
            self.partition,
            self.origin_region,
            self.origin_ledger,
            self.origin_entry,
            self.batch_index,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Cursor:
    """A durable subscription's ack state on one topic partition in one region."""

    region: str
    topic: str
    partition: int
    subscription: str
    state: AckState


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One line of a consumers' delivery log."""

    region: str
    topic: str
    partition: int
    subscription: str
    key: str | None
    origin_region: str
    origin_ledger: int
    origin_entry: int
    batch_index: int | None
    delivered_at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PairDrift:
    topic: str
    subscription: str
    region: str
    other: str
    unsynced: int
    sync_lag_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Loss:
    topic: str
    subscription: str
    region: str
    acked: int
    lost: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Replication:
    topic: str
    origin_region: str
    region: str
    trimmed: int
    gaps: int
    lag: int
    lag_ms: int
    duplicates: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderViolation:
    topic: str
    subscription: str
    key: str | None
    region: str
    origin_region: str
    origin_ledger: int
    origin_entry: int
    delivered_at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    pairs: tuple[PairDrift, ...]
    loss: tuple[Loss, ...] | None
    replication: tuple[Replication, ...]
    order_violations: tuple[OrderViolation, ...] | None
    unresolved: int


def _origin_key(identity: Identity) -> tuple[int, int, int]:
    return identity[3], identity[4], identity[5]


def audit(
    copies: Iterable[Copy],
    cursors: Iterable[Cursor],
    *,
    expected: Mapping[str, Sequence[str]],
    as_of_ms: int,
    deliveries: Iterable[Delivery] | None = None,
) -> Report:
    """The whole audit in one process (see the module docstring for each definition).

    ``expected`` maps a namespace (``tenant/ns``) to the audited regions it replicates to: each should
    hold every message of the others (a region that was not read must not be listed).
    """
    # held[(topic, partition, region)][identity] -> local positions of its copies
    held: dict[tuple[str, int, str], dict[Identity, list[Position]]] = defaultdict(lambda: defaultdict(list))
    publish: dict[Identity, int] = {}
    unresolved = 0
    for c in copies:
        ident = c.identity
        if ident is None:
            unresolved += 1
            continue
        held[(c.topic, c.partition, c.region)][ident].append(Position(c.ledger, c.entry))
        publish.setdefault(ident, c.publish_time)

    # states[(topic, subscription)][region] -> {identity: acked}
    by_partition: dict[tuple[str, str, int, str], list[Cursor]] = defaultdict(list)
    for cur in cursors:
        by_partition[(cur.topic, cur.subscription, cur.partition, cur.region)].append(cur)
    states: dict[tuple[str, str], dict[str, dict[Identity, bool]]] = defaultdict(dict)
    for (topic, sub, partition, region), curs in sorted(by_partition.items()):
        state = curs[0].state
        per_region = states[(topic, sub)].setdefault(region, {})
        for ident, positions in held.get((topic, partition, region), {}).items():
            per_region[ident] = all(p in state for p in positions)

    pairs: list[PairDrift] = []
    for (topic, sub), regions in sorted(states.items()):
        for r in sorted(regions):
            for o in sorted(regions):
                if r == o:
                    continue
                mine, theirs = regions[r], regions[o]
                common = [i for i in mine if i in theirs]
                unsynced = [i for i in common if mine[i] and not theirs[i]]
                lag = 0
                if unsynced:
                    newest = max(publish[i] for i in common if mine[i])
                    lag = newest - min(publish[i] for i in unsynced)
                pairs.append(
                    PairDrift(
                        topic=topic,
                        subscription=sub,
                        region=r,
                        other=o,
                        unsynced=len(unsynced),
                        sync_lag_ms=lag,
                    )
                )

    loss: list[Loss] | None = None
    violations: list[OrderViolation] | None = None
    if deliveries is not None:
        log = list(deliveries)
        got: set[tuple[str, int, str, str, int, int, int | None]] = {
            (
                d.topic,
                d.partition,
                d.subscription,
                d.origin_region,
                d.origin_ledger,
                d.origin_entry,
                d.batch_index,
            )
            for d in log
        }
        loss = []
        for (topic, sub), regions in sorted(states.items()):
            for r, acks in sorted(regions.items()):
                acked = [i for i, a in acks.items() if a]
                lost = sum(
                    1
                    for i in acked
                    if (i[0], i[1], sub, i[2], i[3], i[4], i[5]) not in got
                    and (i[0], i[1], sub, i[2], i[3], i[4], None) not in got
                )
                loss.append(Loss(topic=topic, subscription=sub, region=r, acked=len(acked), lost=lost))
        violations = order_violations(log)

    replication: list[Replication] = []
    origins: dict[tuple[str, str], set[Identity]] = defaultdict(set)
    mine_by_region: dict[tuple[str, str], dict[Identity, list[Position]]] = defaultdict(dict)
    for (topic, _partition, region), copies_of in held.items():
        mine_by_region[(topic, region)].update(copies_of)
        for ident in copies_of:
            origins[(topic, ident[2])].add(ident)
    for (topic, origin), idents in sorted(origins.items()):
        wanted = [r for r in expected.get(namespace_of(topic), ()) if r != origin]
        for r in sorted(wanted):
            have = mine_by_region.get((topic, r), {})
            trimmed = gaps = lag = 0
            oldest: int | None = None
            per_partition: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
            for i in have:
                if i[2] == origin:
                    per_partition[i[1]].append(_origin_key(i))
            bounds = {p: (min(ks), max(ks)) for p, ks in per_partition.items()}
            for i in idents:
                if i in have:
                    continue
                b = bounds.get(i[1])
                k = _origin_key(i)
                if b is not None and k < b[0]:
                    trimmed += 1
                elif b is not None and k < b[1]:
                    gaps += 1
                else:
                    lag += 1
                    oldest = publish[i] if oldest is None else min(oldest, publish[i])
            duplicates = sum(len(ps) - 1 for i, ps in have.items() if i[2] == origin)
            replication.append(
                Replication(
                    topic=topic,
                    origin_region=origin,
                    region=r,
                    trimmed=trimmed,
                    gaps=gaps,
                    lag=lag,
                    lag_ms=0 if oldest is None else as_of_ms - oldest,
                    duplicates=duplicates,
                )
            )

    return Report(
        pairs=tuple(pairs),
        loss=None if loss is None else tuple(loss),
        replication=tuple(replication),
        order_violations=None if violations is None else tuple(violations),
        unresolved=unresolved,
    )


def order_violations(log: Iterable[Delivery]) -> list[OrderViolation]:
    """Deliveries that went back in a key's order (see the module docstring), in log order."""
    streams: dict[tuple[str, str, str | None, str], list[Delivery]] = defaultdict(list)
    for d in log:
        streams[(d.topic, d.subscription, d.key, d.origin_region)].append(d)
    out: list[OrderViolation] = []
    for (topic, sub, key, origin), ds in sorted(streams.items(), key=lambda kv: repr(kv[0])):
        top: tuple[int, int, int] | None = None
        for d in sorted(ds, key=_delivery_order):
            here = (d.origin_ledger, d.origin_entry, -1 if d.batch_index is None else d.batch_index)
            if top is not None and here < top:
                out.append(
                    OrderViolation(
                        topic=topic,
                        subscription=sub,
                        key=key,
                        region=d.region,
                        origin_region=origin,
                        origin_ledger=d.origin_ledger,
                        origin_entry=d.origin_entry,
                        delivered_at=d.delivered_at,
                    )
                )
            top = here if top is None else max(top, here)
    return out


def _delivery_order(d: Delivery) -> tuple[int, int, int, int]:
    return (d.delivered_at, d.origin_ledger, d.origin_entry, -1 if d.batch_index is None else d.batch_index)
