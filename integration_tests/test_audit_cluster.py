"""The drift audit on a real Spark standalone cluster: a master and two workers started from the pyspark
distribution (``spark-class``, lean memory), ``geoctl audit drift --master spark://...`` run as the
installed console script, against the real lab.

Executors are separate JVMs started by the workers; their Python workers must run on geoctl's interpreter
(it exists on this host) to import the data source.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest

from geosync_lab import sparkcluster
from integration_tests.helpers import Lab
from integration_tests.test_audit_installed import bare_env, publish_a_topic, run_geoctl

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sparkcluster.StandaloneCluster]:
    with sparkcluster.standalone(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


def test_audit_runs_on_a_standalone_cluster(
    lab: Lab, spark_cluster: sparkcluster.StandaloneCluster, tmp_path: pathlib.Path
) -> None:
    master = spark_cluster.master
    topic = publish_a_topic(lab)
    out = tmp_path / "report"
    env = {**bare_env(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_EXECUTOR_MEMORY": sparkcluster.EXECUTOR_MEMORY}
    args = ["audit", "drift", "--topology", str(lab.dir / "topology.json"), "--out", str(out)]
    args += ["--namespace", "geo/abc", "--topics", f"{topic.rsplit('/', 1)[-1]}$", "--master", master]
    done = run_geoctl([*args, "-o", "json"], env)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)
    assert summary["messages"] == {"a": 7, "b": 7, "c": 7}
    assert summary["unresolved"] == 0
    finished = spark_cluster.completed_apps("geosync-audit")
    assert finished, spark_cluster.status()  # the job ran on the cluster's executors, not in a local driver
    assert finished[0]["cores"] >= 1
