"""PIP-321 ``allowed_clusters`` rules as pure functions, for ``geoctl`` and for checking mirrored events.

Each region's brokers validate a namespace only against their own configuration store, and a policy
written straight into ZooKeeper is not validated at all; a namespace whose policy leaves out the local
cluster gets its topics deleted by the brokers. So ``geoctl`` checks a change against every region before
making it, and the mirror checks every incoming namespace policy before writing it. Both use these
functions, which return violations as values; the CLI turns them into messages and exit codes.

A check lists every violation it finds, in the order Pulsar's ``NamespacesBase`` checks them, so the
first one's ``status`` is what a broker would answer (``internalSetNamespaceAllowedClusters``,
``internalSetNamespaceReplicationClusters``). The statuses are the code's, not the PIP text's: an unknown
cluster id is 403 "Invalid cluster id" in the code and 412 in PIP-321.

Invariants (each is a test in ``tests/core/test_allowedclusters.py``):

1. No violations if and only if the change satisfies PIP-321: allowed clusters contain the replication
   clusters, every cluster is registered and allowed for the tenant, no cluster has a peer in the set.
2. Violations come in the broker's order, each with the status the broker answers.
3. ``reject_event_regions`` rejects exactly the namespace policies that violate those rules against the
   local store, and any that would take the namespace away from the local region; deletions and tenant
   documents naming registered clusters pass.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from geosync_core.policies import (
    NAMESPACE_ALLOWED_CLUSTERS,
    NAMESPACE_REPLICATION_CLUSTERS,
    TENANT_ALLOWED_CLUSTERS,
    Malformed,
    PathClass,
    Record,
    Replica,
    classify,
    read_names,
)

Registered = Mapping[str, frozenset[str]]
"""The clusters registered in a region's store (``/admin/clusters``), each with its ``peerClusterNames``."""


class Rule(enum.Enum):
    TENANT_MISSING = "tenant-missing"
    EMPTY_REPLICATION = "empty-replication"
    GLOBAL_CLUSTER = "global-cluster"
    NOT_ALLOWED_FOR_TENANT = "not-allowed-for-tenant"
    REPLICATION_NOT_ALLOWED = "replication-not-allowed"
    UNKNOWN_CLUSTER = "unknown-cluster"
    PEER_CONFLICT = "peer-conflict"
    NOT_ALLOWED_FOR_NAMESPACE = "not-allowed-for-namespace"

    @property
    def status(self) -> int:
        """The HTTP status a Pulsar 4.0 broker answers for this rule."""
        return _STATUS[self]


_STATUS = {
    Rule.TENANT_MISSING: 404,
    Rule.EMPTY_REPLICATION: 412,
    Rule.GLOBAL_CLUSTER: 412,
    Rule.NOT_ALLOWED_FOR_TENANT: 403,
    Rule.REPLICATION_NOT_ALLOWED: 400,
    Rule.UNKNOWN_CLUSTER: 403,  # PIP-321 says 412; the code answers 403 "Invalid cluster id"
    Rule.PEER_CONFLICT: 409,
    # 4.0.8 (the lab's version; read from its NamespacesBase bytecode) answers 400 "Cluster [x] is not in the
    # list of allowed clusters list for namespace"; later 4.x sources answer 403 for the same check.
    Rule.NOT_ALLOWED_FOR_NAMESPACE: 400,
}


@dataclass(frozen=True)
class Violation:
    """A broken rule and the clusters at fault, sorted; for ``PEER_CONFLICT``, one cluster and its peers."""

    rule: Rule
    clusters: tuple[str, ...] = ()
    peers: tuple[str, ...] = ()

    @property
    def status(self) -> int:
        return self.rule.status


def _where(rule: Rule, clusters: Iterable[str]) -> list[Violation]:
    at_fault = tuple(sorted(clusters))
    return [Violation(rule, at_fault)] if at_fault else []


def _for_tenant(clusters: frozenset[str], tenant_allowed: frozenset[str] | None) -> list[Violation]:
    if tenant_allowed is None:
        return [Violation(Rule.TENANT_MISSING)]
    return _where(Rule.NOT_ALLOWED_FOR_TENANT, clusters - tenant_allowed)


def _registered(clusters: frozenset[str], registered: Registered) -> list[Violation]:
    return _where(Rule.UNKNOWN_CLUSTER, clusters - registered.keys())


def _peer_conflicts(clusters: frozenset[str], registered: Registered) -> list[Violation]:
    return [
        Violation(Rule.PEER_CONFLICT, (cluster,), tuple(sorted(conflict)))
        for cluster in sorted(clusters)
        if (conflict := registered.get(cluster, frozenset()) & clusters)
    ]


def check_set_allowed_clusters(
    allowed: Iterable[str],
    *,
    replication: frozenset[str],
    tenant_allowed: frozenset[str] | None,
    registered: Registered,
) -> list[Violation]:
    """``namespaces set-allowed-clusters``: may the namespace's allowed clusters become ``allowed``?

    ``replication`` is the namespace's current ``replication_clusters``; ``tenant_allowed`` the tenant's
    ``allowedClusters`` (``None``: no such tenant). An empty list is refused while the namespace replicates
    anywhere, because it would not contain the replication clusters.
    """
    new = frozenset(allowed)
    return [
        *_for_tenant(new, tenant_allowed),
        *_where(Rule.REPLICATION_NOT_ALLOWED, replication - new),
        *_registered(new, registered),
        *_peer_conflicts(new, registered),
    ]


def check_set_replication_clusters(
    replication: Iterable[str],
    *,
    allowed: frozenset[str],
    tenant_allowed: frozenset[str] | None,
    registered: Registered,
) -> list[Violation]:
    """``namespaces set-clusters``: may the namespace replicate to ``replication``?

    ``allowed`` is the namespace's current ``allowed_clusters``; when it is empty the tenant's allowed
    clusters stand in for it, as in Pulsar.
    """
    new = frozenset(replication)
    return [
        *([Violation(Rule.EMPTY_REPLICATION)] if not new else []),
        *_where(Rule.GLOBAL_CLUSTER, new & {"global"}),
        *_registered(new, registered),
        *_peer_conflicts(new, registered),
        *(
            _where(Rule.NOT_ALLOWED_FOR_NAMESPACE, new - allowed)
            if allowed
            else _for_tenant(new, tenant_allowed)
        ),
    ]


def check_namespace(
    replication: frozenset[str],
    allowed: frozenset[str],
    *,
    tenant_allowed: frozenset[str] | None,
    registered: Registered,
) -> list[Violation]:
    """A whole namespace policy (``namespaces create``, or one arriving from another region)."""
    used = replication | allowed
    return [
        *_for_tenant(used, tenant_allowed),
        *([Violation(Rule.EMPTY_REPLICATION)] if not replication else []),
        *_where(Rule.GLOBAL_CLUSTER, used & {"global"}),
        *(_where(Rule.REPLICATION_NOT_ALLOWED, replication - allowed) if allowed else []),
        *_registered(used, registered),
        *_peer_conflicts(replication, registered),
    ]


@dataclass(frozen=True)
class Rejection:
    """Why a mirrored record must not be written to the local store."""

    path: str
    reason: str
    violations: tuple[Violation, ...] = ()


def _names(record: Record | None, field: str) -> frozenset[str] | Malformed | None:
    if record is None or record.value is None:
        return None
    return read_names(record.value, field)


def reject_event_regions(
    event: Record, *, replica: Replica, local_region: str, registered: Registered
) -> Rejection | None:
    """Whether a remote record, about to be applied, names regions its namespace may not use here.

    The record is judged against the local store: ``replica`` supplies the tenant and the namespace policy
    held now, ``registered`` the clusters this region knows. A namespace policy that would take the
    namespace away from the local region is refused as well, since brokers delete the topics of such a
    namespace; that removal must be made in the region itself.
    """
    kind = classify(event.path)
    if event.value is None or not kind.mirrored:
        return None
    if kind is PathClass.TENANT:
        tenant = read_names(event.value, TENANT_ALLOWED_CLUSTERS)
        if isinstance(tenant, Malformed):
            return Rejection(event.path, f"tenant document: {tenant.reason}")
        unknown = _registered(tenant, registered)
        return (
            Rejection(event.path, "tenant names unregistered clusters", tuple(unknown)) if unknown else None
        )
    replication = read_names(event.value, NAMESPACE_REPLICATION_CLUSTERS)
    if isinstance(replication, Malformed):
        return Rejection(event.path, f"namespace document: {replication.reason}")
    allowed = read_names(event.value, NAMESPACE_ALLOWED_CLUSTERS)
    if isinstance(allowed, Malformed):
        return Rejection(event.path, f"namespace document: {allowed.reason}")
    tenant_allowed = _names(replica.get(event.path.rsplit("/", 1)[0]), TENANT_ALLOWED_CLUSTERS)
    if isinstance(tenant_allowed, Malformed):
        return Rejection(event.path, f"tenant document: {tenant_allowed.reason}")
    violations = check_namespace(replication, allowed, tenant_allowed=tenant_allowed, registered=registered)
    if violations:
        return Rejection(event.path, "namespace policy breaks PIP-321 here", tuple(violations))
    held = replica.get(event.path)
    before = {_names(held, NAMESPACE_REPLICATION_CLUSTERS), _names(held, NAMESPACE_ALLOWED_CLUSTERS)}
    if any(isinstance(n, frozenset) and local_region in n for n in before) and local_region not in (
        replication | allowed
    ):
        return Rejection(event.path, f"would remove {local_region} from the namespace and delete its topics")
    return None
