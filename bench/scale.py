"""Scale: sync lag, agent CPU and memory from 100 to 10,000 subscriptions, bursts and restart (issue 12.5).

    python bench/scale.py [--lab DIR] [--steps 100,1000,10000] [--repeat 10000:2] [--duration 30]
                          [--rate 2000] [--fresh-runs 10] [--retained 1000000] [--skip-restart]

One run, three parts, each reusing another bench's load (imported, not copied):

1. Steady load per step (``bench/failover.py``'s ``load_run``, batching on): ``N`` Shared subscriptions in
   ``geo/ab`` (10 topics x N/10 subscriptions up to 1,000, then N/100 topics x 100), ``--rate`` messages/s
   acknowledged in region a across them, GeoSync and PIP-33 one after the other on the same regions. The
   load's shape (``--load-shape with-traffic``, ``--b-share 0.5``, the defaults since session 26): a's
   consumers create the subscriptions as the producers start, b's are created by GeoSync's agent (PIP-33's
   beforehand), half the messages are published in b, and the measured load begins once b has every
   subscription (the warm-up is printed). ``--load-shape precreated --b-share 0`` is the shape of every run
   before session 26: subscriptions created in both regions before the traffic, a alone publishing. Per
   step and mechanism: lag p50/p99/max (acknowledged in a -> b's cursor shows that batch index), probes,
   and for GeoSync the agents' CPU-seconds per 1,000 acknowledgements (a + b, utime + stime from
   /proc/PID/stat over the load) and their RSS (VmRSS) after it, with how many subscriptions each agent
   tracks then (earlier steps' topics stay in the lab). ``--repeat 10000:2`` runs that step twice.
2. Time to exact after a 2,000-message burst on a fresh topic (``bench/fresh_topic.py``'s ``one_run``,
   batched), ``--fresh-runs`` times per mechanism: p50/p99/max.
3. Restart (kill -9 of b's agent) to exact with ``--retained`` messages on a topic (``bench/restart.py``:
   its checkpoint mode, ``--restart-runs`` times). ``--skip-restart`` leaves it out.

``--restart-under-load AFTER:DOWN`` kills b's agent (SIGKILL, its checkpoint kept) AFTER seconds into each
of GeoSync's steady loads and starts it again DOWN seconds later, while the load and a's agent go on: a
restart at 10,000 subscriptions under 2,000 acknowledgements a second. Printed for that step: how long after
the agent's start b showed the probes it left waiting (in flight as it went down, or acknowledged while it was
down; p50 and max), and how many did not sync within their 10 s. The step's lag figures include the outage.

The agents are first restarted with their own checkpoint and discovery intervals (10 s each, as the Helm chart
deploys them) instead of the lab's test-speed 2 s and 5 s (``--agent-intervals lab`` keeps those, as every
run before session 25 did).

``--cpu-hog LOADS`` runs each step once per load (comma-separated percent of one core, ``0`` for none):
beside ``stress-ng --cpu 1 --cpu-load LOAD``, started before the step's setup and stopped (its process group
signalled, then killed) as the step ends, whatever happens (issue 46.4, "degrade, don't collapse"). ``0,50``
runs the step quiet, then beside half a core's hog, on the same lab; ``50,0`` the other way round (the
second run tracks the first's subscriptions too). Printed per run: lag, probes synced, control transit
into each agent and the agents' rounds over the measured load (and per third of it: whether they grew
through it), the agents' CPU per 1,000 acknowledgements, the load average at its start and end, and the
hog's own CPU.

``--py-spy DIR`` records both agents with py-spy over each load (collapsed stacks, one file per agent and
step, for flame graphs or ``sort | uniq``-style reading of where a round's time goes). Idle samples are
kept (``--idle``): a thread waiting on a socket shows in the frame that waits.

Without ``--lab`` a fresh three-region lab is booted in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulsar
import requests
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import failover
import fresh_topic
import record
import restart

from geosync_core import topology as topo
from geosync_lab import labs
from geosync_lab.probes import percentile

console = Console(width=180)
TICKS = os.sysconf("SC_CLK_TCK")
AGENTS = ("a", "b")
HOG_SETUP_S = 900.0
"""Seconds a CPU hog may outlive its step's load (setup and warm-up included) before its own timeout ends it,
should this process die without stopping it."""
INTERVALS: dict[str, dict[str, Any]] = {
    "lab": {},
    # The agent's own defaults (the Helm chart's too): a checkpoint and a discovery pass every 10 s, where the
    # lab's agents checkpoint every 2 s and discover every 5 s so that tests see both sooner.
    "production": {"checkpoint_interval_s": None, "discover_interval_s": None},
    # To see what the discovery passes and checkpoints cost the lag: both once a minute (at 10,000
    # subscriptions a pass reads ~14 MB of topic stats, a checkpoint encodes every claim).
    "sparse": {"checkpoint_interval_s": 60.0, "discover_interval_s": 60.0},
}


def quiet_clients() -> None:
    """The imported loads make their own clients: have them log warnings only (a 10,000-subscription step
    otherwise prints ~100,000 INFO lines)."""
    made = pulsar.Client

    def client(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        return made(*args, **kwargs)

    failover.pulsar.Client = client


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


def parse_hogs(text: str) -> list[int]:
    """``--cpu-hog``: the loads to run each step beside, percent of one core (0 for none); ``""`` is one run
    without a hog, as before the option."""
    try:
        loads = [int(x) for x in text.split(",") if x.strip()] or [0]
    except ValueError:
        loads = [-1]
    if any(not 0 <= load <= 100 for load in loads):
        raise SystemExit(
            f"--cpu-hog {text!r}: give loads in percent of one core, 0-100, comma-separated (e.g. 0,50: the "
            "step quiet, then beside stress-ng --cpu 1 --cpu-load 50)"
        )
    if any(loads) and shutil.which(CpuHog.program) is None:
        raise SystemExit(
            f"--cpu-hog needs {CpuHog.program} (scripts/setup.sh installs it: apt-get install stress-ng)"
        )
    return loads


class CpuHog:
    """``stress-ng --cpu 1 --cpu-load LOAD`` for as long as the ``with`` block runs (nothing for load 0). It
    runs in a session (process group) of its own, which is signalled as the block ends, however it ends,
    then killed if it has not gone within ``grace_s``; its own ``--timeout`` (``limit_s``) ends it even if
    this process is killed first. ``report()`` gives what it took: utime + stime of stress-ng and its workers
    (they are its children, counted in its rusage once it has reaped them)."""

    program = "stress-ng"

    def __init__(self, load: int, *, limit_s: float, grace_s: float = 10.0) -> None:
        self.load, self.limit_s, self.grace_s = load, limit_s, grace_s
        self.process: subprocess.Popen[bytes] | None = None
        self.began = self.ended = 0.0
        self.cpu_s: float | None = None

    def command(self) -> list[str]:
        return [
            self.program,
            "--cpu",
            "1",
            "--cpu-load",
            str(self.load),
            "--timeout",
            f"{max(1, int(self.limit_s))}s",
            "--quiet",
        ]

    def __enter__(self) -> CpuHog:
        if self.load > 0:
            self.began = time.monotonic()
            self.process = subprocess.Popen(
                self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            self._signal(process, signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            while process.returncode is None and time.monotonic() < deadline:
                self._reap(process)
                if process.returncode is None:
                    time.sleep(0.05)
        finally:
            if process.returncode is None:
                # Its group, workers and all, while the leader is not reaped (the group's id is still its).
                self._signal(process, signal.SIGKILL)
                process.wait()
            self.ended = time.monotonic()

    def _reap(self, process: subprocess.Popen[bytes]) -> None:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            self.cpu_s = usage.ru_utime + usage.ru_stime

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)  # its own session: the group's id is its pid

    def report(self) -> str:
        if self.load <= 0:
            return ""
        span = max(self.ended - self.began, 1e-9)
        if self.cpu_s is None:
            return f"stress-ng --cpu 1 --cpu-load {self.load} ran {span:.0f} s (its CPU not read: killed)"
        return (
            f"stress-ng --cpu 1 --cpu-load {self.load} ran {span:.0f} s and took {self.cpu_s:.1f} CPU-s "
            f"({self.cpu_s / span:.0%} of a core)"
        )


def in_window(step: Step, at: float) -> int | None:
    """Which third of the step's measured load ``at`` falls in (0-2), None outside it."""
    began, ended = step.window
    if not began <= at <= ended or ended <= began:
        return None
    return min(2, int(3 * (at - began) / (ended - began)))


def transits(step: Step, agent: str, kind: str = "transit") -> list[tuple[int, float]]:
    """Control messages taken by ``agent`` during the measured load: (third, seconds in transit, or with
    ``kind`` ``queued`` of that the seconds they waited in its inbox for its loop)."""
    state = step.states.get(agent) or {}
    taken = []
    for at, ms_ in state.get(f"control_{kind}_recent") or []:
        third = in_window(step, float(at))
        if third is not None:
            taken.append((third, float(ms_) / 1000))
    return taken


def round_events(step: Step, agent: str) -> list[dict[str, Any]]:
    """The agent's rounds of 0.25 s or more (its timeline keeps only those, each once it ended) that ran
    during the measured load, whenever they began."""
    state = step.states.get(agent) or {}
    began, ended = step.window
    return [
        event
        for event in state.get("timeline") or []
        if event.get("kind") == "round"
        and float(event["began"]) < ended
        and float(event["began"]) + float(event["seconds"]) > began
    ]


def long_rounds(step: Step, agent: str) -> list[tuple[int, float]]:
    """``round_events`` as (the third of the load it ended in, or the last, seconds); with the round still
    running as the load ended (``since_round_ended_s`` of /state, when over 0.25 s) in the last third."""
    rounds = []
    for event in round_events(step, agent):
        end = min(float(event["began"]) + float(event["seconds"]), step.window[1])
        rounds.append((in_window(step, end) or 0, float(event["seconds"])))
    running = (step.states.get(agent) or {}).get("since_round_ended_s")
    if running is not None and float(running) >= 0.25:
        rounds.append((2, float(running)))
    return rounds


def by_third(values: list[tuple[int, float]], q: float | None) -> str:
    """``q`` (None: the max) of each third of the load, ``-`` where a third has none."""
    return " / ".join(s([v for t, v in values if t == third], q) for third in range(3))


def degrade_figures(step: Step) -> dict[str, Any]:
    """What ``--cpu-hog`` compares: the step's lag, control transit and rounds over its measured load, per
    third of it too, and what shared the machine."""

    def summary(values: list[float]) -> dict[str, float | None]:
        return {
            "p50": percentile(values, 0.5),
            "p99": percentile(values, 0.99),
            "max": max(values, default=None),
            "n": len(values),
        }

    figures: dict[str, Any] = {
        "cpu_hog_load": step.hog,
        "hog": step.hog_cpu,
        "lag_s": summary(step.run.lags),
        "probes_synced": len(step.run.lags),
        "probes_not_synced_in_10_s": step.run.timeouts,
        "acks": step.run.acked,
        "agent_cpu_s": step.cpu,
        "agent_cpu_s_per_1000_acks": round(sum(step.cpu.values()) / max(1, step.run.acked) * 1000, 4),
        "load_avg_start": step.load_at_start,
        "load_avg_end": step.load,
        "measured_s": round(step.window[1] - step.window[0], 1),
    }
    for agent in AGENTS:
        state = step.states.get(agent) or {}
        taken = transits(step, agent)
        rounds = long_rounds(step, agent)
        figures[f"control_transit_into_{agent}_s"] = {
            **summary([v for _, v in taken]),
            "p50_by_third": [percentile([v for t, v in taken if t == k], 0.5) for k in range(3)],
            "max_by_third": [max((v for t, v in taken if t == k), default=None) for k in range(3)],
        }
        queued = transits(step, agent, "queued")
        figures[f"control_queued_in_{agent}_s"] = {
            **summary([v for _, v in queued]),
            "max_by_third": [max((v for t, v in queued if t == k), default=None) for k in range(3)],
        }
        figures[f"rounds_{agent}_s"] = {
            "p99_last_200": state.get("round_seconds_p99"),
            "max_last_200": state.get("round_seconds_max"),
            "long_rounds": len(rounds),
            "max": max((v for _, v in rounds), default=None),
            "max_by_third": [max((v for t, v in rounds if t == k), default=None) for k in range(3)],
            "unfinished_at_end_s": state.get("since_round_ended_s"),
            # the long ones as the agent's timeline gives them: seconds, CPU (the loop's thread, all
            # threads) and each step's seconds/CPU, from the load's start
            "over_1_s": [
                {**e, "began": round(float(e["began"]) - step.window[0], 2)}
                for e in round_events(step, agent)
                if float(e["seconds"]) >= 1.0
            ],
        }
    return figures


def degrade_table(results: list[Step]) -> Table:
    table = Table(
        "subs",
        "hog",
        "lag p50 / p99 / max",
        "probes synced (not in 10 s)",
        "transit a->b p50 / p99 / max",
        "transit b->a p50 / p99 / max",
        "of which queued for the loop, p99 / max: in b | in a",
        "rounds a p99 / max",
        "rounds b p99 / max",
        "agent CPU s / 1,000 acks",
        "load avg start -> end",
        title="--cpu-hog: the same step quiet and loaded (rounds: p99 of the agent's last 200, max over the "
        "load from its timeline)",
    )

    def three(d: dict[str, Any]) -> str:
        return " / ".join("-" if d[k] is None else f"{d[k]:.2f}" for k in ("p50", "p99", "max"))

    for step in results:
        f = degrade_figures(step)

        def rounds(agent: str, f: dict[str, Any] = f) -> str:
            r = f[f"rounds_{agent}_s"]
            p99, top = r["p99_last_200"], r["max"]
            return ("-" if p99 is None else f"{p99:.2f}") + " / " + ("<0.25" if top is None else f"{top:.2f}")

        table.add_row(
            f"{step.subs:,}",
            f"{step.hog} %" if step.hog else "none",
            three(f["lag_s"]),
            f"{len(step.run.lags)} ({step.run.timeouts})",
            three(f["control_transit_into_b_s"]),
            three(f["control_transit_into_a_s"]),
            " | ".join(
                " / ".join("-" if q[k] is None else f"{q[k]:.2f}" for k in ("p99", "max"))
                for q in (f["control_queued_in_b_s"], f["control_queued_in_a_s"])
            ),
            rounds("a"),
            rounds("b"),
            f"{f['agent_cpu_s_per_1000_acks']:.3f}",
            f"{step.load_at_start} -> {step.load}",
        )
    return table


def degrade_lines(step: Step) -> list[str]:
    """Whether the loop kept up through the load: transit and long rounds per third of it."""
    lines = []
    for agent, other in (("b", "a"), ("a", "b")):
        taken = transits(step, agent)
        queued = transits(step, agent, "queued")
        rounds = long_rounds(step, agent)
        lines.append(
            f"  by third of the load, {agent}: transit {other}->{agent} p50 {by_third(taken, 0.5)}, max "
            f"{by_third(taken, None)} ({len(taken)} messages); queued for the loop (every message read) p50 "
            f"{by_third(queued, 0.5)}, max {by_third(queued, None)}; rounds of 0.25 s or more: "
            f"{' / '.join(str(sum(1 for t, _ in rounds if t == k)) for k in range(3))}, max "
            f"{by_third(rounds, None)}"
        )
    for agent in AGENTS:
        longest = sorted(round_events(step, agent), key=lambda e: -float(e["seconds"]))[:3]
        for e in longest:
            steps = e.get("steps") or {}
            top = sorted(steps.items(), key=lambda kv: -float(kv[1][0]))[:5]
            began, took = float(e["began"]) - step.window[0], float(e["seconds"])
            lines.append(
                f"  {agent}'s round +{began:.1f}/{took:.2f} s, CPU {e.get('cpu_s', '-')} (all threads "
                f"{e.get('process_cpu_s', '-')}): " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in top)
            )
        counters = (step.states.get(agent) or {}).get("counters") or {}
        lines.append(
            f"  {agent} at the load's end: round running or paused for "
            f"{(step.states.get(agent) or {}).get('since_round_ended_s', '-')} s; claimed topics looked up "
            f"{counters.get('claimed_lookups', 0)}, claims received {counters.get('claims_received', 0)}"
        )
    if step.hog_cpu:
        lines.append(f"  hog: {step.hog_cpu}")
    return lines


def restart_agents(lab_dir: pathlib.Path, settings: dict[str, Any]) -> None:
    """Both agents stopped (each writes its checkpoint) and started again with ``settings`` over the lab's
    configuration."""
    for name in AGENTS:
        labs.stop_agent(lab_dir, name)
        labs.start_agent(lab_dir, name, settings=settings)
    for name in AGENTS:
        labs.wait_agent_ready(lab_dir, name, timeout_s=300)


def agent_state(lab_dir: pathlib.Path, region: str) -> dict[str, Any]:
    state: dict[str, Any] = requests.get(
        labs.agent_metrics_url(lab_dir, region) + "/state", timeout=10
    ).json()
    return state


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
    events = [("bench", e) for e in step.run.stalls.report()]
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


def ms(values: list[float], q: float | None) -> str:
    value = max(values, default=None) if q is None else percentile(values, q)
    return "-" if value is None else f"{value * 1000:.0f} ms"


def s(values: list[float], q: float | None) -> str:
    value = max(values, default=None) if q is None else percentile(values, q)
    return "-" if value is None else f"{value:.2f} s"


def lag_records(results: list[Step], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """One row of BENCHMARKS.md per subscription step: lag p99 of GeoSync and of PIP-33 in the same run."""
    rows: dict[str, dict[str, Any]] = {}
    for subs in dict.fromkeys(step.subs for step in results):
        mine = [step for step in results if step.subs == subs]

        def p99(mode: str, mine: list[Step] = mine) -> str:
            values = [percentile(st.run.lags, 0.99) for st in mine if st.mode == mode]
            return ", ".join(f"p99 {v:.2f} s" for v in values if v is not None) or "-"

        figures = [
            {
                "mode": st.mode,
                "acks_per_s": st.run.acked / args.duration,
                "lag_p50_s": percentile(st.run.lags, 0.5),
                "lag_p99_s": percentile(st.run.lags, 0.99),
                "lag_max_s": max(st.run.lags, default=None),
                "probes": len(st.run.lags),
                "not_synced_in_10_s": st.run.timeouts,
                "agent_cpu_s": st.cpu,
                "agent_rss_mib": st.rss,
                "load": st.load,
            }
            for st in mine
        ]
        rows[str(subs)] = record.make(
            f"Sync lag, {subs:,} subscriptions, {args.rate:,.0f} acks/s",
            p99("geosync"),
            p99("builtin"),
            figures={"steps": figures},
        )
    return rows


def degrade_record(results: list[Step], args: argparse.Namespace) -> dict[str, Any]:
    """``--cpu-hog``'s row of BENCHMARKS.md: GeoSync's runs quiet and beside the hog, lag p99, transit p99
    and the longest round of each (the cell is for reading; ``figures`` has every number)."""

    def cell(step: Step) -> str:
        f = degrade_figures(step)
        lag, into_b = f["lag_s"], f["control_transit_into_b_s"]
        longest = max((f[f"rounds_{a}_s"]["max"] or 0.0 for a in AGENTS), default=0.0)

        def secs(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f} s"

        return (
            f"{f'hog {step.hog} %' if step.hog else 'quiet'}: lag p99 {secs(lag['p99'])}, "
            f"transit a->b p99 {secs(into_b['p99'])}, longest round {longest:.2f} s, load {step.load}"
        )

    geosync = [step for step in results if step.mode == "geosync"]
    builtin = [step for step in results if step.mode == "builtin"]
    subs = ", ".join(f"{n:,}" for n in dict.fromkeys(step.subs for step in results))
    made: dict[str, Any] = record.make(
        f"Sync lag, {subs} subscriptions, {args.rate:,.0f} acks/s, quiet and beside a CPU hog "
        f"(stress-ng --cpu 1 --cpu-load N, issue 46.4)",
        "; ".join(cell(step) for step in geosync) or "-",
        "; ".join(cell(step) for step in builtin) or "-",
        figures={
            "runs": [{"subs": step.subs, "mode": step.mode, **degrade_figures(step)} for step in results]
        },
    )
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--steps", default="100,1000,10000", help="subscriptions per step")
    parser.add_argument("--repeat", default="10000:2", help="STEP:TIMES, run that step's GeoSync load again")
    parser.add_argument("--modes", default="geosync,builtin", help="mechanisms of the steady load")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load per step and mechanism")
    parser.add_argument("--rate", type=float, default=2000.0, help="acknowledged messages/s across all subs")
    parser.add_argument("--fresh-runs", type=int, default=10)
    parser.add_argument("--fresh-modes", default="geosync,builtin")
    parser.add_argument(
        "--builtin-fresh-runs",
        type=int,
        default=3,
        help="PIP-33 bursts (never exact here)",
    )
    parser.add_argument("--fresh-limit", type=float, default=20.0, help="seconds a burst may take")
    parser.add_argument("--retained", type=int, default=1_000_000, help="retained messages for the restart")
    parser.add_argument("--restart-runs", type=int, default=3)
    parser.add_argument("--skip-restart", action="store_true")
    parser.add_argument(
        "--agent-intervals",
        choices=sorted(INTERVALS),
        default="production",
        help="production (the default): restart both agents first with their own checkpoint and discovery "
        "intervals (10 s each, as the Helm chart deploys them); lab: keep the lab's 2 s and 5 s, which are "
        "there for tests (BENCHMARKS.md before session 25); sparse: both once a minute, to see what "
        "discovery passes and checkpoints cost the lag (BENCHMARKS.md session 27)",
    )
    parser.add_argument(
        "--restart-under-load",
        metavar="AFTER:DOWN",
        help="in GeoSync's steady loads, kill -9 b's agent AFTER s into the load and start it DOWN s later "
        "(its checkpoint kept); printed: how long after its start b showed what a acknowledged meanwhile",
    )
    failover.add_load_shape_arguments(parser)
    parser.add_argument(
        "--py-spy", type=pathlib.Path, help="record both agents with py-spy into this directory"
    )
    parser.add_argument(
        "--cpu-hog",
        metavar="LOADS",
        default="",
        help="run each step once per load, beside stress-ng --cpu 1 --cpu-load LOAD (percent of one core; 0: "
        "no hog), e.g. 0,50: quiet then loaded on the same lab, compared in one table",
    )
    record.add_argument(parser)
    args = parser.parse_args()
    args.shape = failover.load_shape(parser, args)
    outage = Outage.parse(args.restart_under_load)
    hogs = parse_hogs(args.cpu_hog)
    settings = INTERVALS[args.agent_intervals]
    quiet_clients()
    steps = [int(x) for x in args.steps.split(",") if x]
    repeat_step, _, repeat_times = args.repeat.partition(":")
    repeats = {int(repeat_step): int(repeat_times or 1)} if repeat_step else {}
    with labs.given_or_booted(args.lab, ["a", "b", "c"], report=console.print) as lab_dir:
        if settings:
            restart_agents(lab_dir, settings)
        topology = labs.load(lab_dir)
        console.print(
            f"Pulsar {topology.pulsar_version}; {os.cpu_count()} cores; load {os.getloadavg()}; agents' "
            f"intervals: {args.agent_intervals}; load shape: {args.load_shape}, {args.b_share:.0%} "
            "published in b"
        )
        results: list[Step] = []
        not_measured: list[tuple[int, str, str]] = []
        runs = [
            (n, mode, hog)
            for n in steps
            for mode in args.modes.split(",")
            for _ in range(repeats.get(n, 1) if mode == "geosync" else 1)
            for hog in hogs
        ]
        for n, mode, hog in runs:
            fresh = (
                None
                if outage is None or mode != "geosync"
                else Outage(outage.after_s, outage.down_s, settings)
            )
            # The hog's own limit: the step's setup and warm-up as well as its load, with room.
            hog_ = CpuHog(hog, limit_s=args.duration + HOG_SETUP_S)
            try:
                with hog_:
                    step = load_step(lab_dir, topology, n, mode, args, outage=fresh)
                step.hog, step.hog_cpu = hog, hog_.report()
            except pulsar.PulsarException as e:
                # Reported, and the sweep goes on. PIP-33's 10,000 subscriptions, set up after
                # GeoSync's step, once stalled Pulsar's replicators to b for a minute; a's agent
                # unloaded those topics (the lab's replicator_unload_after_s), and the bench's
                # subscribes on them timed out, which ended the whole run.
                console.print(f"{n} subs, {mode}: not measured, its setup failed ({type(e).__name__}: {e})")
                not_measured.append((n, mode, f"setup failed: {type(e).__name__}"))
                continue
            results.append(step)
            beside = f", beside a {hog} % CPU hog" if hog else ""
            console.print(
                f"{n} subs, {mode}{beside}: p50 {ms(step.run.lags, 0.5)} p99 {ms(step.run.lags, 0.99)} "
                f"max {ms(step.run.lags, None)}, {len(step.run.lags)} probes, {step.run.timeouts} "
                f"not synced in 10 s, {step.run.acked} acks, agent CPU {step.cpu}, RSS {step.rss}, "
                f"tracked {step.tracked}, load {step.load}"
            )
            console.print(f"  pace: {step.pace}")
            if step.run.warm_up_s is not None:
                console.print(
                    f"  warm-up: every subscription existed in b {step.run.warm_up_s:.1f} s after "
                    "a's consumers had created theirs (the traffic ran meanwhile; not in the figures)"
                    + (f", then {step.run.settle_s:.0f} s more before measuring" if step.run.settle_s else "")
                )
            by_origin = {
                o: [lag for lag, x in zip(step.run.lags, step.run.origins, strict=True) if x == o]
                for o in sorted(set(step.run.origins))
            }
            if len(by_origin) > 1:
                console.print(
                    "  by the message's origin: "
                    + "; ".join(
                        f"{o}: p50 {ms(v, 0.5)} p99 {ms(v, 0.99)} max {ms(v, None)} ({len(v)} probes)"
                        for o, v in by_origin.items()
                    )
                )
            if step.outage:
                console.print(f"  restart under load: {step.outage}")
            if any(hogs):
                for line in degrade_lines(step):
                    console.print(line)
            lags = sorted(step.run.lags)
            if lags:
                # The shape of the tail: a p99 of a hundred probes is their second-slowest.
                p90, p95 = (percentile(lags, q) or 0.0 for q in (0.9, 0.95))
                console.print(
                    f"  lags (s): p90 {p90:.2f}, p95 {p95:.2f}; "
                    f"over 1 s {sum(1 for v in lags if v > 1.0)}, over 2 s "
                    f"{sum(1 for v in lags if v > 2.0)} of {len(lags)}; slowest (the copy in b first "
                    "seen after) "
                    + ", ".join(
                        f"{lag:.2f} ({copied:.2f})"
                        for lag, copied in sorted(zip(step.run.lags, step.run.copied, strict=True))[-5:]
                    )
                )
            for probe in sorted(step.run.slow, key=lambda p: p.synced_at - p.acked_at)[-5:]:
                console.print(f"  slow probe: {probe.describe()}")
                console.print(f"    overlapping: {overlapping(step, probe.acked_at, probe.synced_at)}")
        table = Table(
            "subs",
            "mechanism",
            "acks/s",
            "lag p50",
            "lag p99",
            "lag max",
            "probes (not synced in 10 s)",
            "agent CPU s / 1,000 acks (a+b)",
            "agent RSS MiB (a / b)",
            "subs tracked (a / b)",
            "load avg (1/5/15 min)",
        )
        for step in results:
            geosync = step.mode == "geosync"
            per_k = sum(step.cpu.values()) / max(1, step.run.acked) * 1000
            table.add_row(
                f"{step.subs:,}",
                "GeoSync" if geosync else "PIP-33",
                f"{step.run.acked / args.duration:.0f}",
                ms(step.run.lags, 0.5),
                ms(step.run.lags, 0.99),
                ms(step.run.lags, None),
                f"{len(step.run.lags)} ({step.run.timeouts})",
                f"{per_k:.3f}" if geosync else f"(agents idle: {per_k:.3f})",
                " / ".join(f"{step.rss[n]:.0f}" for n in AGENTS),
                " / ".join(f"{step.tracked[n]:,}" for n in AGENTS),
                step.load,
            )
        for n, mode, why in not_measured:
            table.add_row(f"{n:,}", "GeoSync" if mode == "geosync" else "PIP-33", "-", "-", "-", "-", why)
        console.print(table)
        if any(hogs):
            console.print(degrade_table(results))
            record.write(args.record, degrade_record(results, args))
        else:
            record.write_each(args.record, lag_records(results, args))

        burst = Table(
            "burst on a fresh topic",
            "runs",
            f"exact within {args.fresh_limit:.0f} s",
            "p50",
            "p99",
            "max",
            "load avg",
        )
        for mode in args.fresh_modes.split(","):
            times: list[float] = []
            runs = args.builtin_fresh_runs if mode == "builtin" else args.fresh_runs
            for run in range(runs):
                try:
                    took = fresh_topic.one_run(
                        topology, mode=mode, messages=2000, limit_s=args.fresh_limit, seed=run
                    )
                except pulsar.PulsarException as e:
                    # Counted as not exact, and the sweep goes on to its other runs and the restart: at
                    # 30,000 subscriptions (both mechanisms' 10,000 steps) a lab region's 512 MiB heap ran
                    # out and a burst's subscribe timed out, which ended the whole run before.
                    console.print(f"burst, {mode}, run {run + 1}: failed ({e.__class__.__name__}: {e})")
                    took = None
                else:
                    console.print(f"burst, {mode}, run {run + 1}: {'-' if took is None else f'{took:.2f} s'}")
                if took is not None:
                    times.append(took)
            burst.add_row(
                "PIP-33" if mode == "builtin" else "GeoSync",
                str(runs),
                str(len(times)),
                s(times, 0.5),
                s(times, 0.99),
                s(times, None),
                ", ".join(f"{x:.1f}" for x in os.getloadavg()),
            )
        console.print(burst)

        if not args.skip_restart:
            topic, sub = restart.prepare(lab_dir, topology, args.retained)
            took_all: list[float] = []
            read_max = 0
            client = pulsar.Client(
                topology.region("a").service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
            )
            try:
                consumer = client.subscribe(
                    topic, sub, consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
                )
                for run in range(args.restart_runs):
                    took, read = restart.one_run(
                        lab_dir,
                        topology,
                        consumer,
                        topic,
                        sub,
                        mode="checkpoint",
                        acks=2000,
                        seed=run,
                        settings=settings,
                    )
                    console.print(f"restart, run {run + 1}: {'-' if took is None else f'{took:.2f} s'}")
                    if took is not None:
                        took_all.append(took)
                    read_max = max(read_max, read)
                    restart.settle(lab_dir, "b")
                consumer.close()
            finally:
                client.close()
            table = Table("restart (kill -9 of b's agent)", "retained", "runs", "exact", "p50", "max", "read")
            table.add_row(
                "with its checkpoint",
                f"{args.retained:,}",
                str(args.restart_runs),
                str(len(took_all)),
                s(took_all, 0.5),
                s(took_all, None),
                f"{read_max:,} messages after start (max)",
            )
            console.print(table)
        console.print(
            "lag = acknowledged in a -> b's cursor shows that batch index (plugin cursor endpoint); burst = "
            "2,000 batched messages on a new topic, 90 % acknowledged at random in a, until b is exact"
        )


if __name__ == "__main__":
    main()
