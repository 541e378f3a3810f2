"""Adopting: a discovery pass's answer taken into the subscriptions' state through the core's entry
(``core.stepping.step`` with ``Discovered``; round step 0).

The shell runs the pass (its admin calls, ``discovering``), tracks the topics it found (readers are I/O:
opened by the round's ``reopen`` step) and steps what the pass listed; the core decides what the listing
means for what is tracked and comes back with ``Adopted``: the topics to stop tracking (the shell closes
their readers and forgets their origin lookups), the topics whose cursors to read at once, counters and
notices. The control topics, the replicators' stalls and unloads are still the shell's (``tracking``).

Invariants (tests in ``tests/agent/test_core_adopting.py``, through ``step``):

* a topic the pass does not list is forgotten (untracked, its subscriptions' states, claims and waiting
  feed reports dropped) unless it was tracked after the pass began (the pass may predate it); without a
  start time (``scanned_at`` None) nothing is forgotten;
* the claims about a topic neither listed here nor tracked are dropped once no region sent any of them for
  ``tuning.UNLISTED_CLAIMS_RESYNCS`` resync periods (its queued look-ups go with them);
* a subscription the pass lists is confirmed as existing at the pass's start (its type and consumers
  taken); one never read before (or deleted here and now back) has its topic's cursors read at once
  (``Adopted.poll_soon``), and a feed report held from before a recreation is dropped;
* a tracked subscription the pass does not list stops existing here, and one confirmed before that is
  marked ``deleted_here`` (not created again from other regions' claims), unless it was seen since the pass
  began.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from geosync_agent.core import tuning
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import SubKey, Subscription, SubsTable
from geosync_core import pluginapi


class Tracked(Protocol):
    """A tracked topic as adopting reads it (the shell's ``agentstate.TopicState``)."""

    @property
    def tracked_at(self) -> float:
        """Monotonic time tracking started."""
        ...


class Periodic(Protocol):
    @property
    def resync_interval_s(self) -> float: ...


class Adopting(Protocol):
    """What of the agent's state adopting a pass reads and changes."""

    @property
    def config(self) -> Periodic: ...

    @property
    def topics(self) -> Mapping[str, Tracked]: ...

    @property
    def subs(self) -> SubsTable: ...

    @property
    def unobserved(self) -> dict[SubKey, pluginapi.CursorReport]:
        """Feed reports waiting for their topic and subscription to be tracked."""
        ...

    @property
    def lookups(self) -> set[str]: ...

    @property
    def claimed_untracked(self) -> dict[str, tuple[float, float]]: ...


@dataclass(frozen=True, slots=True)
class Discovered:
    """A discovery pass begun at ``scanned_at`` (monotonic; None: when is not known) listed ``listed``
    (every topic it saw in the synced namespaces) and, per topic, ``subscriptions`` (name -> (consumers,
    type)), after the shell tracked the topics it found."""

    listed: tuple[str, ...]
    subscriptions: Mapping[str, Mapping[str, tuple[int, str]]]
    scanned_at: float | None


@dataclass(frozen=True, slots=True)
class TopicForgotten:
    """``topic`` is gone (deleted, or its namespace no longer synced): no longer tracked."""

    topic: str


@dataclass(frozen=True, slots=True)
class ClaimsForgotten:
    """The claims of ``keys`` were dropped: no region spoke of them for ``quiet_s`` and this region does
    not list their topics."""

    keys: list[SubKey]
    quiet_s: float


@dataclass(frozen=True, slots=True)
class DeletedHere:
    """``state`` was deleted here: not created again from other regions' claims."""

    state: Subscription


AdoptNotice = TopicForgotten | ClaimsForgotten | DeletedHere


@dataclass(slots=True)
class Adopted:
    """What adopting a pass (or an ownership change, ``core.handing``) asks of the shell: ``gone``, topics
    to stop tracking (reader closed, origin lookups forgotten); ``poll_soon``, topics whose cursors to read
    at once; ``taken_over``, claimed topics queued for a look-up; ``counts`` and ``notices``."""

    gone: list[str] = field(default_factory=list)
    taken_over: list[str] = field(default_factory=list)
    poll_soon: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    notices: list[AdoptNotice] = field(default_factory=list)


def resync_period(interval_s: float, subscriptions: int) -> float:
    """Seconds between a topic's full republishes: ``interval_s``, stretched so that resyncs send at most
    RESYNC_STATES_PER_S states a second on average over ``subscriptions``."""
    return max(interval_s, subscriptions / tuning.RESYNC_STATES_PER_S)


def adopt(state: Adopting, event: Discovered, now: Now) -> Adopted:
    """Take what the pass listed (see the module docstring)."""
    out = Adopted()
    if event.scanned_at is not None:
        keep = set(event.listed)
        out.gone = forget_gone(state, keep, event.scanned_at, out)
        forget_unlisted_claims(state, keep, now, out)
    gone = set(out.gone)
    at = event.scanned_at or now.mono
    by_topic = state.subs.by_topic(existing_only=False)
    for topic, present in event.subscriptions.items():
        if topic not in state.topics or topic in gone:
            continue
        out.poll_soon.extend(track_subscriptions(state, topic, present, at=at))
        for sub in by_topic.get(topic, ()):
            if sub.name not in present:
                absent(sub, event.scanned_at, out)
    return out


def forget_gone(state: Adopting, keep: set[str], scanned_at: float, out: Adopted) -> list[str]:
    """The tracked topics not in ``keep`` and tracked before ``scanned_at``; their subscriptions, claims
    and waiting feed reports dropped here (the shell untracks them)."""
    gone = []
    for topic, ts in state.topics.items():
        if topic in keep or ts.tracked_at >= scanned_at:
            continue
        gone.append(topic)
        for key in [k for k in state.unobserved if k[0] == topic]:
            del state.unobserved[key]
        for key in [k for k in state.subs if k[0] == topic]:
            del state.subs[key]
        state.claimed_untracked.pop(topic, None)
        out.counts["topics_forgotten"] += 1
        out.notices.append(TopicForgotten(topic))
    return gone


def forget_unlisted_claims(state: Adopting, listed: set[str], now: Now, out: Adopted) -> None:
    """Drop the claims about topics neither listed here nor tracked that no region sent any of for
    tuning.UNLISTED_CLAIMS_RESYNCS resync intervals (see there)."""
    quiet_s = tuning.UNLISTED_CLAIMS_RESYNCS * resync_period(state.config.resync_interval_s, len(state.subs))
    horizon = now.wall - quiet_s
    gone = [
        key
        for key, sub in state.subs.items()
        if key[0] not in state.topics
        and key[0] not in listed
        and max(sub.received_from.values(), default=0.0) < horizon
    ]
    for key in gone:
        del state.subs[key]
        state.claimed_untracked.pop(key[0], None)
        state.lookups.discard(key[0])
    if gone:
        out.counts["claims_forgotten"] += len(gone)
        out.notices.append(ClaimsForgotten(gone, quiet_s))


def track_subscriptions(
    state: Adopting, topic: str, present: Mapping[str, tuple[int, str]], *, at: float
) -> list[str]:
    """Record ``topic``'s subscriptions as a topic's stats list them (name -> (consumers, type)) at
    monotonic time ``at``; the topic, once for each one whose cursor was never read, to poll at once."""
    poll = []
    for name, (consumers, kind) in present.items():
        sub = state.subs.made(topic, name)
        # One deleted here and created again: ``confirm`` forgets its old cursor, to be read anew.
        unread = sub.deleted_here or (sub.cursor is None and (not sub.exists or sub.confirmed_at == 0))
        sub.confirm(at)
        if sub.recreated:
            state.unobserved.pop(sub.key, None)  # a report waiting since before is about the old one
        sub.consumers = consumers
        sub.learn_kind(kind)
        if unread:
            poll.append(topic)
    return poll


def absent(sub: Subscription, scanned_at: float | None, out: Adopted) -> None:
    """A discovery pass started at ``scanned_at`` did not find ``sub`` here."""
    if scanned_at is not None and scanned_at <= sub.confirmed_at:
        return  # seen (or created) since the pass began: the pass is older news
    if sub.exists and sub.confirmed_at > 0 and scanned_at is not None:
        sub.deleted_here = True
        out.counts["subscriptions_deleted_here"] += 1
        out.notices.append(DeletedHere(sub))
    sub.exists = False
