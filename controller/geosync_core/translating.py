"""Translating a subscription cursor into origin coordinates: what it acknowledged, as other regions read it.

One region's subscription cursor (mark-delete plus individually deleted ranges) is translated through
that region's ``OriginIndex`` into ``OriginAcks``, which travel on the control topic; another region plans
the change to its own cursor from them (``syncing.plan_apply``). The translation is pure.

Acknowledgement is tracked down to the message: an entry may be a batch of messages, some of them
acknowledged (``AckState.batches``, ``OriginAcks.partials``). Replication keeps batch layout, so batch
index ``i`` of a local entry is batch index ``i`` of its origin entry, and partly acknowledged entries are
translated as partials.

Invariants:

* translation claims exactly what the cursor acknowledged among indexed entries, message by message:
  ``to_origin_acks(index, cursor).acks`` claims ``(origin, i)`` iff a local entry indexed with that origin
  has message ``i`` acknowledged in ``cursor`` (whole entries as spans, partly acknowledged ones as
  partials); entries the index does not cover are never claimed (entries of a region's retired
  incarnation are claimed under its retired name, ``indexing.OriginIndex.retire``);
* JOINED LOCAL SPANS: with ``local`` (the translating region), a span of the region's own messages also
  covers the entries between them that the index names as copies from elsewhere. Origin ``(local, p)``
  then names no message at all (``p`` holds another region's message), so the claim says nothing more,
  and with both regions producing it is one span per ledger instead of one per message.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from geosync_core.indexing import OriginIndex, Run
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

_BEFORE_ALL = Position(-1, -1)


class Reason(enum.Enum):
    NOT_INDEXED = "not-indexed"
    """The index holds no entry yet: nothing this region acknowledged can be named in origin terms."""


@dataclass(frozen=True, slots=True)
class Untranslatable:
    reason: Reason


@dataclass(frozen=True, slots=True)
class Translation:
    """A cursor's acknowledgements in origin coordinates, exact for local entries ``first..last``."""

    acks: OriginAcks
    first: Position
    last: Position


def to_origin_acks(
    index: OriginIndex,
    cursor: AckState,
    *,
    local: str | None = None,
    above: Position | None = None,
) -> Translation | Untranslatable:
    """What ``cursor`` acknowledged, named by origin coordinates, as far as ``index`` covers; with ``local``
    (this region's name) its own messages' spans are joined across copies from elsewhere. With ``above``,
    only what it acknowledged above that entry (the caller holds the claims for the rest): the work is then
    the runs from there to the cursor's reach, not the whole index."""
    first, last = index.first, index.last
    if first is None or last is None:
        return Untranslatable(Reason.NOT_INDEXED)
    above = _BEFORE_ALL if above is None else above
    acked = _acked_above(cursor, above)
    reach = cursor.reach
    runs = itertools.takewhile(
        lambda run: (run.local_ledger, run.local_first) <= (reach.ledger, reach.entry),
        index.runs_from(Position(above.ledger, above.entry + 1)),
    )
    if local is None:
        spans = [(run.region, span) for run in runs for span in _acked_spans(run, acked)]
    else:
        spans = _joined_spans(runs, acked, local, above=above)
    if not cursor.batches:
        return Translation(OriginAcks.of_spans(spans), first, last)
    partials = []
    for p, acks in cursor.batches:
        origin = index.origin_of(p)
        if origin is not None:
            partials.append((origin.region, [(origin.position, acks)]))
    return Translation(OriginAcks.of(((region, [span]) for region, span in spans), partials), first, last)


def _acked_above(cursor: AckState, above: Position) -> tuple[Range, ...]:
    """The cursor's whole entries above ``above`` as a canonical range set's ranges, the mark-delete's prefix
    included. A cursor is normalized (its ranges lie above the mark-delete, apart from it), so that prefix
    and its ranges are canonical as they are: nothing to sort or join."""
    mark_delete = cursor.mark_delete
    if (mark_delete.ledger, mark_delete.entry) <= (above.ledger, above.entry):
        return cursor.ranges.above(above).ranges
    return (Range(above, mark_delete), *cursor.ranges.ranges)


def _joined_spans(
    runs: Iterable[Run], acked: tuple[Range, ...], local: str, *, above: Position
) -> list[tuple[str, Span]]:
    """``(region, span)`` for every run as ``_acked_spans`` gives them, except that spans of ``local``'s own
    messages (origin = local position) are joined when only entries indexed with other origins lie between.
    Translating ``above`` an entry (everything at or below it acknowledged), a span that the log joins to
    ``above`` starts at the beginning of its ledger, so that it joins the claims made below however many
    copies from elsewhere lie before ``above``: ``(local, p)`` for ``p`` at or below ``above`` names a
    message of ``local``'s that the cursor acknowledged, or no message at all."""
    out: list[tuple[str, Span]] = []
    # the local span being extended, and how far the log is accounted for from it (None: a break)
    pending: Span | None = None
    reach: tuple[int, int] | None = None  # (ledger, entry): positions as integers, made for every span
    seed = Span(above.ledger, 0, above.entry) if above.entry >= 0 else None
    if seed is not None:
        pending, reach = (
            seed,
            (above.ledger, above.entry),
        )  # kept only if a span joins it: alone it is no news
    for run in runs:
        spans = _acked_spans(run, acked)
        own = run.region == local and (run.origin_ledger, run.origin_first) == (
            run.local_ledger,
            run.local_first,
        )
        if not own:
            out.extend((run.region, span) for span in spans)
            joins = reach is not None and run.local_ledger == reach[0] and run.local_first <= reach[1] + 1
            reach = (run.local_ledger, max(run.local_last, reach[1])) if joins and reach else None
            continue
        for span in spans:
            if (
                pending is not None
                and reach is not None
                and (span.ledger, span.first) == (reach[0], reach[1] + 1)
            ):
                pending = Span(pending.ledger, pending.first, span.last)
            else:
                if pending is not None and pending != seed:
                    out.append((local, pending))
                pending = span
            reach = (span.ledger, span.last)
        if reach is not None and reach != (run.local_ledger, run.local_last):
            reach = None  # an unacknowledged message of ours ends the span
    if pending is not None and pending != seed:
        out.append((local, pending))
    return out


def _acked_spans(run: Run, acked: tuple[Range, ...]) -> list[Span]:
    """The origin spans of ``run``'s entries that lie in ``acked`` (sorted, disjoint ranges)."""
    ledger, first, last = run.local_ledger, run.local_first, run.local_last
    spans = []
    shift = run.origin_first - first
    # Compared as integers: a run of a topic with holes kept for good meets thousands of ranges.
    i = bisect.bisect_left(acked, (ledger, first), key=_upper_key)
    for r in itertools.islice(acked, i, None):
        lower, upper = r.lower, r.upper
        if (lower.ledger, lower.entry) >= (ledger, last):
            break
        lo = first if lower.ledger < ledger else max(first, lower.entry + 1)
        hi = last if upper.ledger > ledger else min(last, upper.entry)
        if lo <= hi:
            spans.append(Span(run.origin_ledger, lo + shift, hi + shift))
    return spans


def _upper_key(r: Range) -> tuple[int, int]:
    return (r.upper.ledger, r.upper.entry)
