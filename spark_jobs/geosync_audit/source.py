"""Reading every region's topics and cursors for the audit: the ``pulsar-geo`` PySpark data source.

Why a data source: the audit must see every copy of every message in every region, and one Spark task per
topic partition and position range spreads that reading over the cluster. Planning (on the driver's
planner) asks each region's admin API for the topic partitions of the audited namespaces and each
partition's ledgers (``internalStats``), bounds the log at its last confirmed entry at plan time, and
splits it into ranges of at most ``maxEntriesPerSplit`` entries (``geosync_core.drift.read_ranges``).
Each task reads its range with a pulsar-client reader and names each copy's origin with the agent's
rule (``geosync_core.resolving``, else the entry's ``X-Pulsar-replicated-from`` header).

Cursors are small: ``cursor_rows`` reads them on the driver from ``internalStats`` (durable
subscriptions only, per ``stats``; replicator cursors left out). The job reads cursors *before* planning
the message read, so every acknowledged position is at or below the bounds the messages are read to.

Options of ``spark.read.format("pulsar-geo")``: ``topology`` (path of topology.json, required),
``regions`` and ``namespaces`` (comma lists, default all), ``topics`` (a regular expression searched in
the full topic name), ``maxEntriesPerSplit`` (default 50000), ``timeoutSeconds`` (default 30).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminNotFound
from geosync_adapters.adminorigins import header_resolver
from geosync_core import drift
from geosync_core import topology as topo
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from geosync_core.resolving import Malformed, Unresolved, stamp_of

MESSAGES_SCHEMA = (
    "region STRING, topic STRING, partition INT, ledger BIGINT, entry BIGINT, batch_index INT, "
    "origin_region STRING, origin_ledger BIGINT, origin_entry BIGINT, key STRING, publish_time BIGINT, "
    "properties MAP<STRING, STRING>"
)
CURSORS_SCHEMA = (
    "region STRING, topic STRING, partition INT, subscription STRING, mark_delete_ledger BIGINT, "
    "mark_delete_entry BIGINT, ranges ARRAY<STRUCT<lower_ledger: BIGINT, lower_entry: BIGINT, "
    "upper_ledger: BIGINT, upper_entry: BIGINT>>"
)
REPLICATOR_CURSOR = "pulsar.repl."


@dataclass(frozen=True)
class Scope:
    """What to audit: which regions, namespaces and topics of a topology."""

    topology: topo.Topology
    regions: tuple[str, ...]
    namespaces: tuple[str, ...]
    topics: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Scope:
        path = options.get("topology")
        if not path:
            raise ValueError("pulsar-geo: the 'topology' option (path of topology.json) is required")
        topology = topo.from_json(pathlib.Path(path).read_text())
        regions = _list(options.get("regions")) or tuple(sorted(topology.regions))
        namespaces = _list(options.get("namespaces")) or tuple(sorted(topology.namespaces))
        return cls(topology, regions, namespaces, options.get("topics") or None)

    def options(self, path: str) -> dict[str, str]:
        out = {"topology": path, "regions": ",".join(self.regions), "namespaces": ",".join(self.namespaces)}
        if self.topics:
            out["topics"] = self.topics
        return out

    def candidates(self, namespace: str) -> frozenset[str]:
        """The regions a namespace replicates to (every region of the topology if it is not listed)."""
        ns = self.topology.namespaces.get(namespace)
        return frozenset(ns.regions if ns else self.topology.regions)

    def expected(self) -> dict[str, list[str]]:
        """Per audited namespace, the audited regions it replicates to."""
        return {ns: sorted(self.candidates(ns) & set(self.regions)) for ns in self.namespaces}

    def admin(self, region: str, timeout_s: float = 10.0) -> AdminClient:
        return AdminClient(self.topology.region(region).admin_url, timeout=timeout_s)

    def partitions(self, region: str) -> list[tuple[str, str, int]]:
        """``(namespace, topic, partition)`` of every persistent topic partition audited in ``region``."""
        pattern = re.compile(self.topics) if self.topics else None
        admin = self.admin(region)
        controls = {ns.control_topic for ns in self.topology.namespaces.values() if ns.control_topic}
        out = []
        for namespace in self.namespaces:
            if region not in self.candidates(namespace):
                continue
            try:
                names = admin.topics(namespace)
            except AdminNotFound:
                continue
            for name in names:
                if not name.startswith("persistent://"):
                    continue
                topic, partition = drift.split_partition(name)
                if topic in controls or (pattern is not None and not pattern.search(topic)):
                    continue
                out.append((namespace, topic, partition))
        return sorted(set(out))


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


# -- cursors (driver) ------------------------------------------------------------------------------


def cursor_rows(scope: Scope) -> list[tuple[Any, ...]]:
    """One row per durable subscription and topic partition in every audited region (``CURSORS_SCHEMA``)."""
    rows: list[tuple[Any, ...]] = []
    for region in scope.regions:
        admin = scope.admin(region)
        for _ns, topic, partition in scope.partitions(region):
            name = drift.partition_name(topic, partition)
            try:
                durable = {
                    sub
                    for sub, st in (admin.topic_stats(name).get("subscriptions") or {}).items()
                    if st.get("isDurable", True) and not sub.startswith(REPLICATOR_CURSOR)
                }
                cursors = admin.internal_stats(name).get("cursors") or {}
            except AdminNotFound:
                continue
            for sub, raw in sorted(cursors.items()):
                if sub not in durable:
                    continue
                state = AckState.parse(
                    raw["markDeletePosition"], raw.get("individuallyDeletedMessages", "[]")
                )
                ranges = [
                    (r.lower.ledger, r.lower.entry, r.upper.ledger, r.upper.entry) for r in state.ranges
                ]
                rows.append(
                    (
                        region,
                        topic,
                        partition,
                        sub,
                        state.mark_delete.ledger,
                        state.mark_delete.entry,
                        ranges,
                    )
                )
    return rows


# -- messages (the data source) --------------------------------------------------------------------


@dataclass(frozen=True)
class Split(InputPartition):
    """One task's read: a topic partition of one region, from ``first`` to ``last`` (both included)."""

    region: str
    namespace: str
    topic: str
    partition: int
    first: tuple[int, int]
    last: tuple[int, int]


def plan(scope: Scope, max_entries: int) -> list[Split]:
    splits: list[Split] = []
    for region in scope.regions:
        admin = scope.admin(region)
        for namespace, topic, partition in scope.partitions(region):
            try:
                stats = admin.internal_stats(drift.partition_name(topic, partition))
            except AdminNotFound:
                continue
            sizes = drift.ledger_sizes(stats.get("ledgers") or [], stats.get("lastConfirmedEntry") or "")
            for first, last in drift.read_ranges(sizes, max_entries):
                splits.append(
                    Split(
                        region,
                        namespace,
                        topic,
                        partition,
                        (first.ledger, first.entry),
                        (last.ledger, last.entry),
                    )
                )
    return splits


def read_split(scope: Scope, split: Split, timeout_s: int) -> Iterator[tuple[Any, ...]]:
    """Every message of one split, as ``MESSAGES_SCHEMA`` rows."""
    import pulsar

    from geosync_adapters import messaging

    name = drift.partition_name(split.topic, split.partition)
    resolver = header_resolver(split.region, scope.admin(split.region))
    last = Position(*split.last)
    with messaging.client(scope.topology.region(split.region).service_url, timeout_s=timeout_s) as c:
        start = pulsar.MessageId(-1, split.first[0], split.first[1], -1)
        reader = c.create_reader(name, start, start_message_id_inclusive=True, receiver_queue_size=2000)
        try:
            while reader.has_message_available():
                try:
                    msg = reader.read_next(timeout_millis=timeout_s * 1000)
                except pulsar.Timeout:
                    break
                mid = msg.message_id()
                local = Position(mid.ledger_id(), mid.entry_id())
                if local > last:
                    break
                props = dict(msg.properties())
                named = resolver.origin_of(
                    name,
                    local,
                    properties=props,
                    producer=msg.producer_name(),
                    batched=mid.batch_index() >= 0,
                )
                if isinstance(named, Malformed):
                    continue  # an application's stamp, not a broker's: no origin to join on
                if isinstance(named, Unresolved):
                    origin_region: str | None = None
                    stamped = stamp_of(props)
                    origin = stamped if isinstance(stamped, Position) else local
                else:
                    origin_region, origin = named.region, named.position
                yield (
                    split.region,
                    split.topic,
                    split.partition,
                    local.ledger,
                    local.entry,
                    mid.batch_index(),
                    origin_region,
                    origin.ledger,
                    origin.entry,
                    msg.partition_key() or None,
                    msg.publish_timestamp(),
                    props,
                )
        finally:
            reader.close()


class PulsarGeoReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[Split]:
        scope = Scope.from_options(self.options)
        return plan(scope, int(self.options.get("maxEntriesPerSplit", "50000")))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, Split):
            raise TypeError(f"pulsar-geo: not a split of this source: {partition!r}")
        scope = Scope.from_options(self.options)
        yield from read_split(scope, partition, int(self.options.get("timeoutSeconds", "30")))


class PulsarGeoDataSource(DataSource):
    """``spark.read.format("pulsar-geo").option("topology", PATH)...load()``: every copy of every
    message of the audited topics in every audited region (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "pulsar-geo"

    def schema(self) -> str:
        return MESSAGES_SCHEMA

    def reader(self, schema: Any) -> PulsarGeoReader:
        return PulsarGeoReader(self.options)
