"""Where the regions are, for commands that talk to several: ``--topology`` or ``--config``.

``--topology`` takes a lab's ``topology.json`` (or its directory); ``--config`` a YAML file with a
``regions:`` mapping of the same shape (``admin_url`` required; ``zookeeper`` and ``service_url`` where a
command needs them). Without either, ``./lab/topology.json`` is used if it exists.
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable
from typing import Any

import click
import yaml

from geoctl.errors import GeoctlError
from geosync_core import topology as topo

DEFAULT_TOPOLOGY = pathlib.Path("lab") / "topology.json"


topology_option = click.option(
    "--topology",
    "topology_path",
    type=click.Path(path_type=pathlib.Path),
    default=None,
    envvar="GEOCTL_TOPOLOGY",
    help="A lab's topology.json or its directory (env GEOCTL_TOPOLOGY; default ./lab/topology.json).",
)


def config_option(fields: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--config FILE``: a YAML ``regions:`` mapping; ``fields`` names what a region entry may hold."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=pathlib.Path),
        default=None,
        envvar="GEOCTL_CONFIG",
        help=f"YAML with a 'regions:' mapping (name -> {fields}).",
    )


def options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--topology`` and ``--config``; the command receives ``regions: dict[str, topo.Region]``."""

    @topology_option
    @config_option("admin_url, zookeeper, service_url")
    @functools.wraps(fn)
    def wrapper(
        *args: Any, topology_path: pathlib.Path | None, config_path: pathlib.Path | None, **kw: Any
    ) -> Any:
        return fn(*args, regions=load(topology_path, config_path), **kw)

    return wrapper


def load(topology_path: pathlib.Path | None, config_path: pathlib.Path | None) -> dict[str, topo.Region]:
    if topology_path is not None and config_path is not None:
        raise GeoctlError("give either --topology or --config, not both")
    if config_path is not None:
        return _from_config(config_path)
    path = topology_path or DEFAULT_TOPOLOGY
    if path.is_dir():
        path = path / "topology.json"
    try:
        text = path.read_text()
    except OSError as e:
        raise GeoctlError(
            f"cannot read the topology {path}: {e.strerror}; pass --topology DIR/topology.json of a lab "
            "('geoctl lab up') or --config FILE with a 'regions:' mapping"
        ) from e
    try:
        return dict(topo.from_json(text).regions)
    except topo.TopologyError as e:
        raise GeoctlError(f"{path}: {e}") from e


def _from_config(path: pathlib.Path) -> dict[str, topo.Region]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise GeoctlError(f"cannot read {path}: {e}") from e
    regions = raw.get("regions") if isinstance(raw, dict) else None
    if not isinstance(regions, dict) or not regions:
        raise GeoctlError(f"{path}: expected a 'regions:' mapping of region name -> admin_url, zookeeper")
    out = {}
    for name, entry in regions.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("admin_url"), str):
            raise GeoctlError(f"{path}: regions.{name}: 'admin_url' is required")
        out[str(name)] = topo.Region(
            name=str(name),
            service_url=str(entry.get("service_url", "")),
            admin_url=entry["admin_url"],
            zookeeper=str(entry.get("zookeeper", "")),
        )
    return out


def pick(regions: dict[str, topo.Region], name: str) -> topo.Region:
    try:
        return regions[name]
    except KeyError:
        known = ", ".join(sorted(regions)) or "none"
        raise GeoctlError(f"unknown region {name!r}; known regions: {known}") from None
