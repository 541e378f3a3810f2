"""Getting a Pulsar server distribution from Maven Central, verified and cached.

Why Maven: Pulsar's server is not packaged for PyPI or Debian, but every release deploys
``org.apache.pulsar:pulsar-server-distribution:<version>:tar.gz:bin`` to Maven Central. We ask Maven
itself for it (strict checksums, its own local repository as the download cache), then unpack it once
into GeoSync's cache directory. A partially unpacked tree is never used: it is unpacked beside its final
name and renamed when complete.

Why 4.0.8: the design asks for Pulsar 4.0 LTS at 4.0.13 or later, but the newest 4.0.x release that the
registry reachable from our machines serves is 4.0.8 (4.0.9 and later answer 404). 4.0.8 already stamps
``__MSG_PROP_REPL_SOURCE_POSITION`` (since 4.0.4). ``GEOSYNC_PULSAR_VERSION`` picks another version.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tarfile

from geosync_lab.errors import LabError

PULSAR_VERSION = os.environ.get("GEOSYNC_PULSAR_VERSION", "4.0.8")
MIN_JAVA = 17
_ARTIFACT = "org.apache.pulsar:pulsar-server-distribution:{version}:tar.gz:bin"


def cache_dir() -> pathlib.Path:
    root = os.environ.get("GEOSYNC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "geosync")
    path = pathlib.Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def java_major(java: str = "java") -> int:
    """The major version of the ``java`` on PATH; raise with an install hint when missing."""
    exe = shutil.which(java)
    if exe is None:
        raise LabError(
            "Java is not installed (no 'java' on PATH)",
            hint=f"install a JDK {MIN_JAVA} or newer, e.g. 'apt-get install -y openjdk-17-jdk-headless'",
        )
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise LabError(
            f"cannot tell the Java version from: {out.stderr.strip()[:200]}",
            hint=f"install a JDK {MIN_JAVA} or newer",
        )
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8" style
        major = int(match.group(2))
    return major


def check_java() -> int:
    major = java_major()
    if major < MIN_JAVA:
        raise LabError(
            f"Java {major} is too old: Pulsar 4 needs Java {MIN_JAVA} or newer",
            hint="install openjdk-17-jdk-headless (or newer) and put it first on PATH",
        )
    return major


def pulsar_home(version: str = PULSAR_VERSION) -> pathlib.Path:
    return cache_dir() / f"apache-pulsar-{version}"


def _sha1(path: pathlib.Path) -> str:
    digest = hashlib.sha1()  # Maven Central publishes .sha1 for this artifact (no .sha512)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _maven_repository_in_use() -> pathlib.Path:
    for arg in shlex.split(os.environ.get("GEOSYNC_MAVEN_ARGS", "")):
        if arg.startswith("-Dmaven.repo.local="):
            return pathlib.Path(arg.split("=", 1)[1])
    return pathlib.Path(os.path.expanduser("~")) / ".m2" / "repository"


def _fetch_tarball(version: str, dest: pathlib.Path) -> pathlib.Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LabError(
            "Maven is not installed (no 'mvn' on PATH); it fetches Pulsar from Maven Central",
            hint="install it with 'apt-get install -y maven'",
        )
    artifact = _ARTIFACT.format(version=version)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-C",
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={dest}",
        "-Dmdep.overWriteReleases=true",
        # e.g. "-s settings.xml" for a proxy or mirror; also how tests stand in an unreachable registry
        *shlex.split(os.environ.get("GEOSYNC_MAVEN_ARGS", "")),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    tarball = dest / f"pulsar-server-distribution-{version}-bin.tar.gz"
    if proc.returncode != 0 or not tarball.exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        unreachable = any(
            s in tail for s in ("Could not transfer", "Unknown host", "Connection", "timed out")
        )
        missing = "Could not find artifact" in tail or "not found" in tail.lower()
        if missing and not unreachable:
            raise LabError(
                f"Pulsar {version} is not on Maven Central ({artifact}):\n{tail}",
                hint="pick a published version with GEOSYNC_PULSAR_VERSION",
            )
        raise LabError(
            f"Maven could not download {artifact}:\n{tail}",
            hint="check that Maven Central is reachable from this machine, then run the command again",
        )
    # Maven verified the checksum while downloading (-C); check the copy we got against what it stored.
    stored = (
        _maven_repository_in_use()
        / "org/apache/pulsar/pulsar-server-distribution"
        / version
        / f"pulsar-server-distribution-{version}-bin.tar.gz.sha1"
    )
    if stored.exists():
        expected = stored.read_text().split()[0].strip().lower()
        if _sha1(tarball) != expected:
            tarball.unlink()
            raise LabError(
                f"checksum mismatch for {tarball.name}", hint="run the command again to re-download"
            )
    return tarball


def _extract(tar: tarfile.TarFile, dest: pathlib.Path) -> None:
    """Unpack ``tar`` under ``dest`` only. Python 3.11.4 and later check that with the "data" filter; Debian
    12's python3.11 (3.11.2) has no filters, so there every name and link must stay inside ``dest``."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = dest.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        # A symlink's target is relative to its directory, a hard link's to the archive's root.
        link = root
        if member.issym():
            link = (target.parent / member.linkname).resolve()
        elif member.islnk():
            link = (root / member.linkname).resolve()
        if not (target.is_relative_to(root) and link.is_relative_to(root)) or member.isdev():
            raise tarfile.TarError(f"{member.name!r} would be written outside {dest}")
    tar.extractall(dest)


def ensure_pulsar(version: str = PULSAR_VERSION) -> pathlib.Path:
    """Return PULSAR_HOME for ``version``, downloading and unpacking it first if needed."""
    home = pulsar_home(version)
    if (home / ".geosync-complete").exists():
        return home
    cache = cache_dir()
    tarball = cache / f"pulsar-server-distribution-{version}-bin.tar.gz"
    if not tarball.exists():
        tarball = _fetch_tarball(version, cache)
    staging = cache / f".unpack-{version}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        with tarfile.open(tarball) as tar:
            _extract(tar, staging)
        inner = staging / f"apache-pulsar-{version}"
        if not (inner / "bin" / "pulsar").exists():
            raise LabError(
                f"{tarball.name} does not contain apache-pulsar-{version}/bin/pulsar",
                hint=f"delete {tarball} and run the command again",
            )
        (inner / "bin" / "pulsar").chmod(0o755)
        (inner / ".geosync-complete").write_text(version + "\n")
        shutil.rmtree(home, ignore_errors=True)
        inner.rename(home)
    except (tarfile.TarError, OSError) as e:
        tarball.unlink(missing_ok=True)
        raise LabError(
            f"could not unpack {tarball.name}: {e}", hint="run the command again to re-download"
        ) from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return home
