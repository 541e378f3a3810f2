"""The Spark transforms compute exactly what ``geosync_core.drift.audit`` defines.

Small hand-made tables pin each definition; seeded synthetic scenarios (three regions with colliding
ledger ids, gaps, lag, trimmed heads, duplicates, holes, lost and out-of-order deliveries) compare every
summary row with the single-process oracle.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from geosync_audit import findings
from geosync_audit.source import CURSORS_SCHEMA, MESSAGES_SCHEMA
from geosync_audit.synthetic import Scenario, scenario
from geosync_core import drift

T = "persistent://geo/abc/t"


def frames(spark: SparkSession, s: Scenario) -> tuple[Any, Any, Any]:
    return (
        spark.createDataFrame(s.messages, MESSAGES_SCHEMA),
        spark.createDataFrame(s.cursors, CURSORS_SCHEMA),
        spark.createDataFrame(s.deliveries, findings.DELIVERIES_SCHEMA),
    )


def run(
    spark: SparkSession, s: Scenario, only: tuple[str, ...] = ("pairs", "loss", "replication", "order")
) -> dict[str, list[tuple[Any, ...]]]:
    """The summaries the Spark transforms compute (only those asked for: each costs Spark jobs)."""
    messages, cursors, deliveries = frames(spark, s)
    st = findings.states(messages, cursors)
    subs = findings.subscriptions(cursors)
    out: dict[str, list[tuple[Any, ...]]] = {}
    if "pairs" in only:
        out["pairs"] = [tuple(r) for r in findings.pairs(st, subs).summary.collect()]
    if "loss" in only:
        out["loss"] = [tuple(r) for r in findings.losses(st, subs, deliveries).summary.collect()]
    if "replication" in only:
        rep = findings.replication(spark, messages, s.expected, s.as_of_ms)
        out["replication"] = [tuple(r) for r in rep.summary.collect()]
    if "order" in only:
        out["order"] = sorted(
            (
                r.topic,
                r.subscription,
                r.key,
                r.region,
                r.origin_region,
                r.origin_ledger,
                r.origin_entry,
                r.delivered_at,
            )
            for r in findings.order_violations(deliveries).collect()
        )
    return out


def oracle(s: Scenario) -> dict[str, list[tuple[Any, ...]]]:
    report = drift.audit(
        s.copies(),
        s.cursor_values(),
        expected=s.expected,
        as_of_ms=s.as_of_ms,
        deliveries=s.delivery_values(),
    )
    assert report.loss is not None
    assert report.order_violations is not None
    return {
        "pairs": [
            (p.topic, p.subscription, p.region, p.other, p.unsynced, p.sync_lag_ms) for p in report.pairs
        ],
        "loss": [(x.topic, x.subscription, x.region, x.acked, x.lost) for x in report.loss],
        "replication": [
            (x.topic, x.origin_region, x.region, x.trimmed, x.gaps, x.lag, x.lag_ms, x.duplicates)
            for x in report.replication
        ],
        "order": sorted(
            (
                v.topic,
                v.subscription,
                v.key,
                v.region,
                v.origin_region,
                v.origin_ledger,
                v.origin_entry,
                v.delivered_at,
            )
            for v in report.order_violations
        ),
    }


def test_spark_matches_the_oracle_on_a_synthetic_scenario(spark: SparkSession) -> None:
    s = scenario(seed=2, partitions=2, per_origin=20, gap=0.1, disorder=0.1)
    got, want = run(spark, s), oracle(s)
    assert got == want
    # the scenario exercises every count, so agreement is not agreement on zeros
    assert any(p[4] for p in want["pairs"])
    assert any(x[4] for x in want["loss"])
    assert any(x[4] for x in want["replication"])
    assert any(x[5] for x in want["replication"])
    assert want["order"]


def msg(region: str, e: int, origin: str, oe: int, *, pt: int = 0, key: str = "k") -> tuple[Any, ...]:
    return (region, T, -1, 7, e, -1, origin, 7, oe, key, pt or 1000 + oe, {})


def test_acks_in_one_region_only_are_unsynced_toward_the_others(spark: SparkSession) -> None:
    # a published 0..3; b holds all four (local entries 0..3); a acks 0..2, b acks only 0
    messages = [msg("a", e, "a", e) for e in range(4)] + [msg("b", e, "a", e) for e in range(4)]
    cursors: list[tuple[Any, ...]] = [
        ("a", T, -1, "s", 7, 2, []),
        ("b", T, -1, "s", 7, 0, []),
    ]
    s = Scenario(messages=messages, cursors=cursors, expected={"geo/abc": ["a", "b"]}, as_of_ms=5000)
    got = run(spark, s, only=("pairs",))
    assert got["pairs"] == [(T, "s", "a", "b", 2, 1), (T, "s", "b", "a", 0, 0)]
    assert got["pairs"] == oracle(s)["pairs"]


def test_a_hand_moved_cursor_is_loss_and_a_synced_one_is_not(spark: SparkSession) -> None:
    messages = [msg("a", e, "a", e) for e in range(6)] + [msg("b", e, "a", e) for e in range(6)]
    # a's consumers got 0..1; a's cursor was moved to 4 by hand; b's agent synced b to 1
    cursors: list[tuple[Any, ...]] = [("a", T, -1, "s", 7, 4, []), ("b", T, -1, "s", 7, 1, [])]
    deliveries = [("a", T, -1, "s", "k", "a", 7, e, None, 10 + e) for e in range(2)]
    s = Scenario(messages=messages, cursors=cursors, deliveries=deliveries, expected={"geo/abc": ["a", "b"]})
    got = run(spark, s, only=("loss",))
    assert got["loss"] == [(T, "s", "a", 5, 3), (T, "s", "b", 2, 0)]
    assert got["loss"] == oracle(s)["loss"]


def test_key_order_violation_across_a_failover(spark: SparkSession) -> None:
    deliveries = [
        ("a", T, -1, "s", "k1", "a", 7, 0, None, 100),
        ("a", T, -1, "s", "k1", "a", 7, 2, None, 110),
        ("b", T, -1, "s", "k1", "a", 7, 1, None, 200),  # after failover, k1 goes back
        ("b", T, -1, "s", "k1", "a", 7, 2, None, 210),  # redelivery: not a violation
        ("b", T, -1, "s", "k2", "a", 7, 3, None, 50),
    ]
    s = Scenario(deliveries=deliveries)
    got = run(spark, s, only=("order",))
    assert got["order"] == [(T, "s", "k1", "b", "a", 7, 1, 200)]
    assert got["order"] == oracle(s)["order"]


def test_replication_classes(spark: SparkSession) -> None:
    # a published 0..9; b lacks 0 (trimmed), 4 (gap) and 8..9 (lag)
    messages = [msg("a", e, "a", e, pt=1000 + e) for e in range(10)]
    messages += [msg("b", i, "a", e, pt=1000 + e) for i, e in enumerate([1, 2, 3, 5, 6, 7])]
    s = Scenario(messages=messages, expected={"geo/abc": ["a", "b"]}, as_of_ms=2000)
    got = run(spark, s, only=("replication",))
    assert got["replication"] == [(T, "a", "b", 1, 1, 2, 2000 - 1008, 0)]
    assert got["replication"] == oracle(s)["replication"]


def test_unsynced_timeline_buckets_unsynced_messages_by_publish_time(spark: SparkSession) -> None:
    # a acks all 6 (published 10 s .. 110 s), b none: 6 unsynced a->b in buckets of 100/4 = 25 s
    messages = [msg("a", e, "a", e, pt=10_000 + e * 20_000) for e in range(6)]
    messages += [msg("b", e, "a", e, pt=10_000 + e * 20_000) for e in range(6)]
    cursors: list[tuple[Any, ...]] = [("a", T, -1, "s", 7, 5, []), ("b", T, -1, "s", 7, -1, [])]
    st = findings.states(
        spark.createDataFrame(messages, MESSAGES_SCHEMA), spark.createDataFrame(cursors, CURSORS_SCHEMA)
    )
    detail = findings.pairs(st, findings.subscriptions(spark.createDataFrame(cursors, CURSORS_SCHEMA))).detail
    rows = [tuple(r) for r in findings.unsynced_timeline(detail, buckets=4).collect()]
    assert rows == [("a", "b", 10_000, 2), ("a", "b", 35_000, 1), ("a", "b", 60_000, 1),
                    ("a", "b", 85_000, 1), ("a", "b", 110_000, 1)]  # fmt: skip
    assert findings.unsynced_timeline(detail.limit(0)).collect() == []
