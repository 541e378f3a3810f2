"""Incarnating: the other regions' lives, learned from their envelopes through the core's entry
(``core.stepping.step`` with ``IncarnationsNamed`` and ``RegionRebuilt``, round step 7).

A region wiped and rebuilt under its name starts a new life (``geosync_core.incarnations``; this region's own
is kept in its ZooKeeper by the shell's ``incarnating``): its new messages reuse the origin coordinates of
its old ones. Every envelope names the lives its sender knows; what the sender says of itself is learned
here (``IncarnationsNamed``). A life newer than the one known is a rebuild, and a rebuild needs I/O before
anything is learned: where each tracked topic's log ends now (``Learned.read_ends``). The shell reads them
and steps ``RegionRebuilt``: the region's old entries in this region's logs, up to those ends, and every
claim held or queued about its origins go by the old life's retired name (``incarnations.retired``), so
that old claims go on reaching old messages (every region renames alike) and never the new ones. Renaming
only what the tails had read let the entries a stalled or restarted reader had not reached yet go by the
region's plain name: claims about the new life's messages then acknowledged them (issue 45, case 2;
``tests/sim/test_issue45_rebuilt.py``).

Learned from the control topic's history (the news was sent before this agent started: it starts with no
checkpoint, or one older than the news), the logs may hold the new life's messages as well, below their
ends and read already: every tail is read again from its earliest message (``Learned.reread``, the shell's
I/O), and an entry at or below its log's end is of the old life only if it was published before the new
life began (``OriginIndex.retire(before_ms=)``; a replicated copy keeps its origin's publish time). Retiring
up to the ends alone named the new life's messages with the old ones, and the old claims acknowledged one a
consumer held (the rebuilds profile's seed 17).

A region's first life learned here makes the topics holding claims about its messages resynced at once:
those claims went out without its life, and a peer that knows it refuses them
(``reports.of_known_incarnations``; simulator seed 200245, takeovers profile). Claims that waited for a
life (``core.receiving``) come back once it is learned (``Learned.released``), for the shell to hand over
as ``ClaimsReceived`` with ``waited``.

Invariants (tests in ``tests/agent/test_core_incarnating.py``, through ``step``):

* a region speaks only for itself: what an envelope says of a third region's life, or of this region's own
  (its ZooKeeper says that), is never learned;
* a known life is never replaced by an older or the same one, and a newer one is learned only with the
  logs' ends read (``RegionRebuilt``): nothing changes before;
* a rebuilt region's old claims (held, published, queued to send) and its old entries in the logs up to
  their ends go by the retired name, never its plain one; what was translated or planned from them is made
  again, and a checkpoint is taken at the round's end (one restored from before would learn it again when
  the logs hold new messages too);
* learned from the control topic's history, an entry goes by the retired name only if published before the
  new life began, and every tail is read again;
* a region's first life learned brings the resync of the topics holding claims about its messages forward
  to now;
* claims that waited for a region's life are released once that life is learned, and only then.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from geosync_agent.core.now import Now
from geosync_agent.core.planning import Topic
from geosync_agent.core.receiving import Regional, Waiting
from geosync_agent.core.stepped import Stepped
from geosync_agent.core.subscriptions import SubsTable
from geosync_core import ackstates, incarnations
from geosync_core.incarnations import Incarnation, Known
from geosync_core.positions import Position


class ResyncedTopic(Topic, Protocol):
    """A tracked topic as learning a life reads and changes it (the shell's ``agentstate.TopicState``)."""

    resync_at: float
    """When its subscriptions' claims are sent again whole (monotonic)."""


class Learning(Protocol):
    """What of the agent's state learning the regions' lives reads and changes (``agentstate.AgentState``)."""

    @property
    def config(self) -> Regional: ...

    @property
    def topics(self) -> Mapping[str, ResyncedTopic]: ...

    @property
    def subs(self) -> SubsTable: ...

    incarnations: Known
    """The regions' lives known here."""

    @property
    def waiting(self) -> Waiting: ...

    waiting_count: int

    @property
    def outgoing(self) -> MutableMapping[str, list[ackstates.AckStateMessage]]:
        """States queued for this round's envelopes, by namespace."""
        ...

    checkpoint_at: float
    """When the next checkpoint is taken (monotonic)."""


@dataclass(frozen=True, slots=True)
class IncarnationsNamed:
    """Round step 7: an envelope of ``sender`` names these lives (``tags``, region -> life); ``history``: it
    was sent before this agent started (``Opened.history``)."""

    sender: str
    tags: Mapping[str, Incarnation]
    history: bool


@dataclass(frozen=True, slots=True)
class RegionRebuilt:
    """After ``Learned.read_ends``: ``region`` announced ``incarnation``, newer than the life known here;
    ``ends``, the last entry each tracked topic's log holds now (None, or absent: not known);
    ``history`` as in ``IncarnationsNamed``."""

    region: str
    incarnation: Incarnation
    ends: Mapping[str, Position | None]
    history: bool


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """``region`` was rebuilt (life ``new``, was ``old``): ``runs`` index runs here now go by ``retired``."""

    region: str
    old: Incarnation
    new: Incarnation
    runs: int
    retired: str


@dataclass(slots=True)
class Learned:
    """What an envelope's lives did. ``read_ends``: its sender was rebuilt, nothing is learned yet: the shell
    reads where each tracked topic's log ends and steps ``RegionRebuilt``. ``rebuilt``: the rebuild taken,
    for the log; ``reread``, topics whose tail is read again from the earliest message (their ``stale_reason``
    says why); ``released``, claims that waited for a life now learned, each with the lives they name, for
    ``ClaimsReceived`` with ``waited``; ``out``, counters."""

    read_ends: bool = False
    rebuilt: Rebuilt | None = None
    reread: list[str] = field(default_factory=list)
    released: list[tuple[dict[str, Incarnation], list[ackstates.AckStateMessage]]] = field(
        default_factory=list
    )
    out: Stepped = field(default_factory=Stepped)


def learn(state: Learning, event: IncarnationsNamed, now: Now) -> Learned:
    """``IncarnationsNamed`` (see the module docstring)."""
    sender = event.sender
    incarnation = event.tags.get(sender)
    if incarnation is None or sender == state.config.region:
        return Learned()
    known = state.incarnations.get(sender)
    if known is not None and incarnation > known:
        return Learned(read_ends=True)
    return _take_life(state, sender, incarnation, {}, history=event.history, now_mono=now.mono)


def rebuild(state: Learning, event: RegionRebuilt, now: Now) -> Learned:
    """``RegionRebuilt`` (see the module docstring)."""
    ends, history = event.ends, event.history
    return _take_life(state, event.region, event.incarnation, ends, history=history, now_mono=now.mono)


def _take_life(
    state: Learning,
    region: str,
    incarnation: Incarnation,
    ends: Mapping[str, Position | None],
    *,
    history: bool,
    now_mono: float,
) -> Learned:
    """``incarnation`` of ``region`` learned if it is newer than the one known, and what follows from it."""
    known = state.incarnations.get(region)
    state.incarnations, replaced = state.incarnations.learn(region, incarnation)
    learned = Learned()
    if replaced is not None:
        _rename(state, region, replaced, incarnation, ends, history=history, now_mono=now_mono, out=learned)
    if known is None:
        _resync(state, region, now_mono=now_mono, out=learned.out)
    for key in [k for k in state.waiting if k[0] == region]:
        if not state.incarnations.waits(*key, tagged=True):
            messages = state.waiting.pop(key)
            state.waiting_count -= len(messages)
            learned.released.append(({region: key[1]}, list(messages)))
    return learned


def _resync(state: Learning, region: str, *, now_mono: float, out: Stepped) -> None:
    """The topics holding claims published about ``region``'s messages are resynced now."""
    topics = {
        s.topic
        for s in state.subs.values()
        if s.published is not None and region in s.published.origin_regions
    }
    for topic in topics:
        ts = state.topics.get(topic)
        if ts is not None:
            ts.resync_at = min(ts.resync_at, now_mono)
    if topics:
        out.counts["resyncs_for_incarnations"] += len(topics)


def _rename(
    state: Learning,
    region: str,
    old: Incarnation,
    new: Incarnation,
    ends: Mapping[str, Position | None],
    *,
    history: bool,
    now_mono: float,
    out: Learned,
) -> None:
    """``region``'s old entries and the claims about them go by the retired name of its ``old`` life."""
    out.out.counts["incarnations_changed"] += 1
    retired = incarnations.retired(region, old)
    runs = 0
    for topic, ts in state.topics.items():
        tail = ts.tail
        runs += tail.index.retire(region, retired, upto=ends.get(topic), before_ms=new.created_ms)
        tail.version += 1
        tail.rewrites += 1
        if history:
            tail.stale_reason = (
                f"region {region} was rebuilt, and this agent learned it from the control topic's "
                "history: its old and new messages are told apart by publish time"
            )
            out.reread.append(topic)
    for sub in state.subs.values():
        if not any(
            acks is not None and region in acks.origin_regions for acks in (sub.received, sub.published)
        ):
            continue
        sub.received = sub.received.renamed(region, retired)
        if sub.published is not None:
            sub.published = sub.published.renamed(region, retired)
        sub.translated = sub.planned = None
    # States queued before this round learned it are sealed with the lives known when they are sent: what
    # they say of the region is about its old life.
    for namespace, states in state.outgoing.items():
        state.outgoing[namespace] = [
            replace(m, acks=m.acks.renamed(region, retired)) if region in m.acks.origin_regions else m
            for m in states
        ]
    state.checkpoint_at = min(state.checkpoint_at, now_mono)
    out.rebuilt = Rebuilt(region, old, new, runs, retired)
