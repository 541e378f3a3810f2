"""Spark's Python workers run on the driver's interpreter, not on the first ``python3`` in ``PATH``."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from geosync_audit.sessions import worker_python_for


def test_workers_run_on_the_drivers_interpreter(spark: SparkSession) -> None:
    assert spark.conf.get("spark.pyspark.python") == sys.executable
    seen = spark.sparkContext.parallelize(range(2), 2).map(lambda _: __import__("sys").executable).collect()
    assert set(seen) == {sys.executable}


def test_an_explicit_choice_wins() -> None:
    assert worker_python_for("/opt/py/bin/python") == "/opt/py/bin/python"
