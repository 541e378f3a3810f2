"""The drift audit on a real Spark standalone cluster: a master and two workers started from the pyspark
distribution (``spark-class``, lean memory), ``geoctl audit drift --master spark://...`` run as the
installed console script, against the real lab.

Executors are separate JVMs started by the workers; their Python workers must run on geoctl's interpreter
(it exists on this host) to import the data source.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests

from integration_tests.helpers import Lab, wait_for
from integration_tests.test_audit_installed import bare_env, publish_a_topic, run_geoctl

pytestmark = pytest.mark.lab

SPARK_CLASS = pathlib.Path(sys.executable).parent / "spark-class"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _alive_workers(ui: str) -> int:
    try:
        return int(requests.get(f"{ui}/json/", timeout=3).json().get("aliveworkers", 0))
    except (requests.RequestException, ValueError):
        return 0


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("spark-cluster")
    port, ui_port, *worker_ui = _free_ports(4)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}
    master = f"spark://127.0.0.1:{port}"
    ui = f"http://127.0.0.1:{ui_port}"
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        log = (root / f"{name}.log").open("wb")
        procs.append(subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=log, stderr=log))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui_port))  # fmt: skip
        for i, wport in enumerate(worker_ui):
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                  "--cores", "1", "--memory", "640m", "--webui-port", str(wport),
                  "--work-dir", str(root / f"work{i}"), master)  # fmt: skip
        wait_for(lambda: _alive_workers(ui) == 2, timeout_s=120, what="a Spark master with two workers")
        yield master, ui
    finally:
        for p in procs:  # only the processes this fixture started
            p.terminate()
        deadline = time.monotonic() + 20
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()


def test_audit_runs_on_a_standalone_cluster(
    lab: Lab, spark_cluster: tuple[str, str], tmp_path: pathlib.Path
) -> None:
    master, ui = spark_cluster
    topic = publish_a_topic(lab)
    out = tmp_path / "report"
    env = {**bare_env(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_EXECUTOR_MEMORY": "512m"}
    args = ["audit", "drift", "--topology", str(lab.dir / "topology.json"), "--out", str(out)]
    args += ["--namespace", "geo/abc", "--topics", f"{topic.rsplit('/', 1)[-1]}$", "--master", master]
    done = run_geoctl([*args, "-o", "json"], env)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)
    assert summary["messages"] == {"a": 7, "b": 7, "c": 7}
    assert summary["unresolved"] == 0
    apps = requests.get(f"{ui}/json/", timeout=5).json()
    finished = [a for a in apps.get("completedapps", []) if a["name"] == "geosync-audit"]
    assert finished, apps  # the job ran on the cluster's executors, not in a local driver
    assert finished[0]["cores"] >= 1
