"""The drift audit as operators run it: the installed ``geoctl`` console script in its own process, with a
``PATH`` that does not contain the virtualenv, against the real lab.

Spark starts its Python workers (the ``pulsar-geo`` data source's planner and readers) as separate
processes; they must run on the interpreter geoctl is installed in, not on the first ``python3`` in
``PATH``, which has neither this package nor pulsar-client (``geosync_audit.sessions``).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import uuid

import pytest

from integration_tests.helpers import Lab, produce, wait_for

pytestmark = pytest.mark.lab

VENV_BIN = pathlib.Path(sys.executable).parent
GEOCTL = VENV_BIN / "geoctl"


def bare_env() -> dict[str, str]:
    """The environment of a shell that never activated the virtualenv: system PATH, no PYSPARK_*."""
    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if pathlib.Path(p).is_dir())
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": path, "LANG": "C.UTF-8"}
    for key in ("JAVA_HOME", "TMPDIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def publish_a_topic(lab: Lab) -> str:
    topic = f"persistent://geo/abc/installed-{uuid.uuid4().hex[:8]}"
    for region in ("a", "b", "c"):
        lab.admin(region).create_subscription(topic, "unsynced-installed")
    produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(7)])

    def backlog(region: str) -> int | None:
        try:
            subs = lab.admin(region).topic_stats(topic).get("subscriptions") or {}
        except Exception:
            return None
        found = subs.get("unsynced-installed", {}).get("msgBacklog")
        return None if found is None else int(found)

    wait_for(lambda: all(backlog(r) == 7 for r in "abc"), timeout_s=90, what=f"{topic} replicated to b, c")
    return topic


def run_geoctl(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GEOCTL), *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_installed_geoctl_audits_without_the_virtualenv_in_path(lab: Lab, tmp_path: pathlib.Path) -> None:
    env = bare_env()
    outside = shutil.which("python3", path=env["PATH"])
    assert outside is not None, "the test needs a system python3 (the one Spark would otherwise start)"
    assert pathlib.Path(outside).parent != VENV_BIN
    # the python3 Spark used to start cannot import the audit: this is what the fix is about
    probe = subprocess.run([outside, "-c", "import geosync_audit"], env=env, capture_output=True, check=False)
    assert probe.returncode != 0

    topic = publish_a_topic(lab)
    out = tmp_path / "report"
    args = ["audit", "drift", "--topology", str(lab.dir / "topology.json"), "--out", str(out)]
    args += ["--namespace", "geo/abc", "--topics", f"{topic.rsplit('/', 1)[-1]}$", "--master", "local[2]"]
    done = run_geoctl([*args, "-o", "json"], env)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout)
    assert summary["messages"] == {"a": 7, "b": 7, "c": 7}
    assert summary["unresolved"] == 0
    assert json.loads((out / "summary.json").read_text())["totals"] == summary["totals"]
    assert (out / "drift.png").read_bytes()[:4] == b"\x89PNG"

    # an operator's explicit choice still rules: a worker interpreter without the package fails loudly
    wrong = run_geoctl([*args, "--worker-python", outside], env)
    assert wrong.returncode != 0
    assert "geosync_audit" in wrong.stdout + wrong.stderr
