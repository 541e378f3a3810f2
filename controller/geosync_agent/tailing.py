"""Tailing a region's topics to learn each local entry's origin coordinates.

A reader per topic partition hands messages to the runtime through a queue (the client's listener thread
never does more than ``put``); the runtime appends them to that partition's ``OriginIndex``. A local
message's origin is itself. A replicated copy carries its origin position in
``__MSG_PROP_REPL_SOURCE_POSITION``, but not the origin region: with two regions that is the other one;
with more, the producer name decides when the broker generated it (``<cluster>-<n>-<n>``, verified once
per name), and otherwise the entry's ``X-Pulsar-replicated-from`` header is read from the local admin API.
Ledger ids of different regions collide, so positions alone never decide.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulsar

from geosync_adapters.messaging import REPL_SOURCE_POSITION
from geosync_core import drift
from geosync_core.indexing import OriginIndex
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.origins import Origin
from geosync_core.positions import Position

Lookup = Callable[[str, Position], "str | None"]


class OriginResolver:
    """Names the origin region of replicated entries in one region (see module docstring)."""

    def __init__(self, *, local: str, lookup: Lookup) -> None:
        self.local = local
        self.lookup = lookup
        self._by_producer: dict[str, str] = {}
        self.lookups = 0

    def resolve(
        self, topic: str, local: Position, *, producer: str, candidates: frozenset[str]
    ) -> str | None:
        named = drift.origin_without_lookup(
            self.local, candidates, producer=producer, verified=self._by_producer
        )
        if named is not None:
            return named
        self.lookups += 1
        region = self.lookup(topic, local)
        if region is not None and drift.producer_cluster(producer) == region:
            # A broker-generated name is unique to the cluster that generated it: remember it.
            self._by_producer[producer] = region
        return region


@dataclass
class Tail:
    """One topic partition being read from its earliest retained entry."""

    topic: str
    partition: int
    index: OriginIndex = field(default_factory=OriginIndex)
    inbox: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    reader: Any = None
    last: Position | None = None
    markers: list[tuple[Position, dict[str, str], bytes]] = field(default_factory=list)
    """Snapshot markers read since the runtime last took them."""
    keys: dict[Position, str] = field(default_factory=dict)
    """Each indexed entry's ordering key (or partition key; "" without one), for Key_Shared order rules."""
    version: int = 0
    """Bumped whenever entries are indexed, so plans made from an older index are known to be stale."""
    bytes_read: int = 0
    messages_read: int = 0
    unresolved: list[Position] = field(default_factory=list)
    """Local entries whose origin could not be named: kept in the log so mark-delete never passes them."""
    wake: threading.Event | None = None
    """Set on every message, to end the runtime's wait between rounds early (control topics)."""

    def listener(self, _reader: Any, msg: Any) -> None:
        # Runs on the client's thread: hand over and return at once.
        self.inbox.put(msg)
        if self.wake is not None:
            self.wake.set()

    def open(self, client: pulsar.Client) -> None:
        # The "geosync-" subscription prefix lets the broker plugins' entry filter show us snapshot markers.
        self.reader = client.create_reader(
            self.topic,
            pulsar.MessageId.earliest,
            reader_listener=self.listener,
            receiver_queue_size=1000,
            subscription_role_prefix="geosync-tail",
        )

    def close(self) -> None:
        if self.reader is not None:
            with contextlib.suppress(pulsar.PulsarException):
                self.reader.close()
            self.reader = None

    def drain(self, resolver: OriginResolver, candidates: frozenset[str], *, limit: int = 5000) -> int:
        """Index up to ``limit`` queued messages; return how many entries were appended."""
        appended = 0
        for _ in range(limit):
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                break
            mid = msg.message_id()
            position = Position(mid.ledger_id(), mid.entry_id())
            self.messages_read += 1
            self.bytes_read += len(msg.data())
            if self.last is not None and position <= self.last:
                continue  # another message of the same batch entry, or a redelivery after reconnect
            properties = msg.properties()
            if MARKER_PROPERTY in properties:
                # Snapshot markers are never dispatched to applications (the entry filter acknowledges them):
                # not indexed, not in any log a plan walks; handed to snapshot mode instead.
                self.markers.append((position, dict(properties), msg.data()))
                self.last = position
                continue
            self.keys[position] = msg.ordering_key() or msg.partition_key() or ""
            stamp = properties.get(REPL_SOURCE_POSITION)
            if stamp is None:
                origin = Origin(resolver.local, position)
            else:
                region = resolver.resolve(
                    self.topic, position, producer=msg.producer_name(), candidates=candidates
                )
                if region is None:
                    # Cannot name it: not indexed, but listed, so mark-delete stops there (no guess).
                    self.unresolved.append(position)
                    self.last = position
                    continue
                origin = Origin(region, Position.parse(stamp))
            self.index.append(position, origin)
            self.last = position
            appended += 1
        if appended:
            self.version += 1
        return appended

    def forget_keys_up_to(self, floor: Position) -> None:
        """Drop keys of entries at or below ``floor`` (every tracked subscription acknowledged them)."""
        if self.keys and next(iter(self.keys)) <= floor:
            self.keys = {p: k for p, k in self.keys.items() if p > floor}

    def positions_above(self, floor: Position) -> list[Position]:
        """Every indexed local entry above ``floor``, in order (what a consumer could be dispatched)."""
        out: list[Position] = []
        for run in self.index:
            if Position(run.local_ledger, run.local_last) <= floor:
                continue
            start = run.local_first
            if run.local_ledger == floor.ledger:
                start = max(start, floor.entry + 1)
            elif run.local_ledger < floor.ledger:
                continue
            out.extend(Position(run.local_ledger, e) for e in range(start, run.local_last + 1))
        if self.unresolved:
            out = sorted({*out, *(p for p in self.unresolved if p > floor)})
        return out
