"""Looking: the cursors a look at a topic read, taken through the core's entry (``core.stepping.step`` with
``CursorsRead``, round step 2).

A look is the plugin's feed report of a topic (only the subscriptions consumers just acknowledged on) or a
poll of its ``internalStats`` (every subscription of it), read by the shell (``observing``). Each cursor it
shows is judged first: did it go back (``generations.rewound``: a rewind made here starts a new generation
of the subscription's claims; one shown by a poll alone is read again before it is believed)? A cursor the
feed step holds here and looks at again for the acknowledgements the feed brought is nothing the broker
showed, and is not judged. Then it is taken: a poll, which cannot see batch indexes, keeps those the feed or
a write last reported above its mark-delete, unless the topic was reloaded since (Pulsar may have forgotten
them: planned and written again). What comes back (``Looked``) says which subscriptions moved, whether the
look doubted a rewind (the next poll is due at once), whether their type must be learned before the first
claim (I/O, the shell's), and the counters and notices. Once the look's claims are decided
(``core.deciding``), a poll's look ends with ``Polled``: when the topic's cursors are read next
(``geosync_core.pacing.after_poll``, brought forward to the end of a publish pause, or to the next round
after a doubted rewind).

Invariants (tests in ``tests/agent/test_core_looking.py``, through ``step``):

* a cursor is taken only if it differs from the one held: the same value read again keeps its object (the
  apply step and the checkpoint tell an unchanged subscription by identity);
* a rewind shown by a poll alone is not taken (``doubted``); a rewind taken makes a tail that forgot entries
  it acknowledges read the topic again;
* a poll never drops partly acknowledged batches the cursor held, unless the topic was reloaded or the
  cursor went back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from geosync_agent.core import acknowledged, generations
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Topic, Tracked
from geosync_agent.core.stepped import Stepped
from geosync_agent.core.subscriptions import Subscription
from geosync_core import pacing
from geosync_core.rangesets import AckState


class Looking(Tracked, Protocol):
    """What of the agent's state taking a look's cursors reads and changes."""


class PolledTopic(Topic, Protocol):
    """A tracked topic as a poll's end reads and changes it (the shell's ``agentstate.TopicState``)."""

    poll: pacing.PollState
    """When its cursors are read next."""


class PollInterval(Protocol):
    @property
    def poll_interval_s(self) -> float: ...


class Polling(Protocol):
    """What of the agent's state a poll's end reads and changes."""

    @property
    def topics(self) -> Mapping[str, PolledTopic]: ...

    @property
    def config(self) -> PollInterval: ...


@dataclass(frozen=True, slots=True)
class Polled:
    """A poll's look at ``topic`` (its subscriptions ``states``) ended: ``changed`` and ``doubted`` as its
    ``Looked`` said; ``feed``, the plugin's feed is known present; ``spread``, a random draw in [0, 1) that
    spreads the topics' polls (the shell's: the core draws no random number)."""

    topic: str
    states: list[Subscription]
    changed: bool
    doubted: bool
    feed: bool
    spread: float


@dataclass(frozen=True, slots=True)
class CursorsRead:
    """Round step 2: the cursors a look at ``topic`` read (subscription name -> cursor). ``states``: the
    topic's subscriptions that exist here (a poll takes each of them it read; the feed's report, those it
    names); ``polled``: a poll's look, else the feed's; ``reloaded``: the topic writes to another ledger than
    at the last poll; ``judged``: rewinds are judged in this look (not where snapshot mode covers the topic,
    nor, where the feed is read, in a round whose feed read did not answer); ``acknowledgements``: claims
    are made of what consumers acknowledged."""

    topic: str
    cursors: Mapping[str, AckState]
    states: list[Subscription]
    polled: bool
    reloaded: bool
    judged: bool
    acknowledgements: bool


@dataclass(slots=True)
class Looked:
    """What a look's cursors did: ``moved``, the subscriptions whose cursor was taken (in the look's order);
    ``changed``, any was; ``doubted``, a rewind shown by a poll alone is to be read again; ``learn_kinds``,
    a subscription that moved has no known type (learned before its first claim: claims are never taken
    back, and Key_Shared ones keep per-key order); ``reported``, the subscriptions the look showed a cursor
    of or named; ``out``, counters and notices."""

    out: Stepped = field(default_factory=Stepped)
    reported: list[Subscription] = field(default_factory=list)
    moved: list[Subscription] = field(default_factory=list)
    changed: bool = False
    doubted: bool = False
    learn_kinds: bool = False


def take_cursors(state: Looking, event: CursorsRead, now: Now) -> Looked:
    """Step 2 (see the module docstring)."""
    looked = Looked()
    topic, cursors, polled = event.topic, event.cursors, event.polled
    # A feed's look takes the subscriptions its report names, not all of them: their cost at 10,000.
    looked.reported = reported = event.states if polled else state.subs.existing(topic, cursors)
    held_looks = state.feed.held_looks
    source = "poll" if polled else "feed"
    for sub in reported:
        cursor = cursors.get(sub.name)
        if cursor is None:
            continue
        # A cursor held here, looked at again for the acknowledgements the feed brought, is nothing the
        # broker showed: neither judged nor remembered as seen. Held from before a broker restart, it had
        # become what was seen, acknowledgements the crash lost included, and the poll of the same round a
        # rewind nobody made (lab chaos seed 29869).
        held = not polled and (topic, sub.name) in held_looks
        rewind = (
            None
            if held or not event.judged
            else generations.rewound(sub, cursor, source=source, now_mono=now.mono, now_wall=now.wall)
        )
        unconfirmed = rewind is not None and rewind.kind is generations.Rewind.UNCONFIRMED
        if unconfirmed and rewind is not None:
            looked.doubted = True
            looked.out.counts["polls_unconfirmed"] += 1
            looked.out.notices.append(generations.Unconfirmed(sub, rewind, cursor))
        rewound = (
            rewind is not None
            and not unconfirmed
            and took_rewind(state, sub, rewind, cursor, looked.out, acknowledgements=event.acknowledgements)
        )
        if rewound and sub.acked is not None:
            # Acknowledged before the rewind: maybe delivered again, not claimed; but what the cursor after
            # it still shows acknowledged was not taken back (acknowledged after the reset, and reported in
            # the same answer): kept, or nobody would claim it (simulator seed 200171).
            sub.acked = acknowledged.own_part(cursor, sub.acked)
        if (
            polled
            and not rewound  # a rewind cleared the batch indexes acknowledged before it
            and not event.reloaded  # Pulsar may have forgotten them
            and sub.cursor is not None
            and sub.cursor.batches
            and cursor.mark_delete >= sub.cursor.mark_delete  # not reset backwards by someone
        ):
            cursor = cursor.ack_batches(sub.cursor.batches)
        if event.reloaded:
            sub.planned = None  # planned from what the broker may have forgotten: write it again
        if unconfirmed:
            continue  # not taken: the next poll, due at once, shows whether it was read mid-move
        if cursor != sub.cursor:
            looked.changed = True
            looked.moved.append(sub)
            sub.cursor = cursor
        # else the same value read again keeps its object: the apply step and the checkpoint tell an
        # unchanged subscription by identity (a poll parses all its topic's cursors anew)
    looked.learn_kinds = any(not s.kind for s in looked.moved)
    return looked


def took_rewind(
    state: Looking,
    sub: Subscription,
    rewind: generations.Rewound,
    cursor: AckState,
    out: Stepped,
    *,
    acknowledgements: bool,
) -> bool:
    """``cursor`` went back (``generations.rewound`` said how): whether that started a new generation of
    ``sub``'s claims (counted and noticed in ``out``); if so, a tail that forgot entries it acknowledges is
    read again. A write's outcome (``folding``) is judged with it too."""
    if rewind.kind is generations.Rewind.OWN:
        return False
    if rewind.kind is generations.Rewind.PASSIVE:
        out.counts["rewinds_passive"] += 1  # a passive copy: the active region's claims undo it
        return False
    out.counts["rewinds"] += 1
    ts = state.topics.get(sub.topic)
    if ts is not None and ts.tail.index.floor is not None and not ts.tail.stale:
        # The new claims are this cursor's whole translation, but the tail forgot entries it acknowledges
        # (every subscription had acknowledged them): read the topic again before claiming anything.
        ts.tail.stale = True
        ts.tail.stale_reason = (
            f"subscription {sub.name!r} was rewound and its claims start again, from entries forgotten "
            f"up to {ts.tail.index.floor}"
        )
    feed = state.feed
    out.notices.append(
        generations.RewindTaken(
            sub, rewind, cursor, sub.generation, feed.epoch, feed.seq, feed.read_at, claimed=acknowledgements
        )
    )
    return True


def polled(state: Polling, event: Polled, now: Now) -> Stepped:
    """When a polled topic's cursors are read next (see the module docstring)."""
    ts, states = state.topics[event.topic], event.states
    ts.poll = pacing.after_poll(
        ts.poll,
        now=now.mono,
        base_s=state.config.poll_interval_s,
        feed=event.feed,
        changed=event.changed,
        pending_move=any(s.pending_move for s in states),
        consumers=any(s.consumers for s in states),
        spread=event.spread,
    )
    paused = [s.publish_after for s in states if s.publish_after > now.mono and s.cursor != s.translated]
    if paused:
        # The new schedule replaced the one a decision set for states acknowledged during a publish pause
        # (``Stepped.poll_by``): the poll that ends the earliest pause publishes them.
        ts.poll = replace(ts.poll, next_at=min(ts.poll.next_at, *paused))
    if event.doubted:
        ts.poll = replace(ts.poll, next_at=now.mono)  # read again next round (``rewound``)
    return Stepped()
