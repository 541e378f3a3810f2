"""Recent samples of a latency, summarised as percentiles for ``/state`` and the benchmarks."""

from __future__ import annotations

import threading


class Recent:
    """The last ``keep`` samples (thread-safe); ``percentiles()`` gives p50, p90 and p99 of them."""

    def __init__(self, keep: int = 1000) -> None:
        self.keep = keep
        self._values: list[int] = []
        self._lock = threading.Lock()

    def add(self, value: int) -> None:
        with self._lock:
            self._values.append(value)
            del self._values[: -self.keep]

    def percentiles(self) -> dict[str, int]:
        with self._lock:
            ordered = sorted(self._values)
        if not ordered:
            return {}
        return {f"p{q}": ordered[min(len(ordered) - 1, len(ordered) * q // 100)] for q in (50, 90, 99)}
