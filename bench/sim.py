"""Runs the deterministic simulation of regions (``geosync_sim``) over many seeds, or replays one (issue 45).

    python bench/sim.py --seeds 1-1000 [--regions 3] [--topics 4] [--duration 60] [--profile faults]
    python bench/sim.py --seed N --trace [same options]
    python bench/sim.py --seed N --shrink

Each seed draws a schedule (traffic, failovers, and with ``--profile faults`` control faults and agent
crashes, with ``jumps`` also cursor jumps no consumer made, with ``policies`` also operators editing and
deleting namespace policies in random regions, each region's policy mirror beside its agent) and runs the real
agent of each region inside the simulated world; the checker judges every run (``geosync_sim.checking``;
``geosync_sim.policystores`` for the policies). Printed per failing seed: its violations, and with
``--shrink`` the smallest schedule found that still fails the same way, its steps listed. At the end:
schedules, schedules per second, failovers, acknowledgements and CPU per schedule, duplicates by cause,
violations by kind. ``--trace`` prints one run's events as it happened (the same seed prints the same trace).
``--json FILE`` writes the figures. Exit status 1 when a run failed.

Not a ``geoctl`` command: the CLI never imports the agent (an import-linter contract); the simulator runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import pathlib
import sys
import time
from collections import Counter

from geosync_sim import policies, running, schedules


def seeds_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


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
    p.add_argument("--profile", choices=(*schedules.PROFILES, "policies"), default="faults")
    p.add_argument("--json", type=pathlib.Path, help="write the figures here")
    p.add_argument(
        "--claims-from",
        choices=("cursor", "acknowledgements"),
        default="acknowledgements",
        help="the agents' claims_from: what consumers acknowledged (the default) or their whole cursor",
    )
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)  # the agents' warnings about faults the schedule injects on purpose

    seeds = [args.seed] if args.seed is not None else seeds_of(args.seeds)
    failed: list[int] = []
    dups: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    failovers = acks = 0
    cpu = 0.0
    wall0 = time.perf_counter()
    for seed in seeds:
        shape = {"regions": args.regions, "topics": args.topics, "duration": args.duration}
        if args.profile == "policies":  # the faults profile's schedule, and policy steps beside it
            schedule = policies.draw(seed, **shape)
        else:
            schedule = schedules.draw(seed, profile=args.profile, **shape)
        schedule = dataclasses.replace(schedule, claims_from=args.claims_from)
        run = policies.run if args.profile == "policies" else running.run
        result = run(schedule, trace=args.trace)
        if args.trace:
            print("\n".join(result.trace))
            print(f"trace digest {result.digest}")
        failovers += result.failovers
        acks += result.acks
        cpu += result.cpu_s
        dups.update(result.duplicates)
        if not result.failed:
            continue
        failed.append(seed)
        kinds.update(v.kind for v in result.violations)
        print(f"seed {seed}: {len(result.violations)} violations")
        for v in result.violations[:10]:
            print(f"    {v}")
        if args.shrink and args.profile == "policies":
            print("  (--shrink does not run the policy mirrors yet: replay with --trace)")
        elif args.shrink:
            small = running.shrink(result)
            print(f"  shrunk from {len(schedule.steps)} to {len(small.schedule.steps)} steps:")
            for step in small.schedule.steps:
                if step.kind != "produce":
                    print(f"    {step}")
            print(f"    (and {sum(s.kind == 'produce' for s in small.schedule.steps)} produce steps)")
            for v in small.violations[:5]:
                print(f"    -> {v}")
    wall = time.perf_counter() - wall0
    n = len(seeds)
    figures = {
        "command": " ".join(["python", "bench/sim.py", *(argv if argv is not None else sys.argv[1:])]),
        "schedules": n,
        "failed": failed,
        "wall_s": round(wall, 1),
        "schedules_per_s": round(n / wall, 2),
        "cpu_per_schedule_s": round(cpu / n, 3),
        "failovers": failovers,
        "failovers_per_schedule": round(failovers / n, 1),
        "acks_per_schedule": round(acks / n, 1),
        "duplicates": dict(dups),
        "violations": dict(kinds),
    }
    print(
        f"{n} schedules in {wall:.1f} s ({n / wall:.2f}/s), CPU {cpu / n * 1000:.0f} ms per schedule; "
        f"{failovers} failovers ({failovers / n:.1f} per schedule), {acks / n:.0f} acknowledgements per "
        f"schedule; duplicates by cause {dict(dups)}; {len(failed)} failed {dict(kinds)}"
    )
    if failed:
        print(f"failing seeds: {','.join(map(str, failed))}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
