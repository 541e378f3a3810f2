"""``geoctl policies diff``: where the regions' tenant and namespace policies disagree.

The policy mirror should keep ``/admin/policies/{tenant}`` and ``/admin/policies/{tenant}/{ns}`` equal
everywhere; this command shows, per path, a short digest of each region's value (``-``: absent), read
from each region's ZooKeeper (the exact bytes the mirror compares; the default) or from its admin API
(parsed JSON, for regions whose ZooKeeper is out of reach; with the token and CA every command uses,
``geoctl.access``). Exit code 6 when some path differs, so that scripts can wait for convergence.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import click

from geoctl import access
from geoctl.errors import EXIT_UNHEALTHY, EXIT_UNREACHABLE, GeoctlError
from geoctl.output import emit, output_option
from geosync_adapters import adminhttp
from geosync_adapters import zookeeper as zk
from geosync_core import clocks, policies
from geosync_core.errors import TemporaryError

ROOT = "/admin/policies"
_NO_STAMP = clocks.start("geoctl")


def _wanted(tenant: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(tenant, p) for p in include) and not any(
        fnmatch.fnmatchcase(tenant, p) for p in exclude
    )


def read_zookeeper(hosts: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> dict[str, bytes]:
    store = zk.Store(hosts, session_timeout_s=10.0)
    store.start(timeout_s=10.0)
    try:
        found = {}
        for tenant in store.children(ROOT):
            if not _wanted(tenant, include, exclude):
                continue
            paths = [
                f"{ROOT}/{tenant}",
                *(f"{ROOT}/{tenant}/{ns}" for ns in store.children(f"{ROOT}/{tenant}")),
            ]
            for path in paths:
                node = store.read(path)
                if node is not None:
                    found[path] = node.value
        return found
    finally:
        store.stop()


def _canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def read_admin(site: access.Site, include: tuple[str, ...], exclude: tuple[str, ...]) -> dict[str, bytes]:
    client = site.admin(retry=adminhttp.NO_RETRY, timeout=5.0)
    found = {}
    for tenant in client.tenants():
        if not _wanted(tenant, include, exclude):
            continue
        found[f"{ROOT}/{tenant}"] = _canonical(client.tenant(tenant))
        for namespace in client.namespaces(tenant):
            found[f"{ROOT}/{namespace}"] = _canonical(client.namespace_policies(namespace))
    return found


@click.group("policies")
def policies_group() -> None:
    """Tenant and namespace policies as the policy mirror sees them."""


@policies_group.command("diff")
@click.option(
    "--source",
    type=click.Choice(["zookeeper", "admin"]),
    default="zookeeper",
    show_default=True,
    help="Read each region's ZooKeeper (exact bytes) or its admin API (parsed JSON).",
)
@click.option(
    "--tenant",
    "include",
    multiple=True,
    default=("*",),
    show_default=True,
    help="Tenants to compare (fnmatch pattern; repeat).",
)
@click.option(
    "--exclude-tenant",
    "exclude",
    multiple=True,
    default=("public", "pulsar"),
    show_default=True,
    help="Tenants to leave out (each cluster creates its own public and pulsar).",
)
@access.options
@output_option
def diff(
    *,
    source: str,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    sites: dict[str, access.Site],
    output: str,
) -> None:
    """Paths whose value differs between regions, with each region's digest (exit 6 if any)."""
    replicas: dict[str, policies.Replica] = {}
    for name, site in sorted(sites.items()):
        try:
            if source == "zookeeper":
                if not site.region.zookeeper:
                    raise GeoctlError(f"region {name} has no zookeeper address; use --source admin")
                values = read_zookeeper(site.region.zookeeper, include, exclude)
            else:
                values = read_admin(site, include, exclude)
        except adminhttp.AdminError as e:
            credentials = access.credentials_error(e, region=name)
            if credentials is not None:
                raise credentials from e
            raise GeoctlError(
                f"region {name}: cannot read policies ({e}); is it up?", exit_code=EXIT_UNREACHABLE
            ) from e
        except TemporaryError as e:
            raise GeoctlError(
                f"region {name}: cannot read policies ({e}); is it up?", exit_code=EXIT_UNREACHABLE
            ) from e
        replicas[name] = {p: policies.Record(p, v, _NO_STAMP) for p, v in values.items()}
    found = policies.diff(replicas)
    data = {
        "source": source,
        "regions": sorted(sites),
        "paths": sum(1 for _ in {p for r in replicas.values() for p in r}),
        "disagreements": [{"path": d.path, "digests": dict(d.digests)} for d in found],
    }

    def text(data: dict[str, Any]) -> None:
        if not data["disagreements"]:
            click.echo(f"{data['paths']} paths, identical in regions {', '.join(data['regions'])}")
            return
        names = data["regions"]
        width = max(len(d["path"]) for d in data["disagreements"])
        click.echo("  ".join([f"{'path':<{width}}", *(f"{n:<16}" for n in names)]))
        for d in data["disagreements"]:
            cells = [f"{d['digests'].get(n) or '-':<16}" for n in names]
            click.echo("  ".join([f"{d['path']:<{width}}", *cells]))

    emit(data, output, text)
    if found:
        raise SystemExit(EXIT_UNHEALTHY)
