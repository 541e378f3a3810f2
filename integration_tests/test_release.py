"""The release artifacts as a user gets them: ``python -m build`` makes the wheel and the sdist,
``twine check`` accepts their metadata, and the wheel installed into a fresh virtualenv (no source tree
on its path) runs ``geoctl`` and starts the agent, which serves ``/healthz`` for a region it cannot reach
yet, as in a pod whose broker is still starting.

The virtualenv's dependencies come through pip at the versions ``constraints.txt`` pins (pip's cache makes
a second run quick). About a minute and a half on the 2-core CI machine, most of it pip."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.request
import zipfile

import pytest

from geosync_lab import regions

ROOT = pathlib.Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# geosync_sim ships too: the deterministic simulation of regions that runs the agent (bench/sim.py drives it)
PACKAGES = {
    "geosync_core",
    "geosync_adapters",
    "geosync_agent",
    "geosync_lab",
    "geoctl",
    "geosync_audit",
    "geosync_sim",
}


def run(*cmd: str | pathlib.Path, cwd: pathlib.Path | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    return out


def test_build_makes_one_wheel_and_one_sdist_of_the_project_version_that_twine_accepts(
    dist: pathlib.Path,
) -> None:
    assert sorted(p.name for p in dist.iterdir()) == [
        f"geosync-{VERSION}-py3-none-any.whl",
        f"geosync-{VERSION}.tar.gz",
    ]
    out = run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert out.count("PASSED") == 2, out
    with tarfile.open(dist / f"geosync-{VERSION}.tar.gz") as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "constraints.txt"} <= names


def test_the_wheel_holds_every_package_its_scripts_and_its_license(dist: pathlib.Path) -> None:
    with zipfile.ZipFile(dist / f"geosync-{VERSION}-py3-none-any.whl") as wheel:
        names = wheel.namelist()
        entry_points = wheel.read(f"geosync-{VERSION}.dist-info/entry_points.txt").decode()
    assert {n.split("/", 1)[0] for n in names if n.endswith("/__init__.py")} == PACKAGES
    assert "geosync_core/py.typed" in names
    assert f"geosync-{VERSION}.dist-info/licenses/LICENSE" in names
    assert "geoctl = geoctl.cli:main" in entry_points
    assert "geosync-agent = geosync_agent.__main__:main" in entry_points
    # Tests, benchmarks and the lab's data never ship.
    assert not [n for n in names if n.startswith(("tests/", "integration_tests/", "bench/"))]


def test_the_wheel_in_a_fresh_virtualenv_runs_geoctl_and_the_agent(
    dist: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    bin_dir = venv / "bin"
    wheel = dist / f"geosync-{VERSION}-py3-none-any.whl"
    run(
        bin_dir / "pip", "install", "-q", "--disable-pip-version-check", "-c", ROOT / "constraints.txt", wheel
    )
    # From anywhere but the checkout: nothing may come from the source tree.
    where = run(bin_dir / "python", "-c", "import geoctl; print(geoctl.__file__)", cwd=tmp_path)
    assert where.startswith(str(venv)), where

    assert f"geoctl, version {VERSION}" in run(bin_dir / "geoctl", "--version", cwd=tmp_path)
    assert "NOUN VERB" in run(bin_dir / "geoctl", "--help", cwd=tmp_path)
    assert "--config" in run(bin_dir / "geosync-agent", "--help", cwd=tmp_path)

    keys = tmp_path / "keys"
    run(bin_dir / "geoctl", "keys", "generate", "--region", "nowhere", "--key-id", "nowhere-1", "--out", keys)
    keyring = keys / "keyring.yaml"
    run(
        bin_dir / "geoctl", "keys", "add", "--keyring", keyring, "--region", "nowhere",
        "--public", keys / "nowhere-1.pub",
    )  # fmt: skip
    port = regions.free_ports(1)[0]
    config = tmp_path / "agent.yaml"
    config.write_text(
        "region: nowhere\n"
        "admin_url: http://127.0.0.1:9\n"
        "service_url: pulsar://127.0.0.1:9\n"
        f"metrics_port: {port}\n"
        "mirror_policies: false\n"
        f"signing_key_file: {keys / 'nowhere-1.key'}\n"
        "signing_key_id: nowhere-1\n"
        f"keyring_file: {keyring}\n"
        f"state_dir: {tmp_path / 'state'}\n"
    )
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [str(bin_dir / "geosync-agent"), "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    try:
        healthy = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and agent.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                    healthy = answer.status == 200
            except OSError:
                pass
            if healthy:
                break
            time.sleep(0.5)
        assert healthy, (
            f"the agent (exit {agent.poll()}) never answered /healthz:\n"
            + ((tmp_path / "agent.log").read_text()[-3000:])
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "agent.log").read_text()[-3000:]
