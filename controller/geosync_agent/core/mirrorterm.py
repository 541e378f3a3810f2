"""A policy mirror term's state as values, and the context of one step over it.

``Term`` is what a leadership term holds between events (``core.mirroring`` steps it: its docstring has the
protocol and the invariants); ``Job`` is the one answer it waits for, and what it keeps meanwhile. ``Step`` is
one call of ``core.mirroring.step``: the term, the time, and the effects asked for so far; the term's rules
(``core.mirroring``) and its held deletions (``core.mirrorreleasing``) are steps over it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirror import Checkpoint
from geosync_core import allowedclusters, clocks, policies
from geosync_core.policies import Record


@dataclass
class Job:
    """What the term is doing while it waits for an answer of a type in ``waiting`` about ``path``."""

    kind: str  # "clusters", "recheck", "walk", "drain", "observe", "children", "apply", "release"
    waiting: tuple[type, ...]
    path: str = ""
    record: Record | None = None
    attempt: int = 0
    node: ev.Node | None = None
    replica: policies.Replica | None = None
    unmarked: bytes | None = None
    bootstrap: bool = False
    then: str = (
        ""  # in a release: "node", "contents", "mark", "marked", "unmark", "apply", "reread", "restore"
    )
    reason: str = ""


Internal = tuple[str, str]
"""Work the term queued for itself: ("observe" | "children" | "recheck", path), or ("finish", "")."""


@dataclass
class Term:
    """One leadership term's state; ``cp`` is what the next term is handed (``SaveCheckpoint``)."""

    settings: ev.Settings
    cp: Checkpoint = field(default_factory=Checkpoint)
    holds: dict[str, str] = field(default_factory=dict)
    """Destroying changes held (path -> why); each is parked and is the replica's record."""
    registered: allowedclusters.Registered = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    phase: str = "starting"  # "starting", "draining", "walking", "leading", "ended"
    have_checkpoint: bool = False
    job: Job | None = None
    inbox: list[ev.Event | Internal] = field(default_factory=list)
    dirty: bool = False
    next_recheck_ms: int = 0
    rechecking: bool = False
    drained: int = 0


def clock_of(term: Term) -> clocks.Hlc:
    """The term's hybrid logical clock, started for its region when the checkpoint had none."""
    if term.cp.clock is None:
        term.cp.clock = clocks.start(term.settings.region)
    return term.cp.clock


class Step:
    """One ``step``: the term, the time, and the effects asked for so far."""

    def __init__(self, term: Term, now_ms: int) -> None:
        self.term = term
        self.cp = term.cp
        self.now_ms = now_ms
        self.effects: list[ev.Effect] = []

    def ask(self, job: Job, effect: ev.Effect, *answers: type) -> None:
        if answers:
            job.waiting = answers
        self.term.job = job
        self.effects.append(effect)

    def end(self, reason: str) -> None:
        self.term.phase = "ended"
        self.term.job = None
        self.effects.append(ev.StepDown(reason))
