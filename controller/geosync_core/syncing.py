"""Exact subscription sync: translating a cursor to origin coordinates and back into a cursor change.

One region's subscription cursor (mark-delete plus individually deleted ranges) is translated through
that region's ``OriginIndex`` into ``OriginAcks``, which travel on the control topic. Another region plans
the change to its own cursor that makes it acknowledge exactly the same messages, through its own index.
Both steps are pure; the runtime applies a plan with ``expireMessages`` (mark-delete) and
``skipByMessageIds`` or a shadow consumer (individual acks).

Acknowledgement is tracked down to the message: an entry may be a batch of ``size`` messages, some of
them acknowledged (``AckState.batches``, ``OriginAcks.partials``). Replication keeps batch layout, so batch
index ``i`` of a local entry is batch index ``i`` of its origin entry. Only the runtime knows batch sizes
(it read the entries); it passes them as ``size_of``, and without them every entry counts as one message
(what the cursor says about partly acknowledged entries is still kept and translated).

Invariants:

* translation claims exactly what the cursor acknowledged among indexed entries, message by message:
  ``to_origin_acks(index, cursor).acks`` claims ``(origin, i)`` iff a local entry indexed with that origin
  has message ``i`` acknowledged in ``cursor`` (whole entries as spans, partly acknowledged ones as
  partials); entries the index does not cover are never claimed (entries of a region's retired
  incarnation are claimed under its retired name, ``indexing.OriginIndex.retire``);
* JOINED LOCAL SPANS: with ``local`` (the translating region), a span of the region's own messages also
  covers the entries between them that the index names as copies from elsewhere. Origin ``(local, p)``
  then names no message at all (``p`` holds another region's message), so the claim says nothing more,
  and with both regions producing it is one span per ledger instead of one per message;
* NO LOSS: a plan acknowledges a local message only if it is already acknowledged locally or the entry is
  indexed and ``remote`` claims the same message of its origin; a whole entry is acknowledged only if
  each of its ``size`` messages is, and the mark-delete never passes an entry with an unacknowledged
  message; after ``applied`` the log's acknowledged messages are exactly those;
* MONOTONE: a plan's mark-delete is above the current one or absent; nothing is ever un-acknowledged;
* IDEMPOTENT: planning again after ``applied`` yields an empty plan;
* no skip on a guess: an entry of ``log`` that is not indexed (and not acknowledged locally) is never
  acknowledged and the mark-delete never passes it;
* PER-KEY ORDER: ``key_ordered`` keeps a subset of the cursor's messages in which, for every key and
  origin region, the acknowledged messages above the mark-delete are a prefix of that key's messages of
  that origin in log order (entry, then batch index).
"""

from __future__ import annotations

import bisect
import enum
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from geosync_core.batches import BatchAcks, Batches
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


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """The local cursor change: move the mark-delete to ``new_mark_delete`` (if set), then acknowledge
    ``individual_acks`` (whole entries, all above it) and the batch indexes in ``batch_acks`` (for each
    partly acknowledged entry, all above it, the whole set of acknowledged indexes to reach: it includes
    what the cursor already has). ``blocked_by`` is the first entry the mark-delete could not pass
    because it is not indexed yet (``None`` if it stopped at an entry known to be unacknowledged, or at
    the end of the log). ``complete``: false when the walk's budget ran out before the log's end (planning
    again from the cursor this plan makes may find more)."""

    new_mark_delete: Position | None
    individual_acks: tuple[Position, ...]
    blocked_by: Position | None = None
    batch_acks: Batches = ()
    complete: bool = True

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
    previous = (-2, -2)
    floor = (local.mark_delete.ledger, local.mark_delete.entry)
    ranges = [(r.lower.ledger, r.lower.entry, r.upper.ledger, r.upper.entry) for r in local.ranges]
    at, count = 0, len(ranges)
    left = -1 if budget is None else budget
    spans_of = dict(remote.by_region)
    # Pieces of the stretch being walked that the cursor lacks: (first, last, claimed, indexed).
    pieces: list[tuple[int, int, bool, bool]] = []
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
                # Acknowledged here, whole, up to the range's end: nothing to write; the mark-delete may pass.
                end = last if ranges[at][2] > ledger else min(last, ranges[at][3])
                if advancing:
                    mark_delete = (ledger, end)
                entry = end + 1
                continue
            if left == 0:
                complete = False
                break  # the budget is spent: the walk (and the mark-delete) stops before this entry
            gap_end = last if at >= count or ranges[at][0] > ledger else min(last, ranges[at][1])
            pieces.clear()
            _cut(index, spans_of, pieces, ledger=ledger, first=entry, last=gap_end)
            for lo, hi, claimed, indexed in pieces:
                if left == 0:
                    complete = False
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
            if not complete:
                break
        if not complete:
            break
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
    # Positions as integers (Position's generated comparisons cost a call each), the local ranges followed
    # with a cursor instead of searched per entry.
    previous = (-2, -2)
    floor = (local.mark_delete.ledger, local.mark_delete.entry)
    ranges = [(r.lower.ledger, r.lower.entry, r.upper.ledger, r.upper.entry) for r in local.ranges]
    at, count = 0, len(ranges)
    left = -1 if budget is None else budget
    partial_keys = [(p.ledger, p.entry) for p, _ in local.batches]
    hot_until = -1  # entries of the current ledger up to here are walked one by one (see _quiet)
    complete = True
    for ledger, first, last in stretches.items:
        if first > last or (ledger, first) <= previous:
            raise ValueError(
                f"log not in increasing order: {Position(*previous)} then {Position(ledger, first)}"
            )
        previous = (ledger, last)
        hot_until = -1
        if (ledger, last) <= floor:
            continue
        entry = floor[1] + 1 if ledger == floor[0] and first <= floor[1] else first
        while entry <= last:
            here = (ledger, entry)
            while at < count and (ranges[at][2], ranges[at][3]) < here:
                at += 1
            if at < count and (ranges[at][0], ranges[at][1]) < here:
                # Acknowledged here, whole, up to the range's end: nothing to write; the mark-delete may pass.
                end = last if ranges[at][2] > ledger else min(last, ranges[at][3])
                if advancing:
                    mark_delete = (ledger, end)
                entry = end + 1
                continue
            if left == 0:
                complete = False
                break  # the budget is spent: the walk (and the mark-delete) stops before this entry
            if entry > hot_until:
                # Not held here: pass over the entries nothing could acknowledge (no claim about their
                # origin, whole or in part, and not held here in part) in one step, as the rule below would
                # one by one: they stop the mark-delete and change nothing else. A subscription's backlog
                # is mostly such entries, and a plan is made for every claim received.
                gap_end = last if at >= count or ranges[at][0] > ledger else min(last, ranges[at][1])
                quiet_end, hot_until = _quiet(index, remote, partial_keys, at=(ledger, entry), end=gap_end)
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
        if left == 0 and entry <= last:
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


def _size(p: Position, local: AckState, known: int | None) -> int:
    """How many messages entry ``p`` holds, as far as anyone here knows (1 when nobody does); ``known``: what
    the tail says (``size_of(p)``)."""
    if known is None or known <= 1:
        partial = local.batch(p)
        return partial.size if partial is not None else 1
    return known


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


def key_ordered(
    cursor: AckState,
    log: Iterable[Position],
    key_of: Callable[[Position], str | None],
    *,
    size_of: Callable[[Position], int | None] | None = None,
    key_of_message: Callable[[Position, int], str | None] | None = None,
    origin_of: Callable[[Position], str | None] | None = None,
) -> AckState:
    """What a Key_Shared subscription may claim without breaking per-key order after a failover.

    Above the mark-delete, an acknowledged message is kept only if no earlier message of the same key and
    origin region (an earlier entry of ``log``, or a lower batch index of the same entry) is unacknowledged:
    otherwise the region taking over would deliver the earlier message after the later one had been
    acknowledged. Dropping such acknowledgements trades duplicates for order. Entries that are not in
    ``log`` are not claimed either (a subset is always safe to claim).

    Why per origin: geo-replication keeps each origin's order in every region's log, but interleaves the
    origins as their copies arrive, so two messages of one key from two origins can sit in opposite orders
    in two regions (decision 0016). Only the order within an origin is the same wherever consumers move; a
    rule over all origins made two regions' claims hold each other back (each region's consumers left the
    other origin's message unacknowledged) and redelivered messages consumers had acknowledged.

    A key or an origin that is not known (``None``) could be any: an unacknowledged message with an unknown
    key blocks every later message of its origin (of any origin when that is unknown too), and an
    acknowledged one is kept only while nothing it could be is blocked (if it is dropped, it is
    unacknowledged in the claim and blocks the same messages: the claim itself keeps per-key order, so
    ``key_ordered`` is idempotent). Without ``origin_of`` every entry counts as one origin.

    Batched entries: ``size_of(p)`` gives entry ``p``'s number of messages (as for ``plan_apply``) and
    ``key_of_message(p, i)`` the key of its message ``i`` (default: ``key_of(p)`` for every message).
    Without sizes an entry is one message of key ``key_of(p)``, as before batches were tracked; a batch
    whose messages have different keys then needs ``size_of`` and ``key_of_message`` to be judged right.
    """
    blocked = _Blocked()
    kept: list[Position] = []
    kept_batches: list[tuple[Position, BatchAcks]] = []
    single = "" if origin_of is None else None
    for p in log:
        if p <= cursor.mark_delete:
            continue
        size = _size(p, cursor, None if size_of is None else size_of(p))
        origin = single if origin_of is None else origin_of(p)
        bits = 0
        for i in range(size):
            key = key_of_message(p, i) if key_of_message is not None else key_of(p)
            if cursor.acks_message(p, i) and not blocked.blocks(origin, key):
                bits |= 1 << i
            else:  # not claimed: as unacknowledged to whoever takes over
                blocked.add(origin, key)
        acks = BatchAcks(size, bits)
        if acks.is_full:
            kept.append(p)
        elif not acks.is_empty:
            kept_batches.append((p, acks))
    return AckState.of(cursor.mark_delete).ack(*kept).ack_batches(kept_batches)


class _Blocked:
    """The (origin, key) pairs ``key_ordered`` has left unclaimed so far; ``None`` stands for any."""

    __slots__ = ("everything", "keys", "keys_of_any_origin", "origins", "origins_of_any_key", "pairs")

    def __init__(self) -> None:
        self.pairs: set[tuple[str, str]] = set()
        self.keys_of_any_origin: set[str] = set()
        self.origins_of_any_key: set[str] = set()
        self.everything = False
        self.keys: set[str] = set()
        """Every key blocked in some origin (known or not)."""
        self.origins: set[str] = set()
        """Every origin in which some key (known or not) is blocked."""

    def add(self, origin: str | None, key: str | None) -> None:
        if origin is None:
            if key is None:
                self.everything = True
            else:
                self.keys_of_any_origin.add(key)
                self.keys.add(key)
        elif key is None:
            self.origins_of_any_key.add(origin)
            self.origins.add(origin)
        else:
            self.pairs.add((origin, key))
            self.keys.add(key)
            self.origins.add(origin)

    def blocks(self, origin: str | None, key: str | None) -> bool:
        if self.everything:
            return True
        if origin is None and key is None:
            return bool(self.keys or self.origins)
        if origin is None:
            return key in self.keys or bool(self.origins_of_any_key)
        if key is None:
            return origin in self.origins or bool(self.keys_of_any_origin)
        return (
            (origin, key) in self.pairs or key in self.keys_of_any_origin or origin in self.origins_of_any_key
        )
