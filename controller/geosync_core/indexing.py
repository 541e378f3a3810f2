"""A run-length index from one region's local log positions to origin coordinates, and back.

An agent reads its local topic partition in order and learns, for every entry, its origin (the
``__MSG_PROP_REPL_SOURCE_POSITION`` stamp plus the origin region, or the entry itself for a message
published here). Replication keeps each origin's order, so the map compresses into runs: consecutive local
entries of one local ledger whose origins are consecutive entries of one origin ledger. A region's own
messages are one run per ledger; the index grows with origin switches, not with messages.

This is the one mutable structure of the core: appends arrive one entry at a time at reader speed, and
an immutable value would copy the runs on every append. One task owns an index; nothing here shares it.

Invariants:

* appends are in strictly increasing local order; an entry at or below the last one appended (a reader
  replaying after a reconnect) is ignored if it names the same origin and refused otherwise; an entry
  below the truncation floor is ignored;
* ``origin_of(p)`` is the origin appended for ``p``, ``None`` for a position never appended (or
  truncated), whatever the ledger ids of the origins (they collide between regions);
* ``local_of(o)`` is the first local entry (in local order) indexed with origin ``o`` (a replicator that
  re-sent after a reconnect can leave a second copy; later copies are only reachable through ``origin_of``);
* ``origin_of`` is O(log runs); ``local_of`` O(runs) (only ``fill`` and tools use it: keeping a second map
  by origin for it doubled the index's memory); the number of runs is at most one more than the number of
  breaks in the stream (origin region switch, origin or local ledger switch, gap in origin entries);
* ``truncate_below(p)`` forgets exactly the entries below ``p``;
* after ``retire(r, name, upto=u)`` no entry indexed so far, nor appended or filled later at or below the
  greater of ``u`` and the last entry then, has an origin in region ``r``: they are named ``name``
  (everything else is unchanged); with ``before_ms=t`` an entry appended later with a publish time of ``t``
  or more keeps its region's name (it is the new life's: see ``retire``);
* ``OriginIndex.from_wire(index.to_wire())`` answers every question as ``index`` does;
* ``fill(p, o)`` records an entry the reader passed without indexing (its origin was named later): after
  it ``origin_of(p) == o`` and every other answer of ``origin_of`` is unchanged (the index answers as if
  ``p`` had been appended in order).

The broker interceptor keeps a coarser index of its own (``OriginIndex`` in
``interceptors/geosync-plugin-common``) and serves it as ``OriginRun`` values: local entries, their origin
region and, for entries a replicator published, their source position there. The agent needs the broker's
source position for batched entries, whose stamp the Python client does not show (it lives only in the
entry's metadata, which each message's own properties replace). Invariants of ``OriginRun``:

* ``run.covers(ledger, e)`` iff ``ledger == run.ledger`` and ``run.first <= e < run.first + run.count``;
* ``run.origin_at(e)`` is ``Position(source.ledger, source.entry + e - run.first)`` for every entry
  ``e`` the run covers when it has a source, and ``None`` otherwise (no source, or outside the run);
* ``OriginRun.from_wire(run.to_wire()) == run``; ``from_wire`` accepts exactly ``[ledger, first, count,
  origin]`` and ``[ledger, first, count, origin, source ledger, source first]`` with non-negative integers
  (not booleans), a positive count and a non-empty origin, and answers ``None`` for anything else.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from geosync_core.origins import Origin
from geosync_core.positions import Position


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """``length`` local entries from ``local_ledger:local_first``, whose origins are ``length``
    consecutive entries from ``origin_ledger:origin_first`` in ``region``."""

    local_ledger: int
    local_first: int
    region: str
    origin_ledger: int
    origin_first: int
    length: int

    @property
    def local_last(self) -> int:
        return self.local_first + self.length - 1

    @property
    def origin_last(self) -> int:
        return self.origin_first + self.length - 1

    def origin_at(self, local_entry: int) -> Origin:
        return Origin(
            self.region, Position(self.origin_ledger, self.origin_first + local_entry - self.local_first)
        )

    def extends_to(self, local: Position, origin: Origin) -> bool:
        """Whether ``(local, origin)`` is the entry right after this run on both sides."""
        return (
            local.ledger == self.local_ledger
            and local.entry == self.local_first + self.length
            and origin.region == self.region
            and origin.position.ledger == self.origin_ledger
            and origin.position.entry == self.origin_first + self.length
        )

    def starting_at(self, local_entry: int) -> Run:
        """This run without its local entries below ``local_entry``."""
        skip = local_entry - self.local_first
        return replace(
            self, local_first=local_entry, origin_first=self.origin_first + skip, length=self.length - skip
        )


@dataclass(frozen=True, slots=True)
class OriginRun:
    """The broker's record: ``count`` local entries from ``ledger:first`` came from region ``origin`` and,
    when ``source`` is known, were the consecutive entries from ``source`` in that region's log."""

    ledger: int
    first: int
    count: int
    origin: str
    source: Position | None = None

    def covers(self, ledger: int, entry: int) -> bool:
        return ledger == self.ledger and self.first <= entry < self.first + self.count

    def origin_at(self, entry: int) -> Position | None:
        """The source position of local entry ``entry`` of this run; None without a source or outside it."""
        if self.source is None or not self.first <= entry < self.first + self.count:
            return None
        return Position(self.source.ledger, self.source.entry + (entry - self.first))

    def to_wire(self) -> list[int | str]:
        head: list[int | str] = [self.ledger, self.first, self.count, self.origin]
        return head if self.source is None else [*head, self.source.ledger, self.source.entry]

    @property
    def start(self) -> tuple[int, int]:
        """Where the run begins, as ``(ledger, entry)``: the order runs are kept in."""
        return (self.ledger, self.first)

    @classmethod
    def from_wire(cls, item: Any) -> OriginRun | None:
        """One run as the interceptor serves it; None for anything that is not exactly that shape."""
        if not isinstance(item, list) or len(item) not in (4, 6):
            return None
        numbers = [item[0], item[1], item[2], *item[4:]]
        if not all(type(n) is int and n >= 0 for n in numbers) or item[2] < 1:
            return None
        if not isinstance(item[3], str) or not item[3]:
            return None
        source = Position(item[4], item[5]) if len(item) == 6 else None
        return cls(item[0], item[1], item[2], item[3], source)


def covering(runs: Sequence[OriginRun], local: Position) -> OriginRun | None:
    """The run of ``runs`` (disjoint, in ``start`` order) that covers ``local``; None if none does."""
    i = bisect.bisect_right(runs, (local.ledger, local.entry), key=lambda run: run.start) - 1
    return runs[i] if i >= 0 and runs[i].covers(local.ledger, local.entry) else None


class Retirement(NamedTuple):
    """Entries of ``region`` up to local position ``upto`` came from a life of it since rebuilt: they go by
    ``name``; with ``before_ms``, only those published before it (the new life's incarnation's creation)."""

    region: str
    upto: Position
    name: str
    before_ms: int | None = None

    def names(self, local: Position, origin: Origin, published_ms: int | None) -> bool:
        return (
            self.region == origin.region
            and local <= self.upto
            and (self.before_ms is None or published_ms is None or published_ms < self.before_ms)
        )


def _local_key(run: Run) -> tuple[int, int]:
    return run.local_ledger, run.local_first


class OriginIndex:
    """Local positions -> origin coordinates for one topic partition in one region."""

    def __init__(self) -> None:
        self._runs: list[Run] = []
        self._last: Position | None = None
        self._floor: Position | None = None
        self._retired: list[Retirement] = []
        """Entries whose origin region is a retirement's came from an incarnation of it since rebuilt, and are
        indexed under its name (see ``retire``)."""

    def __len__(self) -> int:
        """The number of runs: the index's size."""
        return len(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(self._runs)

    def __reversed__(self) -> Iterator[Run]:
        """The runs, newest local entries first."""
        return reversed(self._runs)

    def runs_from(self, local: Position) -> Iterator[Run]:
        """The runs holding ``local`` or later entries, in order (the run before them may come first)."""
        start = max(bisect.bisect_right(self._runs, (local.ledger, local.entry), key=_local_key) - 1, 0)
        return itertools.islice(self._runs, start, None)

    @property
    def first(self) -> Position | None:
        """The lowest local position indexed, if any."""
        return Position(self._runs[0].local_ledger, self._runs[0].local_first) if self._runs else None

    @property
    def floor(self) -> Position | None:
        """The lowest local position still indexable: every entry below it was truncated (None: never)."""
        return self._floor

    @property
    def last(self) -> Position | None:
        """The highest local position ever appended (the reader's progress), even if truncated since."""
        return self._last

    def append(self, local: Position, origin: Origin, *, published_ms: int | None = None) -> None:
        """Record that local entry ``local`` is the message ``origin``, published at ``published_ms`` (the
        message's publish time, None: not known; only a retirement's ``before_ms`` reads it); raise
        ``ValueError`` if this contradicts what was appended before."""
        if local.entry < 0:
            raise ValueError(f"not an entry: {local}")
        if self._floor is not None and local < self._floor:
            return
        origin = self._named(local, origin, published_ms)
        if self._last is not None and local <= self._last:
            if self.origin_of(local) == origin:
                return
            raise ValueError(f"{local} was indexed as {self.origin_of(local)}, now claimed as {origin}")
        self._last = local
        self._runs = _extend(self._runs, local, origin)

    def retire(
        self, region: str, name: str, *, upto: Position | None = None, before_ms: int | None = None
    ) -> int:
        """``region`` was rebuilt under its name: every entry indexed so far with an origin there names a
        message of its old life, and goes by ``name`` from now on (also when appended again: a reader
        replaying, a tail read again), and so does every entry of that origin appended later at or below
        ``upto`` (the end of the local log when the rebuild was learned: entries the reader had not reached
        yet). With ``before_ms`` (the new life's incarnation's creation time), an entry appended later whose
        publish time is known and not before it is the new life's and keeps the region's name: what tells
        the lives apart in a log read again after the news (issue 45, case 2: a peer's agent that learns of
        the rebuild from its control topic's history has the new life's messages below its logs' ends too).
        Returns how many runs were renamed."""
        last = self._last if upto is None or (self._last is not None and self._last > upto) else upto
        if last is None:
            return 0
        renamed = 0
        for i, run in enumerate(self._runs):
            if run.region == region:
                self._runs[i] = replace(run, region=name)
                renamed += 1
        self._retired.append(Retirement(region, last, name, before_ms))
        return renamed

    def retirements(self) -> list[Retirement]:
        return list(self._retired)

    def keep_retirements(self, retired: list[Retirement]) -> None:
        """Carry the retirements of an index this one replaces (the same topic read again)."""
        self._retired = list(retired)

    def _named(self, local: Position, origin: Origin, published_ms: int | None = None) -> Origin:
        for retirement in self._retired:
            if retirement.names(local, origin, published_ms):
                return Origin(retirement.name, origin.position)
        return origin

    def fill(self, local: Position, origin: Origin, *, published_ms: int | None = None) -> None:
        """Record ``local`` as ``origin`` (published at ``published_ms``, as for ``append``) although the
        reader is past it: an entry skipped when read (its origin could not be named then) and named now.
        Raise ``ValueError`` if ``local`` was indexed as another origin."""
        if self._last is None or local > self._last:
            self.append(local, origin, published_ms=published_ms)
            return
        if self._floor is not None and local < self._floor:
            return
        origin = self._named(local, origin, published_ms)
        known = self.origin_of(local)
        if known is not None:
            if known == origin:
                return
            raise ValueError(f"{local} was indexed as {known}, now claimed as {origin}")
        run = Run(
            local_ledger=local.ledger,
            local_first=local.entry,
            region=origin.region,
            origin_ledger=origin.position.ledger,
            origin_first=origin.position.entry,
            length=1,
        )
        bisect.insort(self._runs, run, key=_local_key)

    def origin_of(self, local: Position) -> Origin | None:
        i = bisect.bisect_right(self._runs, (local.ledger, local.entry), key=_local_key) - 1
        if i < 0:
            return None
        run = self._runs[i]
        if run.local_ledger != local.ledger or local.entry > run.local_last:
            return None
        return run.origin_at(local.entry)

    def local_of(self, origin: Origin) -> Position | None:
        p = origin.position
        for run in self._runs:
            if (
                run.region == origin.region
                and run.origin_ledger == p.ledger
                and run.origin_first <= p.entry <= run.origin_last
            ):
                return Position(run.local_ledger, run.local_first + p.entry - run.origin_first)
        return None

    def copy(self) -> OriginIndex:
        """An independent copy (runs are immutable values: copying the list is enough), for a checkpoint
        encoded on another thread while this index keeps growing."""
        other = OriginIndex()
        other._runs, other._last, other._floor = list(self._runs), self._last, self._floor
        other._retired = list(self._retired)
        return other

    def to_wire(self) -> dict[str, Any]:
        """The index as JSON-ready values (the agent's checkpoint); ``from_wire`` reads it back."""
        wire: dict[str, Any] = {
            "runs": [_run_wire(r) for r in self._runs],
            "last": None if self._last is None else self._last.to_wire(),
            "floor": None if self._floor is None else self._floor.to_wire(),
        }
        if self._retired:
            wire["retired"] = [
                [r.region, r.upto.to_wire(), r.name, *([] if r.before_ms is None else [r.before_ms])]
                for r in self._retired
            ]
        return wire

    @classmethod
    def from_wire(cls, value: Any) -> OriginIndex:
        """The index ``to_wire`` wrote; ``ValueError`` for anything else (a checkpoint is input too)."""
        # "by_origin" (a second map that earlier agents wrote) is read past: the runs say everything.
        if not isinstance(value, dict) or set(value) - {"by_origin", "retired"} != {"runs", "last", "floor"}:
            raise ValueError("not an origin index")
        index = cls()
        index._runs = [_run_from(item) for item in _list(value["runs"])]
        index._last = None if value["last"] is None else Position.from_wire(value["last"])
        index._floor = None if value["floor"] is None else Position.from_wire(value["floor"])
        index._retired = [_retirement(item) for item in _list(value.get("retired", []))]
        locals_ = [_local_key(r) for r in index._runs]
        if locals_ != sorted(locals_):
            raise ValueError("origin index runs out of order")
        if index._runs and (
            index._last is None
            or Position(index._runs[-1].local_ledger, index._runs[-1].local_last) > index._last
        ):
            raise ValueError("origin index runs beyond its last entry")
        return index

    def truncate_below(self, position: Position) -> None:
        """Forget every local entry below ``position`` (they are acknowledged everywhere that matters)."""
        self._floor = max(position, self._floor) if self._floor is not None else position
        self._runs = _truncated(self._runs, position)


def _retirement(item: Any) -> Retirement:
    if not (
        isinstance(item, list)
        and len(item) in (3, 4)
        and all(isinstance(item[i], str) for i in (0, 2))
        and (len(item) == 3 or (isinstance(item[3], int) and not isinstance(item[3], bool)))
    ):
        raise ValueError(f"not a retirement: {item!r}")
    return Retirement(item[0], Position.from_wire(item[1]), item[2], item[3] if len(item) == 4 else None)


def _run_wire(run: Run) -> list[int | str]:
    return [run.local_ledger, run.local_first, run.region, run.origin_ledger, run.origin_first, run.length]


def _run_from(item: Any) -> Run:
    if not isinstance(item, list) or len(item) != 6 or not isinstance(item[2], str) or not item[2]:
        raise ValueError(f"not a run: {item!r}")
    numbers = [item[0], item[1], item[3], item[4], item[5]]
    if not all(type(n) is int and n >= 0 for n in numbers) or item[5] < 1:
        raise ValueError(f"not a run: {item!r}")
    return Run(
        local_ledger=item[0],
        local_first=item[1],
        region=item[2],
        origin_ledger=item[3],
        origin_first=item[4],
        length=item[5],
    )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"not a list: {value!r}")
    return value


def _extend(runs: list[Run], local: Position, origin: Origin) -> list[Run]:
    p = origin.position
    if runs and runs[-1].extends_to(local, origin):
        runs[-1] = replace(runs[-1], length=runs[-1].length + 1)
    else:
        runs.append(
            Run(
                local_ledger=local.ledger,
                local_first=local.entry,
                region=origin.region,
                origin_ledger=p.ledger,
                origin_first=p.entry,
                length=1,
            )
        )
    return runs


def _truncated(runs: list[Run], position: Position) -> list[Run]:
    """``runs`` (in local order) without their entries below ``position``."""
    kept = [r for r in runs if Position(r.local_ledger, r.local_last) >= position]
    if kept and Position(kept[0].local_ledger, kept[0].local_first) < position:
        kept[0] = kept[0].starting_at(position.entry)
    return kept
