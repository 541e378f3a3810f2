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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from geosync_core import syncing
from geosync_core.indexing import OriginIndex
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


@dataclass(frozen=True, slots=True)
class KeyOrder:
    """For a Key_Shared subscription: the local entries above the mark-delete, each one's key, and for
    batched entries their sizes and each message's key (see ``syncing.key_ordered``)."""

    log: Sequence[Position]
    key_of: Callable[[Position], str | None]
    size_of: Callable[[Position], int | None] | None = None
    key_of_message: Callable[[Position, int], str | None] | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """The claims to record as published for a subscription, and whether to send them now."""

    claims: OriginAcks
    send: bool
    complete: bool = True
    """Whether the translation covered everything the cursor acknowledged (false: some acknowledged entries
    lie beyond the index's last entry; decide again when the index grows)."""


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
    deciding region, joins the spans of its own messages (``syncing.to_origin_acks``). ``claimed_to``: up to
    where ``published`` already holds everything ``cursor`` acknowledged; only what lies above is translated
    (the claims only grow, so the rest is in them already)."""
    if cursor == last_translated and published is not None and not force and not index_grew:
        return None
    own_cursor = cursor
    if key_order is not None:
        own_cursor = syncing.key_ordered(
            cursor,
            key_order.log,
            key_order.key_of,
            size_of=key_order.size_of,
            key_of_message=key_order.key_of_message,
        )
    above = claimed_to if published is not None else None
    translated = syncing.to_origin_acks(index, own_cursor, local=local, above=above)
    own = translated.acks if isinstance(translated, syncing.Translation) else OriginAcks.of({})
    complete = isinstance(translated, syncing.Translation) and cursor.reach <= translated.last
    known = received if published is None else received.merge(published)
    claims = own.merge(known)
    echo_only = published is not None and claims == known
    return Claim(claims=claims, send=force or not echo_only, complete=complete)
