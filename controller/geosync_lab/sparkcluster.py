"""A Spark standalone cluster on this host: a master and workers started from the pyspark distribution.

The drift audit runs on ``local[*]`` by default and on a cluster with ``--master spark://...``. The real-lab
test of the latter (``integration_tests/test_audit_cluster.py``) and the bench comparing both
(``bench/audit.py --masters local[2],standalone``) need a real cluster; the pyspark package is a Spark
distribution (``jars/``, ``bin/spark-class``), so this boots one without a Spark download. It names that
directory ``SPARK_HOME`` for the daemons: left to find it themselves, they ask whatever ``python3`` is first
in ``PATH``, which need not have pyspark.

Memory is lean (daemons 256 MiB, workers offering 640 MiB each): the machine also runs three Pulsar
regions. An application must then ask for executors that fit (``spark.executor.memory`` 512m; the
default 1g never gets one and the application waits forever). ``standalone`` stops exactly the processes
it started, terminating them and killing what is still there after a grace period.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from geosync_lab.errors import LabError

EXECUTOR_MEMORY = "512m"
"""What an application should ask for per executor so that a worker of ``standalone`` can give it."""


@dataclass(frozen=True)
class StandaloneCluster:
    master: str
    """``spark://127.0.0.1:PORT``, for ``--master``."""
    ui: str
    """The master's web UI, whose ``/json/`` says which workers are alive and which applications ran."""
    workers: int
    logs: pathlib.Path

    def status(self) -> dict[str, Any]:
        """The master's ``/json/`` document (empty when it does not answer)."""
        try:
            with urllib.request.urlopen(f"{self.ui}/json/", timeout=3) as response:
                data: dict[str, Any] = json.loads(response.read())
                return data
        except (OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return int(self.status().get("aliveworkers", 0))

    def completed_apps(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.status().get("completedapps", []) if a.get("name") == name]


def spark_home() -> pathlib.Path:
    """The Spark distribution inside the installed pyspark package (found without importing it)."""
    spec = importlib.util.find_spec("pyspark")
    home = (
        pathlib.Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    )
    if home is None or not (home / "bin" / "spark-class").exists():
        raise LabError(
            "pyspark is not installed here", hint="install the spark extra (pip install -e '.[spark]')"
        )
    return home


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [int(s.getsockname()[1]) for s in socks]
    for s in socks:
        s.close()
    return ports


@contextlib.contextmanager
def standalone(
    root: pathlib.Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "640m",
    daemon_memory: str = "256m",
    start_timeout_s: float = 120.0,
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) on loopback, logs and work
    directories under ``root``; yielded once every worker has registered, stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    port, ui_port, *worker_ui = free_ports(2 + workers)
    home = spark_home()
    launcher = home / "bin" / "spark-class"
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": daemon_memory,
    }
    cluster = StandaloneCluster(
        master=f"spark://127.0.0.1:{port}", ui=f"http://127.0.0.1:{ui_port}", workers=workers, logs=root
    )
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with (root / f"{name}.log").open("wb") as log:
            procs.append(subprocess.Popen([str(launcher), *args], env=env, stdout=log, stderr=log))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui_port))  # fmt: skip
        for i, wport in enumerate(worker_ui):
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                  "--cores", str(cores), "--memory", memory, "--webui-port", str(wport),
                  "--work-dir", str(root / f"work{i}"), cluster.master)  # fmt: skip
        _wait_for_workers(cluster, procs, start_timeout_s)
        yield cluster
    finally:
        _stop(procs)


def _wait_for_workers(
    cluster: StandaloneCluster, procs: list[subprocess.Popen[bytes]], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while cluster.alive_workers() < cluster.workers:
        exited = [p.args for p in procs if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            raise LabError(
                f"the Spark master at {cluster.master} has {cluster.alive_workers()} of {cluster.workers} "
                f"workers after {timeout_s:.0f} s" + (" (a daemon exited)" if exited else ""),
                hint=f"see the logs in {cluster.logs}",
            )
        time.sleep(0.5)


def _stop(procs: list[subprocess.Popen[bytes]], grace_s: float = 20.0) -> None:
    for p in procs:  # only the processes started here
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
