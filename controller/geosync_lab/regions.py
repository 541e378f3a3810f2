"""One region of the lab: a ZooKeeper-backed Pulsar standalone process with its own ports and data.

Each region is one JVM (``bin/pulsar standalone`` with ``PULSAR_STANDALONE_USE_ZOOKEEPER=1``): an
in-process ZooKeeper that is that region's metadata *and* configuration store (isolated from every other
region, as with PIP-136 deployments), one bookie, one broker. Heaps, direct memory and caches are cut
down so that three regions fit a 2-core, 24 GB machine; no functions worker, no stream storage, no
websocket proxy, ensemble/quorum 1.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from geosync_adapters.admin import AdminClient, is_ready
from geosync_lab.errors import LabError

# Lean JVM settings, measured in bench/lab_boot.py (BENCHMARKS.md).
JVM_MEM = os.environ.get("GEOSYNC_REGION_MEM", "-Xms128m -Xmx512m -XX:MaxDirectMemorySize=256m")
JVM_GC = "-XX:+UseSerialGC -XX:+PerfDisableSharedMem"
JVM_EXTRA_OPTS = (
    "-Dzookeeper.admin.enableServer=false -Dpulsar.allocator.exit_on_oom=true "
    "-Dio.netty.recycler.maxCapacityPerThread=4096 -XX:TieredStopAtLevel=1"
)

BROKER_CONF = {
    "bindAddress": "127.0.0.1",
    "advertisedAddress": "127.0.0.1",
    "managedLedgerDefaultEnsembleSize": "1",
    "managedLedgerDefaultWriteQuorum": "1",
    "managedLedgerDefaultAckQuorum": "1",
    "managedLedgerCacheSizeMB": "32",
    "webSocketServiceEnabled": "false",
    "numIOThreads": "2",
    "numHttpServerThreads": "4",
    "numOrderedExecutorThreads": "2",
    "bookkeeperNumberOfChannelsPerBookie": "2",
    "brokerDeleteInactiveTopicsEnabled": "false",
    "allowAutoTopicCreationType": "non-partitioned",
    "brokerShutdownTimeoutMs": "3000",
    "replicationConnectionsPerBroker": "1",
    "enableReplicatedSubscriptions": "true",
    # The geo-replicators' client (``brokerClient_`` keys go to it): a replicator whose remote broker died
    # retries with a backoff doubling up to 60 s by default, so replication (GeoSync's control topic with it)
    # could resume a minute after the remote bundle has a new owner; 5 s bounds that.
    "brokerClient_maxBackoffIntervalNanos": str(5_000_000_000),
}
"""Broker keys of every lab broker, a standalone region's or one of a multi-broker region's (``clusters``)."""

_CONF_OVERRIDES = {
    **BROKER_CONF,
    # The standalone's in-process bookie reads its keys from the same file.
    "dbStorage_writeCacheMaxSizeMb": "16",
    "dbStorage_readAheadCacheMaxSizeMb": "16",
    "dbStorage_rocksDB_blockCacheSize": "16777216",
}


@dataclass(frozen=True)
class Ports:
    web: int
    broker: int
    zookeeper: int
    bookie: int

    def as_dict(self) -> dict[str, int]:
        return {"web": self.web, "broker": self.broker, "zookeeper": self.zookeeper, "bookie": self.bookie}


def free_ports(count: int, *, avoid: set[int] | None = None) -> list[int]:
    """Ask the kernel for ``count`` distinct free loopback ports (never assume a fixed one)."""
    avoid = set(avoid or ())
    chosen: list[int] = []
    sockets: list[socket.socket] = []
    try:
        while len(chosen) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            sockets.append(s)
            if port not in avoid and port not in chosen:
                chosen.append(port)
    finally:
        for s in sockets:
            s.close()
    return chosen


def pick_ports(avoid: set[int] | None = None) -> Ports:
    web, broker, zk, bookie = free_ports(4, avoid=avoid)
    return Ports(web=web, broker=broker, zookeeper=zk, bookie=bookie)


@dataclass(frozen=True)
class RegionProcess:
    """Where a region lives on disk and how to reach it."""

    name: str
    root: pathlib.Path
    ports: Ports

    @property
    def conf_path(self) -> pathlib.Path:
        return self.root / "conf" / "standalone.conf"

    @property
    def log_dir(self) -> pathlib.Path:
        return self.root / "logs"

    @property
    def log_file(self) -> pathlib.Path:
        return self.log_dir / "pulsar-standalone.log"

    @property
    def stdout_file(self) -> pathlib.Path:
        return self.log_dir / "stdout.log"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.web}"

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.ports.broker}"

    @property
    def zookeeper(self) -> str:
        return f"127.0.0.1:{self.ports.zookeeper}"

    def admin(self) -> AdminClient:
        return AdminClient(self.admin_url)


BATCH_INDEX_ACKS_ENV = "GEOSYNC_BATCH_INDEX_ACKS"
"""``0`` (or ``false``/``no``/``off``) boots lab brokers without batch-index acknowledgements."""


def batch_index_acks_default() -> bool:
    """The lab's default for batch-index acknowledgements: on (as Pulsar 4.1 brokers are by default),
    unless ``GEOSYNC_BATCH_INDEX_ACKS`` turns it off."""
    value = os.environ.get(BATCH_INDEX_ACKS_ENV, "").strip().lower()
    return value not in ("0", "false", "no", "off")


def batch_index_conf(enabled: bool) -> dict[str, str]:
    """The broker key that tracks acknowledgements per message inside a batched entry (4.0 defaults to
    off; consumers also need batch-index acks enabled client-side to send them)."""
    return {"acknowledgmentAtBatchIndexLevelEnabled": "true" if enabled else "false"}


def render_conf(pulsar_home: pathlib.Path, region: RegionProcess, extra: dict[str, str] | None = None) -> str:
    """The distribution's standalone.conf with our keys replaced in place."""
    values = dict(_CONF_OVERRIDES)
    values.update(
        clusterName=region.name,
        brokerServicePort=str(region.ports.broker),
        webServicePort=str(region.ports.web),
        narExtractionDirectory=str(region.root / "nar"),
    )
    values.update(extra or {})
    return render_props((pulsar_home / "conf" / "standalone.conf").read_text(), values)


def render_props(template: str, values: dict[str, str]) -> str:
    """A Java properties file with each key of ``values`` set: replaced in place where the template sets
    it, appended otherwise (last one wins in Java props, so nothing below may set it again)."""
    lines = []
    seen: set[str] = set()
    for line in template.splitlines():
        key = line.split("=", 1)[0].strip()
        if not line.lstrip().startswith("#") and "=" in line and key in values:
            lines.append(f"{key}={values[key]}")
            seen.add(key)
        else:
            lines.append(line)
    lines.append("")
    lines.append("# GeoSync lab additions")
    lines.extend(f"{k}={v}" for k, v in values.items() if k not in seen)
    return "\n".join(lines) + "\n"


def keyring_file(region: RegionProcess) -> pathlib.Path:
    """The lab's keyring, ``LAB/agents/keyring.yaml`` next to ``LAB/regions/NAME`` (written when the first
    agent starts): the entry filter reads the regions' public keys from it to hide genuine snapshot markers
    only, never an application's message that carries the marker property (``geosync_core.markers``)."""
    return region.root.parent.parent / "agents" / "keyring.yaml"


def start(
    pulsar_home: pathlib.Path, region: RegionProcess, *, extra_conf: dict[str, str] | None = None
) -> int:
    """Launch the region's JVM detached in its own session; return its pid (bin/pulsar execs java)."""
    for sub in ("conf", "logs", "data", "nar"):
        (region.root / sub).mkdir(parents=True, exist_ok=True)
    region.conf_path.write_text(render_conf(pulsar_home, region, extra_conf))
    env = dict(os.environ)
    env.update(
        PULSAR_STANDALONE_USE_ZOOKEEPER="1",
        PULSAR_MEM=JVM_MEM,
        PULSAR_GC=JVM_GC,
        PULSAR_GC_LOG=" ",
        PULSAR_LOG_DIR=str(region.log_dir),
        PULSAR_STANDALONE_CONF=str(region.conf_path),
        PULSAR_EXTRA_OPTS=(
            f"{JVM_EXTRA_OPTS} -Dgeosync.region={region.name} -Dgeosync.keyringFile={keyring_file(region)}"
        ),
    )
    cmd = [
        str(pulsar_home / "bin" / "pulsar"),
        "standalone",
        "--config",
        str(region.conf_path),
        "--no-functions-worker",
        "--no-stream-storage",
        "--zookeeper-port",
        str(region.ports.zookeeper),
        "--bookkeeper-port",
        str(region.ports.bookie),
        "--zookeeper-dir",
        str(region.root / "data" / "zookeeper"),
        "--bookkeeper-dir",
        str(region.root / "data" / "bookkeeper"),
    ]
    with region.stdout_file.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=region.root,
            start_new_session=True,
        )
    return proc.pid


def owns(pid: int, marker: str) -> bool:
    """True if ``pid`` is alive and is the process we started (its command line names ``marker``).

    Guards against killing an unrelated process that reused a recorded pid.
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return any(marker in arg for arg in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def starting(pid: int, *, since: float, grace_s: float = 5.0) -> bool:
    """Alive but not (yet) showing its marker shortly after the start: between fork and exec the child still
    carries the parent's command line, so an early check would report a live region as dead."""
    if time.monotonic() - since > grace_s:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def region_marker(region: RegionProcess) -> str:
    """What identifies a region's JVMs on their command lines: the region's own directory (unique per lab;
    every process of a region, standalone or one of a multi-broker region's, names a file under it)."""
    return f"{region.root}{os.sep}"


def rss_mb(pid: int) -> float:
    try:
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except psutil.NoSuchProcess:
        return 0.0


# Jetty's access log: one line per admin request, which would push everything else out of a tail.
_NOISE = ("org.eclipse.jetty.server.RequestLog",)


def file_tail(path: pathlib.Path, lines: int) -> str | None:
    """The last ``lines`` lines of a log file, less access-log lines, each cut at 300 characters; None if
    the file is missing or empty."""
    if not path.exists():
        return None
    raw = path.read_text(errors="replace").splitlines()
    text = [line for line in raw if not any(n in line for n in _NOISE)]
    return f"last lines of {path}:\n" + "\n".join(line[:300] for line in text[-lines:]) if text else None


def log_tail(region: RegionProcess, lines: int = 25) -> str:
    """The last lines of a standalone region's log, or of each process's log in a multi-broker region."""
    for path in (region.log_file, region.stdout_file):
        tail = file_tail(path, lines)
        if tail:
            return tail
    tails = [t for t in (file_tail(p, lines) for p in sorted(region.log_dir.glob("*.stdout.log"))) if t]
    return "\n\n".join(tails) or f"(no log written yet under {region.log_dir})"


def port_conflict(region: RegionProcess) -> bool:
    needles = ("Address already in use", "BindException", "Failed to bind")
    for path in (region.log_file, region.stdout_file):
        if path.exists() and any(n in path.read_text(errors="replace") for n in needles):
            return True
    return False


class RegionDied(LabError):
    """The region's process exited while we waited for it."""

    def __init__(self, message: str, *, hint: str = "", port_conflict: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.port_conflict = port_conflict


def wait_ready(
    region: RegionProcess,
    pid: int,
    *,
    deadline_s: float,
    token: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until the region's admin API lists its own cluster; return seconds waited."""
    started = time.monotonic()
    admin = AdminClient(region.admin_url, token=token)
    while True:
        if is_ready(admin, region.name):
            return time.monotonic() - started
        if not owns(pid, region_marker(region)) and not starting(pid, since=started):
            raise RegionDied(
                f"region {region.name!r} exited during start-up\n{log_tail(region)}",
                hint="read the log above; a port taken by another program is retried automatically",
                port_conflict=port_conflict(region),
            )
        if time.monotonic() - started > deadline_s:
            raise LabError(
                f"region {region.name!r} did not come up within {deadline_s:.0f} s\n{log_tail(region)}",
                hint="the machine may be overloaded; raise --deadline or stop other JVMs",
            )
        sleep(0.5)


def _signal(pid: int, pgid: int, sig: signal.Signals) -> None:
    """Signal the whole session when the process leads it (the JVM and anything it forked), else the pid."""
    with contextlib.suppress(ProcessLookupError):
        if pgid == pid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)


def stop(pid: int, marker: str, *, grace_s: float = 20.0) -> str:
    """Stop one process we started: SIGTERM to its session, then SIGKILL after ``grace_s``."""
    if not owns(pid, marker):
        return "not running"
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return "not running"
    _signal(pid, pgid, signal.SIGTERM)
    try:
        psutil.Process(pid).wait(timeout=grace_s)
        return "stopped"
    except psutil.NoSuchProcess:
        return "stopped"
    except psutil.TimeoutExpired:
        _signal(pid, pgid, signal.SIGKILL)
        with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
            psutil.Process(pid).wait(timeout=10)
        return "killed"


def signal_region(pid: int, marker: str, sig: signal.Signals) -> bool:
    """Send ``sig`` (e.g. SIGSTOP/SIGCONT/SIGKILL) to a region we started; False if it is not ours."""
    if not owns(pid, marker):
        return False
    os.kill(pid, sig)
    return True
