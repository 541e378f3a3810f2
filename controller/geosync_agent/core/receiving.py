"""Receiving: claims from the other regions through the core's entry (``core.stepping.step`` with
``ClaimsReceived``, round steps 8-9).

The shell opens an envelope read from a control topic (its signature, its sender's key, replays and misplaced
states: ``geosync_core.envelopes``), decodes the states it carries and learns the incarnations it announces
(``controlling``: a region rebuilt asks the brokers where their logs end, which is I/O); each state then
comes here as an event. Its claims about a life of a region that the region has not announced here yet wait
for it (``reports.waiting_on_incarnations``; at most ``tuning.MAX_WAITING_CLAIMS``, the oldest dropped:
their sender's next resync says them again) and come back as an event of their own once it has
(``waited``). The rest are made about the incarnations known here (``reports.of_known_incarnations``) and
merged into the subscription's claims (``generations.take_claims``).

What the shell knows of the claims' topic comes with the event, as it is now: whether this region syncs the
subscription and its topic (its configuration), whether this agent syncs the topic (sidecar mode: its
broker owns it), whether plugin cursor writes are usable, what claims are made of here.

Invariants (tests in ``tests/agent/test_core_receiving.py``, through ``step``):

* claims about a subscription this region does not sync change nothing;
* claims of an older generation than the one held are dropped (they would undo a rewind);
* claims about a region's life not announced here are held, not taken, until it is;
* claims naming a topic not tracked here ask for discovery (a topic this agent does not sync, in sidecar
  mode: a look-up of its owner), never more than ``tuning.MAX_UNOBSERVED`` topics at a time;
* claims that changed what is held bring their topic's poll forward when plugin writes cannot be used
  (admin moves plan from a cursor read afresh).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from geosync_agent.core import generations, reports, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Topic
from geosync_agent.core.stepped import Stepped
from geosync_agent.core.subscriptions import Subscription, SubsTable
from geosync_core import ackstates
from geosync_core.incarnations import Incarnation, Known

Waiting = dict[tuple[str, Incarnation], deque[ackstates.AckStateMessage]]
"""Claims about a life of a region the region has not announced here yet, by (region, life)."""


class Receiving(Protocol):
    """What of the agent's state claims received read and change (``agentstate.AgentState`` has it all)."""

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    @property
    def subs(self) -> SubsTable: ...

    @property
    def incarnations(self) -> Known:
        """The regions' lives known here."""
        ...

    @property
    def waiting(self) -> Waiting: ...

    waiting_count: int
    """How many claims ``waiting`` holds."""

    @property
    def lookups(self) -> set[str]:
        """Sidecar mode: claimed topics whose owner is to be looked up."""
        ...

    @property
    def claimed_untracked(self) -> dict[str, tuple[float, float]]:
        """Claimed topics not tracked here yet, looked up alone: topic -> (next look-up, give up at)."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimsReceived:
    """One state of an envelope from another region: ``message``, a subscription's claims; ``tags``, the
    incarnations the envelope names (None: none, an agent from before incarnations); ``waited``: these claims
    waited for a region's life that is now announced (not held again). Of the claims' topic: ``synced``, this
    region syncs the subscription; ``synced_topic``, and the topic; ``owned``, this agent syncs the topic
    (sidecar mode: its broker owns it); ``sidecar``, this agent shards by ownership; ``plugin_writes``, plugin
    cursor writes are usable and not known absent. ``acknowledgements`` and ``claims_known`` as in
    ``stepping.ApplyDue``."""

    message: ackstates.AckStateMessage
    tags: dict[str, Incarnation] | None
    waited: bool
    synced: bool
    synced_topic: bool
    owned: bool
    sidecar: bool
    plugin_writes: bool
    acknowledgements: bool
    claims_known: bool


def receive(state: Receiving, event: ClaimsReceived, now: Now) -> Stepped:
    """Steps 8-9 (see the module docstring)."""
    out, message = Stepped(), event.message
    if not event.waited:
        message, waiting = reports.waiting_on_incarnations(message, event.tags, state.incarnations)
        _wait(state, waiting, out)
    known = reports.of_known_incarnations(message, event.tags, state.incarnations)
    if known is not message:
        out.counts["claims_stale_incarnation"] += 1
    _take(state, known, event, now, out)
    return out


def _wait(
    state: Receiving, waiting: dict[tuple[str, Incarnation], ackstates.AckStateMessage], out: Stepped
) -> None:
    """Keep the claims ``waiting`` for a region's life, the oldest dropped above the bound."""
    for key, message in waiting.items():
        out.counts["claims_waiting_incarnation"] += 1
        state.waiting.setdefault(key, deque()).append(message)
        state.waiting_count += 1
    while state.waiting_count > tuning.MAX_WAITING_CLAIMS:
        key = next(iter(state.waiting))
        state.waiting[key].popleft()
        state.waiting_count -= 1
        out.counts["claims_waiting_dropped"] += 1
        if not state.waiting[key]:
            del state.waiting[key]


def _take(
    state: Receiving, message: ackstates.AckStateMessage, event: ClaimsReceived, now: Now, out: Stepped
) -> None:
    # The sender's rules may differ (another version or configuration): what is not synced here, a broker's
    # own subscription among them, is never written from claims.
    if not event.synced:
        return
    topic, key = message.topic, (message.topic, message.subscription)
    sub = state.subs.get(key)
    if sub is None:
        sub = state.subs[key] = Subscription(topic, message.subscription, exists=False)
    ts = state.topics.get(topic)
    generation = sub.generation
    taken = generations.take_claims(
        sub,
        message,
        index=None if ts is None else ts.tail.index,
        now_wall=now.wall,
        follow_rewinds=not event.acknowledgements,
    )
    if taken is generations.Taken.SUPERSEDED:
        out.counts["claims_superseded"] += 1  # from before a rewind: they would undo it
        return
    if sub.generation != generation:
        # The apply step follows a rewind or not once it is known what claims here are made of.
        how = (
            "deferred"
            if sub.follow and not event.claims_known
            else "followed"
            if sub.follow
            else "not followed"
        )
        out.counts[f"rewinds_{how.replace(' ', '_')}"] += 1
        out.notices.append(generations.RewoundElsewhere(sub, how))
    if topic not in state.topics and not event.owned:
        # Sidecar mode: another broker's agent applies them (the claims are kept for a takeover).
        if event.sidecar and len(state.lookups) < tuning.MAX_UNOBSERVED:
            state.lookups.add(topic)
    elif topic not in state.topics:
        if event.synced_topic and len(state.claimed_untracked) < tuning.MAX_UNOBSERVED:
            state.claimed_untracked.setdefault(topic, (now.mono, now.mono + tuning.CLAIMED_LOOKUP_S))
        out.rediscover.append("rediscover_for_claims")
    if taken is generations.Taken.CHANGED:
        out.counts["claims_received"] += 1
        if ts is not None and not event.plugin_writes:
            # Plugin writes answer the cursor's state; admin calls need a fresh read to plan from. (Not while
            # the plugin's writes are untried: a restarted agent's first claims then made every topic due a
            # poll for two rounds, until its first writes were answered.)
            out.poll_soon.append(topic)
