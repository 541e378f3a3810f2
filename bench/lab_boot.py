"""Boot time and memory per region for a 2-region and a 3-region lab, side by side in one run.

    python bench/lab_boot.py [--repeat N]

Each lab is booted in a fresh temporary directory, measured (time until the region's admin API lists
its own cluster; resident memory right after boot and again once replication is wired), and stopped
before the next one. Run it on a quiet machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from geosync_lab import labs, regions


@dataclass
class Boot:
    lab_ready_s: float
    boot_s: dict[str, float]
    rss_wired_mb: dict[str, float]


def one(region_names: list[str]) -> Boot:
    with tempfile.TemporaryDirectory(prefix="geosync-bench-") as tmp:
        started = time.monotonic()
        result = labs.up(Path(tmp), region_names)
        ready = time.monotonic() - started
        try:
            wired_rss = {
                name: sum(regions.rss_mb(p) for p in r.pids) for name, r in result.topology.regions.items()
            }
        finally:
            labs.down(Path(tmp))
    return Boot(
        lab_ready_s=ready,
        boot_s={b.name: b.seconds for b in result.boots},
        rss_wired_mb=wired_rss,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="boots per lab size (figures are medians)")
    args = parser.parse_args()
    console = Console()
    console.print(f"machine: {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB")
    table = Table(
        "regions", "lab ready (s)", "region boot (s) median / max", "resident per region (MiB) median / max"
    )
    for names in (["a", "b"], ["a", "b", "c"]):
        runs = [one(names) for _ in range(args.repeat)]
        boots = [v for r in runs for v in r.boot_s.values()]
        rss = [v for r in runs for v in r.rss_wired_mb.values()]
        table.add_row(
            str(len(names)),
            f"{statistics.median(r.lab_ready_s for r in runs):.1f}",
            f"{statistics.median(boots):.1f} / {max(boots):.1f}",
            f"{statistics.median(rss):.0f} / {max(rss):.0f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
