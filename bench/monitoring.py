"""What ``bench/scale.py`` measures of the agents while a step's load runs: their processes' CPU and memory
(``/proc``), their /state, and the ``Monitor`` that samples both as the load starts and ends (and records them
with py-spy on ``--py-spy``). ``ms`` and ``s`` print a figure's percentile.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import requests
from rich.console import Console

from geosync_lab import labs
from geosync_lab.probes import percentile

console = Console(width=180)


TICKS = os.sysconf("SC_CLK_TCK")


AGENTS = ("a", "b")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads) from /proc/PID/stat."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_cpu(agent_pids: dict[str, int], region_pids: dict[str, tuple[int, ...]]) -> dict[str, float]:
    """CPU-seconds so far of what shares the machine: each agent, each region's JVMs, and this process (the
    bench's clients; not py-spy's, its children)."""
    mine = os.times()
    return {
        **{f"agent {n}": cpu_seconds(pid) if pid else 0.0 for n, pid in agent_pids.items()},
        **{f"region {n}": sum(cpu_seconds(p) for p in pids) for n, pids in region_pids.items()},
        "bench (its clients)": mine.user + mine.system,
    }


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pids(lab_dir: pathlib.Path) -> dict[str, int]:
    topology = labs.load(lab_dir)  # read again: a restarted agent has a new pid
    return {name: int(topology.agents[name].pid or 0) for name in AGENTS}


def tracked(lab_dir: pathlib.Path, region: str) -> int:
    return int(agent_state(lab_dir, region)["subscriptions"])


def agent_state(lab_dir: pathlib.Path, region: str) -> dict[str, Any]:
    state: dict[str, Any] = requests.get(
        labs.agent_metrics_url(lab_dir, region) + "/state", timeout=10
    ).json()
    return state


class Monitor:
    """CPU of the agents over the load alone (``failover.load_run``'s ``during``), and what their /state
    showed as it started and ended (the pace of each stage, for reading where lag comes from). Only twice:
    /state lists every subscription, and reading it every second loaded the agents themselves at 10,000."""

    def __init__(
        self, lab_dir: pathlib.Path, *, profile: pathlib.Path | None = None, label: str = ""
    ) -> None:
        self.lab_dir = lab_dir
        self.pids = pids(lab_dir)
        self.cpu: dict[str, float] = {}
        self.samples: list[dict[str, dict[str, Any]]] = []
        self.started = self.ended = self.span = 0.0
        self.load_at_start = ""
        self.profile, self.label = profile, label
        self.profilers: list[subprocess.Popen[bytes]] = []
        topology = labs.load(lab_dir)
        self.region_pids = {name: topology.region(name).pids for name in AGENTS}
        self.machine: dict[str, float] = {}
        """CPU-seconds over the load of what shares the machine: agents, regions' JVMs, this bench."""

    def __call__(self, started: bool) -> None:
        if started:
            self.cpu = {name: -cpu_seconds(pid) for name, pid in self.pids.items()}
            self.machine = {k: -v for k, v in self._machine().items()}
            self.started = time.monotonic()
            self.load_at_start = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            self._sample()
            self._profile()
        else:
            self.cpu = {
                name: self.cpu[name] + (cpu_seconds(pid) if pid else 0.0) for name, pid in self.pids.items()
            }
            self.machine = {k: self.machine[k] + v for k, v in self._machine().items()}
            self.ended = time.monotonic()
            self.span = self.ended - self.started
            for p in self.profilers:
                p.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
            for p in self.profilers:
                p.wait(timeout=60)
            self._sample()

    def swap(self, name: str, kill: Callable[[], object]) -> None:
        """Agent ``name`` is about to be killed: count its CPU so far, then ``kill`` it; ``restarted`` follows
        its new process from its start (a restart's own CPU is the agent's too)."""
        spent = cpu_seconds(self.pids[name])
        kill()
        self.cpu[name] += spent
        self.machine[f"agent {name}"] += spent
        self.pids[name] = 0

    def restarted(self, name: str) -> None:
        self.pids[name] = pids(self.lab_dir)[name]
        # The new process from its start: its first rounds take the claims queued while it was down.
        if self.profile is not None:
            self._spy(name, self.pids[name], suffix="-restarted")

    def _machine(self) -> dict[str, float]:
        return machine_cpu(self.pids, self.region_pids)

    def _profile(self) -> None:
        if self.profile is None:
            return
        self.profile.mkdir(parents=True, exist_ok=True)
        for name, pid in self.pids.items():
            self._spy(name, pid)

    def _spy(self, name: str, pid: int, *, suffix: str = "") -> None:
        assert self.profile is not None
        spy = pathlib.Path(sys.executable).with_name("py-spy")
        out = self.profile / f"agent-{name}-{self.label}{suffix}.txt"
        cmd = [
            str(spy),
            "record",
            "-p",
            str(pid),
            "-r",
            "50",
            "-f",
            "raw",
            "-o",
            str(out),
            "--nonblocking",
            "--idle",
        ]
        self.profilers.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _sample(self) -> None:
        try:
            self.samples.append({name: agent_state(self.lab_dir, name) for name in AGENTS})
        except requests.RequestException as e:
            console.print(f"agent state not read: {e}")

    def pace(self) -> str:
        """Per-second rates of the stages over the load, and the agents' round times (max over samples)."""
        if len(self.samples) < 2:
            return "-"
        first, last = self.samples[0], self.samples[-1]
        span = max(self.span, 1.0)

        def rate(region: str, counter: str) -> float:
            before, after = first[region]["counters"], last[region]["counters"]
            if any(after.get(k, 0) < v for k, v in before.items()):
                before = {}  # restarted during the load (--restart-under-load): its counters began again
            return float(after.get(counter, 0) - before.get(counter, 0)) / span

        def phases(region: str) -> str:
            steps = last[region].get("round_phases") or {}
            top = sorted(steps.items(), key=lambda kv: -float(kv[1]["share"]))[:4]
            return " ".join(f"{k} {v['max']:.2f}/{v['share']:.0%}" for k, v in top) or "-"

        def calls(region: str) -> str:
            kinds = last[region].get("broker_calls") or {}
            slow = sorted(kinds.items(), key=lambda kv: -float(kv[1]["p99"]))[:4]
            return " ".join(f"{k} {v['p50']:.2f}/{v['p99']:.2f}/{v['max']:.2f}" for k, v in slow) or "-"

        rounds = {n: last[n]["round_seconds_p50"] for n in AGENTS}
        longest = {n: last[n]["round_seconds_max"] for n in AGENTS}
        transit = [x["b"].get("control_transit_ms") or {} for x in self.samples]
        machine = ", ".join(f"{k} {v:.1f}" for k, v in self.machine.items())
        return (
            f"CPU s in {span:.0f} s on {os.cpu_count()} cores: {machine}; "
            f"a: {rate('a', 'states_published'):.0f} states/s in {rate('a', 'envelopes_published'):.0f} "
            f"envelopes/s, feed reads {rate('a', 'feed_reads'):.1f}/s, round p50 {rounds['a']:.2f} s "
            f"max {longest['a']:.2f} s; "
            f"b: {rate('b', 'claims_received'):.0f} claims/s, "
            f"{rate('b', 'plugin_acks'):.0f} cursor writes/s, "
            f"plans {rate('b', 'plans_made'):.0f}/s "
            f"(settled by writes {rate('b', 'plans_settled_by_writes'):.0f}/s), "
            f"round p50 {rounds['b']:.2f} s max {longest['b']:.2f} s, "
            f"control transit a->b (last) {transit[-1]}; "
            f"round steps (max s / share of round time): a {phases('a')}; b {phases('b')}; "
            f"slowest broker calls (p50/p99/max s, last 1,000 of each kind): a {calls('a')}; b {calls('b')}; "
            f"discovery pass max a {last['a'].get('discovery_seconds_max', '-')} s, "
            f"b {last['b'].get('discovery_seconds_max', '-')} s"
        )


def ms(values: list[float], q: float | None) -> str:
    value = max(values, default=None) if q is None else percentile(values, q)
    return "-" if value is None else f"{value * 1000:.0f} ms"


def s(values: list[float], q: float | None) -> str:
    value = max(values, default=None) if q is None else percentile(values, q)
    return "-" if value is None else f"{value:.2f} s"
