"""Exact subscription sync: planning the change to a cursor that makes it acknowledge what others claim.

One region's cursor travels to the others as ``OriginAcks`` (``translating.to_origin_acks``). Another
region plans the change to its own cursor that makes it acknowledge exactly the same messages, through its
own ``OriginIndex``. Planning is pure; the runtime applies a plan with ``expireMessages`` (mark-delete) and
``skipByMessageIds`` or a shadow consumer (individual acks).

Acknowledgement is tracked down to the message: an entry may be a batch of ``size`` messages, some of
them acknowledged (``AckState.batches``, ``OriginAcks.partials``). Replication keeps batch layout, so batch
index ``i`` of a local entry is batch index ``i`` of its origin entry. Only the runtime knows batch sizes
(it read the entries); it passes them as ``size_of``, and without them every entry counts as one message
(what the cursor says about partly acknowledged entries is still kept).

Invariants:

* NO LOSS: a plan acknowledges a local message only if it is already acknowledged locally or the entry is
  indexed and ``remote`` claims the same message of its origin; a whole entry is acknowledged only if
  each of its ``size`` messages is, and the mark-delete never passes an entry with an unacknowledged
  message; after ``applied`` the log's acknowledged messages are exactly those;
* MONOTONE: a plan's mark-delete is above the current one or absent; nothing is ever un-acknowledged;
* IDEMPOTENT: planning again after ``applied`` yields an empty plan;
* no skip on a guess: an entry of ``log`` that is not indexed (and not acknowledged locally) is never
  acknowledged and the mark-delete never passes it.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from geosync_core.batches import BatchAcks, Batches
from geosync_core.indexing import OriginIndex
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """The local cursor change: move the mark-delete to ``new_mark_delete`` (if set), then acknowledge
    ``individual_acks`` (whole entries, all above it) and the batch indexes in ``batch_acks`` (for each
    partly acknowledged entry, all above it, the whole set of acknowledged indexes to reach: it includes
    what the cursor already has). ``blocked_by`` is the first entry the mark-delete could not pass
    because it is not indexed yet (``None`` if it stopped at an entry known to be unacknowledged, or at
    the end of the log). ``complete``: false when the walk's budget ran out before the log's end (planning
    again from the cursor this plan makes may find more). ``held``: messages the claims acknowledge that
    the plan leaves unacknowledged to keep a Key_Shared subscription's per-key order
    (``keyorder.key_ordered_plan``): a change of the cursor here may free them."""

    new_mark_delete: Position | None
    individual_acks: tuple[Position, ...]
    blocked_by: Position | None = None
    batch_acks: Batches = ()
    complete: bool = True
    held: int = 0

    @property
    def is_empty(self) -> bool:
        return self.new_mark_delete is None and not self.individual_acks and not self.batch_acks


@dataclass(frozen=True, slots=True)
class Stretches:
    """Local entries as stretches of consecutive entries of one ledger, ``(ledger, first, last)`` with both
    ends included, in increasing order: the log ``plan_apply`` walks, in a form that lets it pass over a
    stretch the cursor acknowledged whole at once instead of entry by entry. ``items`` may be a generator
    (read once, as far as the walk goes)."""

    items: Iterable[tuple[int, int, int]] = ()

    @classmethod
    def of(cls, positions: Iterable[Position]) -> Stretches:
        """The stretches of ``positions`` (increasing, or ValueError)."""
        items: list[list[int]] = []
        previous = (-2, -2)
        for p in positions:
            here = (p.ledger, p.entry)
            if here <= previous:
                raise ValueError(f"log not in increasing order: {Position(*previous)} then {p}")
            previous = here
            if items and items[-1][0] == p.ledger and items[-1][2] + 1 == p.entry:
                items[-1][2] = p.entry
            else:
                items.append([p.ledger, p.entry, p.entry])
        return cls(tuple((ledger, first, last) for ledger, first, last in items))

    def __iter__(self) -> Iterator[Position]:
        for ledger, first, last in self.items:
            for entry in range(first, last + 1):
                yield Position(ledger, entry)


def plan_apply(
    index: OriginIndex,
    local: AckState,
    *,
    remote: OriginAcks,
    log: Iterable[Position] | Stretches,
    size_of: Callable[[Position], int | None] | None = None,
    budget: int | None = None,
) -> ApplyPlan:
    """Plan the change that makes ``local`` acknowledge what ``remote`` claims, entry by entry of ``log``.

    ``log`` lists, in increasing order, every local entry above the local mark-delete that a consumer
    could be dispatched (entries the broker never dispatches, such as markers, may be left out and are
    then passed over, as brokers do). Entries listed but not indexed block the mark-delete. Given as
    ``Stretches``, a stretch the cursor acknowledges is passed over whole: the walk costs the entries the
    cursor lacks, not the window (a mark-delete held back by holes kept for good has tens of thousands of
    entries above it). ``budget``: the most entries the walk looks at one by one (those the cursor does not
    hold whole); it stops there, and so does the mark-delete. Entries acknowledged here cost nothing of it,
    so a mark-delete held back by a hole kept for good does not hold the plan back with it.

    ``size_of(p)`` is the number of messages in local entry ``p`` (``None`` or 1: not batched; an entry the
    cursor holds in part is read with the size the cursor gives if ``size_of`` does not know it). An entry
    is acknowledged whole if it is locally, if ``remote`` claims its origin whole, or if the local and
    remote acknowledged indexes together cover its size; otherwise remote indexes the cursor lacks are
    planned in ``batch_acks``. Without sizes, remote partial claims are left unused (never guessed at).

    Where neither the cursor nor the claims hold part of a batch (most subscriptions), sizes change nothing
    and the plan is made range by range (``_plan_whole``), not entry by entry (``_plan_by_entry``): the
    same plan (a property test compares them), at the cost of the stretches the cursor lacks and the
    claims' spans over them, with no object made for an entry the mark-delete passes.
    """
    stretches = log if isinstance(log, Stretches) else Stretches.of(log)
    if not local.batches and not remote.partials:
        return _plan_whole(index, local, remote, stretches, budget=budget)
    return _plan_by_entry(index, local, remote, stretches, size_of=size_of, budget=budget)


def _pieces(local: AckState, stretches: Stretches) -> Iterator[tuple[bool, int, int, int]]:
    """The entries of ``stretches`` above ``local``'s mark-delete, in order, as pieces ``(held, ledger,
    first, last)`` of one stretch each: held whole by the cursor (up to a range's end) or not held whole
    (up to the next range's start). Both walks of ``plan_apply`` go over these; a walk that stops inside a
    piece it does not hold stops there for good (the budget), so the next piece is never read."""
    # Positions as integers (Position's generated comparisons cost a call each), the local ranges followed
    # with a cursor instead of searched per piece.
    previous = (-2, -2)
    floor = (local.mark_delete.ledger, local.mark_delete.entry)
    ranges = [(r.lower.ledger, r.lower.entry, r.upper.ledger, r.upper.entry) for r in local.ranges]
    at, count = 0, len(ranges)
    for ledger, first, last in stretches.items:
        if first > last or (ledger, first) <= previous:
            raise ValueError(
                f"log not in increasing order: {Position(*previous)} then {Position(ledger, first)}"
            )
        previous = (ledger, last)
        if (ledger, last) <= floor:
            continue
        entry = floor[1] + 1 if ledger == floor[0] and first <= floor[1] else first
        while entry <= last:
            here = (ledger, entry)
            while at < count and (ranges[at][2], ranges[at][3]) < here:
                at += 1
            if at < count and (ranges[at][0], ranges[at][1]) < here:
                end = last if ranges[at][2] > ledger else min(last, ranges[at][3])
                yield True, ledger, entry, end
            else:
                end = last if at >= count or ranges[at][0] > ledger else min(last, ranges[at][1])
                yield False, ledger, entry, end
            entry = end + 1


def _plan_whole(
    index: OriginIndex, local: AckState, remote: OriginAcks, stretches: Stretches, *, budget: int | None
) -> ApplyPlan:
    """``plan_apply`` where ``local`` holds no partly acknowledged entry and ``remote`` claims none: an entry
    is acknowledged iff the cursor holds it or its origin lies in a claimed span, so each stretch the cursor
    lacks is cut, along the index's runs and the claims' spans over their origins, into pieces that are
    claimed whole or not at all, and each piece is taken at once (the budget counts its entries)."""
    mark_delete: tuple[int, int] | None = None
    individual: list[Position] = []
    blocked_by: Position | None = None
    advancing = True
    complete = True
    left = -1 if budget is None else budget
    spans_of = dict(remote.by_region)
    # Pieces of the stretch being walked that the cursor lacks: (first, last, claimed, indexed).
    pieces: list[tuple[int, int, bool, bool]] = []
    for held, ledger, first, last in _pieces(local, stretches):
        if held:
            # Acknowledged here, whole: nothing to write; the mark-delete may pass.
            if advancing:
                mark_delete = (ledger, last)
            continue
        if left == 0:
            complete = False
            break  # the budget is spent: the walk (and the mark-delete) stops before this entry
        pieces.clear()
        _cut(index, spans_of, pieces, ledger=ledger, first=first, last=last)
        entry = first
        for lo, hi, claimed, indexed in pieces:
            if left == 0:
                break
            take = hi - lo + 1 if left < 0 else min(hi - lo + 1, left)
            if claimed:
                if advancing:
                    mark_delete = (ledger, lo + take - 1)
                else:
                    individual.extend(Position(ledger, e) for e in range(lo, lo + take))
            elif advancing:
                advancing = False
                blocked_by = None if indexed else Position(ledger, lo)
            if left > 0:
                left -= take
            entry = lo + take
        if entry <= last:
            complete = False
            break  # the budget ran out in this piece
    new_mark_delete = None if mark_delete is None else Position(*mark_delete)
    return ApplyPlan(new_mark_delete, tuple(individual), blocked_by, (), complete)


def _cut(
    index: OriginIndex,
    spans_of: dict[str, tuple[Span, ...]],
    pieces: list[tuple[int, int, bool, bool]],
    *,
    ledger: int,
    first: int,
    last: int,
) -> None:
    """Local entries ``ledger:first..last`` as pieces ``(first, last, claimed, indexed)`` in order: not
    indexed, or indexed with origins that the spans of ``spans_of`` claim all or none of."""
    at = first
    for run in index.runs_from(Position(ledger, first)):
        if run.local_ledger < ledger:
            continue  # the run before: it may end in an earlier ledger
        if run.local_ledger > ledger or run.local_first > last:
            break
        run_last = run.local_first + run.length - 1
        if run_last < at:
            continue
        if run.local_first > at:
            pieces.append((at, run.local_first - 1, False, False))
            at = run.local_first
        hi = min(last, run_last)
        shift = run.origin_first - run.local_first
        origin_ledger = run.origin_ledger
        spans = spans_of.get(run.region, ())
        j = bisect.bisect_left(spans, (origin_ledger, at + shift), key=_SPAN_END)
        while j < len(spans) and at <= hi:
            span = spans[j]
            if span.ledger != origin_ledger or span.first - shift > hi:
                break
            lo = max(at, span.first - shift)
            if lo > at:
                pieces.append((at, lo - 1, False, True))
            top = min(hi, span.last - shift)
            pieces.append((lo, top, True, True))
            at = top + 1
            j += 1
        if at <= hi:
            pieces.append((at, hi, False, True))
            at = hi + 1
        if at > last:
            return
    if at <= last:
        pieces.append((at, last, False, False))


def _plan_by_entry(
    index: OriginIndex,
    local: AckState,
    remote: OriginAcks,
    stretches: Stretches,
    *,
    size_of: Callable[[Position], int | None] | None,
    budget: int | None,
) -> ApplyPlan:
    """``plan_apply`` entry by entry, for cursors and claims that hold parts of batches."""
    mark_delete: tuple[int, int] | None = None
    individual: list[Position] = []
    batches: list[tuple[Position, BatchAcks]] = []
    blocked_by: Position | None = None
    advancing = True
    left = -1 if budget is None else budget
    partial_keys = [(p.ledger, p.entry) for p, _ in local.batches]
    complete = True
    for held, ledger, first, last in _pieces(local, stretches):
        if held:
            # Acknowledged here, whole: nothing to write; the mark-delete may pass.
            if advancing:
                mark_delete = (ledger, last)
            continue
        entry = first
        hot_until = -1  # entries of this piece up to here are walked one by one (see _quiet)
        while entry <= last:
            if left == 0:
                break  # the budget is spent: the walk (and the mark-delete) stops before this entry
            if entry > hot_until:
                # Pass over the entries nothing could acknowledge (no claim about their origin, whole or in
                # part, and not held here in part) in one step, as the rule below would one by one: they
                # stop the mark-delete and change nothing else. A subscription's backlog is mostly such
                # entries, and a plan is made for every claim received.
                quiet_end, hot_until = _quiet(index, remote, partial_keys, at=(ledger, entry), end=last)
                if quiet_end >= entry:
                    take = quiet_end - entry + 1 if left < 0 else min(quiet_end - entry + 1, left)
                    if advancing:
                        advancing = False
                        stop = Position(ledger, entry)
                        blocked_by = stop if index.origin_of(stop) is None else None
                    if left > 0:
                        left -= take
                    entry += take
                    continue
            left -= 1
            here = (ledger, entry)
            p = Position(ledger, entry)
            entry += 1
            origin = index.origin_of(p)
            acked = origin is not None and origin in remote
            grown: BatchAcks | None = None
            known = None if size_of is None else size_of(p)
            partial = local.batch(p) if local.batches else None  # not acknowledged whole: in part, if at all
            size = known if known is not None and known > 1 else (partial.size if partial is not None else 1)
            if not acked and origin is not None and (size > 1 or known == 1):
                # A one-message entry known to be one: a partial claim about its origin may name that message.
                mine = BatchAcks(size, 0) if partial is None else partial.within(size)
                grown = mine.union(remote.acked_indexes(origin, size))
                acked = grown.is_full
                if acked and size_of is not None and known != size:
                    # Not at the entry's own size but at one the cursor's unacknowledged indexes imply, which
                    # may be short: completing it, or writing it as a batch ack with every index set (which a
                    # broker takes for the whole entry), would acknowledge the messages above it too.
                    acked, grown = False, None
                if grown == mine:
                    grown = None
            if advancing and acked:
                mark_delete = here
            elif acked:
                individual.append(p)
            else:
                if grown is not None:
                    batches.append((p, grown))
                if advancing:
                    advancing = False
                    blocked_by = p if origin is None else None
        if entry <= last:
            complete = False
            break
    new_mark_delete = None if mark_delete is None else Position(*mark_delete)
    return ApplyPlan(new_mark_delete, tuple(individual), blocked_by, tuple(batches), complete)


def _quiet(
    index: OriginIndex,
    remote: OriginAcks,
    partial_keys: list[tuple[int, int]],
    *,
    at: tuple[int, int],
    end: int,
) -> tuple[int, int]:
    """Entries ``ledger:entry..end`` (none held here whole) split as ``(quiet_end, hot_end)``: up to
    ``quiet_end`` (``entry - 1``: none) nothing could acknowledge them; from there up to ``hot_end`` they
    are walked one by one. An entry may be quiet only if it is not indexed, or if its origin is claimed
    neither whole nor in part and the cursor holds none of it: ``plan_apply``'s rule then leaves it
    unacknowledged and unwritten. Costs the index runs over the quiet entries, not the entries."""
    ledger, entry = at
    hit, hot = end + 1, end
    i = bisect.bisect_left(partial_keys, (ledger, entry))
    if i < len(partial_keys) and partial_keys[i][0] == ledger and partial_keys[i][1] <= end:
        hit = hot = partial_keys[i][1]
    for run in index.runs_from(Position(ledger, entry)):
        if run.local_ledger < ledger:
            continue  # the run before: it may end in an earlier ledger
        if run.local_ledger > ledger or run.local_first >= hit:
            break
        lo, hi = max(entry, run.local_first), min(hit - 1, run.local_last)
        if lo > hi:
            continue
        shift = run.origin_first - run.local_first
        olo, ohi, origin_ledger = lo + shift, hi + shift, run.origin_ledger
        spans = remote.spans(run.region)
        j = bisect.bisect_left(spans, (origin_ledger, olo), key=_SPAN_END)
        if j < len(spans) and spans[j].ledger == origin_ledger and spans[j].first <= ohi:
            hit, hot = max(spans[j].first, olo) - shift, min(spans[j].last, ohi) - shift
        partials = remote.partials_of(run.region)
        k = bisect.bisect_left(partials, (origin_ledger, olo), key=_BATCH_AT)
        if k < len(partials):
            claimed = partials[k][0]
            if claimed.ledger == origin_ledger and claimed.entry <= ohi and claimed.entry - shift < hit:
                hit = hot = claimed.entry - shift
        if hit <= hi:
            break
    return hit - 1, max(hot, hit)


def _BATCH_AT(item: tuple[Position, BatchAcks]) -> tuple[int, int]:
    return (item[0].ledger, item[0].entry)


_SPAN_END = operator.attrgetter("ledger", "last")


def applied(local: AckState, plan: ApplyPlan) -> AckState:
    """The cursor state after the broker carried out ``plan``."""
    moved = local if plan.new_mark_delete is None else local.ack_cumulative(plan.new_mark_delete)
    return moved.ack(*plan.individual_acks).ack_batches(plan.batch_acks)


def carried_out(cursor: AckState, base: AckState, plan: ApplyPlan) -> bool:
    """Whether ``cursor`` holds everything ``base`` held (whole entries and batch indexes) and everything
    ``plan`` (made from ``base``) writes. If so, and ``plan`` was ``complete`` and not ``blocked_by`` an
    entry, the same claims over the same log plan nothing more for ``cursor``: every entry they name in the
    log already was, or now is, acknowledged in it. Cheaper than building ``applied(base, plan)`` and
    comparing (a cursor that moved on further, by consumers here, counts too)."""
    if plan.new_mark_delete is not None and cursor.mark_delete < plan.new_mark_delete:
        return False  # a broker moves its mark-delete over every entry acknowledged in a row
    if not cursor.covers_whole(base) or not all(p in cursor for p in plan.individual_acks):
        return False
    for p, acks in (*base.batches, *plan.batch_acks):
        if p not in cursor:
            held = cursor.batch(p)
            if held is None or held.acked & acks.acked != acks.acked:
                return False
    return True
