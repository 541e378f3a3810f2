"""Receiving: claims from the other regions through the core's entry (``core.stepping.step`` with
``EnvelopeRead`` and ``ClaimsReceived``, round steps 7-9).

An entry read from a control topic comes in as ``EnvelopeRead``: it is opened (``geosync_core.envelopes``:
signature, the sender's key; ``geosync_core.ackstates``: the states and incarnations it carries), and
refused if it is malformed, misplaced (a state of another namespace than its control topic's) or a replay
(the topic's ``ReplayGuard``); this region's own envelopes, replicated back, are ignored. What comes back
(``Opened``) is what the shell needs to go on: the sender, the incarnations it names, its states. The shell
has those incarnations learned (``core.incarnating``: a region rebuilt first asks the brokers where their
logs end, which is I/O), then hands the states over as one ``ClaimsReceived``.

A state's claims about a life of a region that the region has not announced here yet wait for it
(``reports.waiting_on_incarnations``; at most ``tuning.MAX_WAITING_CLAIMS``, the oldest dropped: their
sender's next resync says them again) and come back as an event of their own once it has (``waited``). The
rest are made about the incarnations known here (``reports.of_known_incarnations``) and merged into the
subscription's claims (``generations.take_claims``).

What the shell knows of the claims' topics comes with the event, as it is now, asked where a claim needs
it: whether this region syncs the subscription and its topic (its configuration), whether this agent syncs
the topic (sidecar mode: its broker owns it); and whether plugin cursor writes are usable, what claims are
made of here.

Invariants (tests in ``tests/agent/test_core_receiving.py``, through ``step``):

* an envelope that is unsigned, altered, malformed, misplaced or replayed yields no claim, and a replay
  guard moves only for an envelope valid whole (``Opened.rejected`` says why);
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from geosync_agent.core import generations, reports, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Topic
from geosync_agent.core.publishing import namespace_of
from geosync_agent.core.stepped import Stepped
from geosync_agent.core.subscriptions import SubsTable
from geosync_core import ackstates, envelopes
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


class Regional(Protocol):
    @property
    def region(self) -> str: ...


class Opening(Protocol):
    """What of the agent's state opening an envelope reads and changes."""

    @property
    def config(self) -> Regional: ...

    @property
    def guards(self) -> dict[str, envelopes.ReplayGuard]:
        """Each control topic's replay guard."""
        ...

    @property
    def started_ms(self) -> int:
        """When this agent started (wall ms): envelopes sent before are the control topic's history."""
        ...


@dataclass(frozen=True, slots=True)
class EnvelopeRead:
    """Round step 7: ``data``, an entry read from the control topic ``topic``; ``keyring``, the regions' keys
    trusted now (the shell reloads them)."""

    data: bytes
    topic: str
    keyring: envelopes.Keyring


@dataclass(slots=True)
class Opened:
    """What an envelope read says. ``rejected``: why it changes nothing (the shell counts and logs it), or
    None. ``sent_at_ms``: when it was sent, for the transit time, if it is current (not the control topic's
    history) and valid whole, replayed or not. ``sender``, ``tags`` (the incarnations it names; None: none)
    and ``states`` (its claims, one ``ClaimsReceived`` each once the incarnations are learned): empty when it
    was rejected or is this region's own. ``history``: it was sent before this agent started."""

    rejected: envelopes.Rejected | None = None
    sent_at_ms: int | None = None
    sender: str = ""
    tags: dict[str, Incarnation] | None = None
    states: list[ackstates.AckStateMessage] = field(default_factory=list)
    history: bool = False


def open_envelope(state: Opening, event: EnvelopeRead) -> Opened:
    """Step 7 (see the module docstring)."""
    opened = envelopes.open_envelope(event.keyring, event.data)
    if isinstance(opened, envelopes.Rejected):
        return Opened(rejected=opened)
    if opened.region == state.config.region:
        return Opened()  # our own message, replicated back to us through the local log
    # Validated whole before the replay guard moves: a genuine envelope of another kind (a policy event) or
    # of another namespace copied here by someone with produce permission only must neither act nor push the
    # guard past the sender's next sequence number (its claims would be refused).
    decoded = ackstates.decode_ack_states(opened)
    if isinstance(decoded, envelopes.Rejected):
        return Opened(rejected=decoded)
    tags = ackstates.incarnations_of(opened)
    if isinstance(tags, envelopes.Rejected):
        return Opened(rejected=tags)
    if any(namespace_of(m.topic) != namespace_of(event.topic) for m in decoded):
        return Opened(rejected=envelopes.Rejected(envelopes.Reason.MISPLACED))
    history = opened.sent_at_ms < state.started_ms  # re-read from the control topic
    sent_at_ms = None if history else opened.sent_at_ms
    state.guards[event.topic], admitted = state.guards.get(event.topic, envelopes.ReplayGuard()).admit(opened)
    if isinstance(admitted, envelopes.Rejected):
        return Opened(rejected=admitted, sent_at_ms=sent_at_ms)
    return Opened(sent_at_ms=sent_at_ms, sender=opened.region, tags=tags, states=decoded, history=history)


@dataclass(frozen=True, slots=True)
class ClaimsReceived:
    """The states of an envelope from another region (or those that waited for a region's life): each
    ``messages``' one, a subscription's claims; ``tags``, the incarnations the envelope names (None: none, an
    agent from before incarnations); ``waited``: these claims waited for a region's life that is now
    announced (not held again). What the shell knows of a claim's topic, asked only where a claim needs it:
    ``synced(topic, subscription)``, this region syncs the subscription; ``synced_topic(topic)``, and the
    topic; ``owned(topic)``, this agent syncs the topic (sidecar mode: its broker owns it). ``sidecar``, this
    agent shards by ownership; ``plugin_writes``, plugin cursor writes are usable and not known absent.
    ``acknowledgements`` and ``claims_known`` as in ``stepping.ApplyDue``."""

    messages: Sequence[ackstates.AckStateMessage]
    tags: dict[str, Incarnation] | None
    waited: bool
    synced: Callable[[str, str], bool]
    synced_topic: Callable[[str], bool]
    owned: Callable[[str], bool]
    sidecar: bool
    plugin_writes: bool
    acknowledgements: bool
    claims_known: bool


def receive(state: Receiving, event: ClaimsReceived, now: Now) -> Stepped:
    """Steps 8-9 (see the module docstring), for each state in turn; one ``Stepped`` for them all."""
    out = Stepped()
    for received in event.messages:
        message = received
        if not event.waited:
            message, waiting = reports.waiting_on_incarnations(received, event.tags, state.incarnations)
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
    topic = message.topic
    if not event.synced(topic, message.subscription):
        return
    sub = state.subs.made(topic, message.subscription, exists=False)
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
    if ts is None and not event.owned(topic):
        # Sidecar mode: another broker's agent applies them (the claims are kept for a takeover).
        if event.sidecar and len(state.lookups) < tuning.MAX_UNOBSERVED:
            state.lookups.add(topic)
    elif ts is None:
        if event.synced_topic(topic) and len(state.claimed_untracked) < tuning.MAX_UNOBSERVED:
            state.claimed_untracked.setdefault(topic, (now.mono, now.mono + tuning.CLAIMED_LOOKUP_S))
        out.rediscover.append("rediscover_for_claims")
    if taken is generations.Taken.CHANGED:
        out.counts["claims_received"] += 1
        if ts is not None and not event.plugin_writes:
            # Plugin writes answer the cursor's state; admin calls need a fresh read to plan from. (Not while
            # the plugin's writes are untried: a restarted agent's first claims then made every topic due a
            # poll for two rounds, until its first writes were answered.)
            out.poll_soon.append(topic)
