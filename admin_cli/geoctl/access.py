"""How operator commands reach every region: admin API, brokers and the region's agent, with credentials.

Builds on ``geoctl.endpoints`` (``--topology`` or ``--config``) and adds what every command that calls an
admin API or a broker (``status``, ``failover``, ``tenants``, ``namespaces``, ``policies``) needs besides the
admin URL, so that each reaches a region the same way:

* the agent of each region (its HTTP endpoint serving ``/state``, ``/healthz``, ``/readyz``): from a lab's
  topology (each agent's config names its metrics port) or ``agent_url`` per region in ``--config``;
* a token for brokers and admin APIs: ``GEOCTL_TOKEN`` in the environment, or a file named by
  ``--token-file`` (env ``GEOCTL_TOKEN_FILE``), or ``token_file`` in ``--config`` (top level or per region).
  There is deliberately no option that takes a token itself: command lines end up in shell histories and
  ``ps`` listings. Tokens are never printed;
* TLS: ``ca_file`` in ``--config`` (top level or per region) is handed to the admin client as the CA bundle
  for ``https://`` admin URLs.
* what ``failover serve`` tells Pulsar clients about a region: ``clients:`` per region in ``--config``
  (``service_url``, ``tls_trust_certs_file``, ``auth_plugin``, ``auth_params``).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click
import requests
import yaml

from geoctl import endpoints
from geoctl.errors import EXIT_REFUSED, EXIT_UNREACHABLE, GeoctlError
from geosync_adapters import admin as adm
from geosync_adapters import adminhttp
from geosync_core import topology as topo


@dataclass(frozen=True)
class Site:
    """One region as an operator command sees it."""

    name: str
    region: topo.Region
    token: str | None = field(default=None, repr=False)
    agent_url: str | None = None
    ca_file: str | None = None
    clients: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    """What ``failover serve`` tells Pulsar clients about this region (``clients:`` in ``--config``):
    ``service_url``, ``tls_trust_certs_file``, ``auth_plugin``, ``auth_params``."""

    def admin(self, *, timeout: float = 10.0, retry: adminhttp.RetryPolicy | None = None) -> adm.AdminClient:
        return adm.AdminClient(
            self.region.admin_url,
            token=self.token,
            timeout=timeout,
            retry=retry or adminhttp.RetryPolicy(attempts=3, deadline=10.0),
            verify=self.ca_file or True,
        )


@dataclass(frozen=True)
class AgentView:
    """What a region's agent said about itself; ``error`` when it could not be reached."""

    url: str | None
    alive: bool = False
    ready: bool = False
    state: dict[str, Any] | None = None
    error: str | None = None

    @property
    def unresolved(self) -> int:
        """Entries the agent read but could not name the origin of (it retries; mark-delete stops there)."""
        found = (self.state or {}).get("unresolved") or {}
        return sum(n for n in found.values() if isinstance(n, int)) if isinstance(found, dict) else 0

    @property
    def claims(self) -> str:
        """What the agent's claims are made of: "acknowledgements" (only what consumers acknowledged
        travels), "cursor" (a jump no consumer made travels too), or "-" (not said)."""
        found = (self.state or {}).get("claims")
        if not isinstance(found, dict) or "exact" not in found:
            return "-"
        return "acknowledgements" if found["exact"] is True else "cursor"

    @property
    def stalled_replicators(self) -> list[dict[str, Any]]:
        """Pulsar's replicators out of this region that the agent saw hold a backlog and send nothing."""
        found = (self.state or {}).get("replicators_stalled") or []
        return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []

    @property
    def unretained(self) -> list[str]:
        """Synced namespaces that keep no acknowledged message in this region (the agent's word)."""
        found = (self.state or {}).get("namespaces_without_retention") or []
        return [str(ns) for ns in found] if isinstance(found, list) else []

    @property
    def held_deletions(self) -> dict[str, str]:
        """Peers' deletions this region's policy mirror holds (path -> why): they would destroy its data."""
        mirror = (self.state or {}).get("mirror")
        found = mirror.get("held") if isinstance(mirror, dict) else None
        return {str(p): str(why) for p, why in found.items()} if isinstance(found, dict) else {}

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "alive": self.alive,
            "ready": self.ready,
            "error": self.error,
            "unresolved": self.unresolved,
            "claims": self.claims,
            "replicators_stalled": self.stalled_replicators,
            "namespaces_without_retention": self.unretained,
            "held_deletions": self.held_deletions,
        }


def options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--topology``, ``--config`` and ``--token-file``; the command receives ``sites``."""

    @endpoints.topology_option
    @endpoints.config_option("admin_url, service_url, zookeeper, agent_url, token_file, ca_file, clients")
    @click.option(
        "--token-file",
        type=click.Path(dir_okay=False, path_type=pathlib.Path),
        default=None,
        envvar="GEOCTL_TOKEN_FILE",
        help="File with the token for brokers and admin APIs (or env GEOCTL_TOKEN; never a command line).",
    )
    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        topology_path: pathlib.Path | None,
        config_path: pathlib.Path | None,
        token_file: pathlib.Path | None,
        **kw: Any,
    ) -> Any:
        return fn(*args, sites=load(topology_path, config_path, token_file), **kw)

    return wrapper


def _read_token(path: pathlib.Path | str, where: str) -> str:
    try:
        token = pathlib.Path(path).read_text().strip()
    except OSError as e:
        raise GeoctlError(f"{where}: cannot read the token file {path}: {e.strerror}") from e
    if not token:
        raise GeoctlError(f"{where}: the token file {path} is empty")
    return token


def load(
    topology_path: pathlib.Path | None,
    config_path: pathlib.Path | None,
    token_file: pathlib.Path | None = None,
) -> dict[str, Site]:
    regions = endpoints.load(topology_path, config_path)
    token = os.environ.get("GEOCTL_TOKEN") or None
    if token is None and token_file is not None:
        token = _read_token(token_file, "--token-file")
    extra: dict[str, dict[str, Any]] = {name: {} for name in regions}
    top: dict[str, Any] = {}
    if config_path is not None:
        raw = yaml.safe_load(config_path.read_text()) or {}
        top = {k: v for k, v in raw.items() if k != "regions"}
        for name, entry in (raw.get("regions") or {}).items():
            extra[str(name)] = dict(entry)
    else:
        extra = _lab_agents(topology_path, regions)
    sites = {}
    for name, region in regions.items():
        entry = extra.get(name, {})
        site_token = token
        file = entry.get("token_file") or top.get("token_file")
        if site_token is None and file:
            site_token = _read_token(file, f"regions.{name}.token_file")
        sites[name] = Site(
            name=name,
            region=region,
            token=site_token,
            agent_url=entry.get("agent_url"),
            ca_file=entry.get("ca_file") or top.get("ca_file"),
            clients={str(k): str(v) for k, v in (entry.get("clients") or {}).items()},
        )
    return sites


def _lab_agents(
    topology_path: pathlib.Path | None, regions: dict[str, topo.Region]
) -> dict[str, dict[str, Any]]:
    """Each lab agent's HTTP endpoint, from the agent config the topology names."""
    path = topology_path or endpoints.DEFAULT_TOPOLOGY
    if path.is_dir():
        path = path / "topology.json"
    out: dict[str, dict[str, Any]] = {name: {} for name in regions}
    try:
        agents = json.loads(path.read_text()).get("agents") or {}
    except (OSError, ValueError):
        return out
    for name, agent in agents.items():
        try:
            conf = yaml.safe_load(pathlib.Path(agent["config"]).read_text()) or {}
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            continue
        port = conf.get("metrics_port")
        if port and agent.get("pid") and name in out:
            host = conf.get("metrics_host") or "127.0.0.1"
            out[name]["agent_url"] = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    return out


def pick(sites: dict[str, Site], name: str) -> Site:
    try:
        return sites[name]
    except KeyError:
        known = ", ".join(sorted(sites)) or "none"
        raise GeoctlError(f"unknown region {name!r}; known regions: {known}") from None


def credentials_error(e: adminhttp.AdminError, *, region: str) -> GeoctlError | None:
    """The error to show when ``e`` means geoctl's own credentials are wrong (no or a bad token: 401; a
    certificate it cannot verify), else None. The token itself is never part of the message."""
    if isinstance(e, adminhttp.AdminUnauthorized):
        return GeoctlError(
            f"region {region} refused the request (401): {e}\n  -> give geoctl a token with GEOCTL_TOKEN, "
            "--token-file or token_file in --config",
            exit_code=EXIT_REFUSED,
        )
    if isinstance(e, adminhttp.AdminTlsError):
        return GeoctlError(
            f"region {region}: {e}\n  -> set ca_file in --config (top level or for this region)",
            exit_code=EXIT_UNREACHABLE,
        )
    return None


def probe_agent(site: Site, *, timeout: float = 3.0) -> AgentView:
    """Ask a region's agent for liveness, readiness and its state; never raises."""
    if not site.agent_url:
        return AgentView(url=None, error="no agent endpoint known for this region")
    base = site.agent_url.rstrip("/")
    try:
        alive = requests.get(f"{base}/healthz", timeout=timeout).status_code == 200
        ready = requests.get(f"{base}/readyz", timeout=timeout).status_code == 200
        response = requests.get(f"{base}/state", timeout=timeout)
        state = response.json() if response.status_code == 200 else None
    except (requests.RequestException, ValueError) as e:
        return AgentView(url=base, error=f"{type(e).__name__}: {e}")
    return AgentView(url=base, alive=alive, ready=ready, state=state)
