"""The ceiling: acknowledgements a second until the sync lag breaks, GeoSync and PIP-33 alike (issue 46.1).

    python bench/ceiling.py [--modes geosync,builtin] [--subs 1000,10000] [--holes 0,0.1]
                            [--rates 500,1000,2000,4000,8000] [--phase 20] [--out FILE] [--plot FILE]

For each mechanism a fresh two-region lab is booted (``--lab DIR`` uses a running one instead). On it, for
each subscription count and hole share, one load (``bench/failover.py``'s ``load_run``: batched producers in
both regions, half the messages published in b, a's Shared consumers creating the subscriptions as the
traffic starts and acknowledging batch indexes, ``--holes`` of what they receive never acknowledged) runs
its rate up in phases of ``--phase`` seconds, one per ``--rates`` value. Per phase: the acknowledgements a
second a's consumers made, the sync lag from a's acknowledgement to b's cursor (probes: p50, p99, max, and
how many did not sync within 10 s), and the CPU each process took over the phase (the agents, each region's
JVMs, this bench's clients), also per 1,000 acknowledgements. Every phase runs; the first whose p99 passes
``--break`` seconds (1 s) or whose probes time out is where the mechanism broke, and the rate of the phase
before it is its ceiling.

From the agents' CPU per acknowledgement at the highest rate they held, the table's last lines say what one
broker's sidecar would need at 10,000 and 50,000 acknowledgements a second (a linear extrapolation: it says
what the cost per acknowledgement implies, not that the agent would keep up).

The phases of one load share its topics and subscriptions, so the agents track the same set throughout; each
load adds its own (the lab keeps them), so the order of ``--subs`` matters little for the agents' work per
acknowledgement but the later loads run beside the earlier ones' idle subscriptions. The bench's own clients
share the machine's two cores with everything else: their CPU is printed, and where the asked rate is not
reached the phase says so (its figures are then the machine's ceiling, not the mechanism's).

``--record FILE`` writes the run's rows of BENCHMARKS.md (``bench/record.py``: one per subscription count and
hole share, GeoSync's ceiling beside PIP-33's from the same run, every phase's figures inside) and
``FILE-table.json``, the section's table of every phase (for ``bench/results/tables/``); ``--plot`` draws lag
p99 against acknowledgements a second, one line per mechanism, subscription count and hole share.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import failover
import monitoring
import record
import scale
import scalesteps

from geosync_lab import labs
from geosync_lab.probes import percentile

console = Console(width=160)
BENCH = "bench (its clients)"
"""This process's CPU in ``monitoring.machine_cpu``."""
EXTRAPOLATE = (10_000, 50_000)
"""Acknowledgements a second at which the sidecar's CPU is extrapolated."""


@dataclass
class Phase:
    mode: str
    subs: int
    holes: float
    asked: float
    """Acknowledgements a second asked of a's consumers."""
    seconds: float
    acked: int = 0
    lags: list[float] = field(default_factory=list)
    timeouts: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU-seconds over the phase: agent a, agent b, region a, region b, bench (its clients)
    (``monitoring.machine_cpu``)."""
    load: tuple[float, float] | None = None
    """The machine's 1-minute load average at the phase's start and end (others' work shares the cores)."""

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds else 0.0

    def p(self, q: float | None) -> float | None:
        return max(self.lags, default=None) if q is None else percentile(self.lags, q)

    def broken(self, limit: float) -> bool:
        p99 = self.p(0.99)
        return self.timeouts > 0 or p99 is None or p99 > limit

    def agents_per_k(self) -> float:
        return (self.cpu.get("agent a", 0.0) + self.cpu.get("agent b", 0.0)) / max(1, self.acked) * 1000

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("lags")
        out.update(
            rate=round(self.rate, 1),
            lag_p50_s=self.p(0.5),
            lag_p99_s=self.p(0.99),
            lag_max_s=self.p(None),
            probes=len(self.lags),
            agents_cpu_s_per_1000_acks=round(self.agents_per_k(), 4),
        )
        return out


class Sampler:
    """CPU of every process that shares the machine, at each phase boundary of one load (its ``during``)."""

    def __init__(self, lab_dir: pathlib.Path, run: failover.LoadRun, phases: list[Phase]) -> None:
        self.lab_dir, self.run, self.phases = lab_dir, run, phases
        topology = labs.load(lab_dir)
        self.agent_pids = monitoring.pids(lab_dir)
        self.region_pids = {name: topology.region(name).pids for name in monitoring.AGENTS}
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.began = 0.0

    def __call__(self, started: bool) -> None:
        if started:
            self.began = time.monotonic()
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        else:
            self.stop.set()
            if self.thread is not None:
                self.thread.join(timeout=30)

    def _sample(self) -> None:
        at = self.began
        for phase in self.phases:
            cpu, acked = monitoring.machine_cpu(self.agent_pids, self.region_pids), self.run.acked
            load = os.getloadavg()[0]
            at += phase.seconds
            if self.stop.wait(max(0.0, at - time.monotonic())):
                return
            after = monitoring.machine_cpu(self.agent_pids, self.region_pids)
            phase.cpu = {k: round(after[k] - cpu[k], 2) for k in after}
            phase.acked = self.run.acked - acked
            phase.load = (round(load, 1), round(os.getloadavg()[0], 1))


def one_load(
    lab_dir: pathlib.Path, mode: str, subs: int, holes: float, args: argparse.Namespace
) -> list[Phase]:
    """One load on ``subs`` subscriptions whose rate steps through ``args.rates``; the phases it ran."""
    phases = [Phase(mode, subs, holes, rate, args.phase) for rate in args.rates]
    run = failover.LoadRun(mode=mode)
    sampler = Sampler(lab_dir, run, phases)
    topics, per_topic = scalesteps.shape(subs)
    starts = [i * args.phase for i in range(len(phases))]

    def rate_at(elapsed: float) -> float:
        return float(args.rates[min(max(0, int(elapsed // args.phase)), len(phases) - 1)])

    failover.load_run(
        labs.load(lab_dir),
        mode=mode,
        duration=args.phase * len(phases),
        n_topics=topics,
        n_subs=per_topic,
        rate=args.rates[0],
        batching=True,
        with_traffic=True,
        b_share=args.b_share,
        hole_ratio=holes,
        rate_at=rate_at,
        run=run,
        during=sampler,
    )
    began = sampler.began
    for phase, start in zip(phases, starts, strict=True):
        window = (began + start, began + start + phase.seconds)
        phase.lags = [
            lag
            for lag, (acked_at, _) in zip(run.lags, run.probes, strict=True)
            if window[0] <= acked_at < window[1]
        ]
        phase.timeouts = sum(1 for t in run.timed_out if window[0] <= t < window[1])
    return phases


def s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


COLUMNS = (
    "mechanism",
    "subs",
    "holes",
    "acks/s asked",
    "acks/s made",
    "lag p50",
    "lag p99",
    "lag max",
    "probes (not in 10 s)",
    "agents CPU-s / 1,000 acks",
    "CPU-s: agents a+b / regions a+b / bench",
    "load (1 min)",
)


def rows(phases: list[Phase], limit: float) -> list[list[str]]:
    out = []
    for ph in phases:
        reached = ph.rate >= 0.8 * ph.asked
        out.append(
            [
                "GeoSync" if ph.mode == "geosync" else "PIP-33",
                f"{ph.subs:,}",
                f"{ph.holes:.0%}",
                f"{ph.asked:,.0f}",
                f"{ph.rate:,.0f}" + ("" if reached else " (short)"),
                s(ph.p(0.5)),
                s(ph.p(0.99)) + (" broke" if ph.broken(limit) else ""),
                s(ph.p(None)),
                f"{len(ph.lags)} ({ph.timeouts})",
                f"{ph.agents_per_k():.3f}",
                " / ".join(
                    f"{ph.cpu.get(f'{k} a', 0.0) + ph.cpu.get(f'{k} b', 0.0):.1f}"
                    for k in ("agent", "region")
                )
                + f" / {ph.cpu.get(BENCH, 0.0):.1f}",
                "-" if ph.load is None else f"{min(ph.load):.1f}-{max(ph.load):.1f}",
            ]
        )
    return out


def table(phases: list[Phase], limit: float) -> Table:
    out = Table(*COLUMNS)
    for row in rows(phases, limit):
        out.add_row(*row)
    return out


def held_and_broke(run: list[Phase], limit: float) -> tuple[Phase | None, Phase | None]:
    """One load's last phase before the first whose lag broke, and that phase (None: no such phase)."""
    broke_at = next((i for i, ph in enumerate(run) if ph.broken(limit)), len(run))
    return (run[broke_at - 1] if broke_at else None), (run[broke_at] if broke_at < len(run) else None)


def ceiling(run: list[Phase], limit: float) -> str:
    """One load's ceiling: the highest rate held before the first phase whose lag broke, and that phase."""
    top, broke = held_and_broke(run, limit)
    text = f"held {top.rate:,.0f} acks/s" if top else "held no rate"
    if broke is not None:
        p99 = broke.p(0.99)
        why = f"p99 {p99:.2f} s" if p99 is not None else "no probe synced"
        text += f", broke at {broke.rate:,.0f} ({why}, {broke.timeouts} probes late)"
    else:
        text += f", never broke up to {run[-1].rate:,.0f}"
    loads = [x for ph in run if ph.load for x in ph.load]
    if loads:
        text += f"; machine load {min(loads):.1f}-{max(loads):.1f}"
    return text


def loads_of(phases: list[Phase]) -> dict[tuple[str, int, float], list[Phase]]:
    loads: dict[tuple[str, int, float], list[Phase]] = {}
    for ph in phases:
        loads.setdefault((ph.mode, ph.subs, ph.holes), []).append(ph)
    return loads


def ceilings(phases: list[Phase], limit: float) -> list[str]:
    """Per load, the highest rate held before the lag broke, and the sidecar CPU that rate's cost implies."""
    lines = []
    for (mode, subs, holes), run in loads_of(phases).items():
        top, _ = held_and_broke(run, limit)
        text = f"{'GeoSync' if mode == 'geosync' else 'PIP-33'}, {subs:,} subs, {holes:.0%} holes: "
        text += ceiling(run, limit)
        if mode == "geosync" and top is not None:
            per_ack = top.agents_per_k() / 1000 / 2  # one agent's share: a sidecar follows its own broker
            text += "; one sidecar at " + ", ".join(
                f"{r:,} acks/s: {per_ack * r:.1f} cores" for r in EXTRAPOLATE
            )
            text += f" (agents {top.agents_per_k():.3f} CPU-s / 1,000 acks at {top.rate:,.0f}/s)"
        lines.append(text)
    return lines


def plot(phases: list[Phase], path: pathlib.Path, limit: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (mode, subs, holes), run in loads_of(phases).items():
        points = [(ph.rate, p99) for ph in run if (p99 := ph.p(0.99)) is not None]
        name = "GeoSync" if mode == "geosync" else "PIP-33"
        ax.plot(
            [x for x, _ in points],
            [y for _, y in points],
            marker="o",
            linestyle="-" if mode == "geosync" else "--",
            label=f"{name}, {subs:,} subs, {holes:.0%} holes",
        )
    ax.axhline(limit, color="grey", linewidth=0.8)
    ax.set_xlabel("acknowledgements a second (made by a's consumers)")
    ax.set_ylabel("sync lag p99 (s), a -> b")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(f"Ceiling on {os.cpu_count()} cores: lag p99 against rate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_records(path: pathlib.Path | None, phases: list[Phase], limit: float) -> None:
    """The run's rows of BENCHMARKS.md (one per subscription count and hole share, both mechanisms side by
    side) and its section table (``FILE-table.json``)."""
    if path is None:
        return
    loads = loads_of(phases)
    rows_by: dict[str, dict[str, object]] = {}
    for subs, holes in dict.fromkeys((k[1], k[2]) for k in loads):
        ours, theirs = loads.get(("geosync", subs, holes)), loads.get(("builtin", subs, holes))
        rows_by[f"{subs}-subs-{round(holes * 100)}-holes"] = record.make(
            f"Ceiling: acks/s held with lag p99 under {limit:g} s, {subs:,} subscriptions, {holes:.0%} holes",
            ceiling(ours, limit) if ours else "not in this run",
            ceiling(theirs, limit) if theirs else "not in this run",
            figures={"phases": [ph.record() for ph in [*(ours or []), *(theirs or [])]]},
        )
    record.write_each(path, rows_by)
    table_record = record.make("Ceiling sweep, every phase", "-")
    for key in ("scenario", "geosync", "pip33"):
        table_record.pop(key)
    record.write(
        path.with_name(f"{path.stem}-table{path.suffix or '.json'}"),
        {"columns": list(COLUMNS), "rows": rows(phases, limit), **table_record},
    )


def interrupted(signum: int, _frame: object) -> None:
    """A SIGTERM (a CI timeout, a closed terminal) unwinds like Ctrl-C: the lab booted for the sweep stops."""
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab (else a fresh one per mode)")
    parser.add_argument("--modes", default="geosync,builtin", help="geosync, builtin (PIP-33) or both")
    parser.add_argument("--subs", default="1000,10000", help="subscription counts, one load each")
    parser.add_argument("--holes", default="0,0.1", help="shares never acknowledged, one load each")
    parser.add_argument(
        "--rates", default="500,1000,2000,4000,8000", help="acknowledgements a second, one phase each, rising"
    )
    parser.add_argument("--phase", type=float, default=20.0, help="seconds per rate")
    parser.add_argument("--break", dest="limit", type=float, default=1.0, help="lag p99 (s) that breaks")
    parser.add_argument("--b-share", type=float, default=0.5, help="share of the messages published in b")
    record.add_argument(parser)
    parser.add_argument("--plot", type=pathlib.Path, help="draw lag p99 against rate into this PNG")
    args = parser.parse_args()
    try:
        args.rates = [float(x) for x in args.rates.split(",") if x]
        subs = [int(x) for x in args.subs.split(",") if x]
        holes = [float(x) for x in args.holes.split(",") if x]
    except ValueError as e:
        parser.error(f"--rates, --subs and --holes take comma-separated numbers: {e}")
    if not args.rates or args.rates != sorted(args.rates) or min(args.rates) <= 0:
        parser.error("--rates: positive and rising, e.g. 500,1000,2000")
    if any(not 0 <= h < 1 for h in holes):
        parser.error("--holes: shares from 0 to below 1, e.g. 0,0.1")
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("geosync", "builtin") for m in modes):
        parser.error(f"--modes {args.modes}: geosync, builtin or both")
    scale.quiet_clients()
    signal.signal(signal.SIGTERM, interrupted)
    phases: list[Phase] = []
    for mode in modes:
        with labs.given_or_booted(args.lab, ["a", "b"], report=console.print) as lab_dir:
            scale.restart_agents(lab_dir, scale.INTERVALS["production"])
            for n in subs:
                for h in holes:
                    console.print(f"{mode}: {n:,} subscriptions, {h:.0%} holes, rates {args.rates} ...")
                    ran = one_load(lab_dir, mode, n, h, args)
                    for ph in ran:
                        console.print(
                            f"  {ph.asked:,.0f}/s asked: {ph.rate:,.0f}/s made, p50 {s(ph.p(0.5))} p99 "
                            f"{s(ph.p(0.99))}, {len(ph.lags)} probes ({ph.timeouts} late), CPU {ph.cpu}, "
                            f"load {ph.load}"
                        )
                    phases += ran
    console.print(table(phases, args.limit))
    for line in ceilings(phases, args.limit):
        console.print(line)
    write_records(args.record, phases, args.limit)
    if args.plot:
        plot(phases, args.plot, args.limit)


if __name__ == "__main__":
    main()
