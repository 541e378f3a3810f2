"""A whole lab of regions: what geoctl, the tests and the benchmarks use, from one place.

The work is done by one module per concept, and every name of theirs that callers use is here too:

* ``topologies``: the topology file (``DIR/topology.json``) and what it records of each region;
* ``booting``: ``up`` (every region in parallel, wired together, the agents started; with ``wan``
  replication through Toxiproxy, with ``brokers`` of 2 or more real clusters, see ``clusters``),
  ``start_region`` and ``rebuild_region``;
* ``agents``: the agents' keys, configuration and processes;
* ``stopping``: ``down`` stops exactly the processes recorded in the topology, after checking that each pid
  is still ours, and then any other the lab's launch record names (``launches``): what a boot stopped
  before it wrote the topology left running; ``stop_region``, ``freeze_region``;
* ``health``: ``status``.
"""

from __future__ import annotations

import contextlib
import pathlib
import tempfile
from collections.abc import Iterator

from geosync_lab.agents import (
    CONTROL_TOPIC,
    UNSYNCED_PATTERNS,
    agent_log,
    agent_metrics_url,
    all_regions_namespace,
    sidecar_name,
    sidecar_names,
    signer,
    signing_key_id,
    start_agent,
    stop_agent,
    wait_agent_ready,
    with_settings,
)
from geosync_lab.booting import (
    RegionBoot,
    UpResult,
    rebuild_region,
    start_region,
    up,
    wait_replication,
)
from geosync_lab.booting import boot_region as _boot_region
from geosync_lab.health import status
from geosync_lab.stopping import down, freeze_region, stop_region
from geosync_lab.topologies import (
    LAB_RETENTION_MB,
    LAB_RETENTION_MINUTES,
    PROBE_TOPIC,
    TENANT,
    TOPOLOGY_FILE,
    Report,
    Site,
    alive_regions,
    cluster_region,
    dump_json,
    load,
    region_process,
    save,
    silent,
    topology_path,
)
from geosync_lab.topologies import booted_region as _booted_region
from geosync_lab.topologies import with_pids as _with_pids

__all__ = [
    "CONTROL_TOPIC",
    "LAB_RETENTION_MB",
    "LAB_RETENTION_MINUTES",
    "PROBE_TOPIC",
    "TENANT",
    "TOPOLOGY_FILE",
    "UNSYNCED_PATTERNS",
    "RegionBoot",
    "Report",
    "Site",
    "UpResult",
    "_boot_region",
    "_booted_region",
    "_with_pids",
    "agent_log",
    "agent_metrics_url",
    "alive_regions",
    "all_regions_namespace",
    "cluster_region",
    "down",
    "dump_json",
    "freeze_region",
    "given_or_booted",
    "load",
    "rebuild_region",
    "region_process",
    "save",
    "sidecar_name",
    "sidecar_names",
    "signer",
    "signing_key_id",
    "start_agent",
    "start_region",
    "status",
    "stop_agent",
    "stop_region",
    "topology_path",
    "up",
    "wait_agent_ready",
    "wait_replication",
    "with_settings",
]


@contextlib.contextmanager
def given_or_booted(
    lab_dir: pathlib.Path | None, names: list[str], *, with_wan: bool = False, report: Report = silent
) -> Iterator[pathlib.Path]:
    """``lab_dir`` if given (left running), else a lab booted in a temporary directory for the block and
    stopped after it (benchmarks' ``--lab``)."""
    if lab_dir is not None:
        yield lab_dir
        return
    with tempfile.TemporaryDirectory(prefix="geosync-bench-") as tmp:
        booted = pathlib.Path(tmp)
        report("booting a lab of regions " + ", ".join(names) + "…")
        up(booted, names, with_wan=with_wan)
        try:
            yield booted
        finally:
            down(booted)
