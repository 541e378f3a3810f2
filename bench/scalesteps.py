"""One step of ``bench/scale.py``: ``N`` subscriptions under ``bench/failover.py``'s load, measured by the
``Monitor`` (and disturbed by an ``Outage`` if asked), and what it gives (``Step``).
"""

from __future__ import annotations

import os
import pathlib
import time
from dataclasses import dataclass, field
from typing import Any

import failover
from monitoring import AGENTS, Monitor, pids, rss_mib, tracked
from outages import Outage

from geosync_core import topology as topo


def shape(n: int) -> tuple[int, int]:
    """(topics, subscriptions per topic) for ``n`` subscriptions."""
    per_topic = min(100, max(1, n // 10))
    return n // per_topic, per_topic


@dataclass
class Step:
    subs: int
    mode: str
    run: failover.LoadRun
    cpu: dict[str, float]
    rss: dict[str, float]
    tracked: dict[str, int]
    load: str
    pace: str
    timelines: dict[str, list[dict[str, Any]]]
    """Each agent's timeline (/state) as the load ended: its long rounds, discovery passes, collections."""
    outage: str | None = None
    """What the probes acknowledged while b's agent was down saw (``--restart-under-load``)."""
    window: tuple[float, float] = (0.0, 0.0)
    """The measured load's start and end on the machine's monotonic clock (the agents' timelines' too)."""
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each agent's /state as the load ended (its timed control transits, its last rounds)."""
    load_at_start: str = ""
    hog: int = 0
    """``--cpu-hog``'s load beside this run, percent of one core (0: none)."""
    hog_cpu: str = ""
    """What the hog itself took: CPU-s over its life (``CpuHog.report``)."""


def load_step(
    lab_dir: pathlib.Path,
    topology: topo.Topology,
    n: int,
    mode: str,
    args: Any,
    *,
    outage: Outage | None = None,
) -> Step:
    topics, per_topic = shape(n)
    monitor = Monitor(lab_dir, profile=args.py_spy, label=f"{n}-{mode}-{time.strftime('%H%M%S')}")
    run = failover.load_run(
        topology,
        mode=mode,
        duration=args.duration,
        n_topics=topics,
        n_subs=per_topic,
        rate=args.rate,
        batching=True,
        **args.shape,
        during=monitor if outage is None else outage.during(lab_dir, monitor),
    )
    now = pids(lab_dir)
    return Step(
        subs=n,
        mode=mode,
        run=run,
        cpu=monitor.cpu,
        rss={name: rss_mib(pid) for name, pid in now.items()},
        tracked={name: tracked(lab_dir, name) for name in AGENTS},
        load=", ".join(f"{x:.1f}" for x in os.getloadavg()),
        pace=monitor.pace(),
        timelines={n: monitor.samples[-1][n].get("timeline", []) for n in AGENTS} if monitor.samples else {},
        outage=None if outage is None else outage.report(run),
        window=(monitor.started, monitor.ended),
        states=dict(monitor.samples[-1]) if len(monitor.samples) > 1 else {},
        load_at_start=monitor.load_at_start,
    )


def overlapping(step: Step, began: float, ended: float) -> str:
    """The agents' long events (their /state timelines at the load's end) and the bench's own stalls that
    overlapped ``began``..``ended``, times relative to ``began``."""
    events: list[tuple[str, dict[str, Any]]] = [("bench", e) for e in step.run.stalls.report()]
    events += [(name, e) for name, events_of in step.timelines.items() for e in events_of]
    shown = []
    for who, e in sorted(events, key=lambda x: float(x[1]["began"])):
        start, took = float(e["began"]), float(e["seconds"])
        if start + took < began or start > ended:
            continue
        steps = e.get("steps") or {}
        # a round's steps: seconds/of which its thread's CPU
        detail = " (" + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in steps.items()) + ")" if steps else ""
        if "cpu_s" in e:
            detail = f" cpu {e['cpu_s']} (all threads {e.get('process_cpu_s', '-')}){detail}"
        shown.append(f"{who} {e['kind']} +{start - began:.2f}/{took:.2f}{detail}")
    return "; ".join(shown) or "nothing long"
