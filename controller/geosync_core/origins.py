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

Batched entries may be claimed in part: ``partials`` holds, per origin region, origin entries of which
some batch indexes were acknowledged (``BatchAcks``), only for entries not covered by that region's spans.
Batch layout survives replication, so ``(origin, index)`` names one message everywhere.

Invariants:

* a ``Span`` is non-empty (``0 <= first <= last``);
* an ``OriginAcks`` is canonical: regions sorted, none empty, spans per region sorted, disjoint and not
  adjacent (``[a, b]`` and ``[b+1, c]`` in one ledger are stored as ``[a, c]``); partials per region
  sorted, partial (neither empty nor full) and outside the region's spans: a partial that becomes full is
  a one-entry span at once (whole entries merge into spans as soon as they complete), so equal sets of
  claimed messages are equal values;
* ``merge`` is the set union at message level: spans united, bitsets OR'ed, commutative, associative,
  idempotent and monotone (it never drops a claim);
* ``without(regions)`` is canonical and holds exactly the claims about the other regions;
  ``renamed(r, name)`` holds the same messages, those of ``r`` as ``name``'s;
* ``origin in acks`` and ``count()`` speak of whole entries; ``acks_message(origin, index)`` of messages.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from geosync_core.batches import BatchAcks, Batches, check_canonical, gather
from geosync_core.positions import Position

T = TypeVar("T")
PartialsArg = (
    Mapping[str, Iterable[tuple[Position, BatchAcks]]]
    | Iterable[tuple[str, Iterable[tuple[Position, BatchAcks]]]]
)


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


_SPAN_KEY = operator.attrgetter("ledger", "first", "last")
_SPAN_END = operator.attrgetter("ledger", "last")
"""Spans sorted and searched on C-level keys, not through their generated comparisons (claims hold
thousands)."""


def _canonical(spans: Iterable[Span]) -> tuple[Span, ...]:
    merged: list[Span] = []
    for s in sorted(spans, key=_SPAN_KEY):
        top = merged[-1] if merged else None
        if top is not None and top.ledger == s.ledger and s.first <= top.last + 1:
            if s.last > top.last:
                merged[-1] = Span(s.ledger, top.first, s.last)
        else:
            merged.append(s)
    return tuple(merged)


@dataclass(frozen=True, slots=True)
class OriginAcks:
    """Acknowledged messages in origin coordinates; build it with ``OriginAcks.of``."""

    by_region: tuple[tuple[str, tuple[Span, ...]], ...] = ()
    partials: tuple[tuple[str, Batches], ...] = ()

    def __post_init__(self) -> None:
        for what, items in (("regions", self.by_region), ("partial regions", self.partials)):
            regions = [region for region, _ in items]
            if regions != sorted(set(regions)):
                raise ValueError(f"{what} not canonical: {regions}")
        for region, spans in self.by_region:
            if not spans or _canonical(spans) != spans:
                raise ValueError(f"spans of {region!r} not canonical: {spans}")
        for region, batches in self.partials:
            check_canonical(batches)
            if not batches or any(_covers(self.spans(region), p) for p, _ in batches):
                raise ValueError(f"partials of {region!r} not canonical: {batches}")

    @classmethod
    def of(
        cls,
        spans: Mapping[str, Iterable[Span]] | Iterable[tuple[str, Iterable[Span]]],
        partials: PartialsArg = (),
    ) -> OriginAcks:
        """The union of any spans and partial claims per region, in canonical form (a region may appear
        more than once; a partial that is full becomes a span, one covered by a span is dropped)."""
        gathered: dict[str, list[Span]] = {}
        for region, region_spans in _items(spans):
            gathered.setdefault(region, []).extend(region_spans)
        pairs: dict[str, list[tuple[Position, BatchAcks]]] = {}
        for region, region_partials in _items(partials):
            pairs.setdefault(region, []).extend(region_partials)
        kept: dict[str, Batches] = {}
        for region, items in pairs.items():
            united = gather(items)
            gathered.setdefault(region, []).extend(
                Span(p.ledger, p.entry, p.entry) for p, acks in united.items() if acks.is_full
            )
            canonical = _canonical(gathered[region])
            kept[region] = tuple(
                sorted((p, a) for p, a in united.items() if a.is_partial and not _covers(canonical, p))
            )
        return cls._trusted(
            tuple((r, _canonical(s)) for r, s in sorted(gathered.items()) if s),
            tuple((r, b) for r, b in sorted(kept.items()) if b),
        )

    @classmethod
    def of_spans(cls, spans: Iterable[tuple[str, Span]]) -> OriginAcks:
        """``of`` for ``(region, span)`` pairs and no partials, sorting a region's spans only when they do not
        come canonical already (a translation names each region's spans in log order: mostly they do)."""
        gathered: dict[str, list[Span]] = {}
        for region, span in spans:
            gathered.setdefault(region, []).append(span)
        return cls._trusted(tuple((r, _canonical_or_same(s)) for r, s in sorted(gathered.items())), ())

    @classmethod
    def decoded(
        cls,
        spans: Mapping[str, list[Span]],
        partials: Mapping[str, list[tuple[Position, BatchAcks]]],
    ) -> OriginAcks:
        """The value a peer's message spells, checked without building it twice: any spans per region (made
        canonical, as ``of`` does; a canonical sender's pass as they are), and per region partly claimed
        entries exactly as a canonical value has them: each partial, none repeated or covered by the
        region's spans (else ``ValueError``). ``of`` followed by a merge of the partials cost a receiver
        three canonical builds per state (the most of its work at 2,000 claims a second)."""
        by_region = tuple(
            (region, _canonical_or_same(region_spans))
            for region, region_spans in sorted(spans.items())
            if region_spans
        )
        kept = []
        for region, items in sorted(partials.items()):
            if not items:
                continue
            covering = next((s for r, s in by_region if r == region), ())
            seen: set[Position] = set()
            for position, acks in items:
                if not acks.is_partial or position in seen or _covers(covering, position):
                    raise ValueError(f"not a canonical partial of {region!r}: {position} {acks}")
                seen.add(position)
            ordered = tuple(items)
            if any(a[0] > b[0] for a, b in itertools.pairwise(ordered)):
                ordered = tuple(sorted(ordered))
            kept.append((region, ordered))
        return cls._trusted(by_region, tuple(kept))

    @classmethod
    def _trusted(
        cls, by_region: tuple[tuple[str, tuple[Span, ...]], ...], partials: tuple[tuple[str, Batches], ...]
    ) -> OriginAcks:
        """A value ``of`` built canonical itself, without checking it again (the checks cost as much as
        building it; the agent builds several per acknowledgement). Tests check that the checks pass."""
        acks = object.__new__(cls)
        object.__setattr__(acks, "by_region", by_region)
        object.__setattr__(acks, "partials", partials)
        return acks

    def spans(self, region: str) -> tuple[Span, ...]:
        for r, spans in self.by_region:
            if r == region:
                return spans
        return ()

    def partials_of(self, region: str) -> Batches:
        """``region``'s partly claimed origin entries."""
        for r, batches in self.partials:
            if r == region:
                return batches
        return ()

    @property
    def regions(self) -> tuple[str, ...]:
        """The regions with whole-entry claims (see ``partials`` for the others)."""
        return tuple(r for r, _ in self.by_region)

    @property
    def origin_regions(self) -> frozenset[str]:
        """Every region some claim is about, whole entries or part of one."""
        return frozenset((*self.regions, *(r for r, _ in self.partials)))

    def __contains__(self, origin: Origin) -> bool:
        """Whether every message of the origin entry is claimed."""
        return _covers(self.spans(origin.region), origin.position)

    def batch(self, origin: Origin) -> BatchAcks | None:
        """The claimed indexes of ``origin`` if it is claimed in part, else ``None``."""
        batches = self.partials_of(origin.region)
        i = bisect.bisect_left(batches, origin.position, key=lambda item: item[0])
        return batches[i][1] if i < len(batches) and batches[i][0] == origin.position else None

    def acked_indexes(self, origin: Origin, size: int) -> BatchAcks:
        """The claimed messages of the origin entry, read as a batch of ``size``."""
        if origin in self:
            return BatchAcks.whole(size)
        partial = self.batch(origin)
        return BatchAcks(size, 0) if partial is None else partial.within(size)

    def acks_message(self, origin: Origin, index: int) -> bool:
        """Whether message ``index`` of the batch at ``origin`` is claimed (index 0 if not batched)."""
        if origin in self:
            return True
        partial = self.batch(origin)
        return partial is not None and index in partial

    def __bool__(self) -> bool:
        return bool(self.by_region or self.partials)

    def merge(self, *others: OriginAcks) -> OriginAcks:
        """The union of this and other regions' claims."""
        if len(others) == 1:  # the agent's common cases, answered without building anything
            (other,) = others
            if not other or other == self:
                return self
            if not self:
                return other
            if not self.partials and not other.partials:
                # Spans alone (most claims): joined region by region, without regathering both values.
                return OriginAcks._trusted(tuple(sorted(_joined_spans(self, other).items())), ())
            return _merged_with_partials(self, other)
        every = (self, *others)
        return OriginAcks.of(
            (item for acks in every for item in acks.by_region),
            (item for acks in every for item in acks.partials),
        )

    def news_since(self, before: OriginAcks) -> OriginAcks:
        """What these claims say that ``before`` did not, as claims: every span and partly claimed entry of
        this value that ``before`` does not hold as it is (a span grown by a filled hole is sent whole). For a
        value grown from ``before`` (claims only grow), ``before.merge(news)`` is this value again, so a
        receiver that merges claims and already holds ``before`` needs only the news."""
        if not before:
            return self
        old_spans = {region: set(spans) for region, spans in before.by_region}
        old_partials = {region: set(batches) for region, batches in before.partials}
        return OriginAcks.of(
            [(r, [x for x in spans if x not in old_spans.get(r, ())]) for r, spans in self.by_region],
            [(r, [x for x in batches if x not in old_partials.get(r, ())]) for r, batches in self.partials],
        )

    def without(self, regions: Iterable[str]) -> OriginAcks:
        """These claims less every claim about origins of ``regions`` (a region rebuilt under its name: its
        old origins name other messages than its new ones)."""
        drop = set(regions)
        if drop.isdisjoint(self.origin_regions):
            return self
        return OriginAcks._trusted(
            tuple(item for item in self.by_region if item[0] not in drop),
            tuple(item for item in self.partials if item[0] not in drop),
        )

    def renamed(self, region: str, name: str) -> OriginAcks:
        """These claims with those about ``region``'s origins made about ``name``'s (a region rebuilt under
        its name: claims about its old life name its retired incarnation from then on)."""
        if region not in self.origin_regions:
            return self
        return self.without([region]).merge(
            OriginAcks.of({name: self.spans(region)}, {name: self.partials_of(region)})
        )

    def split(self) -> tuple[OriginAcks, OriginAcks]:
        """Two halves (by spans and partly claimed entries) whose ``merge`` is this value, for sending a claim
        too large for one message in parts (receivers merge claims, so parts say the same as the whole);
        ``ValueError`` when there is only one span or partial entry to send."""
        items: list[tuple[str, Span | tuple[Position, BatchAcks]]] = [
            *((r, s) for r, spans in self.by_region for s in spans),
            *((r, b) for r, batches in self.partials for b in batches),
        ]
        if len(items) < 2:
            raise ValueError("a single span or partial entry cannot be split")
        half = len(items) // 2

        def build(part: list[tuple[str, Span | tuple[Position, BatchAcks]]]) -> OriginAcks:
            spans = [(r, [x]) for r, x in part if isinstance(x, Span)]
            partials = [(r, [x]) for r, x in part if not isinstance(x, Span)]
            return OriginAcks.of(spans, partials)

        return build(items[:half]), build(items[half:])

    def count(self) -> int:
        """How many whole entries are claimed."""
        return sum(len(s) for _, spans in self.by_region for s in spans)

    def count_partial(self) -> int:
        """How many messages of partly claimed entries are claimed."""
        return sum(len(acks) for _, batches in self.partials for _, acks in batches)


def _joined_spans(one: OriginAcks, other: OriginAcks) -> dict[str, tuple[Span, ...]]:
    """Both values' spans, region by region: a region's spans joined again only where both hold some."""
    regions = dict(one.by_region)
    for region, spans in other.by_region:
        have = regions.get(region)
        regions[region] = spans if have is None else _canonical((*have, *spans))
    return regions


def _merged_with_partials(one: OriginAcks, other: OriginAcks) -> OriginAcks:
    """``one.merge(other)`` where either holds partials, as ``of`` would build it but from two canonical
    values: only the regions whose spans meet are joined again, and the partials are united entry by entry
    (a full one becomes a span, one a span covers goes). Gathering both whole again cost a receiver three
    times a merge of spans alone, for every batched claim."""
    regions = _joined_spans(one, other)
    mine, theirs = dict(one.partials), dict(other.partials)
    kept: list[tuple[str, Batches]] = []
    for region in sorted(mine.keys() | theirs.keys()):
        if region not in mine or region not in theirs:
            # One side's partials of the region (the most common case, a claim merged into the history that
            # holds the rest): canonical already, none full; only those the other side's spans now cover go.
            side, alone = (one, mine[region]) if region in mine else (other, theirs[region])
            spans = regions.get(region, ())
            if spans is not side.spans(region):
                alone = tuple(item for item in alone if not _covers(spans, item[0]))
            if alone:
                kept.append((region, alone))
            continue
        entries: dict[Position, BatchAcks] = dict(mine[region])
        for position, batch in theirs[region]:
            seen = entries.get(position)
            entries[position] = batch if seen is None else seen.union(batch)
        full = [Span(p.ledger, p.entry, p.entry) for p, batch in entries.items() if batch.is_full]
        if full:
            regions[region] = _canonical((*regions.get(region, ()), *full))
        spans = regions.get(region, ())
        batches = tuple(
            sorted((p, batch) for p, batch in entries.items() if not batch.is_full and not _covers(spans, p))
        )
        if batches:
            kept.append((region, batches))
    return OriginAcks._trusted(tuple(sorted(regions.items())), tuple(kept))


def _canonical_or_same(spans: list[Span]) -> tuple[Span, ...]:
    """``_canonical(spans)``, without sorting spans that are canonical already (sorted, apart, not
    adjacent): what a canonical sender wrote."""
    for before, after in itertools.pairwise(spans):
        if before.ledger > after.ledger or (before.ledger == after.ledger and before.last + 1 >= after.first):
            return _canonical(spans)
    return tuple(spans)


def _covers(spans: tuple[Span, ...], p: Position) -> bool:
    i = bisect.bisect_left(spans, (p.ledger, p.entry), key=_SPAN_END)
    return i < len(spans) and p in spans[i]


def _items(
    values: Mapping[str, Iterable[T]] | Iterable[tuple[str, Iterable[T]]],
) -> Iterable[tuple[str, Iterable[T]]]:
    return values.items() if isinstance(values, Mapping) else values
