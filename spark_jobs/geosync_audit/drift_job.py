"""The drift job: read every audited region, join by origin coordinates, write what drifted.

Runs as ``geoctl audit drift`` or ``spark-submit spark_jobs/geosync_audit/drift_job.py --topology FILE
--out DIR`` (any master; executors need this package and pulsar-client installed). Order matters for a
consistent snapshot: cursors are read first, then the messages up to each log's end at plan time, so
every acknowledged position has its message in the read; the messages go to Parquet once and everything
after reads that copy (the data source is never planned twice).

``DIR`` gets Parquet tables (``messages``, ``cursors``, ``deliveries`` when given, ``unsynced``,
``pairs``, ``lost``, ``loss``, ``missing``, ``replication``, ``order_violations``), ``summary.json`` and
``drift.png`` (``reporting.plot``). The definitions are ``geosync_core.drift``'s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from geosync_audit import findings, reporting
from geosync_audit.source import CURSORS_SCHEMA, Scope, cursor_rows
from geosync_core import topology as topo


@dataclass(frozen=True)
class Outcome:
    summary: dict[str, Any]
    out: pathlib.Path


def _write(df: DataFrame, out: pathlib.Path, name: str) -> DataFrame:
    df.write.mode("overwrite").parquet(str(out / name))
    return df


def analyze(
    spark: SparkSession,
    *,
    messages: DataFrame,
    cursors: DataFrame,
    deliveries: DataFrame | None,
    expected: dict[str, list[str]],
    as_of_ms: int,
    out: pathlib.Path,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """Every finding from messages and cursors already in Spark; writes the tables and returns the summary."""
    st = findings.states(messages, cursors).cache()
    subs = findings.subscriptions(cursors).cache()
    pairs = findings.pairs(st, subs)
    _write(pairs.detail, out, "unsynced")
    pair_rows = [tuple(r) for r in _write(pairs.summary, out, "pairs").collect()]
    unsynced = spark.read.parquet(str(out / "unsynced"))
    timeline_rows = [tuple(r) for r in findings.unsynced_timeline(unsynced).collect()]
    loss_rows = violation_rows = None
    if deliveries is not None:
        losses = findings.losses(st, subs, deliveries)
        _write(losses.detail, out, "lost")
        loss_rows = [tuple(r) for r in _write(losses.summary, out, "loss").collect()]
        violations = _write(findings.order_violations(deliveries), out, "order_violations")
        per_sub = violations.groupBy("topic", "subscription").count()
        violation_rows = [tuple(r) for r in per_sub.collect()]
        # subscriptions with cursors but no violation count as 0, not as unknown
        seen = {(t, s) for t, s, _ in violation_rows}
        violation_rows += [(p[0], p[1], 0) for p in pair_rows if (p[0], p[1]) not in seen]
        violation_rows += [(x[0], x[1], 0) for x in loss_rows if (x[0], x[1]) not in seen]
        violation_rows = sorted(set(violation_rows))
    rep = findings.replication(spark, messages, expected, as_of_ms)
    _write(rep.detail, out, "missing")
    rep_rows = [tuple(r) for r in _write(rep.summary, out, "replication").collect()]
    st.unpersist()
    subs.unpersist()
    summary = reporting.summarize(
        pairs=pair_rows,
        loss=loss_rows,
        replication=rep_rows,
        violations=violation_rows,
        meta=meta,
        timeline=timeline_rows,
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    reporting.plot(summary, out / "drift.png")
    return summary


def run(
    spark: SparkSession,
    *,
    topology: pathlib.Path,
    out: pathlib.Path,
    namespaces: Sequence[str] = (),
    regions: Sequence[str] = (),
    topics: str | None = None,
    deliveries: pathlib.Path | None = None,
    max_entries_per_split: int = 50_000,
) -> Outcome:
    """Audit the regions of ``topology`` (see the module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    loaded = topo.from_json(topology.read_text())
    scope = Scope(
        loaded,
        tuple(regions) or tuple(sorted(loaded.regions)),
        tuple(namespaces) or tuple(sorted(loaded.namespaces)),
        topics,
    )
    started = time.monotonic()
    cursors_df = spark.createDataFrame(cursor_rows(scope), CURSORS_SCHEMA)
    _write(cursors_df, out, "cursors")
    as_of_ms = int(time.time() * 1000)
    options = {**scope.options(str(topology.resolve())), "maxEntriesPerSplit": str(max_entries_per_split)}
    _write(spark.read.format("pulsar-geo").options(**options).load(), out, "messages")
    messages = spark.read.parquet(str(out / "messages"))
    cursors = spark.read.parquet(str(out / "cursors"))
    counts = messages.groupBy("region").agg(
        F.count("*").alias("n"), F.count(F.when(F.col("origin_region").isNull(), 1)).alias("unresolved")
    )
    per_region_rows = counts.collect()
    per_region = {r.region: int(r.n) for r in per_region_rows}
    unresolved = sum(int(r.unresolved) for r in per_region_rows)
    delivered = None
    if deliveries is not None:
        raw = spark.read.schema(findings.RAW_DELIVERIES_SCHEMA).json(str(deliveries))
        _write(findings.normalize_deliveries(raw), out, "deliveries")
        delivered = spark.read.parquet(str(out / "deliveries"))
    meta = {
        "as_of_ms": as_of_ms,
        "as_of": dt.datetime.fromtimestamp(as_of_ms / 1000, dt.UTC).isoformat(timespec="seconds"),
        "regions": list(scope.regions),
        "namespaces": list(scope.namespaces),
        "topics": topics,
        "deliveries": None if deliveries is None else str(deliveries),
        "messages": per_region,
        "unresolved": unresolved,
        "input": "pulsar-geo data source (live regions)",
    }
    summary = analyze(
        spark,
        messages=messages,
        cursors=cursors,
        deliveries=delivered,
        expected=scope.expected(),
        as_of_ms=as_of_ms,
        out=out,
        meta=meta,
    )
    summary["seconds"] = round(time.monotonic() - started, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return Outcome(summary, out)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="drift_job", description="GeoSync drift audit (Spark).")
    p.add_argument("--topology", required=True, type=pathlib.Path, help="topology.json of the regions")
    p.add_argument("--out", required=True, type=pathlib.Path, help="output directory")
    p.add_argument("--namespace", action="append", default=[], help="namespace to audit (repeatable)")
    p.add_argument("--region", action="append", default=[], help="region to audit (repeatable)")
    p.add_argument("--topics", default=None, help="regular expression searched in full topic names")
    p.add_argument("--deliveries", type=pathlib.Path, default=None, help="delivery log (JSON lines)")
    p.add_argument("--max-entries-per-split", type=int, default=50_000)
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from geosync_audit.sessions import default_master, session

    spark = session(args.master or default_master())
    outcome = run(
        spark,
        topology=args.topology,
        out=args.out,
        namespaces=args.namespace,
        regions=args.region,
        topics=args.topics,
        deliveries=args.deliveries,
        max_entries_per_split=args.max_entries_per_split,
    )
    reporting.print_summary(outcome.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
