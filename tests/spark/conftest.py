"""One SparkSession for every Spark test in the session (starting one costs seconds)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from geosync_audit.sessions import session


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    s = session("local[2]", app="geosync-audit-tests", small=True)
    return s
