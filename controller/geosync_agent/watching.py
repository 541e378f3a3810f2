"""Liveness: tells a stuck agent from a failing one, and ends a stuck one so that its supervisor restarts it.

Kubernetes restarts a container on its liveness probe, never on its readiness probe, and outside Kubernetes
nothing restarts a process that is alive but blocked. So each loop the agent runs (the sync loop; the policy
mirror's, where it runs) marks its progress on a ``Heartbeat`` each time a round ends, whether the round
succeeded or failed, and each time one of its outside calls ends, answered or not (``beating``). A region
that is down makes calls and rounds *fail* (every outside call has a timeout): that is readiness' business
(``/readyz``), and the loop keeps beating, however many failing calls a round makes (a frozen region, whose
calls each wait out their timeout and retries, made rounds of several minutes on the lab). A loop that
marks nothing for ``limit_s`` (the agent's ``stuck_after_s``) is blocked in a call that does not return:
``/healthz`` fails, and the ``Watchdog`` ends the process with ``EXIT_STUCK`` after writing every thread's
stack to stderr (where it was stuck).

The process ends at once, without the orderly shutdown: the stuck thread may hold what that shutdown would
wait for. What is lost is the checkpoint's last interval at most, and applying a state again after a
restart changes nothing (DESIGN.md, invariant 4).

Invariants: a loop is stuck only once its last beat is more than ``limit_s`` old; the watchdog acts only
while ``stop`` is unset (a process shutting down, or a test's, is never ended by it); it acts once.
"""

from __future__ import annotations

import contextlib
import faulthandler
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

log = logging.getLogger("geosync.agent")

T = TypeVar("T")

EXIT_STUCK = 3
"""The agent's exit status when a loop was stuck (1: a task kept failing; 2: a configuration error)."""
CHECK_EVERY_S = 1.0
"""How often the watchdog looks (at most; a tenth of the limit when that is shorter)."""


class Heartbeat:
    """When one loop last made progress (``time.monotonic`` seconds). ``beat`` is called by the loop itself,
    read by the watchdog and the HTTP endpoint: one float, written whole."""

    __slots__ = ("_clock", "at")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.at = clock()

    def beat(self) -> None:
        self.at = self._clock()


@dataclass
class Watchdog:
    """The loops to watch, by name, and how long each may go without progress."""

    limit_s: float
    clock: Callable[[], float] = time.monotonic
    loops: dict[str, Heartbeat] = field(default_factory=dict)

    def watch(self, name: str, heartbeat: Heartbeat | None = None) -> Heartbeat:
        """Watch the loop ``name`` from now on; its heartbeat (a new one unless given)."""
        heartbeat = heartbeat if heartbeat is not None else Heartbeat(self.clock)
        heartbeat.beat()  # watched from now: the time before does not count against it
        self.loops[name] = heartbeat
        return heartbeat

    def ages(self) -> dict[str, float]:
        """Seconds since each loop last made progress."""
        now = self.clock()
        return {name: max(0.0, now - heartbeat.at) for name, heartbeat in sorted(self.loops.items())}

    def stuck(self) -> list[tuple[str, float]]:
        """The loops without progress for more than ``limit_s``, and for how long."""
        return [(name, age) for name, age in self.ages().items() if age > self.limit_s]

    def liveness(self) -> tuple[bool, str]:
        """What ``/healthz`` says: whether every loop made progress within ``limit_s``, and why not."""
        stuck = self.stuck()
        if stuck:
            loops = ", ".join(f"{name} made no progress for {age:.0f} s" for name, age in stuck)
            return False, f"stuck: {loops}"
        return True, "ok"

    def run(self, stop: threading.Event, on_stuck: Callable[[str], None] | None = None) -> None:
        """Look every ``CHECK_EVERY_S`` until ``stop``; the first time a loop is stuck, ``on_stuck`` (by
        default ``end_process``) is called with why, and the watchdog returns."""
        period = min(CHECK_EVERY_S, self.limit_s / 10)
        while not stop.wait(period):
            ok, why = self.liveness()
            if not ok:
                (on_stuck or end_process)(why)
                return


def beating(target: T, beat: Callable[[], None]) -> T:
    """``target`` (an adapter: admin client, messaging) whose every method call tells ``beat`` when it ends,
    by returning or by raising; attributes are read and set on ``target`` itself."""
    return cast(T, _Beating(target, beat))


class _Beating:
    __slots__ = ("_beat", "_target")

    def __init__(self, target: object, beat: Callable[[], None]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_beat", beat)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not inspect.ismethod(value):
            return value
        beat = self._beat

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            finally:
                beat()

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


def end_process(why: str) -> None:
    """Say why and where the process was stuck, then end it with ``EXIT_STUCK`` at once."""
    log.critical("%s: ending the agent (exit status %d) so that it is restarted", why, EXIT_STUCK)
    with contextlib.suppress(Exception):
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(EXIT_STUCK)
