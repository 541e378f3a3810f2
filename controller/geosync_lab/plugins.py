"""Building the broker plugin NAR (``interceptors/``) for the lab, and the broker keys that load it.

The lab loads GeoSync's plugins into every region: the entry filter that hides snapshot markers from
application subscriptions and the interceptor that records each entry's origin region. They are built
from the sources in this repository with Maven (dependencies come from Maven Central through ``mvn`` and
are cached in ``~/.m2``; after the first build it runs offline). The NAR is cached under GeoSync's cache
directory keyed by a hash of every source file under ``interceptors/``, so an unchanged tree is never
rebuilt and a changed one always is. Nothing else in the test suites invokes Maven.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess

from geosync_lab.distribution import cache_dir
from geosync_lab.errors import LabError

PLUGIN_NAME = "geosync"
INTERCEPTORS = pathlib.Path(__file__).resolve().parents[2] / "interceptors"
_NAR_GLOB = "geosync-broker-plugin/target/geosync-broker-plugin-*.nar"
_SKIP_DIRS = {"target", ".idea", ".settings"}


def sources_hash(root: pathlib.Path = INTERCEPTORS) -> str:
    """A digest of every source file under ``root`` (paths and contents), build output excluded."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])
    )
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def plugins_dir(digest: str) -> pathlib.Path:
    return cache_dir() / "plugins" / digest


def ensure_plugins(root: pathlib.Path = INTERCEPTORS, *, timeout_s: float = 900.0) -> pathlib.Path:
    """Return the directory holding the plugin NAR for the current sources, building it when needed."""
    if not (root / "pom.xml").exists():
        raise LabError(
            f"no plugin sources at {root}",
            hint="run from a full checkout of the repository (interceptors/ holds the Maven build)",
        )
    digest = sources_hash(root)
    target = plugins_dir(digest)
    if any(target.glob("*.nar")):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LabError(
            "Maven is not installed (no 'mvn' on PATH); it builds the broker plugins",
            hint="install it with 'apt-get install -y maven'",
        )
    cmd = [
        mvn,
        "-B",
        "-q",
        "package",
        # e.g. "-s settings.xml" for a proxy or mirror, or "-o" to forbid the network
        *shlex.split(os.environ.get("GEOSYNC_MAVEN_ARGS", "")),
    ]
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise LabError(
            f"building the broker plugins took longer than {timeout_s:.0f} s",
            hint="the first build downloads dependencies; run 'cd interceptors && mvn package' to watch it",
        ) from e
    nars = sorted(root.glob(_NAR_GLOB))
    if proc.returncode != 0 or not nars:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        unreachable = any(
            s in tail for s in ("Could not transfer", "Unknown host", "Connection", "timed out")
        )
        raise LabError(
            f"building the broker plugins failed (exit {proc.returncode}):\n{tail}",
            hint=(
                "check that Maven Central is reachable through mvn (GEOSYNC_MAVEN_ARGS for a settings file)"
                if unreachable
                else f"run 'cd {root} && mvn -B package' to see the full output"
            ),
        )
    if sources_hash(root) != digest:
        raise LabError(
            "the plugin sources changed while they were being built",
            hint="run the command again",
        )
    staging = target.with_name(f".{digest}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(nars[-1], staging / nars[-1].name)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def plugin_conf(nar_dir: pathlib.Path) -> dict[str, str]:
    """The standalone.conf / broker.conf keys that load the entry filter and the interceptor."""
    nar_dir = nar_dir.resolve()
    return {
        "entryFilterNames": PLUGIN_NAME,
        "entryFiltersDirectory": str(nar_dir),
        "brokerInterceptors": PLUGIN_NAME,
        "brokerInterceptorsDirectory": str(nar_dir),
        # Namespace/topic entry-filter policies must not switch ours off.
        "allowOverrideEntryFilters": "false",
        # The agent is a sidecar on loopback: let it acknowledge through the interceptor (one call per
        # round for every subscription instead of an expireMessages each, and holes without PIP-423).
        "geosyncAllowCursorWrites": "true",
    }
