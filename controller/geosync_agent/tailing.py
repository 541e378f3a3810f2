"""Tailing a region's topics to learn each local entry's origin coordinates.

A reader per topic partition hands messages to the runtime through a queue (the client's listener thread
never does more than ``put``); the runtime appends them to that partition's ``OriginIndex``, naming origins
with the one resolver every tool shares (``geosync_core.resolving``). Stamps are untrusted: an entry whose
stamp is malformed or whose origin cannot be named is not indexed but listed, so no mark-delete passes it.

Batched entries: the reader hands over every message of a batch, one after another; the first names the
entry's origin (``batched=True``: a batched replicated copy shows no stamp, see ``resolving``), the others
only tell the batch's size (highest batch index + 1) and their keys. Sizes are what batch-index
acknowledgements are planned with (``syncing.plan_apply(size_of=...)``) and keys what Key_Shared order is
judged with (``syncing.key_ordered(key_of_message=...)``); only keys that differ from the entry's first
message are kept per message.

An entry whose origin could not be named because the brokers could not answer (an admin error, a 404 from
a broker that lost its record for a moment) is retried with backoff (``retry``): once named it is filled
into the index out of order and leaves the unresolved list, so the mark-delete it held back moves again.
Malformed stamps are never retried: no answer can make them positions.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from geosync_adapters.messaging import Received
from geosync_agent.ports import Messaging, Reader
from geosync_core import resolving
from geosync_core.indexing import OriginIndex
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.positions import Position

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
RETRIES_PER_ROUND = 50
"""At most this many unresolved entries of one topic are asked about again per round (each costs calls)."""


@dataclass
class Pending:
    """An entry read but not indexed because its origin could not be named, kept to ask again."""

    properties: dict[str, str]
    producer: str
    batched: bool
    attempts: int = 1
    due: float = 0.0


@dataclass
class Tail:
    """One topic partition being read from its earliest retained entry."""

    topic: str
    partition: int
    index: OriginIndex = field(default_factory=OriginIndex)
    inbox: queue.SimpleQueue[Received] = field(default_factory=queue.SimpleQueue)
    reader: Reader | None = None
    last: Position | None = None
    markers: list[tuple[Position, dict[str, str], bytes]] = field(default_factory=list)
    """Snapshot markers read since the runtime last took them."""
    keys: dict[Position, str] = field(default_factory=dict)
    """Each indexed entry's ordering key (or partition key; "" without one), for Key_Shared order rules."""
    sizes: dict[Position, int] = field(default_factory=dict)
    """Batch sizes of the indexed batched entries (an entry absent here holds one message)."""
    message_keys: dict[tuple[Position, int], str] = field(default_factory=dict)
    """Keys of batched messages whose key differs from their entry's first message."""
    version: int = 0
    """Bumped whenever entries are indexed, so plans made from an older index are known to be stale."""
    bytes_read: int = 0
    messages_read: int = 0
    unresolved: list[Position] = field(default_factory=list)
    """Local entries whose origin could not be named: kept in the log so mark-delete never passes them."""
    pending: dict[Position, Pending] = field(default_factory=dict)
    """Unresolved entries (not malformed) to ask about again, with their backoff."""
    resolved_late: int = 0
    """Entries named by a retry after they were read."""
    malformed: int = 0
    """Entries skipped for a stamp that is not a position (set by an application, not a broker)."""
    resume_at: Position | None = None
    """Restored from a checkpoint: the reader starts at this entry (the last one read), not the earliest."""
    stale: bool = False
    """The reader's first message lay below ``resume_at``: the checkpoint does not match the topic any more
    (deleted and re-created, region rebuilt); the runtime rebuilds this tail from the earliest message."""
    reopen_at: float = 0.0
    """When to try opening the reader again after it could not be opened (monotonic)."""
    wake: threading.Event | None = None
    """Set on every message, to end the runtime's wait between rounds early (control topics)."""

    def listener(self, msg: Received) -> None:
        # Runs on the client's thread: hand over and return at once.
        self.inbox.put(msg)
        if self.wake is not None:
            self.wake.set()

    def open(self, messaging: Messaging) -> None:
        self.reader = messaging.reader(self.topic, self.listener, start=self.resume_at)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None

    def drain(
        self,
        resolver: resolving.OriginResolver,
        *,
        limit: int = 5000,
        now: float = 0.0,
    ) -> int:
        """Index up to ``limit`` queued messages; return how many entries were appended."""
        appended = 0
        for _ in range(limit):
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                break
            position = msg.position
            if self.resume_at is not None:
                if position < self.resume_at:
                    self.stale = True
                    return appended
                self.resume_at = None  # the checkpoint matches what the topic holds
            self.messages_read += 1
            self.bytes_read += len(msg.data)
            if self.last is not None and position <= self.last:
                if position == self.last and msg.batch_index > 0:
                    appended += self._more_of_batch(position, msg)
                continue  # else a redelivery after a reconnect
            self.last = position
            if MARKER_PROPERTY in msg.properties:
                # Snapshot markers are never dispatched to applications (the entry filter acknowledges them):
                # not indexed, not in any log a plan walks; handed to snapshot mode instead.
                self.markers.append((position, dict(msg.properties), msg.data))
                continue
            self.keys[position] = msg.ordering_key or msg.key or ""
            if msg.batch_index >= 0:
                self.sizes[position] = msg.batch_index + 1
            origin = resolver.origin_of(
                self.topic,
                position,
                properties=msg.properties,
                producer=msg.producer,
                batched=msg.batch_index >= 0,
            )
            if isinstance(origin, resolving.Malformed | resolving.Unresolved):
                # Cannot name it: not indexed, but listed, so mark-delete stops there (no guess).
                self.unresolved.append(position)
                if isinstance(origin, resolving.Malformed):
                    self.malformed += 1
                else:
                    self.pending[position] = Pending(
                        dict(msg.properties), msg.producer, msg.batch_index >= 0, due=now + RETRY_FIRST_S
                    )
                continue
            self.index.append(position, origin)
            appended += 1
        if appended:
            self.version += 1
        return appended

    def retry(
        self,
        resolver: resolving.OriginResolver,
        *,
        now: float,
        limit: int = RETRIES_PER_ROUND,
    ) -> int:
        """Ask again about the unresolved entries whose backoff is over (oldest first, at most ``limit``);
        fill the ones named now into the index. Return how many were filled."""
        due = [p for p, item in self.pending.items() if item.due <= now]
        filled = 0
        for position in sorted(due)[:limit]:
            item = self.pending[position]
            origin = resolver.origin_of(
                self.topic,
                position,
                properties=item.properties,
                producer=item.producer,
                batched=item.batched,
            )
            if isinstance(origin, resolving.Malformed | resolving.Unresolved):
                item.attempts += 1
                item.due = now + min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (item.attempts - 1))
                continue
            self.index.fill(position, origin)
            del self.pending[position]
            self.unresolved.remove(position)
            filled += 1
        if filled:
            self.resolved_late += filled
            self.version += 1
        return filled

    def to_wire(self) -> dict[str, Any]:
        """What a checkpoint keeps of this tail (see ``geosync_agent.checkpointing``)."""
        return {
            "index": self.index.to_wire(),
            "last": None if self.last is None else self.last.to_wire(),
            "keys": [[p.ledger, p.entry, k] for p, k in self.keys.items()],
            "sizes": [[p.ledger, p.entry, n] for p, n in self.sizes.items()],
            "message_keys": [[p.ledger, p.entry, i, k] for (p, i), k in self.message_keys.items()],
            "unresolved": [[p.ledger, p.entry] for p in self.unresolved],
            "pending": [
                [
                    p.ledger,
                    p.entry,
                    item.properties.get(resolving.REPL_SOURCE_POSITION),
                    item.producer,
                    item.batched,
                ]
                for p, item in self.pending.items()
            ],
        }

    @classmethod
    def from_wire(cls, topic: str, partition: int, value: Any) -> Tail:
        """A tail restored from ``to_wire``'s values, to resume reading at its last entry; ``ValueError``
        for anything else."""
        if not isinstance(value, dict):
            raise ValueError("not a tail")
        tail = cls(topic, partition, index=OriginIndex.from_wire(value.get("index")))
        tail.last = None if value.get("last") is None else Position.from_wire(value["last"])
        tail.resume_at = tail.last
        tail.keys = {Position(int(lg), int(e)): str(k) for lg, e, k in value.get("keys", [])}
        tail.sizes = {Position(int(lg), int(e)): int(n) for lg, e, n in value.get("sizes", [])}
        tail.message_keys = {
            (Position(int(lg), int(e)), int(i)): str(k) for lg, e, i, k in value.get("message_keys", [])
        }
        tail.unresolved = [Position(int(lg), int(e)) for lg, e in value.get("unresolved", [])]
        for lg, e, stamp, producer, batched in value.get("pending", []):
            properties = {} if stamp is None else {resolving.REPL_SOURCE_POSITION: str(stamp)}
            tail.pending[Position(int(lg), int(e))] = Pending(properties, str(producer), bool(batched))
        return tail

    def _more_of_batch(self, position: Position, msg: Received) -> int:
        """A further message of the batched entry just indexed: its size grows; 1 if plans must be redone."""
        size = msg.batch_index + 1
        if position in self.keys:
            key = msg.ordering_key or msg.key or ""
            if key != self.keys[position]:
                self.message_keys[(position, msg.batch_index)] = key
        if size <= self.sizes.get(position, 1):
            return 0
        self.sizes[position] = size
        return 1

    def has_read(self, position: Position) -> bool:
        """Whether every message of entry ``position`` (and all before it) has been indexed."""
        if self.last is None or self.last < position:
            return False
        return self.last > position or self.inbox.empty()

    def size_of(self, position: Position) -> int | None:
        """The number of messages in local entry ``position`` as read (None: not a batch, or not read)."""
        return self.sizes.get(position)

    def key_of_message(self, position: Position, index: int) -> str | None:
        """The key of message ``index`` of entry ``position`` (None: the entry was not read)."""
        return self.message_keys.get((position, index), self.keys.get(position))

    def forget_keys_up_to(self, floor: Position) -> None:
        """Drop keys, sizes and unresolved entries at or below ``floor`` (every tracked subscription
        acknowledged them)."""
        if self.keys and next(iter(self.keys)) <= floor:
            self.keys = {p: k for p, k in self.keys.items() if p > floor}
        if self.sizes and next(iter(self.sizes)) <= floor:
            self.sizes = {p: n for p, n in self.sizes.items() if p > floor}
        if self.message_keys and next(iter(self.message_keys))[0] <= floor:
            self.message_keys = {pk: k for pk, k in self.message_keys.items() if pk[0] > floor}
        if self.unresolved and self.unresolved[0] <= floor:
            # Every tracked subscription acknowledged them here: their origin no longer matters.
            self.unresolved = [p for p in self.unresolved if p > floor]
            self.pending = {p: item for p, item in self.pending.items() if p > floor}

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
