"""Tables and properties for ``geosync_core.allowedclusters``: one test (at least) per invariant."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.allowedclusters import (
    Registered,
    Rejection,
    Rule,
    Violation,
    check_namespace,
    check_set_allowed_clusters,
    check_set_replication_clusters,
    reject_event_regions,
)
from geosync_core.clocks import Hlc
from geosync_core.policies import Record, Replica

CLUSTERS = ("a", "b", "c", "d", "global")
SETS = st.frozensets(st.sampled_from(CLUSTERS))
REGISTERED = st.dictionaries(st.sampled_from(CLUSTERS[:4]), st.frozensets(st.sampled_from(CLUSTERS[:4])))
ABC: Registered = {"a": frozenset(), "b": frozenset(), "c": frozenset()}
PEERED: Registered = {"a": frozenset({"b"}), "b": frozenset({"a"}), "c": frozenset()}


def _statuses(violations: list[Violation]) -> list[int]:
    return [v.status for v in violations]


@pytest.mark.parametrize(
    ("allowed", "replication", "tenant", "registered", "expected"),
    [
        ({"a", "b"}, {"a"}, {"a", "b", "c"}, ABC, []),
        (set(), set(), {"a"}, ABC, []),
        ({"a"}, {"a"}, None, ABC, [Violation(Rule.TENANT_MISSING)]),
        (
            {"a", "x"},
            {"a"},
            {"a", "b"},
            ABC,
            [Violation(Rule.NOT_ALLOWED_FOR_TENANT, ("x",)), Violation(Rule.UNKNOWN_CLUSTER, ("x",))],
        ),
        ({"b"}, {"a", "b"}, {"a", "b"}, ABC, [Violation(Rule.REPLICATION_NOT_ALLOWED, ("a",))]),
        (set(), {"a"}, {"a"}, ABC, [Violation(Rule.REPLICATION_NOT_ALLOWED, ("a",))]),
        ({"a", "z"}, {"a"}, {"a", "z"}, ABC, [Violation(Rule.UNKNOWN_CLUSTER, ("z",))]),
        (
            {"a", "b", "c"},
            {"c"},
            {"a", "b", "c"},
            PEERED,
            [Violation(Rule.PEER_CONFLICT, ("a",), ("b",)), Violation(Rule.PEER_CONFLICT, ("b",), ("a",))],
        ),
    ],
)
def test_set_allowed_clusters_table(
    allowed: set[str],
    replication: set[str],
    tenant: set[str] | None,
    registered: Registered,
    expected: list[Violation],
) -> None:
    got = check_set_allowed_clusters(
        allowed,
        replication=frozenset(replication),
        tenant_allowed=None if tenant is None else frozenset(tenant),
        registered=registered,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("replication", "allowed", "tenant", "registered", "statuses"),
    [
        ({"a", "b"}, set(), {"a", "b"}, ABC, []),
        ({"a"}, {"a", "b"}, None, ABC, []),  # the namespace's allowed clusters stand in for the tenant's
        (set(), set(), {"a"}, ABC, [412]),
        ({"global"}, set(), {"a"}, ABC, [412, 403, 403]),
        ({"a", "x"}, set(), {"a", "x"}, ABC, [403]),
        ({"a", "b"}, set(), {"a", "b"}, PEERED, [409, 409]),
        ({"a", "b"}, {"a"}, {"a", "b"}, ABC, [400]),  # not in the namespace's allowed clusters
        ({"a", "b"}, set(), {"a"}, ABC, [403]),
        ({"a"}, set(), None, ABC, [404]),
    ],
)
def test_set_replication_clusters_table(
    replication: set[str],
    allowed: set[str],
    tenant: set[str] | None,
    registered: Registered,
    statuses: list[int],
) -> None:
    got = check_set_replication_clusters(
        replication,
        allowed=frozenset(allowed),
        tenant_allowed=None if tenant is None else frozenset(tenant),
        registered=registered,
    )
    assert _statuses(got) == statuses


def test_statuses_are_the_brokers() -> None:
    assert {rule: rule.status for rule in Rule} == {
        Rule.TENANT_MISSING: 404,
        Rule.EMPTY_REPLICATION: 412,
        Rule.GLOBAL_CLUSTER: 412,
        Rule.NOT_ALLOWED_FOR_TENANT: 403,
        Rule.REPLICATION_NOT_ALLOWED: 400,
        Rule.UNKNOWN_CLUSTER: 403,
        Rule.PEER_CONFLICT: 409,
        Rule.NOT_ALLOWED_FOR_NAMESPACE: 400,
    }


def _peer_free(clusters: frozenset[str], registered: Registered) -> bool:
    return all(not (registered.get(c, frozenset()) & clusters) for c in clusters)


@settings(deadline=None)
@given(SETS, SETS, st.none() | SETS, REGISTERED)
def test_set_allowed_clusters_passes_exactly_the_valid_changes(
    allowed: frozenset[str],
    replication: frozenset[str],
    tenant: frozenset[str] | None,
    registered: Registered,
) -> None:
    valid = (
        tenant is not None
        and allowed <= tenant
        and replication <= allowed
        and allowed <= registered.keys()
        and _peer_free(allowed, registered)
    )
    got = check_set_allowed_clusters(
        allowed, replication=replication, tenant_allowed=tenant, registered=registered
    )
    assert (got == []) == valid


@settings(deadline=None)
@given(SETS, SETS, st.none() | SETS, REGISTERED)
def test_set_replication_clusters_passes_exactly_the_valid_changes(
    replication: frozenset[str],
    allowed: frozenset[str],
    tenant: frozenset[str] | None,
    registered: Registered,
) -> None:
    valid = (
        bool(replication)
        and "global" not in replication
        and replication <= registered.keys()
        and _peer_free(replication, registered)
        and (replication <= allowed if allowed else tenant is not None and replication <= tenant)
    )
    got = check_set_replication_clusters(
        replication, allowed=allowed, tenant_allowed=tenant, registered=registered
    )
    assert (got == []) == valid


@settings(deadline=None)
@given(SETS, SETS, st.none() | SETS, REGISTERED)
def test_check_namespace_passes_exactly_the_valid_policies(
    replication: frozenset[str],
    allowed: frozenset[str],
    tenant: frozenset[str] | None,
    registered: Registered,
) -> None:
    used = replication | allowed
    valid = (
        tenant is not None
        and used <= tenant
        and bool(replication)
        and "global" not in used
        and (not allowed or replication <= allowed)
        and used <= registered.keys()
        and _peer_free(replication, registered)
    )
    got = check_namespace(replication, allowed, tenant_allowed=tenant, registered=registered)
    assert (got == []) == valid
    assert all(v.clusters == tuple(sorted(v.clusters)) for v in got)


TENANT, NS = "/admin/policies/t", "/admin/policies/t/ns"


def _record(path: str, doc: object, wall: int = 1) -> Record:
    value = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return Record(path, value, Hlc(wall, 0, "a"))


def _ns(replication: list[str], allowed: list[str] | None = None) -> dict[str, object]:
    return {
        "bundles": {"numBundles": 4},
        "replication_clusters": replication,
        "allowed_clusters": allowed or [],
    }


HELD: Replica = {
    TENANT: _record(TENANT, {"adminRoles": [], "allowedClusters": ["a", "b", "c"]}),
    NS: _record(NS, _ns(["a", "b"])),
}


@pytest.mark.parametrize(
    ("event", "replica", "reason"),
    [
        (_record(NS, _ns(["a", "b", "c"]), 2), HELD, None),
        (_record(NS, _ns(["a"], ["a", "b"]), 2), HELD, None),
        (Record(NS, None, Hlc(2, 0, "a")), HELD, None),
        (
            _record("/admin/policies/t/new", _ns(["b", "c"]), 2),
            HELD,
            None,
        ),  # never held here: nothing to lose
        (_record(TENANT, {"allowedClusters": ["a", "b"]}, 2), HELD, None),
        (_record(TENANT, {"allowedClusters": ["a", "zz"]}, 2), HELD, "tenant names unregistered clusters"),
        (_record(TENANT, b"{", 2), HELD, "tenant document: not a JSON document"),
        (_record(NS, _ns(["a", "b"], ["a"]), 2), HELD, "namespace policy breaks PIP-321 here"),
        (_record(NS, _ns(["a", "zz"]), 2), HELD, "namespace policy breaks PIP-321 here"),
        (_record(NS, _ns(["a", "b"]), 2), {NS: HELD[NS]}, "namespace policy breaks PIP-321 here"),
        (_record(NS, {"replication_clusters": "a"}, 2), HELD, "namespace document: replication_clusters"),
        (_record(NS, {"allowed_clusters": 7}, 2), HELD, "namespace document: allowed_clusters"),
        (_record(NS, _ns(["a"]), 2), {**HELD, TENANT: _record(TENANT, [])}, "tenant document: not a JSON"),
        (_record(NS, _ns(["a", "c"]), 2), HELD, "would remove b from the namespace"),
        (_record(NS, _ns(["a"], ["a", "c"]), 2), HELD, "would remove b from the namespace"),
        (_record(NS, _ns(["c"], ["b", "c"]), 2), HELD, None),  # b stays allowed: its topics stay
        (_record("/admin/local-policies/t/ns", b"{", 2), HELD, None),  # apply_remote refuses it anyway
    ],
)
def test_reject_event_regions_table(event: Record, replica: Replica, reason: str | None) -> None:
    got = reject_event_regions(
        event,
        replica=replica,
        local_region="b",
        registered={"a": frozenset(), "b": frozenset(), "c": frozenset()},
    )
    if reason is None:
        assert got is None
    else:
        assert isinstance(got, Rejection)
        assert got.path == event.path
        assert got.reason.startswith(reason)


NAMES = st.lists(st.sampled_from(CLUSTERS), max_size=4)


@settings(deadline=None)
@given(NAMES, NAMES, st.none() | NAMES, NAMES, REGISTERED)
def test_reject_event_regions_rejects_exactly_invalid_or_local_dropping_policies(
    replication: list[str],
    allowed: list[str],
    tenant: list[str] | None,
    held_replication: list[str],
    registered: Registered,
) -> None:
    replica: Replica = {NS: _record(NS, _ns(held_replication))}
    if tenant is not None:
        replica = {**replica, TENANT: _record(TENANT, {"allowedClusters": tenant})}
    event = _record(NS, _ns(replication, allowed), 2)
    violations = check_namespace(
        frozenset(replication),
        frozenset(allowed),
        tenant_allowed=None if tenant is None else frozenset(tenant),
        registered=registered,
    )
    drops_local = "b" in held_replication and "b" not in {*replication, *allowed}
    got = reject_event_regions(event, replica=replica, local_region="b", registered=registered)
    assert (got is not None) == (bool(violations) or drops_local)
    if violations:
        assert got is not None
        assert got.violations == tuple(violations)
