"""Stepping: the core's entry point, ``step(state, event, now) -> Stepped``: what a round read taken, its
claims decided and received, its cursor changes.

The shell feeds events in and carries out what comes back; it decides nothing of what this covers. The
events, in the order a round and the next one give them:

* ``FeedRead`` (step 1, ``core.feeding``): a feed answer, as the shell read it: a broker restart's
  consequences (every topic polled again, the reports held dropped, this region's own claims applied again),
  the reports held until their subscription's publish may go and their tail has read their batches,
  repeats skipped; ``Fed`` names the cursors to look at per topic and the topics to start tracking.
* ``AckedRead`` (step 1, ``core.absorbing``): a feed answer's ``acked`` blocks, journalled by the shell:
  added to what each subscription's consumers were seen acknowledging; ``Absorbed`` says which to look at
  again with the cursor held here.
* ``CursorsRead`` (step 2, ``core.looking``): the cursors a look at a topic read (the feed's report, a
  poll's): rewinds judged, cursors taken; what comes back is ``Looked`` (which moved, a rewind doubted,
  types to learn first);
* ``ClaimsDue`` (steps 3-4, ``core.deciding``): after that look, the subscriptions whose claim is to be
  decided are chosen, each decided as ``Decide`` says, and the topic's tail forgets what all acknowledged;
* ``Polled`` (``core.looking``): a poll's look ended: when the topic's cursors are read next;
* ``Decide`` (steps 3-4, ``core.deciding``): one subscription's claim is to be decided (a look chose it, or
  its tail caught up with its cursor): the gates
  (``Stepped.undecided``, and the poll that ends a publish pause in ``Stepped.poll_by``), then snapshot
  mode (``Stepped.snapshot``) or the claim, queued for its namespace's envelopes (``Stepped.claims``).
* ``EnvelopeRead`` (step 7, ``core.receiving``): an entry read from a control topic, opened, checked and
  admitted past the topic's replay guard, or refused; what comes back is ``Opened`` (the sender, the lives
  it names, its states), for the shell to have those lives learned and go on with:
* ``IncarnationsNamed`` (step 7, ``core.incarnating``): the life the sender names of itself, learned if it is
  news; claims that waited for it come back (``Learned.released``). A newer life than the one known is a
  rebuild: ``Learned.read_ends`` asks where the logs end (I/O) first, then
* ``RegionRebuilt`` (step 7, ``core.incarnating``): the rebuilt region's old entries and the claims about
  them go by its old life's retired name; the tails to read again come back (``Learned.reread``).
* ``ClaimsReceived`` (steps 8-9, ``core.receiving``): that envelope's states, in one event: each held while
  it names a life of a region not announced here, else made about the lives known here and merged into the
  subscription's claims; what that asks of the shell comes back (a poll brought forward, a discovery pass in
  ``Stepped.rediscover``, a rewind elsewhere as a notice).
* ``Discovered`` (step 0, ``core.adopting``): what a discovery pass listed, after the shell tracked the
  topics it found: the topics and claims it no longer lists forgotten, the subscriptions it lists confirmed,
  those it does not taken as absent (deleted here); ``Adopted`` says which topics to untrack and to poll.
* ``OwnershipMoved`` (step 0, ``core.handing``): sidecar mode, the bundles the broker owns changed: the
  tracked topics it lost handed off, the claimed ones it gained queued for a look-up (``Adopted`` too).
* ``EntriesRead`` (step 10, ``core.naming``): the messages drained from a tail's reader queue, indexed with
  their origins named; where that needs a lookup, ``Indexed.wanted`` asks it (I/O) and the core holds the
  entry and those after it until
* ``OriginsLooked`` (step 10, ``core.naming``): the lookup's answer, after which it goes on; ``PendingDue``:
  the entries not named yet asked about again, the same way.
* ``ApplyDue``: the round's apply step, with what the shell knows now of the brokers (which capabilities are
  usable, what claims are made of, which topics snapshot mode covers). Every subscription's cursor change is
  decided (``core.planning.plan_round``) and comes back as effects: creations and cursor resets to carry out
  at once, then the plans as plugin cursor writes (``Stepped.writes``, their plans in ``Stepped.work``) or as
  admin-API moves through the move gate (``Stepped.moves``).
* ``Written`` (``core.landing``): the outcomes of those plugin writes, as the shell read them (the next
  round's start, before the feed is read), in one event: folded into the state (the cursor each write
  answered taken and judged for a rewind, what the plugin refused planned again), then a write that did all
  its plan asked settles it.
* ``Landed``: then what they leave: the plans the plugin did not write go to the admin API; where the first
  writes found no plugin, their cursors are read again at once (``Stepped.poll_soon``) and planned again.
* ``Lost``: the writes' outcomes could not be read at all: their subscriptions are planned again.
* ``Moved`` (``core.landing``): the outcomes of a batch of admin-API moves (the apply step's, snapshot
  mode's), in one event: folded into the state; the subscriptions a move found gone come back in
  ``Stepped.absent``.

Everything that comes back is a value (``core.stepped.Stepped``; ``Absorbed``, ``Fed``,
``Indexed``, ``Looked``,
``Opened``, ``Learned``): effects (``core.effects``), claims to send, lookups to make, topics to poll,
counters to add and notices to log. The state is the agent's (``Absorbing``, ``Applying``, ``Deciding``,
``Feeding``, ``Learning``, ``Looking``, ``Naming``,
``Opening`` and ``Receiving`` name what of it each event reads); the subscriptions' records are updated as
the decisions are made. The same entry runs in production (the shell's parts, called by ``runtime``'s
round), in the unit tests and in the simulator, which runs the real agent's rounds over simulated ports
(``geosync_sim``).

The other steps of the round still decide in the shell's parts, with the core's functions
(``docs/decisions/0001-sans-io-agent.md`` lists which); their events join this entry as they move.

Invariants of the apply step (tests in ``tests/agent/test_core_planning.py``, through ``step``; those of
the others in their modules, ``core.feeding``, ``core.absorbing``,
``core.looking``, ``core.deciding``, ``core.receiving``,
``core.incarnating``, ``core.naming``, ``core.adopting`` and ``core.handing``):

* every plan of a round is written once, by the plugin (``writes``) or the admin API (``moves``), never both
  in one step;
* a plugin write carries the mark-delete its plan was made from only when the plugin checks it
  (``pluginwrites.WRITE_VERSION``) and has not refused one within ``REPROBE_S``;
* a plan is settled only by a write that did all it asked (``applying.settle_plan``); what the plugin
  refused for good is planned again next round, not moved; what it could not take goes to the admin API,
  unless its topic moved away or the plugin was found absent (then it is read again and planned again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, cast, overload

from geosync_agent.core import applying, landing, planning
from geosync_agent.core.absorbing import Absorbed, Absorbing, AckedRead, absorb
from geosync_agent.core.adopting import Adopted, Adopting, Discovered, adopt
from geosync_agent.core.deciding import ClaimsDue, Decide, Deciding, DecidingLook, decide, decide_look
from geosync_agent.core.effects import AdminMoved, CursorWritten, Effect, NotWritten, Outcome, PluginAck
from geosync_agent.core.feeding import Fed, Feeding, FeedRead, take_feed
from geosync_agent.core.handing import Handing, OwnershipMoved, hand_off
from geosync_agent.core.incarnating import IncarnationsNamed, Learned, Learning, RegionRebuilt, learn, rebuild
from geosync_agent.core.looking import CursorsRead, Looked, Looking, Polled, Polling, polled, take_cursors
from geosync_agent.core.naming import (
    EntriesRead,
    Indexed,
    Naming,
    NamingEvent,
    OriginsLooked,
    PendingDue,
    name_entries,
)
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Tracked, Work
from geosync_agent.core.receiving import (
    ClaimsReceived,
    EnvelopeRead,
    Opened,
    Opening,
    Receiving,
    open_envelope,
    receive,
)
from geosync_agent.core.stepped import Notice, Stepped
from geosync_agent.core.subscriptions import Feed, SubKey, Subscription
from geosync_core import pluginwrites
from geosync_core.capabilities import REPROBE_S
from geosync_core.positions import Position

__all__ = [
    "Absorbed",
    "AckedRead",
    "Adopted",
    "ApplyDue",
    "ClaimsDue",
    "ClaimsReceived",
    "CursorsRead",
    "Decide",
    "Discovered",
    "EntriesRead",
    "EnvelopeRead",
    "Fed",
    "FeedRead",
    "IncarnationsNamed",
    "Indexed",
    "Landed",
    "Learned",
    "Looked",
    "Lost",
    "Moved",
    "Notice",
    "Opened",
    "OriginsLooked",
    "OwnershipMoved",
    "PendingDue",
    "Polled",
    "RegionRebuilt",
    "Stepped",
    "Written",
    "step",
]


class Settings(Protocol):
    """The settings the step reads (``AgentConfig``'s)."""

    @property
    def region(self) -> str: ...

    @property
    def min_apply_interval_s(self) -> float: ...


class Applying(Tracked, Protocol):
    """What of the agent's state the step reads and changes (``agentstate.AgentState`` has it all)."""

    @property
    def config(self) -> Settings: ...

    @property
    def heavy_plans(self) -> dict[SubKey, Subscription]: ...


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApplyDue:
    """A round's apply step. ``plugin_writes``, ``batch_writes``, ``skip_by_ids``: those capabilities are
    usable now; ``acknowledgements``: claims are made of what consumers acknowledged; ``claims_known``: it is
    known what they are made of; ``covered``: whether snapshot mode covers a topic."""

    plugin_writes: bool
    batch_writes: bool
    skip_by_ids: bool
    acknowledgements: bool
    claims_known: bool
    covered: Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class Written:
    """The outcomes of the plugin writes of ``work``, as read. ``covered``: whether snapshot mode covers a
    topic; ``judged``: rewinds are judged in this round; ``acknowledgements``: claims are made of what
    consumers acknowledged."""

    work: Work
    outcomes: list[Outcome]
    covered: Callable[[str], bool]
    judged: bool
    acknowledgements: bool


@dataclass(frozen=True, slots=True)
class Landed:
    """After ``Written``: ``moved_away``, the keys whose topic the broker no longer owns (handed off);
    ``no_plugin``, the plugin was untried before these writes and is now known absent; ``skip_by_ids``: that
    capability is usable now."""

    work: Work
    outcomes: list[Outcome]
    moved_away: frozenset[SubKey]
    no_plugin: bool
    skip_by_ids: bool


@dataclass(frozen=True, slots=True)
class Lost:
    """The outcomes of the plugin writes of ``work`` could not be read."""

    work: Work


@dataclass(frozen=True, slots=True)
class Moved:
    """The outcomes of a batch of admin-API moves. ``covered``: whether snapshot mode covers a topic."""

    outcomes: list[AdminMoved]
    covered: Callable[[str], bool]


ApplyEvent = ApplyDue | Written | Landed | Lost | Moved


Event = ApplyEvent | Decide | ClaimsReceived | IncarnationsNamed | RegionRebuilt | OwnershipMoved


@overload
def step(state: Applying, event: ApplyEvent, now: Now) -> Stepped: ...


@overload
def step(state: Deciding, event: Decide, now: Now) -> Stepped: ...


@overload
def step(state: DecidingLook, event: ClaimsDue, now: Now) -> Stepped: ...


@overload
def step(state: Absorbing, event: AckedRead, now: Now) -> Absorbed: ...


@overload
def step(state: Feeding, event: FeedRead, now: Now) -> Fed: ...


@overload
def step(state: Looking, event: CursorsRead, now: Now) -> Looked: ...


@overload
def step(state: Polling, event: Polled, now: Now) -> Stepped: ...


@overload
def step(state: Opening, event: EnvelopeRead, now: Now) -> Opened: ...


@overload
def step(state: Receiving, event: ClaimsReceived, now: Now) -> Stepped: ...


@overload
def step(state: Learning, event: IncarnationsNamed | RegionRebuilt, now: Now) -> Learned: ...


@overload
def step(state: Naming, event: NamingEvent, now: Now) -> Indexed: ...


@overload
def step(state: Adopting, event: Discovered | OwnershipMoved, now: Now) -> Adopted: ...


def step(
    state: Absorbing
    | Adopting
    | Applying
    | Deciding
    | Feeding
    | Learning
    | Looking
    | Naming
    | Opening
    | Polling
    | Receiving,
    event: Event
    | AckedRead
    | CursorsRead
    | ClaimsDue
    | Discovered
    | EnvelopeRead
    | FeedRead
    | Polled
    | NamingEvent,
    now: Now,
) -> Stepped | Absorbed | Adopted | Fed | Indexed | Learned | Looked | Opened:
    """Take ``event`` (see the module docstring) and say what to do. Each event reads the part of the agent's
    state it is about (``Applying``, ``Deciding``, ``Learning``, ``Looking``, ``Opening``, ``Receiving``);
    ``agentstate.AgentState`` has them all."""
    if isinstance(event, FeedRead):
        return take_feed(cast(Feeding, state), event, now)
    if isinstance(event, AckedRead):
        return absorb(cast(Absorbing, state), event, now)
    if isinstance(event, Polled):
        return polled(cast(Polling, state), event, now)
    if isinstance(event, CursorsRead):
        return take_cursors(cast(Looking, state), event, now)
    if isinstance(event, EnvelopeRead):
        return open_envelope(cast(Opening, state), event)
    if isinstance(event, ClaimsDue):
        return decide_look(cast(DecidingLook, state), event, now)
    if isinstance(event, Decide):
        return decide(cast(Deciding, state), event, now)
    if isinstance(event, ClaimsReceived):
        return receive(cast(Receiving, state), event, now)
    if isinstance(event, IncarnationsNamed):
        return learn(cast(Learning, state), event, now)
    if isinstance(event, RegionRebuilt):
        return rebuild(cast(Learning, state), event, now)
    if isinstance(event, EntriesRead | PendingDue | OriginsLooked):
        return name_entries(cast(Naming, state), event, now)
    if isinstance(event, Discovered):
        return adopt(cast(Adopting, state), event, now)
    if isinstance(event, OwnershipMoved):
        return hand_off(cast(Handing, state), event, now)
    return _apply(cast(Applying, state), event, now)


def _apply(state: Applying, event: ApplyEvent, now: Now) -> Stepped:
    """The apply step's events (11-14)."""
    if isinstance(event, ApplyDue):
        planned = planning.plan_round(
            state.topics,
            state.subs,
            now=now,
            covered=event.covered,
            heavy_plans=state.heavy_plans,
            batch_writes=event.batch_writes,
            acknowledgements=event.acknowledgements,
            claims_known=event.claims_known,
        )
        out = Stepped(effects=planned.effects, counts=planned.counts, notices=[*planned.notices])
        work = planned.work
        if work and event.plugin_writes:
            out.writes, out.work = plugin_writes(work, state.feed, now_mono=now.mono), work
        else:
            out.moves = admin_moves(state, work, now_mono=now.mono, skip_by_ids=event.skip_by_ids)
        return out
    if isinstance(event, Written):
        out = Stepped()
        landing.fold_writes(
            state,
            event.outcomes,
            out,
            now,
            covered=event.covered,
            judged=event.judged,
            acknowledgements=event.acknowledgements,
        )
        settled = sum(_settled(event.work, outcome) for outcome in event.outcomes)
        if settled:
            out.counts["plans_settled_by_writes"] += settled
        return out
    if isinstance(event, Landed):
        out = Stepped()
        rest = unwritten(event.work, event.outcomes, event.moved_away)
        if rest and event.no_plugin:
            # The plugin's first writes found no plugin: they were planned from cursors claims did not have
            # read again (plugin writes answer the cursor), so they are read now, in this round's polls, and
            # planned again for the admin API.
            for sub, ts, _ in rest.values():
                sub.planned = None
                out.poll_soon.append(ts.tail.topic)
            return out
        out.moves = admin_moves(state, rest, now_mono=now.mono, skip_by_ids=event.skip_by_ids)
        return out
    if isinstance(event, Moved):
        out = Stepped()
        landing.fold_moves(state, event.outcomes, out, now, covered=event.covered)
        return out
    for sub, _, _ in event.work.values():
        sub.planned = None  # not known written: planned again
    return Stepped()


def plugin_writes(work: Work, feed: Feed, *, now_mono: float) -> list[PluginAck]:
    """The plugin cursor writes that carry out ``work``. ``plan_apply`` puts every individual ack above the
    new mark-delete (a core invariant, tested). A plugin that checks it is told the mark-delete each plan was
    made from: it writes nothing on a cursor an operator has moved back since (a reset the feed does not
    report), and answers it; not within ``REPROBE_S`` of a plugin refusing one (older than its feed said)."""
    checked = (
        feed.write_version >= pluginwrites.WRITE_VERSION
        and now_mono - feed.planned_from_refused_at >= REPROBE_S
    )
    return [
        PluginAck(
            key,
            plan.new_mark_delete,
            plan.individual_acks,
            plan.batch_acks,
            planned_from=planned_from(sub) if checked else None,
        )
        for key, (sub, _, plan) in work.items()
    ]


def planned_from(sub: Subscription) -> Position | None:
    """The mark-delete of the cursor ``sub``'s plan was made from (``Subscription.planned``'s first part, the
    cursor it held when planning), None if there was none."""
    planned = sub.planned
    cursor = sub.cursor if planned is None or planned[0] is None else planned[0]
    return None if cursor is None else cursor.mark_delete


def admin_moves(state: Applying, work: Work, *, now_mono: float, skip_by_ids: bool) -> list[Effect]:
    """The admin-API changes that carry out ``work`` where the plugin cannot write (``applying.admin_move``:
    mark-delete through the move gate, holes above it)."""
    moves: list[Effect] = []
    region, min_interval_s = state.config.region, state.config.min_apply_interval_s
    for sub, ts, plan in work.values():
        move = applying.admin_move(
            sub,
            plan,
            partition=ts.tail.partition,
            region=region,
            now=now_mono,
            min_interval_s=min_interval_s,
            skip_by_ids=skip_by_ids,
        )
        if move is not None:
            moves.append(move)
    return moves


def _settled(work: Work, outcome: Outcome) -> bool:
    """Whether ``outcome`` is a write that did all its plan in ``work`` asked (``applying.settle_plan``: the
    subscription is taken as planned, not planned again)."""
    if not isinstance(outcome, CursorWritten) or outcome.stale or outcome.key not in work:
        return False
    sub, _, plan = work[outcome.key]
    return applying.settle_plan(sub, plan)


def unwritten(work: Work, outcomes: Iterable[Outcome], moved_away: Iterable[SubKey] = ()) -> Work:
    """The plans of ``work`` the plugin's answers (``outcomes``) leave to the admin API: those neither written
    nor refused for good (``NotWritten`` without ``fallback`` is planned again next round), less those
    ``moved_away`` (their topic is handed off)."""
    handled = {
        o.key
        for o in outcomes
        if isinstance(o, CursorWritten) or (isinstance(o, NotWritten) and not o.fallback)
    }
    handled.update(moved_away)
    return {k: v for k, v in work.items() if k not in handled}
