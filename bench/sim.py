"""Runs the deterministic simulation of regions (``geosync_sim``) over many seeds, or replays one (issue 45).

    python bench/sim.py --seeds 1-1000 [--regions 3] [--topics 4] [--duration 60] [--profile faults]
    python bench/sim.py --seed N --trace [same options]
    python bench/sim.py --seed N --shrink
    python bench/sim.py --seeds 1-20000 --topics 20 --profile all --jobs 2 --progress 60   # a campaign

Each seed draws a schedule (traffic, failovers, and with ``--profile faults`` control faults and agent
crashes, with ``jumps`` also cursor jumps no consumer made, with ``policies`` also operators editing and
deleting namespace policies in random regions, each region's policy mirror beside its agent) and runs the real
agent of each region inside the simulated world; the checker judges every run (``geosync_sim.checking``;
``geosync_sim.policystores`` for the policies). Printed per failing seed: its violations, and with
``--shrink`` the smallest schedule found that still fails the same way, its steps listed. At the end:
schedules, schedules per second, failovers, acknowledgements and CPU per schedule, duplicates by cause,
violations by kind. ``--trace`` prints one run's events as it happened (the same seed prints the same trace).
``--json FILE`` writes the figures. Exit status 1 when a run failed.

A campaign: ``--profile`` takes a comma list of profiles or ``all`` (seed N runs the (N mod count)th, so a
seed replays alone with that profile), ``--jobs`` spreads the seeds over worker processes (the figures and
failures printed are the same as one process's, in seed order) and ``--progress`` prints how far it is.
``--journal FILE`` makes a campaign that outlives its process: each seed's outcome is appended to FILE as it
ends, and a run given the same FILE again runs only the seeds it does not hold yet, then prints the figures
of all of them (wall time summed over the runs). A journal belongs to one commit and one set of options: a
run whose code or options differ is refused (run a long campaign from a worktree of its commit, ``git
worktree add DIR COMMIT``, to go on with it after the tree moved).

Not a ``geoctl`` command: the CLI never imports the agent (an import-linter contract); the simulator runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import multiprocessing
import pathlib
import sys
import time
from collections import Counter
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import record

from geosync_sim import checking, policies, running, schedules, shrinking


def seeds_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


ALL = (*schedules.PROFILES, "policies")


def profiles_of(text: str) -> list[str]:
    """``--profile``: one profile, several (``faults,jumps``: seeds take them in turn), or ``all``."""
    names = list(ALL) if text == "all" else [t for t in text.split(",") if t]
    unknown = [n for n in names if n not in ALL]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown profile {', '.join(unknown) or repr(text)}: choose from {', '.join(ALL)}, a comma "
            "list of them, or all"
        )
    return names


@dataclasses.dataclass(frozen=True)
class Job:
    """One seed's run, as a worker process is handed it."""

    seed: int
    profile: str
    regions: int
    topics: int
    duration: float
    claims_from: str
    trace: bool
    shrink: bool


@dataclasses.dataclass
class Outcome:
    """What one seed's run gives back to the campaign: its figures and the lines it prints."""

    seed: int
    profile: str
    failovers: int
    acks: int
    cpu_s: float
    duplicates: dict[str, int]
    violations: list[str]
    limits: dict[str, int]
    lines: list[str]


def profile_of(seed: int, profiles: list[str]) -> str:
    """The profile ``seed`` runs in a campaign of ``profiles``: they take turns, so a seed replays alone."""
    return profiles[seed % len(profiles)]


def run_one(job: Job) -> Outcome:
    if job.profile == "policies":  # the faults profile's schedule, and policy steps beside it
        schedule = policies.draw(job.seed, regions=job.regions, topics=job.topics, duration=job.duration)
    else:
        schedule = schedules.draw(
            job.seed, profile=job.profile, regions=job.regions, topics=job.topics, duration=job.duration
        )
    schedule = dataclasses.replace(schedule, claims_from=job.claims_from)
    run = policies.run if job.profile == "policies" else running.run
    result = run(schedule, trace=job.trace)
    lines: list[str] = []
    if job.trace:
        lines += [*result.trace, f"trace digest {result.digest}"]
    if result.failed:
        lines.append(f"seed {job.seed} ({job.profile}): {len(result.violations)} violations")
        lines += [f"    {v}" for v in result.violations[:10]]
        if job.shrink and job.profile == "policies":
            lines.append("  (--shrink does not run the policy mirrors yet: replay with --trace)")
        elif job.shrink:
            small = shrinking.shrink(result)
            lines.append(f"  shrunk from {len(schedule.steps)} to {len(small.schedule.steps)} steps:")
            lines += [f"    {step}" for step in small.schedule.steps if step.kind != "produce"]
            lines.append(f"    (and {sum(s.kind == 'produce' for s in small.schedule.steps)} produce steps)")
            lines += [f"    -> {v}" for v in small.violations[:5]]
    return Outcome(
        seed=job.seed,
        profile=job.profile,
        failovers=result.failovers,
        acks=result.acks,
        cpu_s=result.cpu_s,
        duplicates=dict(result.duplicates),
        violations=[v.kind for v in result.violations if v.kind not in checking.LIMITS],
        limits=result.limits(),
        lines=lines,
    )


class Journal:
    """A campaign's outcomes on disk, one JSON line a seed after a header naming the commit and the options
    (``--journal``): what a killed campaign had done is kept, and a resumed one does only the rest."""

    def __init__(self, path: pathlib.Path, header: dict[str, Any]) -> None:
        self.path = path
        self.done: dict[int, Outcome] = {}
        self.wall_s = 0.0  # of the earlier runs
        self.runs = 0
        if path.exists() and path.stat().st_size:
            self._read(header)
        else:
            path.write_text(json.dumps({"journal": 1, **header}) + "\n")
        self.run = self.runs + 1
        self._file = path.open("a")

    def _read(self, header: dict[str, Any]) -> None:
        lines = self.path.read_text().splitlines()
        first = json.loads(lines[0])
        theirs = {k: v for k, v in first.items() if k != "journal"}
        if theirs != header:
            changed = sorted(k for k in {*theirs, *header} if theirs.get(k) != header.get(k))
            raise SystemExit(
                f"--journal {self.path}: written by a campaign with other "
                + ", ".join(f"{k} ({theirs.get(k)!r}, now {header.get(k)!r})" for k in changed)
                + ": go on with it from a worktree of its commit with its options, or give another --journal"
            )
        walls: dict[int, float] = {}
        fields = {f.name for f in dataclasses.fields(Outcome)}
        for line in lines[1:]:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a run killed while writing it: that seed runs again
            walls[row["run"]] = max(walls.get(row["run"], 0.0), row["elapsed_s"])
            self.done[row["seed"]] = Outcome(**{k: v for k, v in row.items() if k in fields})
        self.wall_s, self.runs = sum(walls.values()), max(walls, default=0)

    def add(self, out: Outcome, elapsed_s: float) -> None:
        row = {**dataclasses.asdict(out), "run": self.run, "elapsed_s": round(elapsed_s, 1)}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _quiet_worker() -> None:
    logging.disable(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1-20", help="seeds to run: 1-1000, or 3,7,10-12")
    p.add_argument("--seed", type=int, help="run one seed (with --trace: print its trace)")
    p.add_argument("--trace", action="store_true")
    p.add_argument(
        "--shrink", action="store_true", help="shrink failing schedules (drop steps while it fails)"
    )
    p.add_argument("--regions", type=int, default=3)
    p.add_argument("--topics", type=int, default=4)
    p.add_argument("--duration", type=float, default=60.0, help="virtual seconds of traffic")
    p.add_argument(
        "--profile",
        type=profiles_of,
        default=["faults"],
        help=f"one of {', '.join(ALL)}; a comma list of them (seed N takes the (N mod count)th), or all",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes (each runs whole seeds; the figures and failures printed are the same)",
    )
    p.add_argument(
        "--progress",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="print progress (seeds done, failovers, failures, estimated time left) to stderr this often",
    )
    p.add_argument("--json", type=pathlib.Path, help="write the figures here")
    p.add_argument(
        "--journal",
        type=pathlib.Path,
        help="append each seed's outcome here as it ends; given again, run only the seeds it lacks (same "
        "commit and options) and print the figures of all",
    )
    record.add_argument(p)
    p.add_argument(
        "--claims-from",
        choices=("cursor", "acknowledgements"),
        default="acknowledgements",
        help="the agents' claims_from: what consumers acknowledged (the default) or their whole cursor",
    )
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs}: give 1 or more worker processes")
    if args.trace and args.seed is None:
        p.error("--trace prints one run: give it --seed N")
    _quiet_worker()  # the agents' warnings about faults the schedule injects on purpose

    seeds = [args.seed] if args.seed is not None else seeds_of(args.seeds)
    profiles: list[str] = args.profile
    jobs = [
        Job(
            seed=seed,
            profile=profile_of(seed, profiles),
            regions=args.regions,
            topics=args.topics,
            duration=args.duration,
            claims_from=args.claims_from,
            trace=args.trace,
            shrink=args.shrink,
        )
        for seed in seeds
    ]
    journal = None
    if args.journal is not None:
        journal = Journal(
            args.journal,
            {
                "commit": record.commit_at_start(),
                "regions": args.regions,
                "topics": args.topics,
                "duration": args.duration,
                "profiles": profiles,
                "claims_from": args.claims_from,
            },
        )
    earlier = [journal.done[job.seed] for job in jobs if journal is not None and job.seed in journal.done]
    jobs = [job for job in jobs if journal is None or job.seed not in journal.done]
    if journal is not None:
        print(
            f"journal {args.journal}: {len(earlier)} of {len(seeds)} seeds done in {journal.runs} earlier "
            f"run(s) ({journal.wall_s:.0f} s); running {len(jobs)}",
            file=sys.stderr,
        )
    failed: list[int] = []
    dups: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    limits: Counter[str] = Counter()
    per_profile: dict[str, Counter[str]] = {name: Counter() for name in profiles}
    failovers = acks = 0
    cpu = 0.0
    wall0 = last_progress = time.perf_counter()
    pool = multiprocessing.get_context("fork").Pool(args.jobs, _quiet_worker) if args.jobs > 1 else None
    try:
        ran = pool.imap(run_one, jobs, chunksize=4) if pool is not None else map(run_one, jobs)
        for done, out in enumerate(itertools.chain(earlier, ran), 1):
            if journal is not None and done > len(earlier):
                journal.add(out, time.perf_counter() - wall0)
            if out.lines:
                print("\n".join(out.lines), flush=True)
            failovers += out.failovers
            acks += out.acks
            cpu += out.cpu_s
            dups.update(out.duplicates)
            limits.update(out.limits)
            figures_of = per_profile[out.profile]
            figures_of.update(schedules=1, failovers=out.failovers, failed=int(bool(out.violations)))
            if out.violations:
                failed.append(out.seed)
                kinds.update(out.violations)
            now = time.perf_counter()
            if args.progress and now - last_progress >= args.progress and done > len(earlier):
                last_progress = now
                left = (now - wall0) / (done - len(earlier)) * (len(seeds) - done)
                print(
                    f"[{done}/{len(seeds)} seeds, {failovers} failovers, {len(failed)} failed, "
                    f"{now - wall0:.0f} s, about {left:.0f} s left]",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if pool is not None:
            pool.terminate()
        if journal is not None:
            journal.close()
    wall = time.perf_counter() - wall0 + (journal.wall_s if journal is not None else 0.0)
    n = len(seeds)
    figures: dict[str, Any] = {
        "command": " ".join(["python", "bench/sim.py", *(argv if argv is not None else sys.argv[1:])]),
        "schedules": n,
        "jobs": args.jobs,
        "runs": journal.run if journal is not None else 1,
        "failed": failed,
        "wall_s": round(wall, 1),
        "schedules_per_s": round(n / wall, 2),
        "cpu_per_schedule_s": round(cpu / n, 3),
        "failovers": failovers,
        "failovers_per_schedule": round(failovers / n, 1),
        "acks_per_schedule": round(acks / n, 1),
        "duplicates": dict(dups),
        "violations": dict(kinds),
        "documented_limits": dict(limits),
        "profiles": {name: dict(c) for name, c in per_profile.items()},
    }
    print(
        f"{n} schedules in {wall:.1f} s ({n / wall:.2f}/s, {args.jobs} job(s)), CPU {cpu / n * 1000:.0f} ms "
        f"per schedule; {failovers} failovers ({failovers / n:.1f} per schedule), {acks / n:.0f} "
        f"acknowledgements per schedule; duplicates by cause {dict(dups)}; {len(failed)} failed {dict(kinds)}"
    )
    if limits:
        print(f"documented limits reached (not failures: docs/limits.md): {dict(limits)}")
    if len(profiles) > 1:
        for name, c in per_profile.items():
            print(f"  {name}: {c['schedules']} schedules, {c['failovers']} failovers, {c['failed']} failed")
    if failed:
        print(f"failing seeds: {','.join(map(str, failed))}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.record:
        record.write(args.record, campaign_record(figures, profiles, args))
    return 1 if failed else 0


def campaign_record(figures: dict[str, Any], profiles: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The run as a row of BENCHMARKS.md: failovers simulated, violations, and what it cost."""
    violations: dict[str, int] = figures["violations"]
    scenario = (
        f"Simulated failovers: {figures['schedules']:,} schedules of {args.regions} regions, {args.topics} "
        f"topics, {args.duration:.0f} s of virtual time, profiles {', '.join(profiles)}, claims from "
        f"{args.claims_from} (issue 45)"
    )
    runs = f" over {figures['runs']} runs of one journal" if figures.get("runs", 1) > 1 else ""
    geosync = (
        f"**{figures['failovers']:,} failovers, {sum(violations.values())} violations** "
        f"{violations or ''} in {len(figures['failed'])} schedule(s); {figures['failovers_per_schedule']} "
        f"failovers and {figures['acks_per_schedule']} acknowledgements per schedule; CPU "
        f"{figures['cpu_per_schedule_s']} s per schedule, wall {figures['wall_s']} s with {args.jobs} "
        f"job(s){runs}; duplicates by cause {figures['duplicates']}"
    )
    if figures["documented_limits"]:
        geosync += f"; documented limits reached (not failures) {figures['documented_limits']}"
    made: dict[str, Any] = record.make(scenario, geosync, "-", figures)
    return made


if __name__ == "__main__":
    sys.exit(main())
