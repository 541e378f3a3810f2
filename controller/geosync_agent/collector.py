"""The interpreter's garbage collector, set for a process holding hundreds of thousands of objects for weeks.

Why: the agent's state at 10,000 subscriptions is hundreds of thousands of small objects (positions, ranges,
claims, index runs), and every acknowledgement makes and drops more. CPython's default thresholds
(700, 10, 10) then run a collection every 700 new objects and a full one, which walks every object the
process holds with every thread stopped, every hundred of those. On ``bench/agent_cpu.py``'s 10,000
subscriptions the collections were about a quarter of both agents' CPU, the full ones up to 0.4-0.7 s each:
on a machine the brokers saturate, that is seconds during which no round, feed read or write goes on.

What ``tune`` does, unless ``GEOSYNC_GC_THRESHOLD`` says otherwise (``"700,10,10"``: CPython's defaults;
``"off"``: change nothing):

* ``gc.freeze()`` once, at the start: what exists then (modules, classes, the configuration) is never garbage
  and is left out of every later collection;
* the youngest generation is collected every ``THRESHOLD[0]`` new objects instead of 700 (the older ones
  after 10 of the younger, as by default). Objects the agent drops are freed at once by reference counting
  either way; only reference cycles wait for a collection, and the agent makes few.

``Collections`` counts the collections per generation, their longest pause and their total (``/state``,
``gc``), and puts pauses long enough into the agent's timeline (``/state``, ``timeline``).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from geosync_agent.recent import Timeline

log = logging.getLogger("geosync.agent")

THRESHOLD = (20_000, 10, 10)
ENV = "GEOSYNC_GC_THRESHOLD"


@dataclass
class Collections:
    """The collections since ``tune``, per generation: how many, the longest pause, all pauses (seconds)."""

    settings: dict[str, Any] = field(default_factory=dict)
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])
    longest: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    total: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    timeline: Timeline | None = None
    """Where pauses of the timeline's length or more go (the agent's)."""
    _began: float = 0.0
    _lock: threading.RLock = field(default_factory=threading.RLock)
    """Reentrant: the interpreter calls ``on_gc`` in whichever thread allocated, also in one holding it."""

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        # Called by the interpreter in whichever thread triggered the collection, every other one stopped.
        if phase == "start":
            self._began = time.monotonic()
            return
        generation = min(2, max(0, int(info.get("generation", 0))))
        took = time.monotonic() - self._began
        if self.timeline is not None:
            self.timeline.add("gc", self._began, took, generation=generation)
        with self._lock:
            self.counts[generation] += 1
            self.longest[generation] = max(self.longest[generation], took)
            self.total[generation] += took

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                **self.settings,
                "collections": list(self.counts),
                "longest_ms": [round(t * 1000, 1) for t in self.longest],
                "total_ms": [round(t * 1000, 1) for t in self.total],
            }


def parse(value: str) -> tuple[int, int, int] | None:
    """``GEOSYNC_GC_THRESHOLD``'s value as thresholds; None for ``off``; ValueError for anything else."""
    text = value.strip().lower()
    if text == "off":
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) < 1:
        raise ValueError(
            f'{ENV}={value!r}: give three whole numbers, the first at least 1, as in "20000,10,10" '
            '(CPython\'s defaults: "700,10,10"), or "off" to leave the collector as it is'
        )
    return int(parts[0]), int(parts[1]), int(parts[2])


def tune(environ: dict[str, str] | None = None) -> Collections:
    """Freeze what exists and set the thresholds (see the module docstring); count collections from now."""
    env = os.environ if environ is None else environ
    given = env.get(ENV)
    threshold = THRESHOLD if given is None else parse(given)
    stats = Collections()
    if threshold is None:
        stats.settings = {"threshold": list(gc.get_threshold()), "frozen": 0, "tuned": False}
    else:
        gc.collect()  # what is garbage already goes before the rest is frozen
        gc.freeze()
        gc.set_threshold(*threshold)
        stats.settings = {"threshold": list(threshold), "frozen": gc.get_freeze_count(), "tuned": True}
        log.info("garbage collector: thresholds %s, %d objects frozen", threshold, gc.get_freeze_count())
    gc.callbacks.append(stats.on_gc)
    return stats
