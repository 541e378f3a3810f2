"""Boot time and memory per region for a 2-region and a 3-region lab, side by side in one run.

    python bench/lab_boot.py [--repeat N] [--brokers N]

Each lab is booted in a fresh temporary directory, measured (time until the region's admin API lists
its own cluster; resident memory right after boot and again once replication is wired), and stopped
before the next one. With ``--brokers N`` (2 or more) every region is a cluster of N broker processes plus
its ZooKeeper, configuration store and bookie; the lab's resident memory is then the sum over every JVM,
also shown per kind of process. Run it on a quiet machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import record
from rich.console import Console
from rich.table import Table

from geosync_lab import clusters, labs, regions


@dataclass
class Boot:
    lab_ready_s: float
    boot_s: dict[str, float]
    rss_wired_mb: dict[str, float]
    rss_by_kind_mb: dict[str, list[float]]


def _kind(role: str) -> str:
    return "broker" if role.startswith("broker-") else role


def one(region_names: list[str], brokers: int) -> Boot:
    with tempfile.TemporaryDirectory(prefix="geosync-bench-") as tmp:
        started = time.monotonic()
        result = labs.up(Path(tmp), region_names, brokers=brokers)
        ready = time.monotonic() - started
        by_kind: dict[str, list[float]] = {}
        try:
            wired_rss = {
                name: sum(regions.rss_mb(p) for p in r.pids) for name, r in result.topology.regions.items()
            }
            for region in result.topology.regions.values():
                site = labs.cluster_region(Path(tmp), region)
                roles = site.roles() if site else ["standalone"]
                for role, pid in zip(roles, region.pids, strict=True):
                    by_kind.setdefault(_kind(role), []).append(regions.rss_mb(pid))
        finally:
            labs.down(Path(tmp))
    return Boot(
        lab_ready_s=ready,
        boot_s={b.name: b.seconds for b in result.boots},
        rss_wired_mb=wired_rss,
        rss_by_kind_mb=by_kind,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="boots per lab size (figures are medians)")
    parser.add_argument("--brokers", type=int, default=1, help="brokers per region (1: standalone regions)")
    record.add_argument(parser)
    args = parser.parse_args()
    console = Console()
    console.print(f"machine: {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB")
    table = Table(
        "regions",
        "brokers",
        "lab ready (s)",
        "region boot (s) median / max",
        "resident per region (MiB) median / max",
        "resident, all JVMs (MiB)",
    )
    kinds = Table("regions", "process", "count", "resident each (MiB) median / max")
    figures: dict[str, dict[str, float]] = {}
    for names in (["a", "b"], ["a", "b", "c"]):
        runs = [one(names, args.brokers) for _ in range(args.repeat)]
        boots = [v for r in runs for v in r.boot_s.values()]
        rss = [v for r in runs for v in r.rss_wired_mb.values()]
        table.add_row(
            str(len(names)),
            str(args.brokers),
            f"{statistics.median(r.lab_ready_s for r in runs):.1f}",
            f"{statistics.median(boots):.1f} / {max(boots):.1f}",
            f"{statistics.median(rss):.0f} / {max(rss):.0f}",
            f"{statistics.median(sum(r.rss_wired_mb.values()) for r in runs):.0f}",
        )
        figures[str(len(names))] = {
            "lab_ready_s": statistics.median(r.lab_ready_s for r in runs),
            "resident_per_region_mib": statistics.median(rss),
        }
        for kind in (
            clusters.ZOOKEEPER,
            clusters.CONFIGURATION_STORE,
            clusters.BOOKIE,
            "broker",
            "standalone",
        ):
            values = [v for r in runs for v in r.rss_by_kind_mb.get(kind, [])]
            if values:
                count = len(values) // len(runs)
                kinds.add_row(
                    str(len(names)), kind, str(count), f"{statistics.median(values):.0f} / {max(values):.0f}"
                )
    console.print(table)
    console.print(kinds)
    per = "region" if args.brokers == 1 else f"region of {args.brokers} brokers"
    record.write(
        args.record,
        record.make(
            f"Lab boot, {args.brokers} broker(s) per region",
            "; ".join(
                f"{n} regions ready in {f['lab_ready_s']:.1f} s "
                f"({f['resident_per_region_mib']:.0f} MiB per {per})"
                for n, f in figures.items()
            ),
            figures={"brokers": args.brokers, "repeat": args.repeat, "by_regions": figures},
        ),
    )


if __name__ == "__main__":
    main()
