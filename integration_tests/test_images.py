"""The container images, built and run here: ``scripts/build-images.sh`` builds both with podman (bases
from Debian packages where no registry answers), runs the agent as the chart does (read-only root, no
capabilities) until its HEALTHCHECK passes, and runs the plugin image's copy into a directory; this test
runs the script and reads what it built.

It needs root and apt (the script installs podman, runc and debootstrap if missing), about three minutes
the first time on the 2-core machine (debootstrap, then the wheels), well under a minute after that. Not
covered here: an agent in a container against a real region (the lab's agents run as processes), pulling
from or pushing to a registry, and Kubernetes itself (the chart is rendered and schema-checked in
``tests/charts``).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import tomllib
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
REGISTRY = "localhost/geosync"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def inspect(image: str) -> dict[str, Any]:
    out = subprocess.run(
        ["podman", "image", "inspect", image], capture_output=True, text=True, check=True
    ).stdout
    return dict(json.loads(out)[0])


def test_build_images_builds_both_and_runs_them() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-images.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "agent healthy as uid 10001" in result.stdout
    assert "geosync-broker-plugin-" in result.stdout

    agent = inspect(f"{REGISTRY}/agent:{VERSION}")
    assert agent["Config"]["User"] == "10001:10001"
    assert agent["Config"]["Entrypoint"] == ["python", "-m", "geosync_agent"]
    assert "9464/tcp" in agent["Config"]["ExposedPorts"]
    assert "/healthz" in " ".join(agent["Healthcheck"]["Test"])  # kept: built in the docker format
    assert agent["Labels"]["org.opencontainers.image.version"] == VERSION

    plugins = inspect(f"{REGISTRY}/broker-plugins:{VERSION}")
    assert plugins["Config"]["User"] == "10001:10001"
    assert plugins["Size"] < 20_000_000
