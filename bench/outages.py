"""``bench/scale.py --restart-under-load``: b's agent killed while a step's load runs and started again, and
what the probes it left waiting saw.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import failover
from monitoring import Monitor, s

from geosync_lab import labs


@dataclass
class Outage:
    """b's agent killed (SIGKILL) ``after_s`` into the load and started again ``down_s`` later, its
    checkpoint kept: the load, and a's agent, go on meanwhile (``--restart-under-load``)."""

    after_s: float
    down_s: float
    settings: dict[str, Any] = field(default_factory=dict)
    """The agent's configuration over the lab's when it is started again (``--agent-intervals``)."""
    killed_at: float | None = None
    started_at: float | None = None
    ready_at: float | None = None
    error: str | None = None
    thread: threading.Thread | None = None

    @classmethod
    def parse(cls, text: str | None) -> Outage | None:
        if not text:
            return None
        after, sep, down = text.partition(":")
        try:
            outage = cls(float(after), float(down)) if sep else None
        except ValueError:
            outage = None
        if outage is None or outage.after_s < 0 or outage.down_s < 0:
            raise SystemExit(
                f"--restart-under-load {text!r}: give AFTER:DOWN in seconds, e.g. 10:3 (kill b's agent 10 s "
                "into the load, start it 3 s later)"
            )
        return outage

    def during(self, lab_dir: pathlib.Path, monitor: Monitor) -> Callable[[bool], None]:
        """``failover.load_run``'s ``during``: the monitor's, and the outage started with the load."""

        def during(started: bool) -> None:
            if started:
                monitor(started)
                self.thread = threading.Thread(target=self._run, args=(lab_dir, monitor), daemon=True)
                self.thread.start()
            else:
                if self.thread is not None:
                    self.thread.join(timeout=300)
                monitor(started)

        return during

    def _run(self, lab_dir: pathlib.Path, monitor: Monitor) -> None:
        try:
            time.sleep(self.after_s)
            monitor.swap("b", lambda: labs.stop_agent(lab_dir, "b", kill=True))
            self.killed_at = time.monotonic()
            time.sleep(self.down_s)
            labs.start_agent(lab_dir, "b", settings=self.settings)
            self.started_at = time.monotonic()
            monitor.restarted("b")
            labs.wait_agent_ready(lab_dir, "b", timeout_s=300)
            self.ready_at = time.monotonic()
        except Exception as e:  # reported with the figures: a bench survives its own disturbance failing
            self.error = f"{e.__class__.__name__}: {e}"

    def report(self, run: failover.LoadRun) -> str:
        """The probes b's agent left waiting: acknowledged before its start and not synced when it was
        killed (the probes sample the latest acknowledgements, so these are the ones in flight as it went
        down or acknowledged while it was down): how long after its start b showed them."""
        if self.error or self.killed_at is None or self.started_at is None:
            return f"the restart did not happen: {self.error or 'the load ended first'}"
        start = self.started_at
        waited = [max(0.0, synced - start) for acked, synced in run.probes if acked < start < synced]
        # A probe that timed out was not synced 10 s after its acknowledgement: one acknowledged in the 10 s
        # before the kill was still waiting when the agent went down.
        lost = sum(1 for acked in run.timed_out if self.killed_at - 10 < acked < start)
        ready = "-" if self.ready_at is None else f"{self.ready_at - self.started_at:.2f} s"
        return (
            f"b's agent killed {self.after_s:.0f} s into the load, started {self.down_s:.1f} s later, ready "
            f"after {ready}; probes it left waiting: {len(waited)} synced, {lost} not within their 10 s; "
            f"exact after its start p50 {s(waited, 0.5)}, max {s(waited, None)}"
        )
