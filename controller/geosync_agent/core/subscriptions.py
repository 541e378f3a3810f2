"""What the agent knows of each subscription, as values the core's decisions read and change.

A ``Subscription`` is one subscription of one topic partition as this region sees it: its cursor here, the
claims other regions sent about it and those this region published, and the bookkeeping that lets a round
skip the thousands of subscriptions in which nothing changed. ``SubsTable`` holds them by key.

Invariants (tests in ``tests/agent/test_core.py``):

- ``known()`` is every claim held: those received merged with those published; nothing is ever dropped from
  it but by a newer generation (a rewind) or a hand-off.
- ``confirm`` of one deleted here makes a new subscription: its cursor and plans go, its claims stay.
- ``hand_off`` forgets what was read and published here and keeps the claims received.
- ``SubsTable.version`` changes with every change to which keys the table holds, never otherwise.
- A tail may forget entries up to ``forgettable_floor`` of its subscriptions and no further: never above a
  cursor's mark-delete, above what was claimed of it, or anything while one follows a rewind.
- Setting a field the apply step reads (``APPLY_READS``) to another value lists the subscription in its
  table's ``touched`` (``core.quiet``: the apply step looks only at those, and at the restless ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from geosync_core import pacing
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

BEFORE_ALL = Position(-1, -1)
"""A mark-delete before the earliest message."""

SubKey = tuple[str, str]
"""(topic partition, subscription)"""

APPLY_READS = frozenset(
    {
        "announced",
        "exists",
        "deleted_here",
        "cursor",
        "received",
        "planned",
        "pending_move",
        "follow",
        "generation",
        "reset_to",
    }
)
"""The fields whose change may end the apply step's next look at a subscription otherwise than its last
(``core.quiet``). Not the others: what was published, the feed's bookkeeping, what /state shows (such as
``parked``, which the step works out again where it matters), and what only the step itself sets along with
``planned`` (``planned_end``, ``planned_rewrites``, ``planned_nothing``, ``plan_after``)."""


@dataclass
class Subscription:
    topic: str
    name: str
    cursor: AckState | None = None
    consumers: int = 0
    exists: bool = True
    published: OriginAcks | None = None
    received: OriginAcks = field(default_factory=lambda: OriginAcks.of({}))
    announced: bool = False
    """Some other region has this subscription (so it must exist here too, even before any ack)."""
    received_from: dict[str, float] = field(default_factory=dict)
    translated: AckState | None = None
    """The cursor last translated and published (publishing is skipped while it is unchanged)."""
    translated_from: tuple[AckState, AckState | None, bool, AckState | None] | None = None
    """What the last decision about its claims was made from: the cursor, what consumers were seen
    acknowledging (None unless claims are made of it), whether they were, and ``translated`` as it left it.
    The same objects again decide nothing new (see ``observing``'s publish), and are not decided again."""
    incomplete_at: int | None = None
    """The tail's version when the last translation left acknowledgements out (the cursor reached past the
    origin index: a burst acknowledged before the tail read it); translated again as soon as the tail has
    read more. ``None``: the translation covered the cursor."""
    claimed_to: Position = BEFORE_ALL
    """Up to where what the cursor acknowledged is in the published claims: the last translation's
    mark-delete, but no further than the tail had indexed then (a cursor may acknowledge entries before the
    tail reads them). The tail forgets nothing above it: what is forgotten can no longer be claimed."""
    planned: tuple[AckState | None, int, OriginAcks] | None = None
    """(cursor, index version, claims received) the last plan was made from: replanning is skipped until
    one of them changes or a mark-delete move is still pending (compared as values: an unchanged one is the
    same object, so checking 10,000 subscriptions a round costs little)."""
    planned_end: Position | None = None
    """The tail's last entry when the last plan was made (None: its size was still being counted), and
    ``planned_rewrites`` its ``rewrites`` then: entries appended since change that plan only if the claims
    received name their origins (see the apply step)."""
    planned_rewrites: int = -1
    planned_nothing: bool = False
    """The last plan was empty, walked the whole log and was blocked by no entry not indexed yet: a cursor
    that has since only moved on (consumers here acknowledged) needs no plan either."""
    pending_move: pacing.PendingMove | None = None
    pending_holes: int = 0
    unapplied_batches: int = 0
    """Partly acknowledged entries whose remote batch indexes this region cannot write (entry-granular)."""
    unapplied_batch_messages: int = 0
    """Messages in those entries that other regions acknowledged and this one cannot."""
    kind: str = ""
    """The subscription type the broker last reported with consumers attached ("" until seen)."""
    key_shared: bool = False
    """Seen with Key_Shared consumers here, or claims received said so: claims keep per-key order (see
    keyorder.key_ordered), and so do the plans applying others' (keyorder.key_ordered_plan)."""
    last_applied_at: float = 0.0
    behind_since: float | None = None
    """Wall-clock time since which some remote acknowledgement waits to be applied here (None: in step)."""
    waiting: str = ""
    """Why the last round applied nothing to it, in words for /state ("" when it planned)."""
    confirmed_at: float = 0.0
    """Monotonic time this region last showed the subscription existing (0: never)."""
    parked: bool = False
    """Far behind, below the entries forgotten over ``max_tracked_entries``: not planned nor claimed."""
    deleted_here: bool = False
    """It existed here and a discovery pass started later no longer found it: someone deleted it on
    purpose, and the agent does not create it again from other regions' claims (until it exists again)."""
    generation: int = 0
    """The generation of the claims held and published (``ackstates.AckStateMessage.generation``): a
    rewind here starts a newer one; claims of an older one are dropped, a newer one replaces them."""
    seen_feed: AckState | None = None
    """The whole entries the acknowledgement feed showed acknowledged last: a later feed report that lacks
    some is a rewind (the feed reports in the order things happened; a report read now may predate a poll
    or a write)."""
    seen_any: AckState | None = None
    """The whole entries shown acknowledged since the last rewind, by the feed, a poll or a write: a poll or
    a write result that lacks some is a rewind (everything seen before either happened before it)."""
    seen_by: tuple[str, float] | None = None
    """Which source ("feed", "poll", "write") last changed ``seen_any``, and when (monotonic seconds): told
    in the log when a rewind is declared against it."""
    poll_doubted: bool = False
    """The last poll judged lacked whole entries seen acknowledged before: not believed until the next poll
    (``core.generations.rewound``)."""
    recreated: bool = False
    """Created again after it was deleted here: its first cursor starts a new generation."""
    fed: tuple[tuple[object, ...], AckState] | None = None
    """The last feed report taken (its fields, and the batch sizes its cursor was read with) and the cursor
    read from it: the plugin reports a subscription again for its settle time after each acknowledgement,
    and the same report again is skipped unread while the cursor held is still that one."""
    active: bool = False
    """The last acknowledgements nobody had claimed before were made here (by consumers here): this region
    is where the subscription is consumed, and a rewind here is deliberate. A passive region's copy
    follows the active one's claims; a rewind there is undone by them."""
    follow: bool = False
    """A newer generation arrived: rewind the cursor to what its claims acknowledge (if it acknowledges
    more) before claiming anything from it."""
    reset_to: tuple[Position | None, float] | None = None
    """The agent's own rewind: the mark-delete it set, and until when (monotonic) backward moves down to
    it are that rewind's."""
    plan_took: float = 0.0
    """CPU seconds its last plan took on the loop's thread (see ``tuning.HEAVY_PLAN_S``)."""
    publish_took: float = 0.0
    """CPU seconds its last published claim took to decide and translate (see ``pauses.publish_pause``)."""
    plan_after: float = 0.0
    """Monotonic time before which it is not planned again for new entries or cursor moves alone (new claims
    are planned at once): see ``tuning.PLAN_WAIT_FACTOR``."""
    publish_after: float = 0.0
    """Monotonic time before which its claims are not translated and published again unless forced (see
    ``pauses.publish_pause``): claims with tens of thousands of spans are sent in proportion to their size."""

    acked: AckState | None = None
    """What consumers were seen acknowledging on it (the plugin feed's ``acked`` blocks, with
    ``claims_from: acknowledgements``; ``core.acknowledged``): its claims are the cursor limited to it. None:
    nothing seen yet (or dropped by a rewind)."""

    table: ClassVar[SubsTable | None] = None
    """The table holding it (set by ``SubsTable``), told when a field in ``APPLY_READS`` changes
    (``_Watched``)."""

    def known(self) -> OriginAcks:
        """Every claim held about it: received from other regions and published by this one."""
        return self.received if self.published is None else self.received.merge(self.published)

    def confirm(self, at: float) -> None:
        """The subscription exists here as of monotonic time ``at``. One deleted here is a new subscription:
        its old cursor goes, and its first one starts a new generation of claims."""
        if self.deleted_here:
            self.recreated = True
            self.cursor = self.seen_feed = self.seen_any = None
            self.planned = self.pending_move = None
        self.exists = True
        self.deleted_here = False
        self.confirmed_at = max(self.confirmed_at, at)

    def hand_off(self) -> None:
        """Its topic moved to another broker, whose agent syncs it now: forget what was seen of the cursor
        here and what was published from it (taken over again, it is read and published afresh); the claims
        received stay (another takeover applies them at once)."""
        self.cursor = self.translated = self.seen_feed = self.seen_any = None
        self.published = None
        self.incomplete_at = None
        self.claimed_to = BEFORE_ALL
        self.planned = self.pending_move = self.reset_to = None
        self.pending_holes = self.unapplied_batches = self.unapplied_batch_messages = 0
        self.behind_since = None
        self.parked = False
        self.waiting = "handed off: another broker's agent syncs it"

    @property
    def key(self) -> SubKey:
        return (self.topic, self.name)

    def learn_kind(self, kind: str) -> None:
        if kind and kind != "None":  # sticky: an idle subscription reports no type
            self.kind = kind
            self.key_shared = self.key_shared or kind == "Key_Shared"


_UNSET = object()


class _Watched:
    """A field in ``APPLY_READS``: setting it to another object tells the subscription's table. Only
    setting goes through here (no ``__get__``: reading finds the value in the instance as for any field);
    the other fields are set as fast as ever (publishing alone sets a dozen per acknowledgement)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __set__(self, state: Subscription, value: object) -> None:
        held = state.__dict__
        if held.get(self.name, _UNSET) is not value:
            table = held.get("table")
            if table is not None:
                topic, name = held["topic"], held["name"]
                names = table.touched.get(topic)
                if names is None:
                    table.touched[topic] = {name: None}
                else:
                    names[name] = None
                if self.name == "cursor":
                    names = table.cursor_set.get(topic)
                    if names is None:
                        table.cursor_set[topic] = {name: None}
                    else:
                        names[name] = None
        held[self.name] = value


for _name in APPLY_READS:
    setattr(Subscription, _name, _Watched(_name))  # after ``dataclass`` took the fields' defaults


class SubsTable(dict[SubKey, Subscription]):
    """The agent's subscriptions by key, counting changes to which keys it holds (``version``): the rounds'
    per-topic grouping is kept while the version holds (at 10,000 subscriptions regrouping them at every
    round was a tenth of a round's CPU, for a grouping that changes only when subscriptions come and go).
    ``touched`` lists, per topic, the names of the subscriptions a field the apply step reads changed on
    since the step last took the topic's (see ``core.quiet``), ``cursor_set`` those whose cursor was set."""

    version: int = 0
    _grouped: tuple[int, dict[str, list[Subscription]]] | None = None
    """``by_topic``'s grouping, and the version it was made at."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.touched: dict[str, dict[str, None]] = {}
        self.cursor_set: dict[str, dict[str, None]] = {}
        """Per topic, the subscriptions whose cursor was set since the observe step last took the topic's:
        their claims may have to follow (the step looks at those, not at every subscription of the topic)."""
        for state in self.values():
            self._hold(state)

    def _hold(self, state: Subscription) -> None:
        object.__setattr__(state, "table", self)
        self.touch(state)
        self.cursor_set.setdefault(state.topic, {})[state.name] = None

    def made(self, topic: str, name: str, *, exists: bool = True) -> Subscription:
        """The state of ``topic``'s subscription ``name``, made (with ``exists``) if there is none yet, and
        not made to be thrown away when there is one (a claim received for each acknowledgement at 10,000
        subscriptions built a whole new state each time: 4 % of both agents' work)."""
        sub = self.get((topic, name))
        if sub is None:
            sub = self[(topic, name)] = Subscription(topic, name, exists=exists)
        return sub

    def existing(self, topic: str, names: Iterable[str]) -> list[Subscription]:
        """The subscriptions of ``topic`` named ``names`` (in that order) that exist here."""
        out = []
        for name in names:
            state = self.get((topic, name))
            if state is not None and state.exists:
                out.append(state)
        return out

    def touch(self, state: Subscription) -> None:
        names = self.touched.get(state.topic)
        if names is None:
            self.touched[state.topic] = {state.name: None}
        else:
            names[state.name] = None

    def __setitem__(self, key: SubKey, value: Subscription) -> None:
        self.version += 1
        self._hold(value)
        super().__setitem__(key, value)

    def __delitem__(self, key: SubKey) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, key: SubKey, *default: Any) -> Any:
        self.version += 1
        return super().pop(key, *default)

    def popitem(self) -> tuple[SubKey, Subscription]:
        self.version += 1
        return super().popitem()

    def clear(self) -> None:
        self.version += 1
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)
        for state in self.values():
            self._hold(state)

    def setdefault(self, key: SubKey, default: Subscription) -> Subscription:
        self.version += 1
        state = super().setdefault(key, default)
        self._hold(state)
        return state

    def by_topic(
        self, *, existing_only: bool, topics: Iterable[str] | None = None
    ) -> dict[str, list[Subscription]]:
        """The subscriptions of each topic (in the order the table holds them), or of ``topics`` only;
        ``existing_only``: those that exist here, and only the topics with one. The grouping is made again
        only when subscriptions came or went (``version``); the lists are not to be changed."""
        grouped = self._grouped
        if grouped is None or grouped[0] != self.version:
            groups: dict[str, list[Subscription]] = {}
            for state in self.values():
                groups.setdefault(state.topic, []).append(state)
            grouped = self._grouped = (self.version, groups)
        if not existing_only:
            return grouped[1]
        out: dict[str, list[Subscription]] = {}
        groups = grouped[1]
        chosen = groups.items() if topics is None else ((t, groups[t]) for t in topics if t in groups)
        for topic, group in chosen:
            if all(s.exists for s in group):
                out[topic] = group
            elif any(s.exists for s in group):
                out[topic] = [s for s in group if s.exists]
        return out

    def still_held(self, heavy: dict[SubKey, Subscription]) -> int:
        """How many of the subscriptions ``heavy`` holds (``pauses.note_heavy``) are still this table's;
        those gone, or replaced by a new state of their key, are dropped from it."""
        for key in [k for k, state in heavy.items() if self.get(k) is not state]:
            del heavy[key]
        return len(heavy)


@dataclass
class Feed:
    """Where the agent is in the broker plugin's acknowledgement feed."""

    epoch: str = ""
    seq: int = 0
    busy_until: float = 0.0
    acked: bool = False
    """Its answers carry what consumers acknowledged (``acked``): claims can be made from it."""
    acked_lost: int = 0
    """The plugin's ``acked_lost`` at the last answer (it counts since the broker started)."""
    waiting: dict[SubKey, tuple[Any, ...]] = field(default_factory=dict)
    """``acked`` batches whose entries the tail had not read yet (their size unknown): absorbed at a later
    read (``pluginapi.BatchState``; ``core.acknowledged.absorb``)."""
    held: dict[SubKey, tuple[float, tuple[Any, ...]]] = field(default_factory=dict)
    """``acked`` blocks for subscriptions not tracked yet (``pluginapi.AckedSet``), since when (monotonic
    seconds): taken once the subscription is, dropped after tuning.HELD_ACKED_S."""
    replay: tuple[Any, ...] = ()
    read_at: float = -1.0
    """The round (its ``now.mono``) the feed last answered in."""
    held_looks: set[SubKey] = field(default_factory=set)
    """Subscriptions the last answer named in ``acked`` alone, without a report of their cursor: looked at
    again with the cursor held here (``core.absorbing``), which the broker did not show this time."""
    write_version: int = 1
    """The plugin's write items, as its last feed answer said (``pluginapi.Feed.write_version``): from 2,
    writes carry the mark-delete they were planned from (``PluginAck.planned_from``); older plugins refuse
    the field."""
    planned_from_refused_at: float = float("-inf")
    """When (monotonic seconds) a broker last refused ``planned_from`` though the feed said 2 (brokers of
    both versions during an upgrade): not sent for ``capabilities.REPROBE_S`` after."""
    """``acked`` blocks a restored agent took up from its journal (``pluginapi.AckedSet``): absorbed with the
    first answer of the feed, before anything newer."""


def decided_already(state: Subscription, *, acknowledgements: bool, log_version: int) -> bool:
    """Whether ``state``'s last claim decision was made from the very cursor and acknowledgements it holds
    (``translated_from``; ``acknowledgements``: claims are made of what consumers acknowledged), with
    nothing published or translated since, complete over the log (at ``log_version`` now), and not
    Key_Shared (its claims follow the keys the tail reads): deciding again would find the same claim and
    decide nothing (``claiming.decide`` returns None)."""
    made_from = state.translated_from
    return (
        made_from is not None
        and made_from[0] is state.cursor
        and made_from[1] is (state.acked if acknowledgements else None)
        and made_from[2] == acknowledgements
        and made_from[3] is state.translated
        and state.published is not None
        and not state.key_shared
        and (state.incomplete_at is None or state.incomplete_at == log_version)
    )


def undecided(state: Subscription, acknowledgements: bool, log_version: int) -> bool:
    """Whether ``state``'s cursor is neither the one its claims were translated from nor one a decision was
    made from (``decided_already``): its claims may have to follow it."""
    return (
        state.cursor is not state.translated
        and not decided_already(state, acknowledgements=acknowledgements, log_version=log_version)
        and state.cursor != state.translated
    )


def to_decide(
    state: Subscription, *, polled: bool, moved: bool, claims: bool, acknowledgements: bool, log_version: int
) -> bool:
    """Whether a look at ``state``'s topic decides its claim: a poll's, every subscription it read (a resync
    publishes them whole); the feed's, one the look ``moved``, and where ``claims`` are made one a write moved
    since it was decided or that was not decidable then (``undecided``: claims and the tail follow it). The
    feed's look is given only the subscriptions it named, those set since (``SubsTable.cursor_set``) and
    those left undecided: not every subscription of the topic."""
    return (
        polled
        or moved
        or (claims and undecided(state, acknowledgements=acknowledgements, log_version=log_version))
    )


def claim_size(acks: OriginAcks | None) -> int:
    """Spans and partly claimed entries in ``acks``: what a subscription's claims cost to keep and send."""
    if acks is None:
        return 0
    return sum(len(spans) for _, spans in acks.by_region) + sum(len(b) for _, b in acks.partials)


def forgettable(state: Subscription, *, claims: bool) -> Position | None:
    """Up to where ``state`` lets its topic's tail forget (None: its cursor is not known yet). A subscription
    following a rewind may have to unacknowledge anything: nothing. Where claims are published, nothing a
    cursor acknowledged that is not claimed yet (it acknowledged entries before the tail read them)."""
    if state.cursor is None:
        return None
    if state.follow:
        return BEFORE_ALL
    return min(state.cursor.mark_delete, state.claimed_to) if claims else state.cursor.mark_delete


def forgettable_floor(states: list[Subscription], *, claims: bool) -> Position | None:
    """Up to where all of ``states`` let their topic's tail forget (``forgettable``; None: not at all)."""
    # ``forgettable`` of each, compared as integers: asked of every subscription of each topic a feed
    # report names, at every round.
    floor: Position | None = None
    low = (0, 0)
    for state in states:
        cursor = state.cursor
        if cursor is None:
            return None
        f = BEFORE_ALL if state.follow else cursor.mark_delete
        if claims and not state.follow:
            claimed = state.claimed_to
            if (claimed.ledger, claimed.entry) < (f.ledger, f.entry):
                f = claimed
        at = (f.ledger, f.entry)
        if floor is None or at < low:
            floor, low = f, at
    return floor
