"""Exact subscription sync: translating a cursor to origin coordinates and back into a cursor change.

One region's subscription cursor (mark-delete plus individually deleted ranges) is translated through
that region's ``OriginIndex`` into ``OriginAcks``, which travel on the control topic. Another region plans
the change to its own cursor that makes it acknowledge exactly the same messages, through its own index.
Both steps are pure; the runtime applies a plan with ``expireMessages`` (mark-delete) and
``skipByMessageIds`` or a shadow consumer (individual acks).

Invariants:

* translation claims exactly what the cursor acknowledged among indexed entries: an origin is in
  ``to_origin_acks(index, cursor).acks`` iff a local entry indexed with that origin is in ``cursor``;
  entries the index does not cover are never claimed;
* NO LOSS: a plan acknowledges a local entry only if it is already acknowledged locally or it is indexed
  and its origin is in ``remote``; after ``applied`` the listed entries acknowledged are exactly those;
* MONOTONE: a plan's mark-delete is above the current one or absent; nothing is ever un-acknowledged;
* IDEMPOTENT: planning again after ``applied`` yields an empty plan;
* no skip on a guess: an entry of ``log`` that is not indexed (and not acknowledged locally) is never
  acknowledged and the mark-delete never passes it;
* PER-KEY ORDER: ``key_ordered`` keeps a subset of the cursor in which, for every key, the acknowledged
  entries above the mark-delete are a prefix of that key's entries.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterable
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


def to_origin_acks(index: OriginIndex, cursor: AckState) -> Translation | Untranslatable:
    """What ``cursor`` acknowledged, named by origin coordinates, as far as ``index`` covers."""
    first, last = index.first, index.last
    if first is None or last is None:
        return Untranslatable(Reason.NOT_INDEXED)
    prefix = (Range(_BEFORE_ALL, cursor.mark_delete),) if cursor.mark_delete > _BEFORE_ALL else ()
    acked = (*prefix, *cursor.ranges)
    spans = [(run.region, span) for run in index for span in _acked_spans(run, acked)]
    return Translation(OriginAcks.of((region, [span]) for region, span in spans), first, last)


def _acked_spans(run: Run, acked: tuple[Range, ...]) -> list[Span]:
    """The origin spans of ``run``'s entries that lie in ``acked`` (sorted, disjoint ranges)."""
    ledger, first, last = run.local_ledger, run.local_first, run.local_last
    spans = []
    i = bisect.bisect_left(acked, Position(ledger, first), key=lambda r: r.upper)
    for r in acked[i:]:
        if r.lower >= Position(ledger, last):
            break
        lo = first if r.lower.ledger < ledger else max(first, r.lower.entry + 1)
        hi = last if r.upper.ledger > ledger else min(last, r.upper.entry)
        if lo <= hi:
            shift = run.origin_first - first
            spans.append(Span(run.origin_ledger, lo + shift, hi + shift))
    return spans


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """The local cursor change: move the mark-delete to ``new_mark_delete`` (if set), then acknowledge
    ``individual_acks`` (all above it). ``blocked_by`` is the first entry the mark-delete could not pass
    because it is not indexed yet (``None`` if it stopped at an entry known to be unacknowledged, or at
    the end of the log)."""

    new_mark_delete: Position | None
    individual_acks: tuple[Position, ...]
    blocked_by: Position | None = None

    @property
    def is_empty(self) -> bool:
        return self.new_mark_delete is None and not self.individual_acks


def plan_apply(
    index: OriginIndex, local: AckState, *, remote: OriginAcks, log: Iterable[Position]
) -> ApplyPlan:
    """Plan the change that makes ``local`` acknowledge what ``remote`` claims, entry by entry of ``log``.

    ``log`` lists, in increasing order, every local entry above the local mark-delete that a consumer
    could be dispatched (entries the broker never dispatches, such as markers, may be left out and are
    then passed over, as brokers do). Entries listed but not indexed block the mark-delete.
    """
    mark_delete: Position | None = None
    individual: list[Position] = []
    blocked_by: Position | None = None
    advancing = True
    previous: Position | None = None
    for p in log:
        if previous is not None and p <= previous:
            raise ValueError(f"log not in increasing order: {previous} then {p}")
        previous = p
        if p <= local.mark_delete:
            continue
        origin = index.origin_of(p)
        acked_here = p in local
        acked = acked_here or (origin is not None and origin in remote)
        if advancing and acked:
            mark_delete = p
        elif acked:
            if not acked_here:
                individual.append(p)
        elif advancing:
            advancing = False
            blocked_by = p if origin is None else None
    return ApplyPlan(mark_delete, tuple(individual), blocked_by)


def applied(local: AckState, plan: ApplyPlan) -> AckState:
    """The cursor state after the broker carried out ``plan``."""
    moved = local if plan.new_mark_delete is None else local.ack_cumulative(plan.new_mark_delete)
    return moved.ack(*plan.individual_acks)


def key_ordered(
    cursor: AckState, log: Iterable[Position], key_of: Callable[[Position], str | None]
) -> AckState:
    """What a Key_Shared subscription may claim without breaking per-key order after a failover.

    Above the mark-delete, an acknowledged entry is kept only if no earlier entry of the same key in ``log``
    is unacknowledged: otherwise the region taking over would deliver the earlier entry after the later one
    had been acknowledged. Dropping such acknowledgements trades duplicates for order. Entries that are not
    in ``log`` are not claimed either (a subset is always safe to claim). A key that is not known
    (``key_of`` returns None) could be any key: an unacknowledged entry with an unknown key blocks every
    later entry, and an acknowledged one is kept only while no key is blocked.
    """
    blocked: set[str] = set()
    block_all = False
    kept: list[Position] = []
    for p in log:
        if p <= cursor.mark_delete:
            continue
        key = key_of(p)
        if p not in cursor:
            if key is None:
                block_all = True
            else:
                blocked.add(key)
        elif not block_all and (key not in blocked if key is not None else not blocked):
            kept.append(p)
    return AckState.of(cursor.mark_delete).ack(*kept)
