"""The audit's SparkSession: one per process, quiet, bound to loopback when local.

A session costs seconds to start, so everything in a process (the job, the CLI, the tests) shares the
one ``session`` returns. ``SPARK_LOCAL_IP`` defaults to 127.0.0.1 for local masters (otherwise Spark binds
the external interface and warns); the UI and the console progress bar are off.
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from geosync_audit.source import PulsarGeoDataSource


def default_master() -> str | None:
    """None under ``spark-submit`` (its ``--master`` rules), else ``local[*]``."""
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"


def session(
    master: str | None = "local[*]",
    *,
    app: str = "geosync-audit",
    shuffle_partitions: int = 4,
    small: bool = False,
) -> SparkSession:
    """The process's session. ``small`` tunes it for tiny inputs (tests, a handful of topics): one
    shuffle partition, no adaptive execution and no whole-stage code generation, whose per-query planning
    and compile time dominates when a query reads hundreds of rows."""
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    spark = (
        builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    if small:
        spark.conf.set("spark.sql.shuffle.partitions", "1")
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        spark.conf.set("spark.sql.codegen.wholeStage", "false")
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PulsarGeoDataSource)
    return spark
