"""The lab on Docker: the same topology booted from the official Pulsar image with testcontainers.

For machines with a Docker engine (a developer laptop, a CI runner with Docker). The process backend in
``labs`` is the one this project's own machines run and test; this backend boots one container per region
(``apachepulsar/pulsar:<version>`` running a ZooKeeper-backed standalone, so each region keeps its own
ZooKeeper), on one Docker network where regions reach each other by alias, wires peers, tenant and
namespaces through the same admin calls as the process lab, and returns the same topology contract (with
host-mapped URLs; the ``pids`` are empty and ``lab.container`` names the container).

Agents are not started here: run ``python -m geosync_agent`` against the topology's URLs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from geosync_adapters.admin import AdminClient, is_ready
from geosync_core import topology as topo
from geosync_lab import labs
from geosync_lab.errors import LabError

IMAGE = "apachepulsar/pulsar:{version}"
WEB, BROKER = 8080, 6650


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers, and if not, why (for a skip reason)."""
    try:
        import docker

        docker.from_env().ping()
    except Exception as e:
        return False, f"no Docker engine answers ({e.__class__.__name__}: {str(e)[:120]})"
    return True, "ok"


@contextmanager
def lab(
    region_names: list[str], *, version: str = "4.0.8", deadline_s: float = 300.0
) -> Iterator[topo.Topology]:
    """Boot one container per region, wire geo-replication like ``labs.up``; stop everything on exit."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

    topo.validate_region_names(region_names)
    ok, why = docker_available()
    if not ok:
        raise LabError(why, hint="use the process lab: geoctl lab up")
    containers: dict[str, Any] = {}
    with Network() as network:
        try:
            for name in region_names:
                container = (
                    DockerContainer(IMAGE.format(version=version))
                    .with_network(network)
                    .with_network_aliases(name)
                    .with_exposed_ports(WEB, BROKER)
                    .with_env("PULSAR_STANDALONE_USE_ZOOKEEPER", "1")
                    .with_env("PULSAR_MEM", "-Xms128m -Xmx512m -XX:MaxDirectMemorySize=256m")
                    .with_env("PULSAR_PREFIX_clusterName", name)
                    .with_command(
                        "bash -c 'bin/apply-config-from-env.py conf/standalone.conf && "
                        "bin/pulsar standalone --no-functions-worker --no-stream-storage'"
                    )
                )
                container.start()
                containers[name] = container
            regions = {}
            for name, c in containers.items():
                host = c.get_container_host_ip()
                admin_url = f"http://{host}:{c.get_exposed_port(WEB)}"
                regions[name] = topo.Region(
                    name=name,
                    service_url=f"pulsar://{host}:{c.get_exposed_port(BROKER)}",
                    admin_url=admin_url,
                    zookeeper="",
                    lab={"container": c.get_wrapped_container().name},
                )
                started = time.monotonic()
                while not is_ready(AdminClient(admin_url), name):
                    if time.monotonic() - started > deadline_s:
                        raise LabError(f"region {name!r} container did not come up within {deadline_s:.0f} s")
                    time.sleep(1)
            _wire(regions)
            namespaces = {
                ns: topo.Namespace(name=ns, regions=m) for ns, m in topo.lab_namespaces(region_names).items()
            }
            yield topo.Topology(pulsar_version=version, regions=regions, namespaces=namespaces)
        finally:
            for c in containers.values():
                c.stop()


def _wire(regions: dict[str, topo.Region]) -> None:
    """Peers are reached inside the Docker network by alias; the tenant and namespaces as in the lab."""
    names = list(regions)
    for name, region in regions.items():
        admin = AdminClient(region.admin_url)
        for peer in names:
            if peer != name:
                admin.upsert_cluster(
                    peer, service_url=f"http://{peer}:{WEB}", broker_service_url=f"pulsar://{peer}:{BROKER}"
                )
        admin.upsert_tenant("geo", allowed_clusters=names)
    for ns, members in topo.lab_namespaces(names).items():
        for name in members:
            admin = AdminClient(regions[name].admin_url)
            admin.create_namespace(ns)
            admin.set_allowed_clusters(ns, list(members))
            admin.set_retention(ns, minutes=labs.LAB_RETENTION_MINUTES, size_mb=labs.LAB_RETENTION_MB)
        for name in members:
            AdminClient(regions[name].admin_url).set_replication_clusters(ns, list(members))
