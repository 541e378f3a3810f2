"""Sets of acknowledged positions: open-closed range sets and a cursor's ack state.

Pulsar describes what a subscription acknowledged with a mark-delete position ("everything up to here")
plus ``individuallyDeletedMessages``, a set of open-closed ranges above it, printed as
``"[(3:4..3:5],(3:7..3:10]]"`` where ``(a..b]`` holds every position ``p`` with ``a < p <= b``. The
same shape is PIP-379's "last sent position + individually sent positions" for Key_Shared. This module
is that structure as values, so cursor state read from a broker can be compared, merged and diffed.

Positions are only ordered, not enumerable: nothing here knows which entries exist in a log (a ledger's
last entry is unknown), so ranges that merely touch across a ledger boundary stay separate. Code that
knows the log passes its positions in (``AckState.holes``).

Invariants:

* a ``Range`` is non-empty: ``lower < upper``;
* a ``RangeSet`` is canonical: ranges sorted, disjoint and not touching (``(a..b]`` and ``(b..c]`` are
  stored as ``(a..c]``), so equal sets are equal values and ``parse(format(s)) == s``;
* an ``AckState`` is normalized: every range lies strictly above the mark-delete (a range starting at
  or below it is absorbed and advances the mark-delete);
* its ``batches`` (entries with some but not all batch indexes acknowledged) are sorted, partial, strictly
  above the mark-delete and outside the ranges: an entry whose last index is acknowledged becomes a
  whole-entry range at once (which may advance the mark-delete), and a whole-entry ack drops its partial,
  so equal sets of acknowledged messages are equal values;
* every operation is monotone at message level: acknowledging, cumulative acks and ``merge`` never
  un-acknowledge a message, and ``merge`` is the set union (commutative, associative, idempotent);
* ``position in state`` means the whole entry is acknowledged; a partly acknowledged entry is a hole
  (``holes``) until its last message is.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from geosync_core.batches import BatchAcks, Batches, check_canonical, gather
from geosync_core.positions import Position

_RANGE = re.compile(r"\s*\(([^.\]]+)\.\.([^\]]+)\]\s*")
_NUMBER = r"(-1|[0-9]+)"
_PLAIN = rf"\({_NUMBER}:{_NUMBER}\.\.{_NUMBER}:{_NUMBER}\]"
_PLAIN_RANGE = re.compile(_PLAIN)
"""One range of ``individuallyDeletedMessages`` as brokers print it."""


@dataclass(frozen=True, order=True, slots=True)
class Range:
    """The open-closed range ``(lower..upper]``: every position ``p`` with ``lower < p <= upper``."""

    lower: Position
    upper: Position

    def __post_init__(self) -> None:
        if not self.lower < self.upper:
            raise ValueError(f"empty range ({self.lower}..{self.upper}]")

    @classmethod
    def single(cls, position: Position) -> Range:
        """The range holding one entry, written as Pulsar writes an individual ack: ``(L:E-1..L:E]``."""
        return cls(Position(position.ledger, position.entry - 1), position)

    def __contains__(self, position: Position) -> bool:
        return self.lower < position <= self.upper

    def __str__(self) -> str:
        return f"({self.lower}..{self.upper}]"


def _key(r: Range) -> tuple[int, int, int, int]:
    lower, upper = r.lower, r.upper
    return (lower.ledger, lower.entry, upper.ledger, upper.entry)


_SEEN: dict[str, Range] = {}
"""Ranges as brokers print them -> the range (a pure function, so any of it is right): a feed reports a
cursor again at each acknowledgement, with thousands of ranges that were in its last report."""
SEEN_MAX = 50_000


def _plain_ranges(body: str) -> list[Range] | None:
    """The ranges of a list printed as brokers print it (``(L:E..L:E]`` between commas, spaces around them
    allowed); None for any other form. Raises ValueError for an empty range."""
    if len(_SEEN) > SEEN_MAX:
        _SEEN.clear()
    out = []
    for part in body.split(","):
        token = part.strip()
        found = _SEEN.get(token)
        if found is None:
            match = _PLAIN_RANGE.fullmatch(token)
            if match is None:
                return None
            a, b, c, d = match.groups()
            lower, upper = Position(int(a), int(b)), Position(int(c), int(d))
            if not (lower.ledger, lower.entry) < (upper.ledger, upper.entry):
                raise ValueError(f"empty range ({lower}..{upper}]")
            found = _SEEN[token] = _range(lower, upper)
        out.append(found)
    return out


def _upper_key(r: Range) -> tuple[int, int]:
    return (r.upper.ledger, r.upper.entry)


def _canonical(ranges: list[Range]) -> bool:
    """Whether ``ranges`` are sorted, apart and not touching, as brokers print them: then they are the set's
    canonical form already, and a cursor read at every acknowledgement need not be sorted and joined again."""
    top: tuple[int, int] | None = None
    for r in ranges:
        lower = (r.lower.ledger, r.lower.entry)
        if top is not None and lower <= top:
            return False
        top = (r.upper.ledger, r.upper.entry)
    return True


def _range(lower: Position, upper: Position) -> Range:
    """A range its caller checked non-empty, without checking it again."""
    made = object.__new__(Range)
    object.__setattr__(made, "lower", lower)
    object.__setattr__(made, "upper", upper)
    return made


@dataclass(frozen=True, slots=True)
class RangeSet:
    """A canonical set of open-closed ranges; build it with ``RangeSet.of`` or ``RangeSet.parse``."""

    ranges: tuple[Range, ...] = ()

    def __post_init__(self) -> None:
        for before, after in zip(self.ranges, self.ranges[1:], strict=False):
            if not before.upper < after.lower:
                raise ValueError(f"ranges not canonical: {before} then {after}")

    @classmethod
    def of(cls, ranges: Iterable[Range]) -> RangeSet:
        """The union of any ranges, in canonical form."""
        merged: list[Range] = []
        top = (0, 0)  # merged[-1].upper as integers: compared in C, not through Position's methods
        for r in sorted(ranges, key=_key):
            lower, upper = r.lower, r.upper
            if merged and (lower.ledger, lower.entry) <= top:
                if (upper.ledger, upper.entry) > top:
                    merged[-1] = Range(merged[-1].lower, upper)
                    top = (upper.ledger, upper.entry)
            else:
                merged.append(r)
                top = (upper.ledger, upper.entry)
        return cls._trusted(tuple(merged))

    @classmethod
    def _trusted(cls, ranges: tuple[Range, ...]) -> RangeSet:
        """A set ``of`` or ``above`` built canonical itself, without checking it again."""
        made = object.__new__(cls)
        object.__setattr__(made, "ranges", ranges)
        return made

    @classmethod
    def parse(cls, text: str) -> RangeSet:
        """Parse ``individuallyDeletedMessages`` (``"[]"``, ``"[(3:4..3:5],(3:7..3:10]]"``).

        Accepts ``", "`` between ranges too (Guava's rendering, used by older brokers). Raises
        ``ValueError`` on anything else.
        """
        body = text.strip()
        if not (body.startswith("[") and body.endswith("]")):
            raise ValueError(f"not a range set: {text!r}")
        body = body[1:-1]
        if not body.strip():
            return cls()
        plain = _plain_ranges(body)
        if plain is not None:
            return cls._trusted(tuple(plain)) if _canonical(plain) else cls.of(plain)
        ranges = []
        for part in body.split(","):
            match = _RANGE.fullmatch(part)
            if match is None:
                raise ValueError(f"not a range: {part!r} in {text!r}")
            ranges.append(Range(Position.parse(match[1]), Position.parse(match[2])))
        return cls.of(ranges)

    def __str__(self) -> str:
        return "[" + ",".join(map(str, self.ranges)) + "]"

    def __iter__(self) -> Iterator[Range]:
        return iter(self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __contains__(self, position: Position) -> bool:
        i = bisect.bisect_left(self.ranges, position, key=lambda r: r.upper)
        return i < len(self.ranges) and position in self.ranges[i]

    def union(self, other: Iterable[Range]) -> RangeSet:
        return RangeSet.of((*self.ranges, *other))

    def above(self, floor: Position) -> RangeSet:
        """The part of this set strictly above ``floor``."""
        if not self.ranges:
            return self
        at = (floor.ledger, floor.entry)
        first = bisect.bisect_right(self.ranges, at, key=_upper_key)  # the first range ending above it
        if first == len(self.ranges):
            return RangeSet()
        head = self.ranges[first]
        if (head.lower.ledger, head.lower.entry) >= at:
            return self if first == 0 else RangeSet._trusted(self.ranges[first:])
        return RangeSet._trusted((Range(floor, head.upper), *self.ranges[first + 1 :]))


_PARSED: dict[tuple[str, str], AckState] = {}
"""Cursors as ``internalStats`` prints them -> the state (a pure function of the text, as ``_SEEN``)."""
PARSED_MAX = 20_000


@dataclass(frozen=True, slots=True)
class AckState:
    """What a cursor acknowledged: everything up to ``mark_delete``, whole entries in ``ranges`` above
    it, and the acknowledged batch indexes of partly acknowledged entries in ``batches``."""

    mark_delete: Position
    ranges: RangeSet = RangeSet()
    batches: Batches = ()

    def __post_init__(self) -> None:
        if self.ranges and self.ranges.ranges[0].lower <= self.mark_delete:
            raise ValueError(f"not normalized: {self.ranges} at mark-delete {self.mark_delete}")
        check_canonical(self.batches)
        for position, _ in self.batches:
            if position <= self.mark_delete or position in self.ranges:
                raise ValueError(f"not normalized: partial ack of {position} already acknowledged whole")

    @classmethod
    def of(
        cls,
        mark_delete: Position,
        ranges: Iterable[Range] = (),
        batches: Mapping[Position, BatchAcks] | Iterable[tuple[Position, BatchAcks]] = (),
    ) -> AckState:
        """The normalized state: ranges starting at or below the mark-delete advance it, full batches
        become whole-entry ranges, partial batches already acknowledged whole are dropped."""
        # No batches (most cursors): nothing to gather, sort or drop (one cursor read per acknowledgement).
        partial = gather(batches) if not isinstance(batches, tuple | list) or batches else {}
        whole = [Range.single(p) for p, acks in partial.items() if acks.is_full]
        # A RangeSet is canonical already: only ranges added to it need sorting in.
        canonical = ranges if isinstance(ranges, RangeSet) and not whole else RangeSet.of((*ranges, *whole))
        rest = canonical.above(mark_delete)
        if rest and rest.ranges[0].lower == mark_delete:
            mark_delete, rest = rest.ranges[0].upper, RangeSet._trusted(rest.ranges[1:])
        kept = (
            sorted(
                (p, acks)
                for p, acks in partial.items()
                if acks.is_partial and p > mark_delete and p not in rest
            )
            if partial
            else ()
        )
        # Normalized by construction (the checks of __post_init__ cost as much again; tests run them).
        state = object.__new__(cls)
        object.__setattr__(state, "mark_delete", mark_delete)
        object.__setattr__(state, "ranges", rest)
        object.__setattr__(state, "batches", tuple(kept))
        return state

    @classmethod
    def parse(
        cls,
        mark_delete: str,
        individually_deleted: str = "[]",
        batches: Mapping[Position, BatchAcks] | Iterable[tuple[Position, BatchAcks]] = (),
    ) -> AckState:
        """Build from ``internalStats`` cursor fields ``markDeletePosition`` and
        ``individuallyDeletedMessages``, plus the partly acknowledged entries if the broker tracks batch
        indexes (``BatchAcks.from_unacked`` or ``from_ack_set`` read its convention)."""
        if isinstance(batches, tuple | list) and not batches:
            # A poll reads every cursor of its topic again, mostly as it was: the same text, the same value.
            key = (mark_delete, individually_deleted)
            found = _PARSED.get(key)
            if found is None:
                if len(_PARSED) >= PARSED_MAX:
                    _PARSED.clear()
                found = cls.of(Position.parse(mark_delete), RangeSet.parse(individually_deleted))
                _PARSED[key] = found
            return found
        return cls.of(Position.parse(mark_delete), RangeSet.parse(individually_deleted), batches)

    def __contains__(self, position: Position) -> bool:
        """Whether the whole entry is acknowledged."""
        return position <= self.mark_delete or position in self.ranges

    @property
    def reach(self) -> Position:
        """The highest position acknowledged, whole or in part (the mark-delete if nothing above it)."""
        # Both lie above the mark-delete (normalized); compared as integers (asked twice per claim decided).
        ranges, batches = self.ranges.ranges, self.batches
        top = ranges[-1].upper if ranges else self.mark_delete
        if batches:
            p = batches[-1][0]
            if (p.ledger, p.entry) > (top.ledger, top.entry):
                return p
        return top

    def batch(self, position: Position) -> BatchAcks | None:
        """The acknowledged indexes of ``position`` if it is partly acknowledged, else ``None``."""
        i = bisect.bisect_left(self.batches, position, key=lambda item: item[0])
        return self.batches[i][1] if i < len(self.batches) and self.batches[i][0] == position else None

    def acked_indexes(self, position: Position, size: int) -> BatchAcks:
        """The acknowledged messages of entry ``position`` read as a batch of ``size``."""
        if position in self:
            return BatchAcks.whole(size)
        partial = self.batch(position)
        return BatchAcks(size, 0) if partial is None else partial.within(size)

    def acks_message(self, position: Position, index: int) -> bool:
        """Whether batch index ``index`` of entry ``position`` is acknowledged (0 for an unbatched one)."""
        if position in self:
            return True
        partial = self.batch(position)
        return partial is not None and index in partial

    @property
    def highest(self) -> Position:
        """The highest wholly acknowledged position (the mark-delete when there are no ranges)."""
        return self.ranges.ranges[-1].upper if self.ranges else self.mark_delete

    def ack(self, *positions: Position) -> AckState:
        """Acknowledge individual entries."""
        if not positions:
            return self  # (a plan's individual acks, mostly none)
        return self.ack_ranges(map(Range.single, positions))

    def ack_ranges(self, ranges: Iterable[Range]) -> AckState:
        return AckState.of(self.mark_delete, self.ranges.union(ranges), self.batches)

    def ack_batches(
        self, batches: Mapping[Position, BatchAcks] | Iterable[tuple[Position, BatchAcks]]
    ) -> AckState:
        """Acknowledge batch indexes of entries (an entry all of whose indexes are then acknowledged
        becomes a whole-entry ack)."""
        items = batches.items() if isinstance(batches, Mapping) else batches
        if isinstance(items, tuple | list) and not items:
            return self  # nothing to add (most plans and writes): the same, already normalized value
        return AckState.of(self.mark_delete, self.ranges, (*self.batches, *items))

    def ack_indexes(self, position: Position, size: int, indexes: Iterable[int]) -> AckState:
        """Acknowledge ``indexes`` of the batch of ``size`` messages at ``position``."""
        return self.ack_batches([(position, BatchAcks.of(size, indexes))])

    def ack_cumulative(self, position: Position) -> AckState:
        """Acknowledge everything up to ``position``; never moves the mark-delete back."""
        if (position.ledger, position.entry) <= (self.mark_delete.ledger, self.mark_delete.entry):
            return self
        return AckState.of(position, self.ranges, self.batches)

    def covers_whole(self, other: AckState) -> bool:
        """Whether every whole entry ``other`` acknowledges (its mark-delete and ranges; batch indexes left
        out) this state acknowledges whole: ``self.merge(other)`` would add no whole entry. Without building
        the union (the agent asks it of every cursor the feed reports)."""
        if other.mark_delete > self.mark_delete:
            return False  # a canonical state holds nothing just above its mark-delete
        mine = self.ranges.ranges
        for r in other.ranges.ranges:
            if r.upper <= self.mark_delete:
                continue
            # The ranges of a canonical set neither overlap nor touch: r lies inside the first one ending at
            # or above it, or in none.
            i = bisect.bisect_left(mine, (r.upper.ledger, r.upper.entry), key=_upper_key)
            if i == len(mine) or mine[i].lower > r.lower:
                return False
        return True

    def merge(self, other: AckState) -> AckState:
        """The union of two states."""
        return AckState.of(
            max(self.mark_delete, other.mark_delete),
            self.ranges.union(other.ranges),
            (*self.batches, *other.batches),
        )

    def holes(self, existing: Iterable[Position]) -> list[Position]:
        """The positions among ``existing`` between the mark-delete and ``highest`` that are not wholly
        acknowledged (partly acknowledged entries included)."""
        top = self.highest
        return [p for p in existing if self.mark_delete < p < top and p not in self]
