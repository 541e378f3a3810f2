"""Drift audit throughput: the Spark job on each master beside a single-process Python run of the same join.

    python bench/audit.py [--per-origin 112000] [--masters local[2],standalone] [--repeat 3] [--keep DIR]

The input is SYNTHETIC (``geosync_audit.synthetic``): three regions each publish ``--per-origin``
messages on one topic and hold every other region's in their own interleaved log (minus a lagging tail,
a trimmed head and random gaps, plus replicator duplicates), with colliding ledger ids, one subscription
per region with a random prefix and holes acknowledged, and a delivery log. It has the data source's
shape and is written to Parquet first, so both sides start from the same files and neither reads Pulsar.

Spark side: ``drift_job.analyze`` (every table written to Parquet, summary, plot) on each of ``--masters``
in turn: ``local[N]``, ``standalone`` (a master and ``--workers`` one-core workers booted here from the
pyspark distribution for these runs and stopped after them, ``geosync_lab.sparkcluster``), or the
``spark://`` URL of a running cluster. Each master gets a fresh session and an untimed warm-up job (session
start, executors, first-job costs), then ``--repeat`` timed runs. Python side: ``geosync_core.drift.audit``
after reading the same Parquet with pyarrow, as often. Every run must agree on every count; the bench fails
if one does not. Rows per second = message copies (rows of ``messages``) / wall seconds; the table gives the
median and the slowest run. CPU seconds are what this process and every process under it (Spark's driver
JVM, the standalone master, workers and executors) used during a run: on a machine other work also uses,
wall time says how long the run waited for the CPU too, CPU time how much work it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import shutil
import statistics
import tempfile
import time
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from geosync_audit import drift_job, synthetic
from geosync_audit.sessions import session
from geosync_core import drift
from geosync_lab import sparkcluster

KEYS = ("unsynced", "lost", "order_violations", "replication_gaps", "replication_lag")

MESSAGES = pa.schema(
    [
        ("region", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("ledger", pa.int64()),
        ("entry", pa.int64()),
        ("batch_index", pa.int32()),
        ("origin_region", pa.string()),
        ("origin_ledger", pa.int64()),
        ("origin_entry", pa.int64()),
        ("key", pa.string()),
        ("publish_time", pa.int64()),
        ("properties", pa.map_(pa.string(), pa.string())),
    ]
)
RANGE = pa.struct(
    [
        ("lower_ledger", pa.int64()),
        ("lower_entry", pa.int64()),
        ("upper_ledger", pa.int64()),
        ("upper_entry", pa.int64()),
    ]
)
CURSORS = pa.schema(
    [
        ("region", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("subscription", pa.string()),
        ("mark_delete_ledger", pa.int64()),
        ("mark_delete_entry", pa.int64()),
        ("ranges", pa.list_(RANGE)),
    ]
)
DELIVERIES = pa.schema(
    [
        ("region", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("subscription", pa.string()),
        ("key", pa.string()),
        ("origin_region", pa.string()),
        ("origin_ledger", pa.int64()),
        ("origin_entry", pa.int64()),
        ("batch_index", pa.int32()),
        ("delivered_at", pa.int64()),
    ]
)


def write(rows: list[tuple[Any, ...]], schema: pa.Schema, path: pathlib.Path) -> None:
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    cols = []
    for field, col in zip(schema, columns, strict=True):
        values: list[Any] = list(col)
        if pa.types.is_map(field.type):
            values = [list(v.items()) for v in values]
        elif pa.types.is_list(field.type):
            values = [[dict(zip(RANGE.names, r, strict=True)) for r in v] for v in values]
        cols.append(pa.array(values, type=field.type))
    pq.write_table(pa.Table.from_arrays(cols, schema=schema), path)


def python_side(inputs: pathlib.Path, s: synthetic.Scenario) -> tuple[float, drift.Report]:
    started = time.monotonic()
    messages = pq.read_table(inputs / "messages.parquet").drop_columns(["properties"]).to_pylist()
    copies = [drift.Copy(**m) for m in messages]
    cursors = [
        synthetic.cursor_of(
            (c["region"], c["topic"], c["partition"], c["subscription"], c["mark_delete_ledger"],
             c["mark_delete_entry"], [tuple(r.values()) for r in c["ranges"]])
        )
        for c in pq.read_table(inputs / "cursors.parquet").to_pylist()
    ]  # fmt: skip
    deliveries = [drift.Delivery(**d) for d in pq.read_table(inputs / "deliveries.parquet").to_pylist()]
    report = drift.audit(copies, cursors, expected=s.expected, as_of_ms=s.as_of_ms, deliveries=deliveries)
    return time.monotonic() - started, report


@dataclasses.dataclass
class Series:
    """The timed runs of one implementation on the same input."""

    label: str
    seconds: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)
    totals: list[dict[str, int]] = dataclasses.field(default_factory=list)

    def row(self, rows: int) -> list[str]:
        median, slowest = statistics.median(self.seconds), max(self.seconds)
        return [
            self.label,
            str(len(self.seconds)),
            f"{median:.1f}",
            f"{slowest:.1f}",
            f"{rows / median:,.0f}",
            f"{rows / slowest:,.0f}",
            f"{statistics.median(self.cpu):.1f}",
        ]


def cpu_times() -> dict[int, float]:
    """CPU seconds used so far by this process and every process under it, by pid."""
    out = {}
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended in between
            continue
        out[proc.pid] = t.user + t.system
    return out


class Timed:
    """Wall and CPU seconds of one run (CPU of processes that end during the run is not counted)."""

    def __enter__(self) -> Timed:
        self.wall0, self.cpu0 = time.monotonic(), cpu_times()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.monotonic() - self.wall0
        self.cpu = sum(t - self.cpu0.get(pid, 0.0) for pid, t in cpu_times().items())


def spark_series(
    label: str, master: str, *, inputs: pathlib.Path, s: synthetic.Scenario, out: pathlib.Path, args: Any
) -> Series:
    config = {"spark.executor.memory": args.executor_memory} if master.startswith("spark://") else None
    spark = session(master, app="geosync-bench-audit", shuffle_partitions=4, config=config)
    series = Series(label)
    try:
        spark.read.parquet(str(inputs / "cursors.parquet")).count()  # session, executors, first job: untimed
        for i in range(args.repeat):
            with Timed() as timed:
                summary = drift_job.analyze(
                    spark,
                    messages=spark.read.parquet(str(inputs / "messages.parquet")),
                    cursors=spark.read.parquet(str(inputs / "cursors.parquet")),
                    deliveries=spark.read.parquet(str(inputs / "deliveries.parquet")),
                    expected=s.expected,
                    as_of_ms=s.as_of_ms,
                    out=out / str(i),
                    meta={"input": "synthetic"},
                )
            series.seconds.append(timed.wall)
            series.cpu.append(timed.cpu)
            series.totals.append({k: int(summary["totals"][k]) for k in KEYS})
            print(f"  {label} run {i + 1}: {timed.wall:.1f} s, {timed.cpu:.1f} CPU s", flush=True)
    finally:
        spark.stop()  # the next master gets its own session (and a cluster must outlive its application)
    return series


def on_master(
    master: str, inputs: pathlib.Path, s: synthetic.Scenario, root: pathlib.Path, args: Any
) -> Series:
    slug = master.replace("[", "-").replace("]", "").replace("/", "").replace(":", "-")
    if master != "standalone":
        return spark_series(f"Spark {master}", master, inputs=inputs, s=s, out=root / "out" / slug, args=args)
    label = f"Spark standalone (master + {args.workers} workers x 1 core, {args.executor_memory} executors)"
    with sparkcluster.standalone(
        root / "cluster", workers=args.workers, cores=1, memory=args.worker_memory
    ) as cluster:
        print(f"standalone cluster up: {cluster.master} (logs in {cluster.logs})", flush=True)
        return spark_series(label, cluster.master, inputs=inputs, s=s, out=root / "out" / slug, args=args)


def python_series(inputs: pathlib.Path, s: synthetic.Scenario, repeat: int) -> Series:
    series = Series("single-process Python (geosync_core.drift)")
    for i in range(repeat):
        with Timed() as timed:
            seconds, report = python_side(inputs, s)
        series.seconds.append(seconds)
        series.cpu.append(timed.cpu)
        series.totals.append(
            {
                "unsynced": sum(x.unsynced for x in report.pairs),
                "lost": sum(x.lost for x in report.loss or ()),
                "order_violations": len(report.order_violations or ()),
                "replication_gaps": sum(x.gaps for x in report.replication),
                "replication_lag": sum(x.lag for x in report.replication),
            }
        )
        print(f"  Python run {i + 1}: {seconds:.1f} s, {timed.cpu:.1f} CPU s", flush=True)
    return series


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-origin", type=int, default=112_000, help="messages each of the 3 regions publishes")
    p.add_argument(
        "--masters",
        default="local[2]",
        help="comma-separated: local[N], standalone (booted here), spark://HOST:PORT",
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs per implementation")
    p.add_argument("--workers", type=int, default=2, help="standalone: one-core workers")
    p.add_argument("--worker-memory", default="640m", help="standalone: memory each worker offers")
    p.add_argument("--executor-memory", default=sparkcluster.EXECUTOR_MEMORY, help="spark:// masters")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", type=pathlib.Path, default=None, help="keep inputs and outputs here")
    args = p.parse_args()
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    console = Console(width=140)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # executors of a local cluster reach the driver here
    load_before = os.getloadavg()
    began = time.monotonic()

    started = time.monotonic()
    s = synthetic.scenario(
        seed=args.seed, per_origin=args.per_origin, subscriptions=1, keys=1000, lag=50, trim=10,
        gap=0.0005, duplicate=0.0005, holes=0.0002, with_properties=False,
    )  # fmt: skip
    generated = time.monotonic() - started
    root = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="geosync-bench-audit-"))
    inputs = root / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    write(s.messages, MESSAGES, inputs / "messages.parquet")
    write(s.cursors, CURSORS, inputs / "cursors.parquet")
    write(s.deliveries, DELIVERIES, inputs / "deliveries.parquet")
    rows = len(s.messages)
    console.print(
        f"SYNTHETIC input: {rows:,} message copies ({3 * args.per_origin:,} messages published by 3 "
        f"regions), {len(s.cursors)} cursors, {len(s.deliveries):,} deliveries; "
        f"generated in {generated:.1f} s -> {inputs}"
    )
    del s.messages[:], s.deliveries[:]  # every side reads its own copy from Parquet

    try:
        results = [on_master(m, inputs, s, root, args) for m in masters]
        results.append(python_series(inputs, s, args.repeat))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)

    reference = results[-1].totals[0]
    agree = all(t == reference for series in results for t in series.totals)
    table = Table(
        title=f"drift audit, {rows:,} SYNTHETIC message copies over 3 regions (same Parquet input), "
        f"{args.repeat} runs each"
    )
    timing = ("implementation", "runs", "median s", "max s", "rows/s (median)", "rows/s (slowest)", "CPU s")
    for col in (*timing, "unsynced", "lost", "order viol.", "gaps", "lag"):
        table.add_column(col)
    for series in results:
        table.add_row(*series.row(rows), *(str(reference[k]) for k in KEYS))
    console.print(table)
    console.print(f"results agree: {agree}")
    console.print(
        json.dumps(
            {
                "rows": rows,
                "seconds": {r.label: [round(x, 2) for x in r.seconds] for r in results},
                "cpu_seconds": {r.label: [round(x, 2) for x in r.cpu] for r in results},
                "load_average_before": [round(x, 1) for x in load_before],
                "load_average_after": [round(x, 1) for x in os.getloadavg()],
                "wall_s": round(time.monotonic() - began, 1),
            }
        )
    )
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
