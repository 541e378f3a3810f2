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

This script is the run and its records; its parts are modules beside it: ``scalesteps`` (one step and what it
gives), ``monitoring`` (the agents' CPU, memory and /state over a load), ``outages``
(``--restart-under-load``), ``hogs`` and ``degrading`` (``--cpu-hog`` and its figures).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import Any

import pulsar
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import failover
import fresh_topic
import record
import restart
from degrading import degrade_lines, degrade_record, degrade_table
from hogs import CpuHog, parse_hogs
from monitoring import AGENTS, ms, s
from outages import Outage
from scalesteps import Step, load_step, overlapping

from geosync_lab import labs
from geosync_lab.probes import percentile

console = Console(width=180)


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

    pulsar.Client = client  # the module failover's loads make their clients from


def restart_agents(lab_dir: pathlib.Path, settings: dict[str, Any]) -> None:
    """Both agents stopped (each writes its checkpoint) and started again with ``settings`` over the lab's
    configuration."""
    for name in AGENTS:
        labs.stop_agent(lab_dir, name)
        labs.start_agent(lab_dir, name, settings=settings)
    for name in AGENTS:
        labs.wait_agent_ready(lab_dir, name, timeout_s=300)


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
