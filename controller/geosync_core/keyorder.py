"""Per-key order of claims: what a Key_Shared subscription may claim without breaking it after a failover.

A Key_Shared subscription's consumers acknowledge out of log order. If a region claimed such a cursor as
it is, the region taking over could deliver an earlier message of a key after a later one had been
acknowledged. ``key_ordered`` keeps the subset that is safe to claim; ``claiming.KeyOrder`` applies it
before translation (``translating.to_origin_acks``). ``key_ordered_plan`` keeps the same order where claims
are applied: what a plan (``syncing.plan_apply``) may acknowledge here.

Invariants:

* PER-KEY ORDER: ``key_ordered`` keeps a subset of the cursor's messages in which, for every key and
  origin region, the acknowledged messages above the mark-delete are a prefix of that key's messages of
  that origin in log order (entry, then batch index);
* IDEMPOTENT: ``key_ordered`` of its own result (same log, keys and origins) is that result.
* A SUBSET THAT KEEPS ORDER: ``key_ordered_plan`` writes only what the plan wrote, keeps what the cursor
  held, and after it every message acknowledged above the mark-delete that the cursor did not hold has no
  earlier unacknowledged message of its key and origin in the log; a plan that breaks no order is returned
  as it is (``held`` 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from geosync_core import syncing
from geosync_core.batches import BatchAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


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


def key_ordered_plan(
    plan: syncing.ApplyPlan,
    local: AckState,
    log: Iterable[Position],
    key_of: Callable[[Position], str | None],
    *,
    size_of: Callable[[Position], int | None] | None = None,
    key_of_message: Callable[[Position, int], str | None] | None = None,
    origin_of: Callable[[Position], str | None] | None = None,
) -> syncing.ApplyPlan:
    """``plan`` (made from ``local`` over ``log``) less what would break a Key_Shared subscription's per-key
    order here: a message the plan acknowledges is left unacknowledged (and counted in ``held``) while an
    earlier message of the same key and origin region in ``log`` stays unacknowledged after the plan. What
    ``local`` acknowledges already (consumers here, or earlier plans) is kept, and holds nothing back.

    The claiming region keeps that order over its own log (``key_ordered``), and one origin's messages lie in
    the same order in every region's log, so claims about a log holding every message of the origin never
    need this. A rebuilt region's does not: what the old life had received when it was wiped is not
    replicated to the new one, whose consumers then acknowledge later messages of those keys; applied as
    claimed, a peer that still holds the earlier ones would give them, after a failover there, once the
    later ones were acknowledged (invariant 6; found by the simulator, seeds 5043 and 5430 of the rebuilds
    profile). Kept here, they are given again after the earlier ones (duplicates instead of a reordering).

    Keys and origins as for ``key_ordered`` (``None`` could be any). ``log`` lists the entries above
    ``local``'s mark-delete in order, as for ``plan_apply``; entries not in it are passed over."""
    if plan.is_empty:
        return plan
    target = syncing.applied(local, plan)
    top = max(
        p
        for p in (plan.new_mark_delete, *plan.individual_acks, *(q for q, _ in plan.batch_acks))
        if p is not None
    )
    blocked = _Blocked()
    single = "" if origin_of is None else None
    held = 0
    # Per entry looked at: (position, acknowledged after the plan as kept, as a BatchAcks).
    kept: list[tuple[Position, BatchAcks]] = []
    seen = local.mark_delete
    for p in log:
        if p <= local.mark_delete:
            continue
        if p > top:
            break
        seen = p
        if p in local:
            kept.append((p, BatchAcks.whole(1)))
            continue
        known = None if size_of is None else size_of(p)
        size = _size(p, target if target.batch(p) is not None else local, known)
        origin = single if origin_of is None else origin_of(p)
        bits = 0
        for i in range(size):
            if local.acks_message(p, i):
                bits |= 1 << i
                continue
            key = key_of_message(p, i) if key_of_message is not None else key_of(p)
            if target.acks_message(p, i):
                if not blocked.blocks(origin, key):
                    bits |= 1 << i
                    continue
                held += 1
            blocked.add(origin, key)
        kept.append((p, BatchAcks(size, bits)))
    whole = seen >= top  # else the log ended (its window) below what the plan writes: that part is left out
    if not held and whole:
        return plan
    mark_delete: Position | None = None
    individual: list[Position] = []
    batches: list[tuple[Position, BatchAcks]] = []
    # The mark-delete goes as far as the plan's, over entries acknowledged whole in a row (nothing below the
    # plan's is ever held back: an earlier message of its key is below it too; the log may end first).
    limit = plan.new_mark_delete
    advancing = limit is not None
    for p, acks in kept:
        advancing = advancing and acks.is_full and limit is not None and p <= limit
        if advancing:
            mark_delete = p
            continue
        if p in local:
            continue
        if acks.is_full:
            individual.append(p)
        elif not acks.is_empty and acks != local.acked_indexes(p, acks.size):
            batches.append((p, acks))
    moved = mark_delete if mark_delete is not None and mark_delete > local.mark_delete else None
    return syncing.ApplyPlan(
        moved,
        tuple(individual),
        plan.blocked_by if moved == plan.new_mark_delete else None,
        tuple(batches),
        plan.complete and whole,
        held,
    )


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


def _size(p: Position, local: AckState, known: int | None) -> int:
    """How many messages entry ``p`` holds, as far as anyone here knows (1 when nobody does); ``known``: what
    the tail says (``size_of(p)``)."""
    if known is None or known <= 1:
        partial = local.batch(p)
        return partial.size if partial is not None else 1
    return known
