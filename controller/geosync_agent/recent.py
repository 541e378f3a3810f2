"""Recent samples of a latency, summarised as percentiles for ``/state`` and the benchmarks.

Part of the shell (decision 0001): ``PhaseTimes`` reads the machine's clock, for the loop's step timings.
"""

from __future__ import annotations

import threading
import time


class Recent:
    """The last ``keep`` samples (thread-safe); ``percentiles()`` gives p50, p90 and p99 of them, ``timed()``
    each with when it was taken (on the machine's monotonic clock, the same in every process on it: a
    benchmark keeps those of its own load's span, and sees whether they grew through it)."""

    def __init__(self, keep: int = 1000) -> None:
        self.keep = keep
        self._values: list[int] = []
        self._at: list[float] = []
        self._lock = threading.Lock()

    def add(self, value: int, at: float = 0.0) -> None:
        with self._lock:
            self._values.append(value)
            self._at.append(at)
            del self._values[: -self.keep]
            del self._at[: -self.keep]

    def timed(self) -> list[tuple[float, int]]:
        """The samples kept, oldest first, each as (when it was taken, value)."""
        with self._lock:
            return [(round(at, 3), value) for at, value in zip(self._at, self._values, strict=True)]

    def percentiles(self) -> dict[str, int]:
        with self._lock:
            ordered = sorted(self._values)
        if not ordered:
            return {}
        return {f"p{q}": ordered[min(len(ordered) - 1, len(ordered) * q // 100)] for q in (50, 90, 99)}


class PhaseTimes:
    """Seconds each step of the last ``keep`` rounds took; ``report()`` gives per step the median, the
    maximum and the step's share of the rounds' total time."""

    def __init__(self, keep: int = 200) -> None:
        self.keep = keep
        self._values: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def lap(self, name: str, since: float) -> float:
        """Record that step ``name`` ran from ``since`` (monotonic) until now; returns now."""
        now = time.monotonic()
        with self._lock:
            values = self._values.setdefault(name, [])
            values.append(now - since)
            del values[: -self.keep]
        return now

    def report(self) -> dict[str, dict[str, float]]:
        with self._lock:
            copies = {name: sorted(values) for name, values in self._values.items()}
        total = sum(sum(values) for values in copies.values()) or 1.0
        return {
            name: {
                "p50": round(values[len(values) // 2], 4),
                "max": round(values[-1], 4),
                "share": round(sum(values) / total, 3),
            }
            for name, values in copies.items()
        }


class CallTimes:
    """Seconds the last ``keep`` broker calls of each kind took (thread-safe: the pool's threads add to it);
    ``report()`` gives per kind the count kept, p50, p99 and maximum. A round that waits on its brokers
    shows here: the feed read, the cursor writes and polls, against the round's own steps."""

    def __init__(self, keep: int = 1000) -> None:
        self.keep = keep
        self._values: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def add(self, kind: str, seconds: float) -> None:
        with self._lock:
            values = self._values.setdefault(kind, [])
            values.append(seconds)
            if len(values) > 2 * self.keep:
                del values[: -self.keep]

    def report(self) -> dict[str, dict[str, float]]:
        with self._lock:
            copies = {kind: sorted(values[-self.keep :]) for kind, values in self._values.items()}
        return {
            kind: {
                "n": len(values),
                "p50": round(values[len(values) // 2], 4),
                "p99": round(values[min(len(values) - 1, len(values) * 99 // 100)], 4),
                "max": round(values[-1], 4),
            }
            for kind, values in sorted(copies.items())
        }


class Timeline:
    """The last ``keep`` long events (a round, a discovery pass, a checkpoint, a garbage collection) with
    when they began, on the machine's monotonic clock (the same in every process on it: a benchmark lines
    them up with its own slow samples). Thread-safe; only events of ``at_least_s`` or more are kept."""

    def __init__(self, keep: int = 300, at_least_s: float = 0.25) -> None:
        self.keep, self.at_least_s = keep, at_least_s
        self._events: list[dict[str, object]] = []
        self._lock = threading.RLock()  # a collection's callback adds in whichever thread allocated

    def add(self, kind: str, began: float, seconds: float, **detail: object) -> None:
        if seconds < self.at_least_s:
            return
        event = {"kind": kind, "began": round(began, 3), "seconds": round(seconds, 3), **detail}
        with self._lock:
            self._events.append(event)
            del self._events[: -self.keep]

    def report(self) -> list[dict[str, object]]:
        with self._lock:
            return list(self._events)
