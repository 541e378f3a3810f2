"""The time a round read, as the core is given it: ``Now``.

The core reads no clock. The shell reads the machine's time once per round (``runtime.read_now``) and hands
it down as this value, with its meters for what the round's work costs as it goes; the simulator and the
tests give it their own virtual time and no meters. So the same decisions run on any time source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _stands_still() -> float:
    return 0.0


@dataclass(frozen=True, slots=True)
class Now:
    """The time a round read once: monotonic seconds for intervals, wall seconds for what people see and
    for what travels between regions; and the shell's meters, for what the round's work costs as it goes
    (``runtime.read_now`` gives the machine's). Without meters (tests, the simulator) no work costs
    anything: no CPU, and no time passes within the round."""

    mono: float
    wall: float
    cpu: Callable[[], float] = _stands_still
    """The loop thread's CPU seconds (``time.thread_time``): a plan or a publish is timed with it, and a
    subscription whose last one was heavy is paused (``core.pauses``). CPU, not wall time: on a saturated
    machine a switch of the interpreter's lock alone (5 ms) made any plan look heavy."""
    clock: Callable[[], float] | None = None
    """The monotonic clock ``mono`` was read from (``time.monotonic``), for ``since``."""

    @property
    def wall_ms(self) -> int:
        return int(self.wall * 1000)

    def since(self) -> float:
        """Seconds since ``mono`` on the clock (0 without one): how long the round's work has taken so far."""
        return 0.0 if self.clock is None else self.clock() - self.mono
