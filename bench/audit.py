"""Drift audit throughput: the Spark job on local[2] beside a single-process Python run of the same join.

    python bench/audit.py [--per-origin 112000] [--master local[2]] [--keep DIR]

The input is SYNTHETIC (``geosync_audit.synthetic``): three regions each publish ``--per-origin``
messages on one topic and hold every other region's in their own interleaved log (minus a lagging tail,
a trimmed head and random gaps, plus replicator duplicates), with colliding ledger ids, one subscription
per region with a random prefix and holes acknowledged, and a delivery log. It has the data source's
shape and is written to Parquet first, so both sides start from the same files and neither reads Pulsar.

Spark side: ``drift_job.analyze`` (every table written to Parquet, summary, plot). Python side:
``geosync_core.drift.audit`` after reading the same Parquet with pyarrow. Both must agree on every count;
the bench fails if they do not. Rows per second = message copies (rows of ``messages``) / wall seconds.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from geosync_audit import drift_job, synthetic
from geosync_audit.sessions import session
from geosync_core import drift

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-origin", type=int, default=112_000, help="messages each of the 3 regions publishes")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", type=pathlib.Path, default=None, help="keep inputs and outputs here")
    args = p.parse_args()
    console = Console(width=120)

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

    spark = session(args.master, app="geosync-bench-audit", shuffle_partitions=4)
    spark.read.parquet(str(inputs / "cursors.parquet")).count()  # session and first-job warm-up, not timed
    t0 = time.monotonic()
    summary = drift_job.analyze(
        spark,
        messages=spark.read.parquet(str(inputs / "messages.parquet")),
        cursors=spark.read.parquet(str(inputs / "cursors.parquet")),
        deliveries=spark.read.parquet(str(inputs / "deliveries.parquet")),
        expected=s.expected,
        as_of_ms=s.as_of_ms,
        out=root / "out",
        meta={"input": "synthetic"},
    )
    spark_s = time.monotonic() - t0
    del s.deliveries[:]  # the Python side reads its own copy from Parquet
    python_s, report = python_side(inputs, s)

    keys = ("unsynced", "lost", "order_violations", "replication_gaps", "replication_lag")
    theirs = {
        "unsynced": sum(x.unsynced for x in report.pairs),
        "lost": sum(x.lost for x in report.loss or ()),
        "order_violations": len(report.order_violations or ()),
        "replication_gaps": sum(x.gaps for x in report.replication),
        "replication_lag": sum(x.lag for x in report.replication),
    }
    agree = all(summary["totals"][k] == theirs[k] for k in keys)
    table = Table(title=f"drift audit, {rows:,} SYNTHETIC message copies over 3 regions (same Parquet input)")
    for col in ("implementation", "seconds", "rows/s", "unsynced", "lost", "order viol.", "gaps", "lag"):
        table.add_column(col)
    t = summary["totals"]
    counts = [
        str(t[k]) for k in ("unsynced", "lost", "order_violations", "replication_gaps", "replication_lag")
    ]
    table.add_row(f"Spark {args.master} (geosync_audit)", f"{spark_s:.1f}", f"{rows / spark_s:,.0f}", *counts)
    table.add_row(
        "single-process Python (geosync_core.drift)", f"{python_s:.1f}", f"{rows / python_s:,.0f}", *counts
    )
    console.print(table)
    console.print(f"results agree: {agree}")
    console.print(json.dumps({"rows": rows, "spark_s": round(spark_s, 2), "python_s": round(python_s, 2)}))
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
