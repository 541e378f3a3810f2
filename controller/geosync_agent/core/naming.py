"""Naming the origins of the entries a tail read (round step 10, the index step): without asking the brokers.

The shell drains a tail's reader queue and steps the messages taken as one ``EntriesRead``; the core
indexes them (``LogView.take``), naming each entry's origin with the one resolver every tool shares
(``geosync_core.resolving``). Where a stamp does not say, the resolver asks what the brokers recorded: the
interceptor's origin runs (``Records``, what the shell's ``lookups.OriginLookups`` holds, told with the
event) answer here; what they cannot answer is a lookup (I/O), which the core does not make: it stops at
that entry and returns it as ``Indexed.wanted``. The shell makes it (``OriginLookups``, through the
``Effector``, as the resolver's callbacks did) and steps the answer as ``OriginsLooked``, with its records as
they are after it; the core goes on from the entry it held, and so on until ``wanted`` is None. The
entries whose origin could not be named are asked about again later (``PendingDue``, ``LogView.retry``),
the same way.

One question at a time, in the order the entries were read, not all of a batch's at once: each answer
teaches the resolver what spares the next lookups (a broker-generated producer name verified by one lookup
names all its later entries, one interceptor answer covers a stretch of the topic, a capability learned
absent stops the interceptor being asked). So the calls made are those the resolver made from inside the
drain, in the same order. What needs no lookup, the hot path, is one step per drained batch.

Invariants (``tests/agent/test_core_naming.py``, through ``step``):

* an entry whose origin needs a lookup is not indexed until the answer comes, and no entry read after it
  is either (the log stays in order; ``LogView.held`` keeps them);
* a lookup is asked once per entry and question: the answer stepped back is the one the resolver takes
  when it names the entry again (a verified producer, once answered, is asked about no more);
* an entry named again once an answer came reads the records it was first named with (what it did not ask
  then, it does not ask now), the entries after it the records as they are after the answer;
* an answer that names nothing leaves the entry unresolved and pending, asked about again with backoff
  (``PendingDue``), as before;
* what the interceptor's runs answer is not asked (``Indexed.hits`` counts it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from geosync_agent.core.logview import LogView, Message, Unanswered
from geosync_agent.core.now import Now
from geosync_core import resolving
from geosync_core.envelopes import Keyring
from geosync_core.indexing import OriginRun, covering
from geosync_core.origins import Origin
from geosync_core.positions import Position

Kind = Literal["recorded", "source", "lookup"]
"""Which of the resolver's questions (``resolving.Recorded``, ``Source``, ``Lookup``)."""


@dataclass(frozen=True, slots=True)
class Question:
    """A lookup the core needs answered: ``kind`` about the entry at ``local`` of ``topic``."""

    kind: Kind
    topic: str
    local: Position


@dataclass(frozen=True, slots=True)
class Records:
    """What is known now of the interceptor's record of a topic's origins (the shell's ``OriginLookups``):
    ``usable``, the interceptor's index may be asked (configured, capability usable); ``there``, it is known
    to be there; its last answer's ``runs`` (disjoint, sorted) and ``floor``, the first entry it still
    records."""

    usable: bool = False
    there: bool = False
    runs: Sequence[OriginRun] = ()
    floor: Position | None = None


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntriesRead:
    """The messages drained from ``tail``'s reader queue, in the order read."""

    tail: LogView
    messages: Sequence[Message]
    records: Records
    keyring: Keyring | None = None


@dataclass(frozen=True, slots=True)
class PendingDue:
    """``tail``'s unresolved entries whose backoff is over are to be asked about again."""

    tail: LogView
    records: Records


@dataclass(frozen=True, slots=True)
class OriginsLooked:
    """The answer to ``Indexed.wanted``, and ``tail``'s records as they are after it."""

    tail: LogView
    question: Question
    answer: object
    records: Records


NamingEvent = EntriesRead | PendingDue | OriginsLooked


@dataclass(frozen=True, slots=True)
class Indexed:
    """What an ``EntriesRead`` (``PendingDue``) came to, with the ``OriginsLooked`` it asked for: ``wanted``,
    the lookup to answer first (None: done); once done, ``entries`` appended (filled late); ``hits``, the
    questions the interceptor's runs answered in this step."""

    entries: int = 0
    wanted: Question | None = None
    hits: int = 0


class Namer:
    """The agent's resolver, and what the core is told of the brokers' records while it names entries."""

    def __init__(self, local: str) -> None:
        self.local = local
        self.resolver = resolving.OriginResolver(
            local=local, lookup=self._lookup, source=self._source, recorded=self._recorded
        )
        self.records = Records()
        self.keyring: Keyring | None = None
        self.hits = 0
        self.at: Position | None = None
        """The entry the last question was about, until the step that names it is done."""
        self.known: dict[Kind, object] = {}
        """The answers stepped back about ``at``."""
        self.at_records = Records()
        """The records when ``at`` was first asked about: its naming again reads what it read then."""

    def _told(self, kind: Kind, topic: str, local: Position) -> tuple[bool, object, Records]:
        if self.at is not None and (local is self.at or local == self.at):
            if kind in self.known:
                return True, self.known[kind], self.at_records
            return False, None, self.at_records
        return False, None, self.records

    def _run(self, records: Records, local: Position) -> OriginRun | None:
        if not records.usable or (records.floor is not None and local < records.floor):
            return None
        return covering(records.runs, local)

    def _recorded(self, topic: str, local: Position) -> tuple[str, Position | None] | None:
        told, answer, records = self._told("recorded", topic, local)
        if told:
            return answer  # type: ignore[return-value]
        run = self._run(records, local)
        if run is not None:
            self.hits += 1
            return run.origin, run.origin_at(local.entry)
        blocked = not records.usable or (records.floor is not None and local < records.floor)
        if blocked and not records.there:
            return None  # no record to ask for: stamps are trusted as before
        raise Unanswered(Question("recorded", topic, local))

    def _source(self, topic: str, local: Position) -> Origin | None:
        told, answer, records = self._told("source", topic, local)
        if told:
            return answer  # type: ignore[return-value]
        run = self._run(records, local)
        if run is not None:
            if run.origin == self.local:
                self.hits += 1
                return Origin(self.local, local)
            source = run.origin_at(local.entry)
            if source is not None:
                self.hits += 1
                return Origin(run.origin, source)
        raise Unanswered(Question("source", topic, local))

    def _lookup(self, topic: str, local: Position) -> str | None:
        told, answer, records = self._told("lookup", topic, local)
        if told:
            return answer  # type: ignore[return-value]
        run = self._run(records, local)
        if run is not None:
            self.hits += 1
            return run.origin
        raise Unanswered(Question("lookup", topic, local))


class Naming(Protocol):
    """What of the agent's state these events read and change."""

    @property
    def naming(self) -> Namer: ...


def name_entries(state: Naming, event: EntriesRead | PendingDue | OriginsLooked, now: Now) -> Indexed:
    """Index what ``event`` brings (see the module docstring)."""
    namer = state.naming
    namer.hits = 0
    tail = event.tail
    if isinstance(event, OriginsLooked):
        question = event.question
        if namer.at is None or question.local != namer.at:
            namer.at, namer.known, namer.at_records = question.local, {}, namer.records
        namer.known[question.kind] = event.answer
        namer.records = event.records
    else:
        namer.records = event.records
        namer.at, namer.known = None, {}
    try:
        if isinstance(event, EntriesRead):
            namer.keyring = event.keyring
            entries = tail.take(event.messages, namer.resolver, now=now.mono, keyring=event.keyring)
        elif isinstance(event, PendingDue):
            entries = tail.retry(namer.resolver, now=now.mono)
        else:
            entries = tail.resume(namer.resolver, now=now.mono, keyring=namer.keyring)
    except Unanswered as e:
        wanted = e.question
        assert isinstance(wanted, Question)
        return Indexed(wanted=wanted, hits=namer.hits)
    namer.at, namer.known = None, {}
    return Indexed(entries, None, namer.hits)
