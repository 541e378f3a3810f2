"""The policy mirror's held deletions: a peer's change that would destroy this region's data waits here.

A peer region's namespace or tenant deletion (or a namespace document it marked ``deleted``) is applied only
when this region holds nothing that it would destroy (``geosync_core.deletions`` has the rules). What the
region holds is asked of its brokers (the admin API's topic and namespace lists, as Pulsar's own deletion
check asks them: they read the metadata store, which may be another ZooKeeper than the configuration store
the mirror writes) and read from the mirror's own ZooKeeper as well: partitioned topics' metadata under
``/admin/partitioned-topics/{tenant}/{namespace}/{persistent,non-persistent}``, managed ledgers under
``/managed-ledgers/{tenant}/{namespace}/persistent`` where the two stores are one, namespaces as children of
``/admin/policies/{tenant}``. When the brokers cannot answer, the deletion is held. Brokers do not list a
namespace marked ``deleted`` (404) or one that leaves this region out (412): they refuse new topics in the
first and delete the topics of the second, so the store alone is asked then. Where the metadata store is
another ZooKeeper than the mirror's, the check after the mark therefore sees only what the mirror's store
holds; a topic made in the moment between the first check and the mark is the one case not covered there.

A held change is applied as Pulsar's own broker deletes a namespace: mark the document ``deleted`` (brokers
then refuse new topics in it), look again, then delete; a topic that appeared in between undoes the mark. The
term decides those steps (``geosync_agent.core.mirroring``: ``ListContents``, answered here by
``read_contents``); each write is a compare-and-set fenced by the mirror's leadership, so a change made
meanwhile by anyone wins.

While a deletion is held, the replica holds it as the policy everywhere, and the store keeps the region's
document: ``geoctl policies diff`` shows the difference and ``geoctl status`` the hold. Local edits of the
held document stay in this region and are not mirrored (counted ``held_local_edits``), so last writer wins
never brings a namespace back everywhere that its owners deleted; a newer document from any region (the
namespace created again) replaces the region's own and ends the hold, unless it leaves this region out: that
one is held in the deletion's place (the region's brokers would delete the same topics) and written once the
region has drained. The hold ends on its own once the
region has drained (its topics deleted, by its users, by Pulsar's inactive-topic deletion, or by ``geoctl
policies release``, which says what it deletes).

One of the mirror's parts (see ``mirrorlocal``): it reads no clock, draws no random number and starts no
thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote

from geosync_adapters import zookeeper as zk
from geosync_adapters.adminhttp import AdminError, AdminNotFound, AdminPreconditionFailed
from geosync_core import deletions
from geosync_core.deletions import Contents

POLICIES_ROOT = "/admin/policies"
MANAGED_LEDGERS = "/managed-ledgers"
PARTITIONED_TOPICS = "/admin/partitioned-topics"


class Listing(Protocol):
    """What the region's brokers say it holds (``geosync_adapters.admin.AdminClient``): they read the
    metadata store, which need not be the ZooKeeper the mirror writes (a separate configuration store)."""

    def every_topic(self, namespace: str) -> list[str]: ...

    def namespaces(self, tenant: str) -> list[str]: ...


def read_contents(
    store: zk.Store, brokers: Listing, path: str, *, own: Callable[[str], frozenset[str]]
) -> Contents:
    """What the region holds under a tenant or namespace policy path, by its store and its brokers together
    (``own(namespace)``: GeoSync's topics). Raises ``Held`` when the brokers cannot say."""
    tenant, _, namespace = path[len(POLICIES_ROOT) + 1 :].partition("/")
    if namespace:
        return Contents(topics=tuple(namespace_topics(store, brokers, f"{tenant}/{namespace}", own)))
    names = set(store.children(f"{POLICIES_ROOT}/{tenant}"))
    names.update(ns.rsplit("/", 1)[-1] for ns in _asked(path, lambda: brokers.namespaces(tenant)))
    # A namespace whose policies are gone but whose managed ledgers remain still holds messages.
    names.update(
        ns
        for ns in store.children(f"{MANAGED_LEDGERS}/{tenant}")
        if namespace_topics(store, None, f"{tenant}/{ns}", own)
    )
    return Contents(namespaces=tuple(sorted(names)))


def namespace_topics(
    store: zk.Store, brokers: Listing | None, namespace: str, own: Callable[[str], frozenset[str]]
) -> list[str]:
    """The topics of ``tenant/namespace`` a deletion would destroy (``deletions.user_topics``)."""
    stored = [
        *store.children(f"{MANAGED_LEDGERS}/{namespace}/persistent"),
        *store.children(f"{PARTITIONED_TOPICS}/{namespace}/persistent"),
        *store.children(f"{PARTITIONED_TOPICS}/{namespace}/non-persistent"),
    ]
    if brokers is not None:
        listed = _asked(namespace, lambda: brokers.every_topic(namespace))
        stored += [quote(t.rsplit("/", 1)[-1], safe="") for t in listed]
    return deletions.user_topics(stored, own=own(namespace))


def _asked(what: str, call: Callable[[], list[str]]) -> list[str]:
    try:
        return call()
    except (AdminNotFound, AdminPreconditionFailed):
        # The brokers serve no such tenant or namespace here: none, one marked deleted (they refuse new
        # topics in it), or one without this region (they delete its topics). The store has said the rest.
        return []
    except AdminError as e:
        raise Held(f"cannot list what this region holds under {what}: {e}") from e


class Held(Exception):
    """The change waits: this region still holds what it would destroy."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
