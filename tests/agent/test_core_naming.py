"""Naming the entries a tail read through the core's entry (``core.stepping.step`` with ``EntriesRead``,
``OriginsLooked`` and ``PendingDue``, round step 10): what is indexed, what the core asks the shell to look
up first, and what an answer does, from values only: events in, values out. One test per invariant
``core.naming`` states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geosync_adapters.messaging import Received
from geosync_agent.core import naming, stepping
from geosync_agent.core.logview import RETRY_FIRST_S, LogView
from geosync_agent.core.now import Now
from geosync_core import resolving
from geosync_core.indexing import OriginRun
from geosync_core.origins import Origin
from geosync_core.positions import Position

from .fakes import message

TOPIC = "persistent://geo/ab/t"
STAMP = resolving.REPL_SOURCE_POSITION
NOW = Now(100.0, 1_100.0)
NO_RECORD = naming.Records()
"""No interceptor: the brokers' view of an entry is its headers, a lookup."""
RECORDED = naming.Records(usable=True, there=True)
"""The interceptor is there, its runs not answered for these entries: a lookup."""


@dataclass
class State:
    """The agent's state as naming reads it (``naming.Naming``): region b's resolver."""

    naming: naming.Namer = field(default_factory=lambda: naming.Namer("b"))


def local(entry: int) -> Received:
    return message(TOPIC, Position(9, entry))


def copy(entry: int, stamp: str | None = None) -> Received:
    """b's copy at ``9:entry`` of a's ``5:entry`` (its stamp, or ``stamp``)."""
    return message(TOPIC, Position(9, entry), properties={STAMP: stamp or f"5:{entry}"}, producer="orders")


def held(tail: LogView) -> bool:
    """Whether ``tail`` holds entries read until an answer comes."""
    return tail.held is not None


def answered(
    state: State,
    tail: LogView,
    got: naming.Indexed,
    answers: dict[naming.Question, object],
    *,
    now: Now = NOW,
) -> tuple[naming.Indexed, list[naming.Question]]:
    """Step back ``answers`` to what ``got`` and the steps after it want, as the shell does; the questions
    asked in turn (at most ten: a question asked again and again fails, not hangs)."""
    asked: list[naming.Question] = []
    while got.wanted is not None and len(asked) < 10:
        asked.append(got.wanted)
        looked = naming.OriginsLooked(tail, got.wanted, answers[got.wanted], NO_RECORD)
        got = stepping.step(state, looked, now)
    return got, asked


def test_an_entry_whose_origin_needs_a_lookup_is_not_named_until_the_answer_comes() -> None:
    state, tail = State(), LogView(TOPIC, -1)
    got = stepping.step(state, naming.EntriesRead(tail, [local(0), copy(1), local(2)], NO_RECORD), NOW)
    wanted = naming.Question("source", TOPIC, Position(9, 1))
    assert (got.wanted, got.entries) == (wanted, 0)
    # Neither it nor what was read after it is indexed meanwhile: the log stays in order.
    assert tail.index.origin_of(Position(9, 1)) is None
    assert tail.index.origin_of(Position(9, 2)) is None
    assert tail.unresolved == []
    assert held(tail)
    version = tail.version
    got, asked = answered(state, tail, got, {wanted: Origin("a", Position(5, 1))})
    assert (asked, got.wanted, got.entries) == ([wanted], None, 3)
    assert [tail.index.origin_of(Position(9, e)) for e in range(3)] == [
        Origin("b", Position(9, 0)),
        Origin("a", Position(5, 1)),
        Origin("b", Position(9, 2)),
    ]
    assert tail.version == version + 1
    assert not held(tail)


def test_a_lookup_is_asked_once_per_entry_and_question() -> None:
    # A stamp that is no position, where the interceptor runs: the broker's record is asked first, then
    # (none) its view of the entry; each once, the first answer taken again when the entry is named again.
    state, tail = State(), LogView(TOPIC, -1)
    got = stepping.step(state, naming.EntriesRead(tail, [copy(0, stamp="forged"), copy(1)], RECORDED), NOW)
    recorded = naming.Question("recorded", TOPIC, Position(9, 0))
    source = naming.Question("source", TOPIC, Position(9, 0))
    then = naming.Question("source", TOPIC, Position(9, 1))
    answers: dict[naming.Question, object] = {
        recorded: None,
        source: Origin("a", Position(5, 0)),
        then: Origin("a", Position(5, 1)),
    }
    got, asked = answered(state, tail, got, answers)
    assert (asked, got.entries) == ([recorded, source, then], 2)
    assert state.naming.resolver.spoofed == 1
    assert tail.index.origin_of(Position(9, 0)) == Origin("a", Position(5, 0))


def test_an_answer_that_names_nothing_leaves_the_entry_to_retry() -> None:
    state, tail = State(), LogView(TOPIC, -1)
    got = stepping.step(state, naming.EntriesRead(tail, [copy(0), local(1)], NO_RECORD), NOW)
    wanted = naming.Question("source", TOPIC, Position(9, 0))
    got, _ = answered(state, tail, got, {wanted: None})
    assert got.entries == 1  # the local entry after it
    assert tail.unresolved == [Position(9, 0)]
    assert Position(9, 0) in tail.pending
    # Not asked again before its backoff is over; then asked, and filled in once named.
    soon = Now(NOW.mono + RETRY_FIRST_S / 2, NOW.wall)
    assert stepping.step(state, naming.PendingDue(tail, NO_RECORD), soon) == naming.Indexed()
    later = Now(NOW.mono + RETRY_FIRST_S, NOW.wall)
    got = stepping.step(state, naming.PendingDue(tail, NO_RECORD), later)
    assert got.wanted == wanted
    rewrites = tail.rewrites
    got, _ = answered(state, tail, got, {wanted: Origin("a", Position(5, 0))}, now=later)
    assert (got.entries, tail.unresolved, tail.pending) == (1, [], {})
    assert tail.index.origin_of(Position(9, 0)) == Origin("a", Position(5, 0))
    assert tail.rewrites == rewrites + 1


def test_what_the_interceptors_runs_answer_is_not_asked() -> None:
    state, tail = State(), LogView(TOPIC, -1)
    runs = [OriginRun(9, 0, 4, "a", Position(5, 0))]
    records = naming.Records(usable=True, there=True, runs=runs)
    got = stepping.step(state, naming.EntriesRead(tail, [copy(e) for e in range(4)], records), NOW)
    assert got == naming.Indexed(4, None, 4)
    assert tail.index.origin_of(Position(9, 3)) == Origin("a", Position(5, 3))
    # Past what the runs cover: a lookup.
    got = stepping.step(state, naming.EntriesRead(tail, [copy(4)], records), NOW)
    assert got.wanted == naming.Question("recorded", TOPIC, Position(9, 4))


def test_an_entry_named_again_reads_the_records_it_was_first_named_with() -> None:
    # No interceptor known when the copy is read: its record is not asked for, its headers are. The answer
    # comes with the interceptor learned there meanwhile: naming the entry again must not ask its record now
    # (a call the resolver never made from inside the drain), only the entries after it read the new records.
    state, tail = State(), LogView(TOPIC, -1)
    got = stepping.step(state, naming.EntriesRead(tail, [copy(0), copy(1)], NO_RECORD), NOW)
    first = naming.Question("source", TOPIC, Position(9, 0))
    assert got.wanted == first
    looked = naming.OriginsLooked(tail, first, Origin("a", Position(5, 0)), RECORDED)
    got = stepping.step(state, looked, NOW)
    assert got.wanted == naming.Question("recorded", TOPIC, Position(9, 1))
    assert tail.index.origin_of(Position(9, 0)) == Origin("a", Position(5, 0))
