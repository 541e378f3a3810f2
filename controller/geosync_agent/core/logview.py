"""One topic partition's log as this agent has read it: each local entry's origin and details.

The shell's ``tailing.Tail`` reads the partition and hands what it drained from its reader's inbox to
``LogView.take``; this module owns no reader, queue, thread or clock (``now`` comes with each call). Entries
are named with the one resolver every tool shares (``geosync_core.resolving``); where it must ask what the
brokers recorded (``core.naming``), ``take`` stops at that entry (``Unanswered``), keeps it and the rest
(``held``) and goes on once told (``resume``). Stamps are untrusted: an
entry whose stamp is malformed or whose origin cannot be named is not indexed but listed (``unresolved``),
so no mark-delete passes it.

Batched entries: every message of a batch is handed over, one after another; the first names the entry's
origin (``batched=True``: a batched replicated copy shows no stamp, see ``resolving``), the others only tell
the batch's size (highest batch index + 1) and their keys. Sizes are what batch-index acknowledgements are
planned with (``syncing.plan_apply(size_of=...)``) and keys what Key_Shared order is judged with
(``keyorder.key_ordered(key_of_message=...)``); both live in ``geosync_core.details`` columns (about 12 bytes
an entry), and only keys that differ from the entry's first message are kept per message. They are
forgotten below the slowest subscription's mark-delete and, past a budget (a subscription nobody consumes
holds that floor back), oldest first: an entry whose details are gone is planned as having none (partial
claims about it unused, Key_Shared claims stop before it), which costs duplicates, never a loss.

An entry whose origin could not be named because the brokers could not answer (an admin error, a 404 from
a broker that lost its record for a moment) is retried with backoff (``retry``): once named it is filled
into the index out of order and leaves the unresolved list, so the mark-delete it held back moves again.
Malformed stamps are never retried: no answer can make them positions.

Invariants (``tests/agent/test_core_logview.py``):

* ``unresolved`` is sorted, and every position in ``pending`` is in it.
* ``version`` grows whenever entries are indexed, ``rewrites`` whenever an entry already indexed changes
  (named late, a batch's size counted further): a plan made from older values is stale.
* ``size_of`` never answers for the batch still being counted (``sizing``).
* its checkpoint form (``core.checkpoint.view_to_wire``, then ``view_from_wire``) gives the same answers;
  checkpoints of older agents still restore.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from geosync_core import markers, resolving, syncing
from geosync_core.details import EntryDetails
from geosync_core.envelopes import Keyring
from geosync_core.indexing import OriginIndex
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.positions import Position

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
RETRIES_PER_ROUND = 50
"""At most this many unresolved entries of one topic are asked about again per round (each costs calls)."""
LOG_WINDOW = 50_000
"""At most this many entries a plan looks at one by one (those its cursor does not hold whole: the budget
of ``plan_apply``), and the first this many above a mark-delete for the other walks (``positions_above``):
a region back from a long outage has its whole backlog above its cursors, and planning every subscription
over all of it every round made each round's work grow with the backlog. The mark-delete never passes where
a plan stopped, so a budget is always safe; the next plan passes over what the last one applied."""


class Message(Protocol):
    """What the view reads of one message received (``geosync_adapters.messaging.Received``, which the
    shell hands over as it is): ``batch_index`` is -1 for a message not in a batch, ``batch_size`` the
    batch's size when the client says (None otherwise)."""

    @property
    def position(self) -> Position: ...
    @property
    def batch_index(self) -> int: ...
    @property
    def batch_size(self) -> int | None: ...
    @property
    def data(self) -> bytes: ...
    @property
    def key(self) -> str: ...
    @property
    def ordering_key(self) -> str: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def producer(self) -> str: ...
    @property
    def publish_ms(self) -> int: ...


class Unanswered(Exception):
    """What a resolver asks that it must be told first (``core.naming``: a lookup the shell makes): ``take``
    and ``retry`` stop at the entry that asked and keep it and the rest (``LogView.held``) for ``resume``."""

    def __init__(self, question: object) -> None:
        super().__init__(question)
        self.question = question


@dataclass
class Pending:
    """An entry read but not indexed because its origin could not be named, kept to ask again."""

    properties: dict[str, str]
    producer: str
    batched: bool
    attempts: int = 1
    due: float = 0.0
    published_ms: int | None = None
    """The message's publish time (what tells a rebuilt region's lives apart: ``OriginIndex.retire``)."""


@dataclass
class LogView:
    """One topic partition's log as read so far, from its earliest retained entry."""

    topic: str
    partition: int
    index: OriginIndex = field(default_factory=OriginIndex)
    last: Position | None = None
    markers: list[tuple[Position, dict[str, str], bytes]] = field(default_factory=list)
    """Snapshot markers read since the runtime last took them."""
    details: EntryDetails = field(default_factory=EntryDetails)
    """Each entry's ordering key (or partition key; "" without one), for Key_Shared order rules, and the
    batch sizes of batched entries (an entry without one holds one message)."""
    sizing: Position | None = None
    """The last entry read if it is a batch whose size the client did not give: its size is counted as its
    messages come, so it is not known until a later entry is read (``size_of`` says None for it until then:
    a size counted from the messages read so far once let a claim naming all of them acknowledge the whole
    entry, messages nobody had acknowledged included)."""
    budget_floor: Position | None = None
    """The highest entry forgotten over the budget: a subscription at or below it is parked, not re-read."""
    version: int = 0
    """Bumped whenever entries are indexed, so plans made from an older index are known to be stale."""
    rewrites: int = 0
    """Bumped whenever entries already indexed change (named late, renamed, a batch's size counted further):
    a plan made before must be made again even if only unclaimed entries were appended since (the apply
    step's check of appended entries)."""
    messages_read: int = 0
    unresolved: list[Position] = field(default_factory=list)
    """Local entries whose origin could not be named: kept in the log so mark-delete never passes them."""
    pending: dict[Position, Pending] = field(default_factory=dict)
    """Unresolved entries (not malformed) to ask about again, with their backoff."""
    resolved_late: int = 0
    """Entries named by a retry after they were read."""
    malformed: int = 0
    """Entries skipped for a stamp that is not a position (set by an application, not a broker)."""
    resume_at: Position | None = None
    """Restored from a checkpoint: the reader starts at this entry (the last one read), not the earliest."""
    stale: bool = False
    """The first message taken lay below ``resume_at``: the checkpoint does not match the topic any more
    (deleted and re-created, region rebuilt); the runtime rebuilds this tail from the earliest message."""
    stale_reason: str = ""
    """Why the tail must be read again when it is not the checkpoint's mismatch (see ``forgot_above``)."""
    held: tuple[Any, list[Any], int] | None = field(default=None, repr=False)
    """What a question stopped (``Unanswered``): a message already taken but not named, the messages after
    it and the entries appended before it; or, for ``retry``, the entry asked about, those after it and the
    entries filled before it. ``resume`` goes on with it."""
    _naming: Any = field(default=None, repr=False)
    _appended: int = field(default=0, repr=False)

    def take(
        self,
        messages: Iterable[Message],
        resolver: resolving.OriginResolver,
        *,
        now: float = 0.0,
        keyring: Keyring | None = None,
    ) -> int:
        """Index ``messages`` (in the order read); return how many entries were appended. Stops at the first
        message below ``resume_at`` (``stale``). A message is taken for a snapshot marker only if it is one as
        the broker's entry filter judges before hiding it: not in a batch, and signed by an agent of
        ``keyring`` (``markers.is_genuine``). Any other message carrying the marker property is an
        application's, which the filter delivers: indexed like every message (were it left out of the log, a
        cursor move planned over the log would acknowledge it unseen)."""
        rest = iter(messages)
        try:
            appended = self._take(rest, resolver, now, keyring)
        except Unanswered:
            self.held = (self._naming, list(rest), self._appended)
            raise
        return self._taken(appended)

    def _take(
        self, rest: Iterator[Message], resolver: resolving.OriginResolver, now: float, keyring: Keyring | None
    ) -> int:
        """``take``'s walk over ``rest``; a message whose naming asks what the resolver must be told first
        (``Unanswered``) stays in ``_naming``, with what was appended before it in ``_appended``."""
        appended = 0
        for msg in rest:
            position = msg.position
            if self.resume_at is not None:
                if position < self.resume_at:
                    self.stale = True
                    return appended
                self.resume_at = None  # the checkpoint matches what the topic holds
            self.messages_read += 1
            if self.last is not None and position <= self.last:
                if position == self.last and msg.batch_index > 0:
                    appended += self._more_of_batch(position, msg)
                continue  # else a redelivery after a reconnect
            self.last = position
            self.sizing = position if msg.batch_index >= 0 and msg.batch_size is None else None
            if (
                MARKER_PROPERTY in msg.properties
                and msg.batch_index < 0
                and keyring is not None
                and markers.is_genuine(keyring, msg.properties, msg.data)
            ):
                # Snapshot markers are never dispatched to applications (the entry filter acknowledges them):
                # not indexed, not in any log a plan walks; handed to snapshot mode instead.
                self.markers.append((position, dict(msg.properties), msg.data))
                continue
            self.details.record(
                position,
                msg.ordering_key or msg.key or "",
                None if msg.batch_index < 0 else msg.batch_size or msg.batch_index + 1,
            )
            try:
                origin = resolver.origin_of(
                    self.topic,
                    position,
                    properties=msg.properties,
                    producer=msg.producer,
                    batched=msg.batch_index >= 0,
                )
            except Unanswered:
                self._naming, self._appended = msg, appended
                raise
            if isinstance(origin, resolving.Malformed | resolving.Unresolved):
                self._unnamed(msg, origin, now)
                continue
            self.index.append(position, origin, published_ms=msg.publish_ms)
            appended += 1
        return appended

    def _taken(self, appended: int) -> int:
        if appended:
            self.version += 1
        return appended

    def _unnamed(self, msg: Message, origin: resolving.Malformed | resolving.Unresolved, now: float) -> None:
        """Cannot name it: not indexed, but listed, so mark-delete stops there (no guess)."""
        position = msg.position
        self.unresolved.append(position)
        if isinstance(origin, resolving.Malformed):
            self.malformed += 1
        else:
            self.pending[position] = Pending(
                dict(msg.properties),
                msg.producer,
                msg.batch_index >= 0,
                due=now + RETRY_FIRST_S,
                published_ms=msg.publish_ms,
            )

    def resume(
        self, resolver: resolving.OriginResolver, *, now: float, keyring: Keyring | None = None
    ) -> int:
        """Go on with the ``take`` or ``retry`` an ``Unanswered`` question stopped (``held``), now that
        ``resolver`` is told the answer: the entry it stopped at is named first, then the rest as they
        were read. Return what the whole ``take`` appended (``retry``: filled); ``Unanswered`` again
        when a further question comes up."""
        held, self.held = self.held, None
        if held is None:
            return 0
        if isinstance(held[0], Position):
            return self._retry(held[1], resolver, now, held[2])
        msg, rest, appended = held
        try:
            origin = resolver.origin_of(
                self.topic,
                msg.position,
                properties=msg.properties,
                producer=msg.producer,
                batched=msg.batch_index >= 0,
            )
        except Unanswered:
            self.held = held
            raise
        if isinstance(origin, resolving.Malformed | resolving.Unresolved):
            self._unnamed(msg, origin, now)
        else:
            self.index.append(msg.position, origin, published_ms=msg.publish_ms)
            appended += 1
        more = iter(rest)
        try:
            appended += self._take(more, resolver, now, keyring)
        except Unanswered:
            self.held = (self._naming, list(more), appended + self._appended)
            raise
        return self._taken(appended)

    def retry(
        self,
        resolver: resolving.OriginResolver,
        *,
        now: float,
        limit: int = RETRIES_PER_ROUND,
    ) -> int:
        """Ask again about the unresolved entries whose backoff is over (oldest first, at most ``limit``);
        fill the ones named now into the index. Return how many were filled."""
        due = [p for p, item in self.pending.items() if item.due <= now]
        return self._retry(sorted(due)[:limit], resolver, now, 0)

    def _retry(
        self, positions: list[Position], resolver: resolving.OriginResolver, now: float, filled: int
    ) -> int:
        """``retry``'s walk over ``positions``, ``filled`` already; one whose naming asks what the resolver
        must be told first stays ``held`` with those after it."""
        for i, position in enumerate(positions):
            item = self.pending[position]
            try:
                origin = resolver.origin_of(
                    self.topic,
                    position,
                    properties=item.properties,
                    producer=item.producer,
                    batched=item.batched,
                )
            except Unanswered:
                self.held = (position, positions[i:], filled)
                raise
            if isinstance(origin, resolving.Malformed | resolving.Unresolved):
                item.attempts += 1
                item.due = now + min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (item.attempts - 1))
                continue
            self.index.fill(position, origin, published_ms=item.published_ms)
            del self.pending[position]
            self.unresolved.remove(position)
            filled += 1
        if filled:
            self.resolved_late += filled
            self.version += 1
            self.rewrites += 1
        return filled

    def _more_of_batch(self, position: Position, msg: Message) -> int:
        """A further message of the batched entry just indexed: its size grows; 1 if plans must be redone."""
        self.details.set_message_key(position, msg.batch_index, msg.ordering_key or msg.key or "")
        if not self.details.grow(position, msg.batch_index + 1):
            return 0
        self.rewrites += 1  # an entry already indexed changed size
        return 1

    def has_read(self, position: Position) -> bool:
        """Whether every message of entry ``position`` (and all before it) has been taken, as far as this
        view knows: the last entry taken is it or one past it (the shell's ``Tail`` also asks its inbox
        whether more of a last batch waits)."""
        return self.last is not None and self.last >= position

    def size_of(self, position: Position) -> int | None:
        """The number of messages in local entry ``position`` (None: not a batch, not read, or a batch still
        being counted, see ``sizing``)."""
        if position == self.sizing:
            return None
        return self.details.size(position)

    def key_of(self, position: Position) -> str | None:
        """The key of entry ``position``'s first message (None: not read, or forgotten)."""
        return self.details.key(position)

    def key_of_message(self, position: Position, index: int) -> str | None:
        """The key of message ``index`` of entry ``position`` (None: the entry was not read)."""
        return self.details.key_of_message(position, index)

    def origin_region_of(self, position: Position) -> str | None:
        """The region entry ``position`` was first published in (None: not indexed yet, or forgotten)."""
        origin = self.index.origin_of(position)
        return None if origin is None else origin.region

    def forget_up_to(self, floor: Position) -> None:
        """Drop details, origins and unresolved entries at or below ``floor`` (every tracked subscription
        acknowledged them): what an agent keeps per topic follows its slowest subscription, not retention."""
        self.details.forget_up_to(floor)
        first = self.index.first
        if first is not None and first <= floor:
            self.index.truncate_below(Position(floor.ledger, floor.entry + 1))
        if self.unresolved and self.unresolved[0] <= floor:
            # Every tracked subscription acknowledged them here: their origin no longer matters.
            self.unresolved = [p for p in self.unresolved if p > floor]
            self.pending = {p: item for p, item in self.pending.items() if p > floor}

    def forgot_above(self, mark_delete: Position) -> Position | None:
        """The highest forgotten entry if it lies above ``mark_delete`` (None otherwise): a subscription
        that far behind (created at the earliest message after the others moved on, or rewound) cannot be
        planned from what is left; the tail must be read again from the earliest message."""
        floor = self.index.floor
        if floor is None:
            return None
        forgotten = Position(floor.ledger, floor.entry - 1)
        return forgotten if mark_delete < forgotten else None

    def forget_oldest(self, n: int) -> Position | None:
        """Forget at least the ``n`` oldest entries held (origins and details) although a subscription may
        still be below them (the agent's budget); the highest forgotten, which parks such subscriptions."""
        highest = self.details.forget_oldest(n)
        if highest is not None:
            self.index.truncate_below(Position(highest.ledger, highest.entry + 1))
            self.budget_floor = highest if self.budget_floor is None else max(highest, self.budget_floor)
        return highest

    def stretches_above(self, floor: Position) -> syncing.Stretches:
        """Every entry above ``floor`` a consumer could be dispatched, unresolved ones included (they block
        whoever reaches them), as stretches of consecutive entries read off the index's runs as the walk goes
        (a generator: no position is made for an entry the cursor holds, and nothing beyond where the walk
        stops is read). ``plan_apply``'s budget bounds the walk, not this list: a window of the first entries
        above the mark-delete never moved while a hole kept for good held the mark-delete back, and what lay
        beyond it was never applied (the region_down bench's hour: b stopped 50,000 entries above its first
        hole)."""
        runs = (
            (
                run.local_ledger,
                max(run.local_first, floor.entry + 1)
                if run.local_ledger == floor.ledger
                else run.local_first,
                run.local_last,
            )
            for run in self.index.runs_from(Position(floor.ledger, floor.entry + 1))
            if (run.local_ledger, run.local_last) > (floor.ledger, floor.entry)
        )
        unresolved = sorted((p.ledger, p.entry, p.entry) for p in self.unresolved if p > floor)
        if not unresolved:
            # The index's runs alone (the common case): sorted and apart already, nothing to merge.
            return syncing.Stretches(runs)

        def merged() -> Iterator[tuple[int, int, int]]:
            end = (-2, -2)
            for ledger, first, last in heapq.merge(runs, unresolved):
                # An unresolved entry the index holds after all is listed once.
                start = end[1] + 1 if ledger == end[0] and first <= end[1] else first
                if start <= last:
                    end = (ledger, last)
                    yield ledger, start, last

        return syncing.Stretches(merged())

    def positions_above(self, floor: Position, *, limit: int | None = None) -> list[Position]:
        """The first ``limit`` (default ``LOG_WINDOW``) entries of ``stretches_above``: indexed local entries
        above ``floor``, in order (what a consumer could be dispatched), unresolved ones among them."""
        limit = LOG_WINDOW if limit is None else limit
        return list(itertools.islice(self.stretches_above(floor), limit))
