"""``geoctl namespaces``: create namespaces and change their clusters under PIP-321's rules.

Each region's brokers check a namespace only against their own store, and the policy mirror copies the
resulting document to every other region, where it is checked again. So every command here reads the
target region's tenant, registered clusters and namespace, applies ``geosync_core.allowedclusters`` (the
broker's rules, statuses and order) before calling anything, and also checks that every other reachable
region would accept the mirrored policy. A refusal, ours or the broker's, exits with the code for its
status (``geoctl.errors.EXIT_BY_STATUS``) and a message that says what to do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import click

from geoctl import access
from geoctl.errors import EXIT_BY_STATUS, EXIT_REFUSED, EXIT_UNREACHABLE, GeoctlError
from geoctl.output import emit, output_option
from geosync_adapters import admin as adm
from geosync_adapters import adminhttp
from geosync_core import allowedclusters as ac
from geosync_core.allowedclusters import Rule, Violation

_HINTS = {
    Rule.TENANT_MISSING: "create the tenant first (it must allow these clusters)",
    Rule.EMPTY_REPLICATION: "name at least one cluster with --clusters",
    Rule.GLOBAL_CLUSTER: "'global' is not a cluster; name the real clusters",
    Rule.NOT_ALLOWED_FOR_TENANT: "add them to the tenant's allowed clusters first, or leave them out",
    Rule.REPLICATION_NOT_ALLOWED: (
        "allowed clusters must contain every replication cluster: add them to the allowed clusters, or "
        "first remove them from replication with 'geoctl namespaces set-clusters'"
    ),
    Rule.UNKNOWN_CLUSTER: "register the cluster in that region first, or fix the name",
    Rule.PEER_CONFLICT: "peer clusters cannot be in one set; keep only one of each peer group",
    Rule.NOT_ALLOWED_FOR_NAMESPACE: (
        "widen the namespace first with 'geoctl namespaces set-allowed-clusters', or leave them out"
    ),
}


def describe(v: Violation, *, tenant: str, region: str) -> str:
    names = ", ".join(v.clusters)
    what = {
        Rule.TENANT_MISSING: f"tenant {tenant!r} does not exist",
        Rule.EMPTY_REPLICATION: "the replication cluster list is empty",
        Rule.GLOBAL_CLUSTER: "'global' cannot be a replication cluster",
        Rule.NOT_ALLOWED_FOR_TENANT: f"cluster(s) {names} not allowed for tenant {tenant!r}",
        Rule.REPLICATION_NOT_ALLOWED: f"allowed clusters do not contain replication cluster(s) {names}",
        Rule.UNKNOWN_CLUSTER: f"cluster(s) {names} not registered",
        Rule.PEER_CONFLICT: f"cluster {names} has peer cluster(s) {', '.join(v.peers)} in the same set",
        Rule.NOT_ALLOWED_FOR_NAMESPACE: f"cluster(s) {names} not in the namespace's allowed clusters",
    }[v.rule]
    return f"region {region}: {what} ({v.status}); {_HINTS[v.rule]}"


def refuse(violations: list[Violation], *, tenant: str, region: str) -> GeoctlError:
    lines = [describe(v, tenant=tenant, region=region) for v in violations]
    return GeoctlError("\n".join(lines), exit_code=EXIT_BY_STATUS.get(violations[0].status, EXIT_REFUSED))


def broker_error(e: adminhttp.AdminError, *, region: str, action: str) -> GeoctlError:
    credentials = access.credentials_error(e, region=region)
    if credentials is not None:
        return credentials
    if isinstance(e, adminhttp.AdminTemporary):
        return GeoctlError(
            f"region {region} did not answer ({e}); check it is up ('geoctl lab status') and retry",
            exit_code=EXIT_UNREACHABLE,
        )
    hint = {
        400: "fix the request (see the reason above)",
        403: "the clusters must be registered and allowed for the tenant/namespace in that region",
        404: "create the tenant (and namespace) in that region first",
        409: "it exists already, or peer clusters conflict; see 'geoctl namespaces get-allowed-clusters'",
        412: "name at least one real cluster",
    }.get(e.status or 0, "see the reason above")
    return GeoctlError(
        f"region {region} refused to {action}: {e}; {hint}",
        exit_code=EXIT_BY_STATUS.get(e.status or 0, EXIT_REFUSED),
    )


@dataclass(frozen=True)
class RegionView:
    """What one region's store says about a namespace and its tenant (``None``: absent)."""

    region: str
    tenant_allowed: frozenset[str] | None
    registered: ac.Registered
    replication: frozenset[str] | None
    allowed: frozenset[str] | None


def read_view(client: adm.AdminClient, region: str, namespace: str) -> RegionView:
    tenant = namespace.split("/", 1)[0]
    try:
        tenant_allowed: frozenset[str] | None = frozenset(client.tenant(tenant).get("allowedClusters") or ())
    except adminhttp.AdminNotFound:
        tenant_allowed = None
    registered = {
        name: frozenset(client.cluster(name).get("peerClusterNames") or ()) for name in client.clusters()
    }
    replication = allowed = None
    if tenant_allowed is not None:
        try:
            policies = client.namespace_policies(namespace)
        except adminhttp.AdminNotFound:
            pass
        else:
            replication = frozenset(policies.get("replication_clusters") or ())
            allowed = frozenset(policies.get("allowed_clusters") or ())
    return RegionView(region, tenant_allowed, registered, replication, allowed)


def _names(value: str) -> list[str]:
    return sorted({part.strip() for part in value.split(",") if part.strip()})


def _namespace(_: Any, __: Any, value: str) -> str:
    parts = value.split("/")
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"{value!r}: expected TENANT/NAMESPACE")
    return value


def _clusters_option(name: str, help_text: str, *, required: bool = True) -> Callable[..., Any]:
    return click.option(
        name, required=required, callback=lambda _c, _p, v: None if v is None else _names(v), help=help_text
    )


region_option = click.option("--region", required=True, help="The region whose admin API makes the change.")
no_check_option = click.option(
    "--no-check", is_flag=True, help="Skip geoctl's own checks and let the broker decide (for testing)."
)


def _admin_errors(action: str) -> Callable[..., Any]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            try:
                return fn(*args, **kw)
            except adminhttp.AdminError as e:
                raise broker_error(e, region=kw.get("region") or "?", action=action) from e

        return wrapper

    return decorate


def _check_others(
    sites: dict[str, access.Site],
    target: str,
    namespace: str,
    *,
    replication: frozenset[str],
    allowed: frozenset[str],
) -> list[str]:
    """Check that every other region's mirror would accept the resulting policy; warnings for the rest."""
    tenant = namespace.split("/", 1)[0]
    warnings = []
    for name, site in sorted(sites.items()):
        if name == target:
            continue
        try:
            view = read_view(site.admin(retry=adminhttp.NO_RETRY, timeout=5.0), name, namespace)
        except (adminhttp.AdminUnauthorized, adminhttp.AdminTlsError) as e:
            # our credentials, not the region, are wrong: checking elsewhere would not help
            raise broker_error(e, region=name, action="read the namespace") from e
        except adminhttp.AdminError as e:
            warnings.append(f"region {name} not checked ({e.__class__.__name__}): the mirror checks it there")
            continue
        violations = ac.check_namespace(
            replication, allowed, tenant_allowed=view.tenant_allowed, registered=view.registered
        )
        if violations:
            raise refuse(violations, tenant=tenant, region=name)
        before = (view.replication or frozenset()) | (view.allowed or frozenset())
        if name in before and name not in replication | allowed:
            raise GeoctlError(
                f"region {name}: the change would take namespace {namespace} away from {name}, whose "
                f"brokers would delete its topics; the policy mirror refuses that, so make this change "
                f"in region {name} itself (--region {name})",
                exit_code=EXIT_REFUSED,
            )
    return warnings


def _result(namespace: str, region: str, warnings: Iterable[str], **fields: Any) -> dict[str, Any]:
    return {"namespace": namespace, "region": region, **fields, "warnings": list(warnings)}


def _text(data: dict[str, Any]) -> None:
    for w in data.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    shown = {k: v for k, v in data.items() if k not in ("namespace", "region", "warnings")}
    details = " ".join(f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in shown.items())
    click.echo(f"{data['namespace']} in region {data['region']}: {details}")


@click.group()
def namespaces() -> None:
    """Namespaces across regions, with PIP-321 allowed clusters checked before anything is changed."""


@namespaces.command("create")
@click.argument("namespace", callback=_namespace)
@region_option
@_clusters_option("--clusters", "Replication clusters, comma-separated.")
@_clusters_option(
    "--allowed-clusters", "Allowed clusters (PIP-321), comma-separated; default: none.", required=False
)
@no_check_option
@access.options
@output_option
@_admin_errors("create the namespace")
def create(
    *,
    namespace: str,
    region: str,
    clusters: list[str],
    allowed_clusters: list[str] | None,
    no_check: bool,
    sites: dict[str, access.Site],
    output: str,
) -> None:
    """Create TENANT/NS in one region with its replication and allowed clusters; the mirror copies it."""
    client = access.pick(sites, region).admin()
    replication, allowed = frozenset(clusters), frozenset(allowed_clusters or ())
    warnings: list[str] = []
    if not no_check:
        view = read_view(client, region, namespace)
        if view.replication is not None:
            raise GeoctlError(
                f"region {region}: namespace {namespace} exists already (409); change it with "
                "'geoctl namespaces set-clusters' or 'set-allowed-clusters'",
                exit_code=EXIT_BY_STATUS[409],
            )
        violations = ac.check_namespace(
            replication, allowed, tenant_allowed=view.tenant_allowed, registered=view.registered
        )
        if violations:
            raise refuse(violations, tenant=namespace.split("/", maxsplit=1)[0], region=region)
        warnings = _check_others(sites, region, namespace, replication=replication, allowed=allowed)
    body: dict[str, Any] = {"replication_clusters": sorted(replication)}
    if allowed:
        body["allowed_clusters"] = sorted(allowed)
    client.create_namespace_with_policies(namespace, body)
    data = _result(
        namespace, region, warnings, clusters=sorted(replication), allowed_clusters=sorted(allowed)
    )
    emit(data, output, _text)


def _existing(client: adm.AdminClient, region: str, namespace: str) -> RegionView:
    view = read_view(client, region, namespace)
    if view.tenant_allowed is None:
        raise refuse(
            [Violation(Rule.TENANT_MISSING)], tenant=namespace.split("/", maxsplit=1)[0], region=region
        )
    if view.replication is None or view.allowed is None:
        raise GeoctlError(
            f"region {region}: namespace {namespace} does not exist (404); create it with "
            "'geoctl namespaces create'",
            exit_code=EXIT_BY_STATUS[404],
        )
    return view


@namespaces.command("set-allowed-clusters")
@click.argument("namespace", callback=_namespace)
@region_option
@_clusters_option("--clusters", "The new allowed clusters, comma-separated.")
@no_check_option
@access.options
@output_option
@_admin_errors("set the allowed clusters")
def set_allowed_clusters(
    *,
    namespace: str,
    region: str,
    clusters: list[str],
    no_check: bool,
    sites: dict[str, access.Site],
    output: str,
) -> None:
    """Set the clusters that may load TENANT/NS's topics (must contain its replication clusters)."""
    client = access.pick(sites, region).admin()
    warnings: list[str] = []
    if not no_check:
        view = _existing(client, region, namespace)
        assert view.replication is not None
        violations = ac.check_set_allowed_clusters(
            clusters,
            replication=view.replication,
            tenant_allowed=view.tenant_allowed,
            registered=view.registered,
        )
        if violations:
            raise refuse(violations, tenant=namespace.split("/", maxsplit=1)[0], region=region)
        warnings = _check_others(
            sites, region, namespace, replication=view.replication, allowed=frozenset(clusters)
        )
    client.set_allowed_clusters(namespace, clusters)
    emit(_result(namespace, region, warnings, allowed_clusters=clusters), output, _text)


@namespaces.command("set-clusters")
@click.argument("namespace", callback=_namespace)
@region_option
@_clusters_option("--clusters", "The new replication clusters, comma-separated.")
@no_check_option
@access.options
@output_option
@_admin_errors("set the replication clusters")
def set_clusters(
    *,
    namespace: str,
    region: str,
    clusters: list[str],
    no_check: bool,
    sites: dict[str, access.Site],
    output: str,
) -> None:
    """Set TENANT/NS's replication clusters (each must be allowed for the namespace, or the tenant)."""
    client = access.pick(sites, region).admin()
    warnings: list[str] = []
    if not no_check:
        view = _existing(client, region, namespace)
        assert view.allowed is not None
        violations = ac.check_set_replication_clusters(
            clusters, allowed=view.allowed, tenant_allowed=view.tenant_allowed, registered=view.registered
        )
        if violations:
            raise refuse(violations, tenant=namespace.split("/", maxsplit=1)[0], region=region)
        warnings = _check_others(
            sites, region, namespace, replication=frozenset(clusters), allowed=view.allowed
        )
    client.set_replication_clusters(namespace, clusters)
    emit(_result(namespace, region, warnings, clusters=clusters), output, _text)


@namespaces.command("get-allowed-clusters")
@click.argument("namespace", callback=_namespace)
@click.option("--region", default=None, help="One region; default: every region.")
@access.options
@output_option
def get_allowed_clusters(
    *, namespace: str, region: str | None, sites: dict[str, access.Site], output: str
) -> None:
    """Show TENANT/NS's allowed clusters in one region or in every region (absent: 'missing')."""
    names = [region] if region else sorted(sites)
    found: dict[str, list[str] | None] = {}
    for name in names:
        client = access.pick(sites, name).admin(retry=adminhttp.NO_RETRY, timeout=5.0)
        try:
            found[name] = sorted(client.allowed_clusters(namespace))
        except adminhttp.AdminNotFound:
            found[name] = None
        except adminhttp.AdminError as e:
            if region or access.credentials_error(e, region=name) is not None:
                raise broker_error(e, region=name, action="read the allowed clusters") from e
            found[name] = None
    if region and found[region] is None:
        raise GeoctlError(
            f"region {region}: namespace {namespace} does not exist (404)", exit_code=EXIT_BY_STATUS[404]
        )

    def text(data: dict[str, Any]) -> None:
        for name, allowed in data["regions"].items():
            click.echo(f"{name}: {'missing' if allowed is None else ','.join(allowed) or '(none)'}")

    emit({"namespace": namespace, "regions": found}, output, text)
