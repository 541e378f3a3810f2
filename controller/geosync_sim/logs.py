"""The simulated logs: entries and their messages, topics, and the cursors of subscriptions.

Why apart from ``world``: these are values with the rules of one topic (a cursor's acknowledgements, its
mark-delete moving over deleted entries); ``world`` moves them between regions on virtual time.

Each rule cites the Pulsar class it follows (``ManagedLedgerImpl``, ``ManagedCursorImpl``: see ``world``'s
docstring for the list).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geosync_core.positions import Position
from geosync_core.rangesets import AckState

WALL0 = 1_800_000_000.0
"""The wall clock (seconds) at virtual time 0: publish times and incarnations are wall-clock milliseconds."""

Ident = tuple[str, int, int, int]
"""A message's identity in every region: (origin region, origin ledger, origin entry, batch index)."""


@dataclass(frozen=True, slots=True)
class Msg:
    key: str
    producer: str
    seq: int
    props: tuple[tuple[str, str], ...] = ()
    """The properties its application set (a hostile producer's: a forged stamp, the marker property,
    garbage), in the order it set them."""
    data: bytes = b""
    """Its payload, kept only where something reads it (a message carrying the marker property)."""


@dataclass(slots=True)
class Entry:
    eid: int
    origin: str
    source: Position
    """The entry's position in its origin region."""
    msgs: tuple[Msg, ...]
    batched: bool
    at: float
    replicated_from: str | None = None
    data: bytes = b""
    """A control envelope (control topics only)."""
    life: int = 0
    """Which life of its origin region published it (0: the first; a rebuild starts another)."""
    published: float = 0.0
    """When its origin published it: a replicated copy keeps its origin's publish time (the replicator sends
    the entry's metadata, and ``ProducerImpl.updateMessageMetadata`` sets a publish time only on a message
    that has none)."""

    @property
    def publish_ms(self) -> int:
        """The publish time a client reads (wall-clock milliseconds)."""
        return int((WALL0 + self.published) * 1000)

    def ident(self, index: int) -> Ident:
        return (lived(self.origin, self.life), self.source.ledger, self.source.entry, index)


def lived(region: str, life: int) -> str:
    """The checker's name of ``region`` in its ``life`` (``c``, then ``c~1`` after a rebuild); agents see the
    region's name only."""
    return region if life == 0 else f"{region}~{life}"


@dataclass
class Topic:
    name: str
    ledger: int
    entries: list[Entry] = field(default_factory=list)

    def position(self, eid: int) -> Position:
        return Position(self.ledger, eid)

    @property
    def last(self) -> int:
        return len(self.entries) - 1


@dataclass
class Cursor:
    """Mark-delete, deleted entries above it, and acknowledged indexes of partly acknowledged batches."""

    md: int = -1
    acked: set[int] = field(default_factory=set)
    partial: dict[int, set[int]] = field(default_factory=dict)
    printed: tuple[tuple[int, int, frozenset[int]], AckState] | None = field(
        default=None, compare=False, repr=False
    )
    """((ledger, md, acked), the ack state ``ports.ack_state`` made of them): polls read a cursor again and
    again as it was."""

    def copy(self) -> Cursor:
        return Cursor(self.md, set(self.acked), {e: set(p) for e, p in self.partial.items()})

    def has(self, e: int, i: int) -> bool:
        if e <= self.md or e in self.acked:
            return True
        part = self.partial.get(e)
        return part is not None and i in part

    def entry_done(self, e: int) -> bool:
        return e <= self.md or e in self.acked

    def _advance(self) -> None:
        while self.md + 1 in self.acked:
            self.md += 1
            self.acked.discard(self.md)
            self.partial.pop(self.md, None)

    def ack_entry(self, topic: Topic, e: int) -> list[tuple[int, int]]:
        if self.entry_done(e) or e > topic.last:
            return []
        part = self.partial.pop(e, set())
        newly = [(e, i) for i in range(len(topic.entries[e].msgs)) if i not in part]
        self.acked.add(e)
        self._advance()
        return newly

    def ack_index(self, topic: Topic, e: int, i: int) -> list[tuple[int, int]]:
        if self.has(e, i) or e > topic.last:
            return []
        size = len(topic.entries[e].msgs)
        part = self.partial.setdefault(e, set())
        part.add(i)
        if len(part) >= size:
            del self.partial[e]
            self.acked.add(e)
            self._advance()
        return [(e, i)]

    def ack_through(self, topic: Topic, e: int) -> list[tuple[int, int]]:
        """Cumulative: everything up to entry ``e`` included (forward only)."""
        e = min(e, topic.last)
        newly: list[tuple[int, int]] = []
        for x in range(self.md + 1, e + 1):
            if x in self.acked:
                continue
            part = self.partial.get(x, set())
            newly.extend((x, i) for i in range(len(topic.entries[x].msgs)) if i not in part)
        if e > self.md:
            self.md = e
            self.acked = {x for x in self.acked if x > e}
            self.partial = {x: p for x, p in self.partial.items() if x > e}
            self._advance()
        return newly

    def reset(self, md: int) -> None:
        self.md = md
        self.acked.clear()
        self.partial.clear()


@dataclass
class Subscription:
    name: str
    kind: str
    cursor: Cursor
    next_read: int = 0
    """The next entry the region's consumer is dispatched (a new consumer starts at the mark-delete)."""
    consumers: int = 0
    """Application consumers connected."""
    persisted: Cursor | None = None
    """The cursor as its broker last wrote it to the cursor ledger (what a broker killed leaves)."""
    persisted_at: float = -1e9
    dispatched: bool = False
    """A consumer connected since the topic was loaded: the broker made the subscription's dispatcher, whose
    type the stats report; until then they report ``None`` (``PersistentSubscription`` makes its dispatcher
    in ``addConsumer`` and reads the type off it). A region where nobody consumed does not know the type."""
