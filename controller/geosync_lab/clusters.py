"""A lab region as a real Pulsar cluster (``geoctl lab up --brokers N``, N >= 2): its own ZooKeeper as local
metadata store, its own configuration store (a second ZooKeeper), one bookie and N brokers, each a separate
process.

Why a configuration store per region rather than one ZooKeeper shared by all regions as the global
configuration store: with a shared store, tenants, namespace policies and cluster records are one copy for
every region, so policies agree by construction and the policy mirror (PIP-136 from outside) has nothing to
do and nothing to be tested against. Per-region stores keep the isolation the standalone lab has (each
region owns its policies; only geo-replication and the agents connect regions), and the peers' cluster
records are written into every store by the same wiring as for standalone regions. The cost is one more
small JVM per region (measured in BENCHMARKS.md).

Boot order: both ZooKeepers; ``bin/pulsar initialize-cluster-metadata`` (the region's cluster record in its
configuration store, BookKeeper's ledger layout and the ``public``/``pulsar`` namespaces in its metadata
store; once per data directory); then the bookie and every broker together (a broker needs the bookie only
when it first writes a ledger). Brokers are configured as a standalone region's broker is (the same keys,
the plugins, batch-index acknowledgements), with the modular load manager's defaults, so a namespace's
bundles are spread over the brokers and ``unload`` moves them.

Configuration files are rendered by pure functions from the distribution's own templates; port allocation
is a pure function of the ports the kernel offered.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from geosync_adapters.admin import AdminClient, is_ready
from geosync_lab import regions
from geosync_lab.errors import LabError

# Lean heaps per process, measured with bench/lab_boot.py --brokers 2 (BENCHMARKS.md).
ZOOKEEPER_MEM = os.environ.get("GEOSYNC_ZOOKEEPER_MEM", "-Xms16m -Xmx64m -XX:MaxDirectMemorySize=32m")
BOOKIE_MEM = os.environ.get("GEOSYNC_BOOKIE_MEM", "-Xms32m -Xmx128m -XX:MaxDirectMemorySize=128m")
BROKER_MEM = os.environ.get("GEOSYNC_BROKER_MEM", "-Xms64m -Xmx320m -XX:MaxDirectMemorySize=192m")

ZOOKEEPER = "zookeeper"
CONFIGURATION_STORE = "configuration-store"
BOOKIE = "bookie"


def broker_role(index: int) -> str:
    """Broker ``index`` (0-based) is named ``broker-1``, ``broker-2``, ... in files and logs."""
    return f"broker-{index + 1}"


@dataclass(frozen=True)
class BrokerPorts:
    broker: int
    web: int


@dataclass(frozen=True)
class ClusterPorts:
    zookeeper: int
    configuration_store: int
    bookie: int
    brokers: tuple[BrokerPorts, ...]

    def as_dict(self) -> dict[str, Any]:
        """The topology's lab ``ports``: ``web``/``broker`` are the first broker's (the keys a standalone
        region has), ``brokers`` lists every broker's."""
        return {
            "web": self.brokers[0].web,
            "broker": self.brokers[0].broker,
            "zookeeper": self.zookeeper,
            "bookie": self.bookie,
            "configuration_store": self.configuration_store,
            "brokers": [{"broker": b.broker, "web": b.web} for b in self.brokers],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ClusterPorts:
        return cls(
            zookeeper=int(raw["zookeeper"]),
            configuration_store=int(raw["configuration_store"]),
            bookie=int(raw["bookie"]),
            brokers=tuple(BrokerPorts(broker=int(b["broker"]), web=int(b["web"])) for b in raw["brokers"]),
        )


def allocate(ports: list[int], brokers: int) -> ClusterPorts:
    """Assign ``3 + 2 * brokers`` distinct ports: ZooKeeper, configuration store, bookie, then each broker's
    binary and web port."""
    if brokers < 1:
        raise ValueError(f"a region needs at least one broker, got {brokers}")
    if len(ports) != ports_needed(brokers) or len(set(ports)) != len(ports):
        raise ValueError(f"need {ports_needed(brokers)} distinct ports, got {ports}")
    zk, config_store, bookie, *rest = ports
    pairs = tuple(BrokerPorts(broker=rest[2 * i], web=rest[2 * i + 1]) for i in range(brokers))
    return ClusterPorts(zookeeper=zk, configuration_store=config_store, bookie=bookie, brokers=pairs)


def ports_needed(brokers: int) -> int:
    return 3 + 2 * brokers


def pick_ports(brokers: int, avoid: set[int] | None = None) -> ClusterPorts:
    return allocate(regions.free_ports(ports_needed(brokers), avoid=avoid), brokers)


@dataclass(frozen=True)
class ClusterRegion:
    """Where a multi-broker region lives on disk and how to reach each of its processes."""

    name: str
    root: pathlib.Path
    ports: ClusterPorts

    @property
    def log_dir(self) -> pathlib.Path:
        return self.root / "logs"

    @property
    def marker(self) -> str:
        """On every process's command line (each names its config file under the region's directory)."""
        return f"{self.root}{os.sep}"

    def conf_path(self, role: str) -> pathlib.Path:
        return self.root / "conf" / f"{role}.conf"

    def broker_service_url(self, index: int) -> str:
        return f"pulsar://127.0.0.1:{self.ports.brokers[index].broker}"

    def broker_admin_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports.brokers[index].web}"

    @property
    def service_url(self) -> str:
        """Every broker, as one multi-host service URL (clients try them in turn; lookups find the owner)."""
        return "pulsar://" + ",".join(f"127.0.0.1:{b.broker}" for b in self.ports.brokers)

    @property
    def admin_url(self) -> str:
        """The first broker's web service; admin calls for topics another broker owns are redirected."""
        return self.broker_admin_url(0)

    @property
    def metadata_store(self) -> str:
        return f"127.0.0.1:{self.ports.zookeeper}"

    @property
    def configuration_store(self) -> str:
        return f"127.0.0.1:{self.ports.configuration_store}"

    @property
    def brokers(self) -> int:
        return len(self.ports.brokers)

    def roles(self) -> list[str]:
        """Every process in start order (stop them in reverse)."""
        return [ZOOKEEPER, CONFIGURATION_STORE, BOOKIE, *(broker_role(i) for i in range(self.brokers))]


# -- configuration (pure) --------------------------------------------------------------------------


def zookeeper_conf(template: str, *, port: int, data_dir: pathlib.Path) -> str:
    """The distribution's zookeeper.conf for one store: its port and data, no admin server, no metrics HTTP
    server (both would take fixed ports shared by every lab on the machine)."""
    return regions.render_props(
        template,
        {
            "clientPort": str(port),
            "clientPortAddress": "127.0.0.1",
            "dataDir": str(data_dir),
            "admin.enableServer": "false",
            "metricsProvider.className": "org.apache.zookeeper.metrics.impl.DefaultMetricsProvider",
            # A lab store: losing its last writes on a power cut does not matter, fsync latency does.
            "forceSync": "no",
        },
    )


def bookie_conf(template: str, region: ClusterRegion) -> str:
    """The distribution's bookkeeper.conf for the region's bookie, with the standalone lab's lean caches."""
    data = region.root / "data" / "bookkeeper"
    return regions.render_props(
        template,
        {
            "bookiePort": str(region.ports.bookie),
            "advertisedAddress": "127.0.0.1",
            "listeningInterface": "lo",
            "allowLoopback": "true",
            "journalDirectory": str(data / "journal"),
            "ledgerDirectories": str(data / "ledgers"),
            "metadataServiceUri": f"zk+hierarchical://{region.metadata_store}/ledgers",
            "httpServerEnabled": "false",
            # No Prometheus endpoint: its port (8000) would be the same for every bookie on the machine.
            "enableStatistics": "false",
            "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
            "journalSyncData": "false",
            "dbStorage_writeCacheMaxSizeMb": "16",
            "dbStorage_readAheadCacheMaxSizeMb": "16",
            "dbStorage_rocksDB_blockCacheSize": "16777216",
            "dbStorage_rocksDB_writeBufferSizeMB": "4",
            "diskUsageThreshold": "0.99",
            "diskUsageWarnThreshold": "0.98",
        },
    )


def broker_conf(template: str, region: ClusterRegion, index: int, extra: dict[str, str] | None = None) -> str:
    """The distribution's broker.conf for broker ``index``: the standalone lab's broker keys, this broker's
    ports, both metadata stores, and ``extra`` (plugins, batch-index acknowledgements, ...)."""
    values = dict(regions.BROKER_CONF)
    values.update(
        clusterName=region.name,
        brokerServicePort=str(region.ports.brokers[index].broker),
        webServicePort=str(region.ports.brokers[index].web),
        metadataStoreUrl=f"zk:{region.metadata_store}",
        configurationMetadataStoreUrl=f"zk:{region.configuration_store}",
        narExtractionDirectory=str(region.root / "nar" / broker_role(index)),
        functionsWorkerEnabled="false",
    )
    values.update(extra or {})
    return regions.render_props(template, values)


def initialize_args(region: ClusterRegion) -> list[str]:
    """``bin/pulsar initialize-cluster-metadata`` arguments: this region's cluster record (web service of
    the first broker, every broker in the binary service URL) in its own configuration store."""
    return [
        "initialize-cluster-metadata",
        "--cluster",
        region.name,
        "--metadata-store",
        f"zk:{region.metadata_store}",
        "--configuration-metadata-store",
        f"zk:{region.configuration_store}",
        "--web-service-url",
        region.admin_url,
        "--broker-service-url",
        region.service_url,
    ]


# -- processes -------------------------------------------------------------------------------------


def _env(region: ClusterRegion, role: str, mem: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PULSAR_MEM=mem,
        BOOKIE_MEM=mem,
        PULSAR_GC=regions.JVM_GC,
        PULSAR_GC_LOG=" ",
        PULSAR_LOG_DIR=str(region.log_dir),
        PULSAR_LOG_FILE=f"{role}.log",
        PULSAR_EXTRA_OPTS=f"{regions.JVM_EXTRA_OPTS} -Dgeosync.region={region.name}",
        PULSAR_ZK_CONF=str(region.conf_path(role)),
        PULSAR_BOOKKEEPER_CONF=str(region.conf_path(role)),
        PULSAR_BROKER_CONF=str(region.conf_path(role)),
    )
    return env


def _launch(home: pathlib.Path, region: ClusterRegion, role: str, command: str, mem: str) -> int:
    with (region.log_dir / f"{role}.stdout.log").open("ab") as out:
        proc = subprocess.Popen(
            [str(home / "bin" / "pulsar"), command],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(region, role, mem),
            cwd=region.root,
            start_new_session=True,
        )
    return proc.pid


def _write_confs(home: pathlib.Path, region: ClusterRegion, extra: dict[str, str]) -> None:
    for sub in ("conf", "logs", "data", "nar"):
        (region.root / sub).mkdir(parents=True, exist_ok=True)
    zk_template = (home / "conf" / "zookeeper.conf").read_text()
    for role, port in (
        (ZOOKEEPER, region.ports.zookeeper),
        (CONFIGURATION_STORE, region.ports.configuration_store),
    ):
        conf = zookeeper_conf(zk_template, port=port, data_dir=region.root / "data" / role)
        region.conf_path(role).write_text(conf)
    region.conf_path(BOOKIE).write_text(bookie_conf((home / "conf" / "bookkeeper.conf").read_text(), region))
    broker_template = (home / "conf" / "broker.conf").read_text()
    for i in range(region.brokers):
        region.conf_path(broker_role(i)).write_text(broker_conf(broker_template, region, i, extra))


def zookeeper_ok(address: str, *, timeout_s: float = 1.0) -> bool:
    """ZooKeeper's ``ruok`` four-letter word answered ``imok`` (Pulsar's scripts allow every 4lw)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def start(
    home: pathlib.Path,
    region: ClusterRegion,
    *,
    extra_conf: dict[str, str] | None = None,
    deadline_s: float = 240.0,
    sleep: Callable[[float], None] = time.sleep,
    on_launch: Callable[[int, str], None] = lambda _pid, _role: None,
) -> list[int]:
    """Start every process of the region (initializing its metadata the first time); return their pids in
    :meth:`ClusterRegion.roles` order. Returns once both stores answer; :func:`wait_ready` waits for the rest.
    On failure the processes started so far are stopped. ``on_launch`` is told ``(pid, role)`` of each
    process as it starts (the lab's launch record)."""
    _write_confs(home, region, dict(extra_conf or {}))
    started = time.monotonic()
    pids: list[int] = []

    def launch(role: str, command: str, mem: str) -> None:
        pids.append(_launch(home, region, role, command, mem))
        on_launch(pids[-1], role)

    try:
        for role in (ZOOKEEPER, CONFIGURATION_STORE):
            launch(role, "zookeeper", ZOOKEEPER_MEM)
        for role, address in (
            (ZOOKEEPER, region.metadata_store),
            (CONFIGURATION_STORE, region.configuration_store),
        ):
            while not zookeeper_ok(address):
                _check_alive(region, pids, since=started, deadline_s=deadline_s, waiting_for=role)
                sleep(0.2)
        _initialize(home, region, timeout_s=max(deadline_s - (time.monotonic() - started), 30.0))
        launch(BOOKIE, "bookie", BOOKIE_MEM)
        for i in range(region.brokers):
            launch(broker_role(i), "broker", BROKER_MEM)
    except Exception:
        stop(region, pids, grace_s=5)
        raise
    return pids


def _initialize(home: pathlib.Path, region: ClusterRegion, *, timeout_s: float) -> None:
    done = region.root / "data" / "initialized"
    if done.exists():
        return
    log = region.log_dir / "initialize-cluster-metadata.log"
    env = _env(region, "initialize-cluster-metadata", ZOOKEEPER_MEM)
    with log.open("ab") as out:
        try:
            proc = subprocess.run(
                [str(home / "bin" / "pulsar"), *initialize_args(region)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=region.root,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise LabError(
                f"region {region.name!r}: initialize-cluster-metadata took longer than {timeout_s:.0f} s",
                hint=f"read {log}",
            ) from e
    if proc.returncode != 0:
        raise LabError(
            f"region {region.name!r}: initialize-cluster-metadata failed (exit {proc.returncode})\n"
            + _tail(log),
            hint=f"read {log}",
        )
    done.write_text("")


def _tail(path: pathlib.Path, lines: int = 25) -> str:
    if not path.exists():
        return f"(no log at {path})"
    text = path.read_text(errors="replace").splitlines()
    return f"last lines of {path}:\n" + "\n".join(line[:300] for line in text[-lines:])


def _alive(pid: int, region: ClusterRegion, *, since: float) -> bool:
    return regions.owns(pid, region.marker) or regions.starting(pid, since=since)


def _check_alive(
    region: ClusterRegion, pids: list[int], *, since: float, deadline_s: float, waiting_for: str
) -> None:
    """Raise RegionDied when one of ``pids`` ended, LabError past the deadline."""
    for role, pid in zip(region.roles(), pids, strict=False):
        if not _alive(pid, region, since=since):
            logs = [region.log_dir / f"{role}.log", region.log_dir / f"{role}.stdout.log"]
            text = "\n".join(_tail(p) for p in logs if p.exists())
            conflict = any(
                n in p.read_text(errors="replace")
                for p in logs
                if p.exists()
                for n in ("Address already in use", "BindException", "Failed to bind")
            )
            raise regions.RegionDied(
                f"region {region.name!r}: its {role} exited during start-up\n{text}",
                hint="read the log above; a port taken by another program is retried automatically",
                port_conflict=conflict,
            )
    if time.monotonic() - since > deadline_s:
        raise LabError(
            f"region {region.name!r}: {waiting_for} not ready within {deadline_s:.0f} s",
            hint=f"read the logs under {region.log_dir}; the machine may be overloaded",
        )


def listening(port: int, *, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_ready(
    region: ClusterRegion,
    pids: list[int],
    *,
    deadline_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until the bookie serves and every broker's admin API lists the region's cluster; raise if
    any process of the region ended meanwhile."""
    started = time.monotonic()
    pending = [BOOKIE] + [broker_role(i) for i in range(region.brokers)]
    while True:
        _check_alive(region, pids, since=started, deadline_s=deadline_s, waiting_for=", ".join(pending))
        if not pending:
            return time.monotonic() - started
        for role in list(pending):
            if role == BOOKIE:
                ok = listening(region.ports.bookie)
            else:
                index = int(role.rsplit("-", 1)[1]) - 1
                ok = is_ready(AdminClient(region.broker_admin_url(index), timeout=3), region.name)
            if ok:
                pending.remove(role)
        if pending:
            sleep(0.5)


def stop(
    region: ClusterRegion, pids: list[int] | tuple[int, ...], *, grace_s: float = 20.0
) -> dict[str, str]:
    """Stop the region's processes in reverse start order (brokers, bookie, stores); what happened to each."""
    out: dict[str, str] = {}
    for role, pid in reversed(list(zip(region.roles(), pids, strict=False))):
        out[role] = regions.stop(pid, region.marker, grace_s=grace_s)
    return out
