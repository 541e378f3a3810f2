"""Origin coordinates and acknowledgements expressed in them.

Every message has one origin: the region where it was first published and its position there.
``Origin(region, position)`` names the same message in every region, so ack state written in origin
coordinates can be compared and merged between regions whose logs differ.

``OriginAcks`` holds, per origin region, closed spans of entries *within one origin ledger*.
``Span(ledger=L, first=a, last=b)`` in region R's acks claims: "a subscription acknowledged every message
whose origin is (R, L:e) for a <= e <= b". A span never crosses an origin ledger and there is no
"everything up to X" prefix, because a claimant only knows the origin entries that reached it: the
origin region may hold entries it never replicated to the claimant (its ledger ends, messages with other
replication clusters), and claiming a prefix or a cross-ledger range would acknowledge those in a third
region although no consumer received them. Within one origin ledger a claimant only builds a span from
consecutive entry ids it actually saw, so a span never covers an entry the claimant lacked.

Invariants:

* a ``Span`` is non-empty (``0 <= first <= last``);
* an ``OriginAcks`` is canonical: regions sorted, none empty, spans per region sorted, disjoint and not
  adjacent (``[a, b]`` and ``[b+1, c]`` in one ledger are stored as ``[a, c]``), so equal sets are equal
  values;
* ``merge`` is the set union: commutative, associative, idempotent and monotone (it never drops a
  claim).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from geosync_core.positions import Position


@dataclass(frozen=True, slots=True)
class Origin:
    """One message, named in every region: where it was first published, and its position there."""

    region: str
    position: Position

    def __str__(self) -> str:
        return f"{self.region}/{self.position}"


@dataclass(frozen=True, order=True, slots=True)
class Span:
    """The entries ``first..last`` (both included) of one ledger."""

    ledger: int
    first: int
    last: int

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last or self.ledger < 0:
            raise ValueError(f"not a span: {self.ledger}:[{self.first}..{self.last}]")

    def __contains__(self, position: Position) -> bool:
        return position.ledger == self.ledger and self.first <= position.entry <= self.last

    def __len__(self) -> int:
        return self.last - self.first + 1


def _canonical(spans: Iterable[Span]) -> tuple[Span, ...]:
    merged: list[Span] = []
    for s in sorted(spans):
        top = merged[-1] if merged else None
        if top is not None and top.ledger == s.ledger and s.first <= top.last + 1:
            merged[-1] = Span(s.ledger, top.first, max(top.last, s.last))
        else:
            merged.append(s)
    return tuple(merged)


@dataclass(frozen=True, slots=True)
class OriginAcks:
    """Acknowledged messages in origin coordinates; build it with ``OriginAcks.of``."""

    by_region: tuple[tuple[str, tuple[Span, ...]], ...] = ()

    def __post_init__(self) -> None:
        regions = [region for region, _ in self.by_region]
        if regions != sorted(set(regions)):
            raise ValueError(f"regions not canonical: {regions}")
        for region, spans in self.by_region:
            if not spans or _canonical(spans) != spans:
                raise ValueError(f"spans of {region!r} not canonical: {spans}")

    @classmethod
    def of(cls, spans: Mapping[str, Iterable[Span]] | Iterable[tuple[str, Iterable[Span]]]) -> OriginAcks:
        """The union of any spans per region, in canonical form (a region may appear more than once)."""
        items = spans.items() if isinstance(spans, Mapping) else spans
        gathered: dict[str, list[Span]] = {}
        for region, region_spans in items:
            gathered.setdefault(region, []).extend(region_spans)
        return cls(tuple((r, _canonical(s)) for r, s in sorted(gathered.items()) if s))

    def spans(self, region: str) -> tuple[Span, ...]:
        for r, spans in self.by_region:
            if r == region:
                return spans
        return ()

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(r for r, _ in self.by_region)

    def __contains__(self, origin: Origin) -> bool:
        spans = self.spans(origin.region)
        p = origin.position
        i = bisect.bisect_left(spans, (p.ledger, p.entry), key=lambda s: (s.ledger, s.last))
        return i < len(spans) and p in spans[i]

    def __bool__(self) -> bool:
        return bool(self.by_region)

    def merge(self, *others: OriginAcks) -> OriginAcks:
        """The union of this and other regions' claims."""
        return OriginAcks.of(item for acks in (self, *others) for item in acks.by_region)

    def count(self) -> int:
        """How many messages are claimed."""
        return sum(len(s) for _, spans in self.by_region for s in spans)
