"""Acknowledgements inside one batched entry: which batch indexes of an entry are acknowledged.

Pulsar producers batch by default: one entry holds ``size`` messages, batch indexes ``0..size-1``, and
brokers with batch-index acknowledgement track them one by one. Geo-replication keeps batch layout (one
source entry is one target entry, batch index ``i`` stays ``i``), so a message is named in every region
by its origin coordinates plus its batch index, and the acknowledged indexes of one entry are a bitset
that means the same thing everywhere.

``BatchAcks(size, acked)`` is that bitset: bit ``i`` of ``acked`` set means batch index ``i`` is
acknowledged. Cursor state (``rangesets.AckState.batches``) and claims in origin coordinates
(``origins.OriginAcks.partials``) keep only *partial* values, neither empty (nothing to say) nor full (a
full entry is a whole-entry acknowledgement and lives in their ranges or spans instead), so that equal
sets of acknowledged messages are equal values.

Pulsar itself speaks the other way round: a cursor's ``ackSet`` (``long[]`` words of a Java ``BitSet``)
has a bit set for every index still *unacknowledged*; ``from_unacked`` and ``from_ack_set`` read that.

Invariants:

* ``1 <= size <= MAX_BATCH_SIZE`` and ``0 <= acked < 2**size``: no index beyond the batch;
* ``union`` is the set union of acknowledged indexes: commutative, associative, idempotent, monotone;
  two values for one entry have one size in practice (layout is kept), and should they not, the union
  keeps the larger size so that merging never fails (readers judge fullness against the size they know,
  see ``within``);
* ``BatchAcks.of(size, b.indexes()) == b`` and ``from_hex(size, b.hex()) == b`` for every ``b``; ``hex``
  is the one canonical spelling (lowercase, no leading zeros) and ``from_hex`` accepts nothing else;
* ``from_unacked(size, u).indexes()`` is exactly ``range(size)`` without ``u``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from geosync_core.positions import Position

MAX_BATCH_SIZE = 65536
"""The largest batch accepted (Pulsar's default ``batchingMaxMessages`` is 1000); larger is refused."""

_HEX = re.compile(r"[1-9a-f][0-9a-f]*|0")
_WORD = 2**64 - 1


@dataclass(frozen=True, order=True, slots=True)
class BatchAcks:
    """The acknowledged batch indexes of one entry of ``size`` messages, as a bitset."""

    size: int
    acked: int

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_BATCH_SIZE or not 0 <= self.acked < 1 << self.size:
            raise ValueError(f"not a batch ack set: size {self.size}, bits {self.acked:#x}")

    @classmethod
    def of(cls, size: int, indexes: Iterable[int]) -> BatchAcks:
        """The set of ``indexes`` (each in ``[0, size)``, else ``ValueError``) of a batch of ``size``."""
        bits = 0
        for i in indexes:
            if not 0 <= i < size:
                raise ValueError(f"batch index {i} outside a batch of {size}")
            bits |= 1 << i
        return cls(size, bits)

    @classmethod
    def whole(cls, size: int) -> BatchAcks:
        return cls(size, (1 << size) - 1)

    @classmethod
    def from_unacked(cls, size: int, unacked_indexes: Iterable[int]) -> BatchAcks:
        """From Pulsar's convention: the indexes listed are the ones *not* acknowledged yet."""
        return cls(size, cls.whole(size).acked & ~cls.of(size, unacked_indexes).acked)

    @classmethod
    def from_ack_set(cls, size: int, words: Sequence[int]) -> BatchAcks:
        """From a cursor's or a command's ``ackSet``: ``long[]`` words of a Java ``BitSet`` (word ``j``
        bit ``k`` is index ``64*j + k``; set = unacknowledged; Java's signed longs welcome)."""
        unacked = sum((w & _WORD) << (64 * j) for j, w in enumerate(words))
        return cls(size, cls.whole(size).acked & ~unacked)

    @classmethod
    def from_hex(cls, size: int, text: str) -> BatchAcks:
        """Parse ``hex()``'s spelling; raise ``ValueError`` on any other (leading zeros, upper case)."""
        if len(text) > (size + 3) // 4 or not _HEX.fullmatch(text):
            raise ValueError(f"not a batch bitset: {text[:40]!r}")
        return cls(size, int(text, 16))

    def hex(self) -> str:
        """The bitset as lowercase hex without leading zeros: size 8, indexes {0, 2, 5} -> ``"25"``."""
        return f"{self.acked:x}"

    @property
    def is_empty(self) -> bool:
        return self.acked == 0

    @property
    def is_full(self) -> bool:
        return self.acked == (1 << self.size) - 1

    @property
    def is_partial(self) -> bool:
        """Neither empty nor full: the only form cursor state and claims keep."""
        return not (self.is_empty or self.is_full)

    def __contains__(self, index: int) -> bool:
        return 0 <= index < self.size and bool(self.acked >> index & 1)

    def __len__(self) -> int:
        """How many indexes are acknowledged."""
        return self.acked.bit_count()

    def indexes(self) -> tuple[int, ...]:
        """The acknowledged indexes, ascending."""
        return tuple(i for i in range(self.size) if self.acked >> i & 1)

    def unacked_indexes(self) -> tuple[int, ...]:
        """The indexes not acknowledged, ascending (Pulsar's convention)."""
        return tuple(i for i in range(self.size) if not self.acked >> i & 1)

    def union(self, other: BatchAcks) -> BatchAcks:
        return BatchAcks(max(self.size, other.size), self.acked | other.acked)

    def within(self, size: int) -> BatchAcks:
        """The same acknowledged indexes read as a batch of ``size`` (indexes beyond it dropped)."""
        return BatchAcks(size, self.acked & ((1 << size) - 1))


Batches = tuple[tuple[Position, BatchAcks], ...]
"""Partly acknowledged entries, sorted by position, one value each, every value partial."""


def gather(
    items: Mapping[Position, BatchAcks] | Iterable[tuple[Position, BatchAcks]],
) -> dict[Position, BatchAcks]:
    """The union per position of any (position, acks) pairs, a position may appear more than once."""
    pairs = items.items() if isinstance(items, Mapping) else items
    gathered: dict[Position, BatchAcks] = {}
    for position, acks in pairs:
        if position.entry < 0:
            raise ValueError(f"not an entry: {position}")
        seen = gathered.get(position)
        gathered[position] = acks if seen is None else seen.union(acks)
    return gathered


def check_canonical(batches: Batches) -> None:
    """Raise ``ValueError`` unless ``batches`` is sorted, without repeats, and every value partial."""
    for (before, _), (after, _) in itertools.pairwise(batches):
        if not before < after:
            raise ValueError(f"batches not canonical: {before} then {after}")
    for position, acks in batches:
        if not acks.is_partial or position.entry < 0:
            raise ValueError(f"not a partial batch ack: {position} {acks}")
