"""What consumers acknowledged, per subscription, and the claim's own part taken from it (decision 0015).

With ``AgentConfig.claims_from: acknowledgements`` and a plugin whose feed carries ``acked`` blocks, a
subscription's claims come from what its consumers acknowledged, never from cursor moves no consumer made
(creation at Latest, clear-backlog, skip, TTL expiry, a forward reset: issue 45). The agent keeps, per
subscription, the union of every ``acked`` block the feed handed over (``absorb``) as an ``AckState`` (the
core's range-set and batch-index shapes), and claims the translation of ``own_part``: the cursor **and**
that set, message by message.

What is claimed when:

* a feed answer's ``acked`` block adds what it names to the subscription's set (``absorb``); its claim then
  grows by what the cursor also acknowledges (``own_part``): never more than the cursor, never what a jump
  added (a jump moves the cursor, not the set);
* a poll, a write or a feed cursor report that moves the cursor adds to the claim only what the set already
  holds: a move no ``acked`` block reported claims nothing;
* a subscription first seen (no set yet) claims nothing it did not see consumers acknowledge; one restored
  from a checkpoint claims from its checkpointed set;
* every way the set can miss an acknowledgement makes the claim smaller, so a failed-over consumer gets
  those messages again (re-delivery, never loss): an ``overflowed`` block (a subset: absorbed as it is,
  never completed from the cursor), a grown ``acked_lost`` (whole blocks dropped by the plugin), a new feed
  epoch (a broker restart: what it held unread is gone; the set is kept, collection goes on), a batch whose
  size the tail does not know yet (``absorb`` leaves it out; the agent keeps it, not checkpointed, until the
  tail has read its entry), a rewind (the set is dropped: what consumers acknowledged before it may be
  delivered again);
* the claims already published stay (claims only grow): a smaller own part never takes them back.

Invariants (``tests/agent/test_acknowledged.py``): ``own_part(c, a)`` acknowledges exactly the messages both
``c`` and ``a`` acknowledge; ``absorb`` is monotone (never takes a message out) and, with every batch size
known, adds exactly the block's messages.
"""

from __future__ import annotations

from collections.abc import Callable

from geosync_core.batches import MAX_BATCH_SIZE, BatchAcks
from geosync_core.pluginapi import AckedSet, BatchState
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

CURSOR = "cursor"
ACKNOWLEDGEMENTS = "acknowledgements"
CLAIMS_FROM = (CURSOR, ACKNOWLEDGEMENTS)
"""``AgentConfig.claims_from``'s values."""

BEFORE_ALL = Position(-1, -1)
NOTHING = AckState(BEFORE_ALL)
"""The set of a subscription no consumer was seen acknowledging on."""


def absorb(
    acked: AckState | None, block: AckedSet, size_of: Callable[[Position], int | None]
) -> tuple[AckState, tuple[BatchState, ...]]:
    """``acked`` (None: nothing yet) with what ``block`` says consumers acknowledged, and the block's batches
    left out because ``size_of`` (the tail's batch sizes) does not know their size yet: the caller keeps them
    until the tail has read their entries, and drops (counts) them after; dropped, their indexes are not
    claimed (re-delivery, never loss). An ``overflowed`` block is absorbed as it is (a subset); the caller
    counts it."""
    base = NOTHING if acked is None else acked
    batches: list[tuple[Position, BatchAcks]] = []
    left_out: list[BatchState] = []
    for b in block.batches:
        size = size_of(b.position)
        if size is None or not 1 <= size <= MAX_BATCH_SIZE:
            left_out.append(b)
            continue
        batches.append((b.position, BatchAcks.from_unacked(size, [i for i in b.unacked if i < size])))
    mark_delete = base.mark_delete if block.cumulative is None else max(base.mark_delete, block.cumulative)
    grown = AckState.of(mark_delete, base.ranges.union(block.ranges), (*base.batches, *batches))
    return grown, tuple(left_out)


def _whole(state: AckState) -> list[Range]:
    prefix = [Range(BEFORE_ALL, state.mark_delete)] if state.mark_delete > BEFORE_ALL else []
    return [*prefix, *state.ranges]


def _both(a: list[Range], b: list[Range]) -> list[Range]:
    """The intersection of two sorted lists of disjoint open-closed ranges."""
    out: list[Range] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lower, upper = max(a[i].lower, b[j].lower), min(a[i].upper, b[j].upper)
        if lower < upper:
            out.append(Range(lower, upper))
        if a[i].upper < b[j].upper:
            i += 1
        else:
            j += 1
    return out


def _partial(state: AckState, position: Position) -> BatchAcks | bool | None:
    """True: the whole entry; a ``BatchAcks``: some indexes; None: none."""
    if position in state:
        return True
    return state.batch(position)


def own_part(cursor: AckState, acked: AckState | None) -> AckState:
    """What this region's claim is translated from: the messages ``cursor`` acknowledges that consumers were
    seen acknowledging (``acked``; None: none yet). Never more than the cursor."""
    if acked is None:
        acked = NOTHING
    if acked == cursor:
        return cursor
    ranges = _both(_whole(cursor), _whole(acked))
    batches: list[tuple[Position, BatchAcks]] = []
    for position in sorted({p for p, _ in cursor.batches} | {p for p, _ in acked.batches}):
        mine, theirs = _partial(cursor, position), _partial(acked, position)
        if mine is None or theirs is None:
            continue
        if mine is True and isinstance(theirs, BatchAcks):
            batches.append((position, theirs))
        elif theirs is True and isinstance(mine, BatchAcks):
            batches.append((position, mine))
        elif isinstance(mine, BatchAcks) and isinstance(theirs, BatchAcks):
            size = min(mine.size, theirs.size)
            common = BatchAcks(size, mine.acked & theirs.acked & ((1 << size) - 1))
            if not common.is_empty:
                batches.append((position, common))
    return AckState.of(BEFORE_ALL, ranges, batches)
