"""The audit's joins as DataFrame transforms: ``geosync_core.drift`` computed on Spark.

Every function takes and returns DataFrames (no I/O, no session state), so the tests run them on small
frames and compare with ``geosync_core.drift.audit``, which defines each count. Inputs have the shapes of
``source.MESSAGES_SCHEMA``, ``source.CURSORS_SCHEMA`` and ``DELIVERIES_SCHEMA``.

Positions compare as ``(ledger, entry)`` and origin coordinates as ``(ledger, entry, batch index)``;
struct comparison in Spark SQL is field by field, which is exactly that order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

IDENTITY = ["topic", "partition", "origin_region", "origin_ledger", "origin_entry", "batch_index"]
DELIVERIES_SCHEMA = (
    "region STRING, topic STRING, partition INT, subscription STRING, key STRING, origin_region STRING, "
    "origin_ledger BIGINT, origin_entry BIGINT, batch_index INT, delivered_at BIGINT"
)
NAMESPACE = r"^[a-z-]+://([^/]+/[^/]+)/"


def _at_or_below(ledger: Column, entry: Column, top_ledger: Column, top_entry: Column) -> Column:
    return (ledger < top_ledger) | ((ledger == top_ledger) & (entry <= top_entry))


def states(messages: DataFrame, cursors: DataFrame) -> DataFrame:
    """Per identity, subscription and region holding it: ``acked`` (every copy covered by the cursor) and
    the publish time. Copies without an origin region are left out."""
    m = messages.where(F.col("origin_region").isNotNull())
    joined = m.join(cursors, ["region", "topic", "partition"])
    ledger, entry = F.col("ledger"), F.col("entry")
    in_range = F.exists(
        "ranges",
        lambda r: (
            ~_at_or_below(ledger, entry, r["lower_ledger"], r["lower_entry"])
            & _at_or_below(ledger, entry, r["upper_ledger"], r["upper_entry"])
        ),
    )
    covered = _at_or_below(ledger, entry, F.col("mark_delete_ledger"), F.col("mark_delete_entry")) | in_range
    return joined.groupBy(*IDENTITY, "subscription", "region").agg(
        (F.min(covered.cast("int")) == 1).alias("acked"),
        F.min("publish_time").alias("publish_time"),
    )


def subscriptions(cursors: DataFrame) -> DataFrame:
    """``(topic, subscription, region)`` for every subscription that exists somewhere."""
    return cursors.select("topic", "subscription", "region").distinct()


@dataclass(frozen=True)
class Pairs:
    detail: DataFrame
    """One row per unsynced message: identity, subscription, region (acked), other (not acked)."""
    summary: DataFrame
    """``topic, subscription, region, other, unsynced, sync_lag_ms`` for every pair of regions where
    the subscription exists."""


def pairs(st: DataFrame, subs: DataFrame) -> Pairs:
    a = st.alias("a")
    b = st.alias("b")
    on = [F.col(f"a.{c}") == F.col(f"b.{c}") for c in [*IDENTITY, "subscription"]]
    joined = a.join(b, [*on, F.col("a.region") != F.col("b.region")]).select(
        *(F.col(f"a.{c}") for c in IDENTITY),
        F.col("a.subscription"),
        F.col("a.region").alias("region"),
        F.col("b.region").alias("other"),
        F.col("a.publish_time"),
        F.col("a.acked").alias("acked_here"),
        (F.col("a.acked") & ~F.col("b.acked")).alias("unsynced"),
    )
    detail = joined.where("unsynced").drop("acked_here", "unsynced")
    counts = joined.groupBy("topic", "subscription", "region", "other").agg(
        F.count(F.when(F.col("unsynced"), 1)).alias("unsynced"),
        F.max(F.when(F.col("acked_here"), F.col("publish_time"))).alias("newest"),
        F.min(F.when(F.col("unsynced"), F.col("publish_time"))).alias("oldest"),
    )
    x, y = subs.alias("x"), subs.alias("y")
    every = x.join(
        y,
        (F.col("x.topic") == F.col("y.topic"))
        & (F.col("x.subscription") == F.col("y.subscription"))
        & (F.col("x.region") != F.col("y.region")),
    ).select("x.topic", "x.subscription", "x.region", F.col("y.region").alias("other"))
    summary = (
        every.join(counts, ["topic", "subscription", "region", "other"], "left")
        .select(
            "topic",
            "subscription",
            "region",
            "other",
            F.coalesce(F.col("unsynced"), F.lit(0)).cast("long").alias("unsynced"),
            F.when(F.col("unsynced") > 0, F.col("newest") - F.col("oldest"))
            .otherwise(F.lit(0))
            .cast("long")
            .alias("sync_lag_ms"),
        )
        .orderBy("topic", "subscription", "region", "other")
    )
    return Pairs(detail, summary)


def unsynced_timeline(detail: DataFrame, *, buckets: int = 60) -> DataFrame:
    """``region, other, bucket_ms, unsynced``: unsynced messages per region pair by publish time, in at
    most ``buckets + 1`` equal buckets (at least one second wide) over the unsynced messages' time span;
    empty when nothing is unsynced. Small whatever the input: what the plot draws over time."""
    span = detail.agg(F.min("publish_time").alias("lo"), F.max("publish_time").alias("hi"))
    width = F.greatest(F.lit(1000), F.ceil((F.col("hi") - F.col("lo")) / F.lit(buckets))).cast("long")
    bucketed = detail.crossJoin(span).select(
        "region",
        "other",
        (F.col("lo") + F.floor((F.col("publish_time") - F.col("lo")) / width) * width)
        .cast("long")
        .alias("bucket_ms"),
    )
    return (
        bucketed.groupBy("region", "other", "bucket_ms")
        .agg(F.count("*").cast("long").alias("unsynced"))
        .orderBy("region", "other", "bucket_ms")
    )


@dataclass(frozen=True)
class Losses:
    detail: DataFrame
    summary: DataFrame
    """``topic, subscription, region, acked, lost`` for every subscription and region."""


def losses(st: DataFrame, subs: DataFrame, deliveries: DataFrame) -> Losses:
    acked = st.where("acked")
    d = deliveries.select(
        "topic",
        "partition",
        "subscription",
        "origin_region",
        "origin_ledger",
        "origin_entry",
        F.col("batch_index").alias("d_batch"),
    ).distinct()
    keys = ["topic", "partition", "subscription", "origin_region", "origin_ledger", "origin_entry"]
    a, dd = acked.alias("a"), d.alias("d")
    cond = [F.col(f"a.{k}") == F.col(f"d.{k}") for k in keys]
    cond.append(F.col("d.d_batch").isNull() | (F.col("d.d_batch") == F.col("a.batch_index")))
    detail = a.join(dd, cond, "left_anti")
    acked_n = acked.groupBy("topic", "subscription", "region").agg(F.count("*").alias("acked"))
    lost_n = detail.groupBy("topic", "subscription", "region").agg(F.count("*").alias("lost"))
    summary = (
        subs.join(acked_n, ["topic", "subscription", "region"], "left")
        .join(lost_n, ["topic", "subscription", "region"], "left")
        .select(
            "topic",
            "subscription",
            "region",
            F.coalesce(F.col("acked"), F.lit(0)).cast("long").alias("acked"),
            F.coalesce(F.col("lost"), F.lit(0)).cast("long").alias("lost"),
        )
        .orderBy("topic", "subscription", "region")
    )
    return Losses(detail, summary)


@dataclass(frozen=True)
class ReplicationDrift:
    detail: DataFrame
    """One row per message a region lacks: identity, region, ``kind`` (trimmed, gap, lag)."""
    summary: DataFrame
    """``topic, origin_region, region, trimmed, gaps, lag, lag_ms, duplicates``."""


def replication(
    spark: SparkSession, messages: DataFrame, expected: Mapping[str, Sequence[str]], as_of_ms: int
) -> ReplicationDrift:
    m = messages.where(F.col("origin_region").isNotNull())
    universe = (
        m.groupBy(*IDENTITY)
        .agg(F.min("publish_time").alias("publish_time"))
        .withColumn("namespace", F.regexp_extract("topic", NAMESPACE, 1))
    )
    wanted = spark.createDataFrame(
        [(ns, r) for ns, regions in expected.items() for r in regions], "namespace STRING, region STRING"
    )
    should = universe.join(F.broadcast(wanted), "namespace").where(F.col("region") != F.col("origin_region"))
    have = m.groupBy(*IDENTITY, "region").agg(F.count("*").alias("copies"))
    coords = F.struct("origin_ledger", "origin_entry", "batch_index")
    bounds = have.groupBy("topic", "partition", "region", "origin_region").agg(
        F.min(coords).alias("lo"), F.max(coords).alias("hi")
    )
    missing = (
        should.join(have.select(*IDENTITY, "region"), [*IDENTITY, "region"], "left_anti")
        .join(bounds, ["topic", "partition", "region", "origin_region"], "left")
        .withColumn(
            "kind",
            F.when(F.col("lo").isNotNull() & (coords < F.col("lo")), "trimmed")
            .when(F.col("lo").isNotNull() & (coords < F.col("hi")), "gap")
            .otherwise("lag"),
        )
        .drop("lo", "hi", "namespace")
    )
    counts = missing.groupBy("topic", "origin_region", "region").agg(
        F.count(F.when(F.col("kind") == "trimmed", 1)).alias("trimmed"),
        F.count(F.when(F.col("kind") == "gap", 1)).alias("gaps"),
        F.count(F.when(F.col("kind") == "lag", 1)).alias("lag"),
        F.min(F.when(F.col("kind") == "lag", F.col("publish_time"))).alias("oldest_lagging"),
    )
    dups = (
        have.where(F.col("region") != F.col("origin_region"))
        .groupBy("topic", "origin_region", "region")
        .agg(F.sum(F.col("copies") - 1).alias("duplicates"))
    )
    keys = ["topic", "origin_region", "region"]
    summary = (
        should.select(*keys)
        .distinct()
        .join(counts, keys, "left")
        .join(dups, keys, "left")
        .select(
            *keys,
            *(F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in ("trimmed", "gaps", "lag")),
            F.coalesce(F.lit(as_of_ms) - F.col("oldest_lagging"), F.lit(0)).cast("long").alias("lag_ms"),
            F.coalesce(F.col("duplicates"), F.lit(0)).cast("long").alias("duplicates"),
        )
        .orderBy(*keys)
    )
    return ReplicationDrift(missing, summary)


def order_violations(deliveries: DataFrame) -> DataFrame:
    """Deliveries that went back in their key's order (``geosync_core.drift``'s definition)."""
    batch = F.coalesce(F.col("batch_index"), F.lit(-1))
    here = F.struct(F.col("origin_ledger"), F.col("origin_entry"), batch)
    window = (
        Window.partitionBy("topic", "subscription", "key", "origin_region")
        .orderBy("delivered_at", "origin_ledger", "origin_entry", batch)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    top = F.max(here).over(window)
    return (
        deliveries.withColumn("after", top)
        .where(F.col("after").isNotNull() & (here < F.col("after")))
        .select(
            "topic",
            "subscription",
            "key",
            "region",
            "origin_region",
            "origin_ledger",
            "origin_entry",
            "delivered_at",
            F.col("after.origin_ledger").alias("after_origin_ledger"),
            F.col("after.origin_entry").alias("after_origin_entry"),
        )
    )


def normalize_deliveries(raw: DataFrame) -> DataFrame:
    """A delivery log as read from JSON lines (``topic`` may name a partition, ``delivered_at`` may be
    epoch milliseconds or an ISO-8601 time) in ``DELIVERIES_SCHEMA``."""
    part = F.regexp_extract("topic", r"-partition-([0-9]+)$", 1)
    when_ms = F.coalesce(
        F.col("delivered_at").cast("long"),
        F.unix_millis(F.to_timestamp(F.col("delivered_at"))),
    )
    return raw.select(
        "region",
        F.regexp_replace("topic", r"-partition-[0-9]+$", "").alias("topic"),
        F.when(part == "", F.lit(-1)).otherwise(part.cast("int")).alias("partition"),
        "subscription",
        "key",
        "origin_region",
        F.col("origin_ledger").cast("long").alias("origin_ledger"),
        F.col("origin_entry").cast("long").alias("origin_entry"),
        F.col("batch_index").cast("int").alias("batch_index"),
        when_ms.alias("delivered_at"),
    )


RAW_DELIVERIES_SCHEMA = (
    "region STRING, topic STRING, subscription STRING, key STRING, origin_region STRING, "
    "origin_ledger BIGINT, origin_entry BIGINT, batch_index INT, delivered_at STRING"
)
