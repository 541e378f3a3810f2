"""Per-key order of claims: what a Key_Shared subscription may claim without breaking it after a failover.

A Key_Shared subscription's consumers acknowledge out of log order. If a region claimed such a cursor as
it is, the region taking over could deliver an earlier message of a key after a later one had been
acknowledged. ``key_ordered`` keeps the subset that is safe to claim; ``claiming.KeyOrder`` applies it
before translation (``translating.to_origin_acks``).

Invariants:

* PER-KEY ORDER: ``key_ordered`` keeps a subset of the cursor's messages in which, for every key and
  origin region, the acknowledged messages above the mark-delete are a prefix of that key's messages of
  that origin in log order (entry, then batch index);
* IDEMPOTENT: ``key_ordered`` of its own result (same log, keys and origins) is that result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

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
