"""Deciding: subscriptions' claims through the core's entry (``core.stepping.step`` with ``ClaimsDue`` and
``Decide``, round steps 3-4).

Once a look at a topic's cursors (the feed's, a poll's: ``observing``) has taken them (``core.looking``),
``ClaimsDue`` chooses the subscriptions whose claim is to be decided (``subscriptions.to_decide``: a poll's,
every one it read; the feed's, those it moved and those a write moved since or left undecided), decides
each, keeps those not decidable yet for the next look (``unpublished``), and lets the topic's tail forget
what every subscription acknowledged (at each poll, else every ``tuning.FLOOR_EVERY_S``). A tail that read
as far as a cursor acknowledged asks for one decision alone (``Decide``, from ``indexing``).

For each, the gates come first: no claim while its subscription follows a rewind (its cursor
may acknowledge what the newer claims do not), while its tail is to be read again or its cursor lies below
what the tail forgot (claims made now could leave entries out; parked below what the budget of entries held
made it forget), or within its publish pause unless at a resync (``Stepped.undecided``; the poll that ends
the pause in ``Stepped.poll_by``). Then a topic snapshot mode covers goes to it (``Stepped.snapshot``: its
markers are the shell's), and any other has its claim decided (``core.publishing.claim``), timed with the
round's CPU meter, queued for its namespace's envelopes (``Stepped.claims``), and paused for what it cost
(``core.pauses``).

Invariants (tests in ``tests/agent/test_core_deciding.py``, through ``step``): the gates above; a claim goes
out only for a namespace synced here; the same claim is not decided twice unless a resync forces it; a
subscription a look could not decide is decided by the next look at its topic, named or not; a tail
forgets only what every subscription of its topic acknowledged (``subscriptions.forgettable_floor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from geosync_agent.core import planning, publishing, subscriptions, tuning
from geosync_agent.core.logview import LogView
from geosync_agent.core.now import Now
from geosync_agent.core.pauses import note_heavy, publish_pause
from geosync_agent.core.planning import Topic
from geosync_agent.core.stepped import Stepped
from geosync_agent.core.subscriptions import (
    SubKey,
    Subscription,
    SubsTable,
    decided_already,
    forgettable_floor,
)
from geosync_core.rangesets import AckState


class LookedTopic(Topic, Protocol):
    """A tracked topic as a look's decisions read and change it (the shell's ``agentstate.TopicState``)."""

    unpublished: dict[str, None]
    """Its subscriptions whose claim a look could not decide yet (looked at again by the next one)."""
    floor_at: float
    """When its tail may next forget what every subscription acknowledged (monotonic)."""


class Regional(Protocol):
    """The setting a claim's decision reads (``AgentConfig``'s)."""

    @property
    def region(self) -> str: ...


class Deciding(Protocol):
    """What of the agent's state a claim's decision (``Decide``) reads and changes."""

    @property
    def config(self) -> Regional: ...

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    @property
    def namespaces(self) -> Mapping[str, frozenset[str]]:
        """The namespaces synced here: claims go out on their control topics only."""
        ...

    @property
    def heavy_publishes_by(self) -> dict[SubKey, Subscription]:
        """The subscriptions whose last publish took ``tuning.HEAVY_PLAN_S`` or more (``pauses``)."""
        ...

    @property
    def heavy_publishes(self) -> int:
        """How many of them this round began with."""
        ...


class DecidingLook(Deciding, Protocol):
    """What of the agent's state a look's decisions (``ClaimsDue``) read and change."""

    @property
    def topics(self) -> Mapping[str, LookedTopic]: ...

    @property
    def subs(self) -> SubsTable: ...


@dataclass(frozen=True, slots=True)
class ClaimsDue:
    """Round steps 3-4 after a look at ``topic`` took its cursors: ``states``, the topic's subscriptions that
    exist here; ``reported`` and ``moved``, those the look showed and those whose cursor it took
    (``looking.Looked``); ``polled``: a poll's look, else the feed's; ``force``: at the topic's resync;
    ``cursor_set``: the subscriptions a write set the cursor of since the last look (``SubsTable.cursor_set``,
    taken by the shell before the look); ``acknowledgements`` and ``covered`` as in ``Decide``."""

    topic: str
    states: list[Subscription]
    reported: list[Subscription]
    moved: list[Subscription]
    polled: bool
    force: bool
    cursor_set: Mapping[str, None] | None
    acknowledgements: bool
    covered: bool


@dataclass(frozen=True, slots=True)
class Decide:
    """Round steps 3-4: decide ``sub``'s claim. A look at its topic's cursors chose it (the feed's or a
    poll's, ``subscriptions.to_decide``), or its tail read as far as its cursor acknowledged. ``force``: at
    its topic's resync (whole, and not held by a publish pause); ``acknowledgements``: claims are made of
    what consumers acknowledged; ``covered``: snapshot mode covers its topic (markers, not claims)."""

    sub: Subscription
    force: bool
    acknowledgements: bool
    covered: bool


def decide(state: Deciding, event: Decide, now: Now) -> Stepped:
    """Steps 3-4: the gates before a claim (a rewind followed, a tail to read again, a publish pause), then
    snapshot mode or the claim (``publishing.claim``), timed, and the publish pause that follows it."""
    out = Stepped()
    out.undecided = not _decide(state, event.sub, event, now, out)
    return out


def _decide(state: Deciding, sub: Subscription, how: Decide | ClaimsDue, now: Now, out: Stepped) -> bool:
    """``decide``'s work for ``sub``, as ``how`` says (its ``force``, ``acknowledgements`` and ``covered``),
    added to ``out`` (a look's decisions share one); False: not decidable yet."""
    ts = state.topics.get(sub.topic)
    if ts is None or sub.cursor is None or sub.follow:
        return False  # following a rewind: this cursor may acknowledge what the newer claims do not
    tail, cursor = ts.tail, sub.cursor
    if tail.stale or _behind_forgotten(tail, sub, cursor, out):
        return False  # the tail is read again first (next round): claims made now could leave entries out
    if not how.force and now.mono < sub.publish_after:
        # Claims too large to translate and send at every acknowledgement: the next due poll brings this
        # cursor back (it still differs from ``translated``), and with it everything acknowledged since.
        at = sub.publish_after
        out.poll_by[sub.topic] = min(out.poll_by.get(sub.topic, at), at)
        out.counts["publishes_paused"] += 1
        return False
    if how.covered:
        out.snapshot.append(sub)
        return True
    # With claims_from: acknowledgements (and a feed that reports them), the claim is made of what consumers
    # acknowledged, limited to the cursor (core.acknowledged); else of the cursor.
    exact = how.acknowledgements
    if not how.force and decided_already(sub, acknowledgements=exact, log_version=tail.version):
        return True  # ``claim`` would answer "same": not timed (a poll looks at every subscription)
    # The cost is the loop thread's CPU (``Now.cpu``), not the wall time: on a saturated machine a GIL switch
    # alone (5 ms) made any publish or plan look heavy, and the pauses grew with every one counted so.
    started = now.cpu()
    namespace = publishing.namespace_of(sub.topic)
    decided = publishing.claim(
        sub,
        tail,
        exact=exact,
        force=how.force,
        local=state.config.region,
        sendable=namespace in state.namespaces,
    )
    if not isinstance(decided, publishing.Send):
        return True
    if decided.as_news:
        out.counts["states_sent_as_news"] += 1
    sub.publish_took = took = now.cpu() - started
    note_heavy(state.heavy_publishes_by, sub, took)
    sub.publish_after = now.mono + publish_pause(decided.size, took=took, heavy=state.heavy_publishes)
    out.claims.append((namespace, decided.message))
    return True


def _behind_forgotten(tail: LogView, sub: Subscription, cursor: AckState, out: Stepped) -> bool:
    """Whether ``sub``'s cursor lies below entries the tail already forgot (``planning.behind_forgotten``):
    nothing is claimed for it, and the tail is read again from the earliest message or the subscription is
    parked (counted and noticed in ``out``)."""
    behind = planning.behind_forgotten(tail, sub, cursor)
    if isinstance(behind, planning.Parked):
        out.counts["subscriptions_parked"] += 1
        out.notices.append(behind)
    return behind is not False


def decide_look(state: DecidingLook, event: ClaimsDue, now: Now) -> Stepped:
    """Steps 3-4 after a look (see the module docstring): every decision's values, in the look's order."""
    out, topic = Stepped(), event.topic
    claims, moved = not event.covered, {id(s) for s in event.moved}
    ts = state.topics[topic]
    unpublished: dict[str, None] = {}
    names = {**dict.fromkeys(s.name for s in event.reported), **(event.cursor_set or {}), **ts.unpublished}
    for sub in event.states if event.polled else state.subs.existing(topic, names):
        if not subscriptions.to_decide(
            sub,
            polled=event.polled,
            moved=id(sub) in moved,
            claims=claims,
            acknowledgements=event.acknowledgements,
            log_version=ts.tail.version,
        ):
            continue
        if not _decide(state, sub, event, now, out):
            unpublished[sub.name] = None
    ts.unpublished = unpublished
    state.subs.cursor_set.pop(topic, None)  # what this look set itself
    if event.polled or now.mono >= ts.floor_at:
        ts.floor_at = now.mono + tuning.FLOOR_EVERY_S
        floor = forgettable_floor(event.states, claims=claims)
        if floor is not None:
            ts.tail.forget_up_to(floor)
    return out
