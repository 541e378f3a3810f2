"""The audit's SparkSession: one per process, quiet, bound to loopback when local.

A session costs seconds to start, so everything in a process (the job, the CLI, the tests) shares the
one ``session`` returns. ``SPARK_LOCAL_IP`` defaults to 127.0.0.1 for local masters (otherwise Spark binds
the external interface and warns); the UI and the console progress bar are off.

Python workers (the data source's planner and readers, every UDF) run on the interpreter the driver runs
on, not on whatever ``python3`` comes first in ``PATH``: PySpark starts workers with ``PYSPARK_PYTHON``
(default ``python3``), and a ``python3`` outside the virtualenv geoctl is installed in has neither this
package nor pulsar-client. ``worker_python`` sets it (default ``PYSPARK_PYTHON`` when the operator set one,
else ``sys.executable``); on a cluster that path must exist on every worker host, e.g. the same virtualenv
path or an image with the package installed. Under ``spark-submit`` (no master given) its own settings
(``spark.pyspark.python``, ``PYSPARK_PYTHON``) are left alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from geosync_audit.source import PulsarGeoDataSource


def default_master() -> str | None:
    """None under ``spark-submit`` (its ``--master`` rules), else ``local[*]``."""
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"


def worker_python_for(given: str | None = None) -> str:
    """The interpreter Python workers run on: ``given``, else ``PYSPARK_PYTHON``, else the driver's own."""
    return given or os.environ.get("PYSPARK_PYTHON") or sys.executable


def session(
    master: str | None = "local[*]",
    *,
    app: str = "geosync-audit",
    shuffle_partitions: int = 4,
    small: bool = False,
    worker_python: str | None = None,
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """The process's session. ``small`` tunes it for tiny inputs (tests, a handful of topics): one
    shuffle partition, no adaptive execution and no whole-stage code generation, whose per-query planning
    and compile time dominates when a query reads hundreds of rows. ``config``: further settings for a new
    session (e.g. ``spark.executor.memory`` for a small cluster's workers)."""
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    if master is not None or worker_python:  # under spark-submit its own settings rule
        python = worker_python_for(worker_python)
        # read by SparkContext (UDFs, the data source's functions) and inherited by the JVM it launches
        os.environ["PYSPARK_PYTHON"] = python
        builder = builder.config("spark.pyspark.python", python)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
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
