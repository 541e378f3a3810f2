"""Generations of a subscription's claims: what a rewind does to what a region claims and holds.

Claims can never be taken back, so a deliberate rewind (a consumer or operator moved the cursor back, or
the subscription was deleted and created again) starts a newer generation of them: the region where the
subscription is consumed (``Subscription.active``) claims afresh from its cursor alone, and every other
region, hearing of the newer generation, drops the claims it held. Where claims are made of the cursor
(``claims_from: cursor``) it also rewinds its own cursor to what the new claims acknowledge (``follow``):
its cursor would otherwise be claimed back over the rewind. Where they are made of what consumers
acknowledged (``claims_from: acknowledgements``) its cursor stays (a reset is not replicated, invariant 7)
and what its consumers acknowledged before is dropped with the old claims. Claims of an older generation
are dropped where a newer one is known.

Invariants (tests in ``tests/agent/test_core_generations.py``): a generation never goes back; a new one
holds no claims and no plan; only the active region starts one from its own cursor, and never for a move
back the agent made itself and sees late, nor for a single poll's; claims of an older generation change
nothing; a newer one replaces the claims held and has the cursor followed before it claims anything.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum

from geosync_agent.core.subscriptions import BEFORE_ALL, Subscription
from geosync_core import ackstates, claiming
from geosync_core.indexing import OriginIndex
from geosync_core.origins import OriginAcks
from geosync_core.rangesets import AckState


def new_generation(state: Subscription, generation: int) -> None:
    """Start ``generation`` of ``state``'s claims: none held or published yet, nothing planned from the
    old ones, no rewind to follow."""
    state.generation = generation
    state.received = OriginAcks.of({})
    state.published = state.translated = None
    state.claimed_to = BEFORE_ALL
    state.planned = state.pending_move = state.reset_to = None
    state.follow = False


def follow(state: Subscription, generation: int) -> None:
    """Another region rewound the subscription (``generation`` is newer): its claims replace the ones
    held, and the cursor here is rewound to them before it claims anything."""
    new_generation(state, generation)
    state.follow = True


class Rewind(Enum):
    """What a cursor seen going back is."""

    PASSIVE = "passive"
    """Here, where the subscription is not consumed: the active region's claims undo it."""
    OWN = "own"
    """The agent's own rewind, seen late by this source."""
    NEW_GENERATION = "new generation"
    """A deliberate rewind where the subscription is consumed: a new generation of its claims started."""
    UNCONFIRMED = "unconfirmed"
    """Shown by a poll alone, not believed yet: the cursor is read again before it is judged."""


@dataclass(frozen=True, slots=True)
class Rewound:
    kind: Rewind
    recreated: bool
    """The cursor is the first of a subscription created again (not a move back)."""
    seen: AckState | None
    """What this source showed acknowledged before."""
    source: str = ""
    """Who showed the cursor going back ("feed", "poll", "write")."""
    seen_by: tuple[str, float] | None = None
    """Which source last changed ``seen`` and when (``Subscription.seen_by``; None for the feed's own)."""
    at: float = 0.0
    """When (monotonic seconds) it was judged."""


LACKING_SHOWN = 3
"""Ranges of what was seen and is missing now named in a rewind's log line (the rest are counted)."""


def lacking(seen: AckState, now: AckState) -> tuple[list[str], int]:
    """The parts of ``seen`` (its mark-delete, its ranges; batch indexes left out) that ``now`` does not
    acknowledge whole: the first LACKING_SHOWN as text, and how many there are. What a rewind was judged
    by, for its log line (``covers_whole`` says only whether there are any)."""
    shown: list[str] = []
    count = 0
    if seen.mark_delete > now.mark_delete:
        count += 1
        shown.append(f"up to {seen.mark_delete} (mark-delete)")
    mine = now.ranges.ranges
    for r in seen.ranges.ranges:
        if r.upper <= now.mark_delete:
            continue
        # As ``AckState.covers_whole`` judges it: inside the first range of ``now`` ending at or above it.
        i = bisect.bisect_left(
            mine, (r.upper.ledger, r.upper.entry), key=lambda m: (m.upper.ledger, m.upper.entry)
        )
        if i == len(mine) or mine[i].lower > r.lower:
            count += 1
            if len(shown) < LACKING_SHOWN:
                shown.append(str(r))
    return shown, count


def describe(rewind: Rewound, cursor: AckState) -> str:
    """One bounded line on what a rewind was judged by: the view compared against (its source and age),
    the one that lacks some of it, and the first of what it lacks."""
    seen = rewind.seen
    if seen is None:
        return f"on a {rewind.source or 'view'}: the subscription was created again"
    whole = AckState.of(cursor.mark_delete, cursor.ranges) if cursor.batches else cursor
    shown, count = lacking(seen, whole)
    by = rewind.seen_by
    origin = "the feed's last report" if rewind.source == "feed" else "nothing recorded"
    if by is not None and rewind.source != "feed":
        origin = f"a {by[0]} {rewind.at - by[1]:.2f} s before"
    more = f" and {count - len(shown)} more" if count > len(shown) else ""
    return (
        f"on a {rewind.source}: the view from {origin} (mark-delete {seen.mark_delete}, "
        f"{len(seen.ranges)} ranges) acknowledged what this one (mark-delete {cursor.mark_delete}, "
        f"{len(cursor.ranges)} ranges, {len(cursor.batches)} partial batches) lacks: "
        f"{', '.join(shown) or 'nothing whole'}{more}"
    )


def rewound(
    state: Subscription, cursor: AckState, *, source: str, now_mono: float, now_wall: float
) -> Rewound | None:
    """Whether ``cursor``, as ``source`` ("feed", "poll" or "write") showed it, has ``state`` rewound here
    by someone else than the agent (it no longer acknowledges entries it was seen acknowledging before,
    see ``Subscription.seen_feed`` and ``seen_any``; or it is the first cursor after it was created
    again); None when it was not. Where this region is the active one, a new generation of its claims
    starts, made of this cursor alone, numbered no lower than the wall clock's milliseconds (``now_wall``
    seconds). Batch indexes are left out (polls cannot see them). A poll that lacks what was seen is
    ``Rewind.UNCONFIRMED`` (nothing recorded): judged only if the next poll lacks it too."""
    md = cursor.mark_delete
    whole = AckState.of(md, cursor.ranges) if cursor.batches else cursor
    seen = state.seen_feed if source == "feed" else state.seen_any
    seen_by = None if source == "feed" else state.seen_by
    if source == "poll" and not state.recreated:
        # ``internalStats`` reads a cursor's mark-delete, then its ranges, not under one lock: a poll taken
        # while the mark-delete moved on shows the old mark-delete with the ranges the move dropped (those
        # at or below the new one), so it lacks entries acknowledged all along (lab chaos seed 93910: a
        # hole acknowledged 0.1 s after a Key_Shared consumer subscribed moved it on). Such a view is gone
        # at the next read; a rewind is not. A poll that lacks what was seen is believed at the second.
        doubted, state.poll_doubted = state.poll_doubted, False
        if not doubted and seen is not None and not whole.covers_whole(seen):
            state.poll_doubted = True
            return Rewound(Rewind.UNCONFIRMED, False, seen, source, seen_by, now_mono)
    if source == "feed":
        state.seen_feed = whole
    any_ = state.seen_any
    # A cursor moving on covers what was seen: the union is then the cursor itself (not built again).
    state.seen_any = (
        whole if any_ is None or source != "feed" or whole.covers_whole(any_) else any_.merge(whole)
    )
    if state.seen_any is not any_:
        state.seen_by = (source, now_mono)
    recreated, state.recreated = state.recreated, False
    if not recreated and (seen is None or whole.covers_whole(seen)):
        return None
    state.planned = None  # the cursor may be back where it was planned from before: plan again
    if not state.active:
        return Rewound(Rewind.PASSIVE, recreated, seen, source, seen_by, now_mono)
    own = state.reset_to
    if not recreated and own is not None and now_mono < own[1] and (own[0] is None or md >= own[0]):
        return Rewound(Rewind.OWN, recreated, seen, source, seen_by, now_mono)
    new_generation(state, max(state.generation + 1, int(now_wall * 1000)))
    state.seen_feed = state.seen_any = whole
    state.seen_by = (source, now_mono)
    return Rewound(Rewind.NEW_GENERATION, recreated, seen, source, seen_by, now_mono)


class Taken(Enum):
    """What claims received did to a subscription's state."""

    SUPERSEDED = "superseded"
    """Of an older generation than the one held: dropped (they would undo a rewind)."""
    UNCHANGED = "unchanged"
    """Nothing the claims held did not say already."""
    CHANGED = "changed"
    """The claims held grew."""


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    """A poll alone showed ``state``'s cursor (``cursor``) going back: read again before it is judged."""

    state: Subscription
    rewind: Rewound
    cursor: AckState


@dataclass(frozen=True, slots=True)
class RewindTaken:
    """``state``'s cursor (``cursor``) was rewound here: its claims start again from it, as ``generation``.
    What the feed had said by then (``epoch``, ``seq``, ``read_at``: when it last answered, monotonic, -1:
    never) and whether claims are made of what consumers acknowledged (``claimed``), to tell a broker's
    restart from a rewind when reading the log."""

    state: Subscription
    rewind: Rewound
    cursor: AckState
    generation: int
    epoch: str
    seq: int
    read_at: float
    claimed: bool


@dataclass(frozen=True, slots=True)
class RewoundElsewhere:
    """Claims of a newer generation came for ``state``: it was rewound in another region. ``how``:
    "deferred" (followed or not once it is known what claims here are made of: the feed has not answered
    yet), "followed" (its cursor here is rewound to them) or "not followed" (claims start again)."""

    state: Subscription
    how: str


def take_claims(
    state: Subscription,
    message: ackstates.AckStateMessage,
    *,
    index: OriginIndex | None,
    now_wall: float,
    follow_rewinds: bool = True,
) -> Taken:
    """Merge the claims ``message`` carries into ``state`` (the subscription it names) at wall time
    ``now_wall``. A newer generation replaces the claims held first (the caller tells it by
    ``state.generation``). With ``follow_rewinds`` the cursor here is then rewound to the new claims
    (``follow``): a region that claims its cursor would otherwise claim back what the rewind undid. Without
    it (claims made of what consumers acknowledged, decision 0015) the cursor stays where it is, and what
    this region's consumers acknowledged before belongs to the old generation: it is not claimed again
    (invariant 7: a reset is never replicated implicitly).
    Claims that tell of acknowledgements not made here first make this region passive: the subscription is
    consumed there now (judged against the topic's origin ``index``, or by the claims' form without one).
    Claims that say the subscription is Key_Shared make it so here (``Subscription.key_shared``): a region
    where nobody consumed cannot tell the type, and keeps per-key order applying them only when it knows."""
    if message.generation < state.generation:
        return Taken.SUPERSEDED
    if message.key_shared and not state.key_shared:
        state.key_shared = True
        state.planned = None  # planned without per-key order
    if message.generation > state.generation:
        if follow_rewinds:
            follow(state, message.generation)
        else:
            new_generation(state, message.generation)
            state.acked = None
    merged = state.received.merge(message.acks)
    changed = merged != state.received
    if state.active and changed:
        known = state.known()
        if (
            claiming.tells_news(index, message.acks, known)
            if index is not None
            else known.merge(message.acks) != known  # no log here to judge by: by their form
        ):
            state.active = False  # acknowledged elsewhere first: consumed there now
    state.received_from[message.region] = now_wall
    state.announced = True
    if changed:
        state.received = merged
    return Taken.CHANGED if changed else Taken.UNCHANGED
