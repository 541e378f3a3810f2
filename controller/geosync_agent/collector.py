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
* the youngest generation is collected every ``THRESHOLD[0]`` new objects (100,000) instead of 700 (the
  older ones after 10 of the younger, as by default). Objects the agent drops are freed at once by
  reference counting either way; only reference cycles wait for a collection, and the agent makes few;
* after every round of the sync loop (``Collections.after_round``), what is alive is frozen too, and every
  ``FULL_EVERY_S`` all of it is unfrozen and collected once, between two rounds. Why: the claims, cursors and
  index runs of 10,000 subscriptions live for seconds to minutes and are replaced all the time, so they were
  promoted through the older generations and walked again by every collection of those. In a 10,000
  subscription run the collector stopped each agent for 7-8 s over its ~3 minutes, in pauses of up to 0.8 s
  (the middle generation's took 130 ms on average) that lay under the slowest sync probes. Frozen, a
  collection walks only what the current round made; the cycles among frozen objects (few: ``collected``
  counts what each generation found) wait for the next full collection, which bounds them.

``Collections`` counts the collections per generation, their longest pause and their total (``/state``,
``gc``), and puts pauses long enough into the agent's timeline (``/state``, ``timeline``). Part of the shell
(decision 0001): it times collections on the machine's clock, and the loop calls ``after_round``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from geosync_agent.recent import Timeline

log = logging.getLogger("geosync.agent")

THRESHOLD = (100_000, 10, 10)
"""The youngest generation is collected after this many new objects (20,000 until session 29). Frozen after
every round, it holds only what the current round made; with the admin client's cycles gone, a soak at
10,000 subscriptions found 60 unreachable objects in 771 young collections (6.1 s of pauses) over its first
12 minutes at 20,000: nearly every one of those pauses was for nothing."""
ENV = "GEOSYNC_GC_THRESHOLD"
FULL_EVERY_S = 600.0
"""Seconds between two full collections of everything frozen after the rounds (see the module docstring)."""


@dataclass
class Collections:
    """The collections since ``tune``, per generation: how many, the longest pause, all pauses (seconds)."""

    settings: dict[str, Any] = field(default_factory=dict)
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])
    longest: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    total: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    collected: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Unreachable objects each generation's collections found (cycles: nothing else waits for them)."""
    freezes: bool = False
    """Whether ``after_round`` freezes what is alive (``tune`` sets it when it tunes the collector)."""
    full_at: float | None = None
    """Monotonic time of the next full collection of the frozen objects (None: at the first round)."""
    full_collections: int = 0
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
            self.collected[generation] += int(info.get("collected", 0))

    def after_round(self, now: float) -> None:
        """The sync loop's round ended at monotonic time ``now``: freeze what is alive, or, every
        FULL_EVERY_S, collect everything once first (see the module docstring). Nothing unless
        ``freezes``."""
        if not self.freezes:
            return
        if self.full_at is None:
            self.full_at = now + FULL_EVERY_S
        elif now >= self.full_at:
            self.full_at = now + FULL_EVERY_S
            gc.unfreeze()
            gc.collect()  # counted and put into the timeline by ``on_gc``, as generation 2
            with self._lock:
                self.full_collections += 1
        gc.freeze()

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """No collection while the block builds what lives long (a restored checkpoint: at 10,000
        subscriptions, the collections it set off made restoring its claims 40 % slower in a micro-benchmark);
        what it built is frozen after it with ``freezes``, so the first collections do not walk it either."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if self.freezes:
                gc.freeze()
            if enabled:
                gc.enable()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                **self.settings,
                "collections": list(self.counts),
                "longest_ms": [round(t * 1000, 1) for t in self.longest],
                "total_ms": [round(t * 1000, 1) for t in self.total],
                "collected": list(self.collected),
                "frozen_now": gc.get_freeze_count(),
                "full_collections_of_frozen": self.full_collections,
            }


def parse(value: str) -> tuple[int, int, int] | None:
    """``GEOSYNC_GC_THRESHOLD``'s value as thresholds; None for ``off``; ValueError for anything else."""
    text = value.strip().lower()
    if text == "off":
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[0]) < 1:
        raise ValueError(
            f'{ENV}={value!r}: give three whole numbers, the first at least 1, as in "100000,10,10" '
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
        stats.freezes = True
        log.info("garbage collector: thresholds %s, %d objects frozen", threshold, gc.get_freeze_count())
    gc.callbacks.append(stats.on_gc)
    return stats
