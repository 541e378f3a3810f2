"""What a step of the core asks the shell to do, as one value: ``Stepped``, which ``stepping.step`` returns.

The shell carries it out in its order (``folding._carry_out``): counters added, notices logged, effects
performed, plugin writes sent, admin moves made, polls brought forward, claims queued for the round's
envelopes, a discovery pass asked for. Fields an event does not use stay empty.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from geosync_agent.core import generations, planning
from geosync_agent.core.effects import Effect, PluginAck
from geosync_agent.core.planning import Work
from geosync_agent.core.subscriptions import Subscription
from geosync_core import ackstates
from geosync_core.positions import Position


@dataclass(frozen=True, slots=True)
class WriteStale:
    """A plugin write to ``state`` applied nothing: its cursor had moved back to ``mark_delete`` since the
    write was planned (planned again)."""

    state: Subscription
    mark_delete: Position


@dataclass(frozen=True, slots=True)
class MoveFailed:
    """An admin-API move of ``state`` failed (``error``; planned again), or found it ``gone`` here."""

    state: Subscription
    error: str
    gone: bool


Notice = (
    planning.Notice
    | generations.RewoundElsewhere
    | generations.Unconfirmed
    | generations.RewindTaken
    | WriteStale
    | MoveFailed
)
"""What a decision made that people should read of (the shell logs it)."""


@dataclass(slots=True)
class Stepped:
    """What a step asks for: ``effects`` to carry out now, then ``moves``, the admin-API moves (each
    batch's outcomes handed back as ``Moved``); ``writes``, plugin cursor writes to send (their outcomes
    come back as ``Written`` and ``Landed`` at the next round, with ``work``, the plans they carry);
    ``poll_soon``, topics whose cursors are to be read again at once; ``counts`` to add to the agent's
    counters; ``notices`` to log; and what the other events say, below."""

    effects: list[Effect] = field(default_factory=list)
    moves: list[Effect] = field(default_factory=list)
    writes: list[PluginAck] = field(default_factory=list)
    work: Work = field(default_factory=dict)
    poll_soon: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    notices: list[Notice] = field(default_factory=list)
    claims: list[tuple[str, ackstates.AckStateMessage]] = field(default_factory=list)
    """``Decide``: a claim to seal and send on its namespace's control topic, with this round's others."""
    poll_by: dict[str, float] = field(default_factory=dict)
    """``Decide``: topics whose cursors are to be read again by then (monotonic), if not sooner."""
    snapshot: list[Subscription] = field(default_factory=list)
    """``Decide``: subscriptions whose cursor goes to snapshot mode (``snapshotting``), not to claims."""
    undecided: bool = False
    """``Decide``: the claim could not be decided yet (its tail is read again first, a rewind is followed,
    a publish pause holds it): the look keeps it as not published."""
    rediscover: list[str] = field(default_factory=list)
    """``ClaimsReceived``: ask for a discovery pass (claims name a topic not tracked here), counted under
    these names when the shell asks."""
    absent: list[Subscription] = field(default_factory=list)
    """``Moved``: subscriptions an admin move found gone here, taken as a discovery pass that no longer finds
    them (the shell's ``_absent``)."""
