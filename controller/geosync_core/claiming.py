"""What a region claims for one subscription: its cursor in origin coordinates, merged with what it heard.

Every region publishes, per subscription, the union of what its own cursor acknowledged (translated through
its origin index) and every claim it received, so any live region carries the whole history to a region that
was away. Publishing is skipped when the cursor did not change since the last translation, and a claim that
adds nothing to what others already told us is not echoed back (the periodic resync, ``force``, still
sends it), which keeps control traffic proportional to acknowledgements rather than to regions squared.

Invariants:

* claims only grow: the result contains ``received`` and the previous ``published``;
* the result's own part is exactly the translation of the cursor (or of its per-key-ordered subset for a
  Key_Shared subscription);
* with ``force`` the decision always sends; without it, it sends only when the claims add something;
* a cursor that acknowledged entries the index has not read yet is translated again once it has
  (``Claim.complete`` false, then ``index_grew``): a burst acknowledged before the agent's reader got to it is
  claimed as soon as it is read, not at the next resync.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from geosync_core import keyorder, translating
from geosync_core.indexing import OriginIndex
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

_SPAN_END = operator.attrgetter("ledger", "last")
_FIRST = operator.itemgetter(0)


@dataclass(frozen=True, slots=True)
class KeyOrder:
    """For a Key_Shared subscription: the local entries above the mark-delete, each one's key and origin
    region, and for batched entries their sizes and each message's key (see ``keyorder.key_ordered``)."""

    log: Sequence[Position]
    key_of: Callable[[Position], str | None]
    size_of: Callable[[Position], int | None] | None = None
    key_of_message: Callable[[Position, int], str | None] | None = None
    origin_of: Callable[[Position], str | None] | None = None

    def ordered(self, cursor: AckState) -> AckState:
        """What of ``cursor`` may be claimed keeping per-key order (``keyorder.key_ordered``)."""
        return keyorder.key_ordered(
            cursor,
            self.log,
            self.key_of,
            size_of=self.size_of,
            key_of_message=self.key_of_message,
            origin_of=self.origin_of,
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The claims to record as published for a subscription, and whether to send them now."""

    claims: OriginAcks
    send: bool
    complete: bool = True
    """Whether the translation covered everything the cursor acknowledged (false: some acknowledged entries
    lie beyond the index's last entry; decide again when the index grows)."""
    news: bool = False
    """Whether the claims acknowledge a message of this region's log that the claims known before (received,
    and published) did not: ``tells_news`` of them, which the decision has already asked."""


def decide(
    index: OriginIndex,
    cursor: AckState,
    *,
    received: OriginAcks,
    published: OriginAcks | None,
    last_translated: AckState | None,
    force: bool,
    key_order: KeyOrder | None = None,
    index_grew: bool = False,
    local: str | None = None,
    claimed_to: Position | None = None,
) -> Claim | None:
    """The claim for a subscription whose cursor is ``cursor``; None when nothing needs deciding (the cursor
    is the one last translated, something was published, no resync is due, and the index did not grow
    under a translation that was not ``complete``: the caller says so with ``index_grew``). ``local``, the
    deciding region, joins the spans of its own messages (``translating.to_origin_acks``). ``claimed_to``:
    up to where ``published`` already holds everything ``cursor`` acknowledged; only what lies above is
    translated (the claims only grow, so the rest is in them already)."""
    if cursor == last_translated and published is not None and not force and not index_grew:
        return None
    own_cursor = cursor if key_order is None else key_order.ordered(cursor)
    above = claimed_to if published is not None else None
    translated = translating.to_origin_acks(index, own_cursor, local=local, above=above)
    own = translated.acks if isinstance(translated, translating.Translation) else OriginAcks.of({})
    complete = isinstance(translated, translating.Translation) and cursor.reach <= translated.last
    known = received if published is None else received.merge(published)
    claims = own.merge(known)
    # An echo: the claims tell no message the known ones do not. Also when they differ in form only: this
    # region joins its own messages' spans across the copies between them, others name them run by run
    # (``tells_news``). With both regions producing, every cursor the claims moved here differed so, and was
    # sent back as news: a quarter of what the claiming region sent, at 10,000 subscriptions.
    news = _names_news(index, own, known)  # what ``own`` adds to ``known`` is what ``claims`` add to it
    echo_only = published is not None and not news
    return Claim(claims=claims, send=force or not echo_only, complete=complete, news=news)


def _gaps(spans: Sequence[Span], within: Span) -> list[tuple[int, int]]:
    """The entries of ``within`` that no span of ``spans`` (canonical, one ledger or more) covers."""
    out: list[tuple[int, int]] = []
    at = within.first
    # From the first span that ends at or after ``within``'s start: a claim's old spans are not walked again
    # for each new one (claims with holes kept hold thousands).
    start = bisect.bisect_left(spans, (within.ledger, at), key=_SPAN_END)
    for s in itertools.islice(spans, start, None):
        if s.ledger != within.ledger or s.first > within.last:
            break
        if s.first > at:
            out.append((at, s.first - 1))
        at = max(at, s.last + 1)
        if at > within.last:
            return out
    if at <= within.last:
        out.append((at, within.last))
    return out


def tells_news(index: OriginIndex, acks: OriginAcks, known: OriginAcks) -> bool:
    """Whether ``acks`` acknowledge a message of this region's log (an entry ``index`` holds) that ``known``
    does not, in whole or in part: whether another region's consumers acknowledged something first.

    Claims can differ in form and say the same thing. A region joins the spans of its own messages across the
    copies from elsewhere between them (``translating.to_origin_acks`` with ``local``): those positions of its
    log are no message of its own, and no entry of any other region's log has them as origin. Another region,
    translating its copies of those messages, names them one by one. Comparing the forms alone made a region
    whose consumers acknowledged everything look as if others had acknowledged first, whenever both regions
    produced (a lab test found it: the region stopped counting as the one consumed, and a rewind there was
    undone). Messages this region has not read (or forgot, every subscription having acknowledged them) are
    no news either: where that is wrong (consumers acknowledging in two regions at once), a rewind here is
    followed there, which costs duplicates, never a loss."""
    return _names_news(index, acks, known)


def _names_news(index: OriginIndex, acks: OriginAcks, known: OriginAcks) -> bool:
    """``tells_news``. What ``acks`` add to ``known`` is looked for in ``acks`` itself, not in the merge of
    both: the merge holds every claim known (all of a subscription's history), ``acks`` a translation's
    news mostly."""
    if not acks or acks == known:
        return False
    wanted: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for region, spans in acks.by_region:
        had = known.spans(region)
        for span in spans:
            for first, last in _gaps(had, span):
                wanted.setdefault((region, span.ledger), []).append((first, last))
    for region, batches in acks.partials:
        for position, batch in batches:
            origin = Origin(region, position)
            if origin in known:
                continue
            held = known.batch(origin)
            if held is None or held.union(batch) != held:  # as the merge would unite them
                wanted.setdefault((region, position.ledger), []).append((position.entry, position.entry))
    if not wanted:
        return False
    lowest: dict[str, tuple[int, int]] = {}  # positions as integers, compared for every run looked at
    for (region, ledger), gaps in wanted.items():
        gaps.sort()
        start = (ledger, gaps[0][0])
        lowest[region] = min(lowest.get(region, start), start)
    # Newest entries first: new acknowledgements are mostly recent ones. Replication keeps each region's
    # order, so once a region's run lies wholly below its lowest gap, its earlier runs do too (a replicator's
    # re-sent copies can break that at the very end of the log; the cost is a missed news, as above).
    for run in reversed(index):
        bottom = lowest.get(run.region)
        if bottom is None:
            continue
        last = run.origin_last
        if (run.origin_ledger, last) < bottom:
            del lowest[run.region]
            if not lowest:
                return False
            continue
        found = wanted.get((run.region, run.origin_ledger))
        if found is None:
            continue
        # The last gap starting at or below the run's end overlaps the run iff it ends at or after the run's
        # start (they are disjoint and sorted: none before it reaches further).
        i = bisect.bisect_right(found, last, key=_FIRST) - 1
        if i >= 0 and found[i][1] >= run.origin_first:
            return True
    return False
