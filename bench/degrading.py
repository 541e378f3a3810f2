"""``bench/scale.py --cpu-hog``'s figures: how a step's lag, control transit and rounds went over its
measured load (per third of it: whether the loop kept up), as a table, lines and a BENCHMARKS.md record.
"""

from __future__ import annotations

import argparse
from typing import Any

import record
from monitoring import AGENTS, s
from rich.table import Table
from scalesteps import Step

from geosync_lab.probes import percentile


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
