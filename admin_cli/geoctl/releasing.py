"""``geoctl policies release``: the operator's explicit word to let a held namespace deletion destroy data.

A region's policy mirror holds another region's deletion of a namespace while that namespace still holds
topics here (``geosync_agent.mirrorholds``): applying it would leave their messages unreachable. The hold
ends on its own once the region has drained. This command is the other way out: it says which topics it
would delete and how many messages their subscriptions have not consumed, asks, and then does what Pulsar's
broker does for a namespace deletion: marks the namespace ``deleted`` in the region's ZooKeeper (its brokers
then refuse new topics in it, so no reader or replicator makes them again), deletes the topics through the
region's admin API, and waits for the mirror to delete the namespace.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from geoctl import access
from geoctl.errors import EXIT_PRECONDITION, EXIT_UNREACHABLE, GeoctlError
from geoctl.output import emit, output_option
from geosync_adapters import admin as adm
from geosync_adapters import adminhttp
from geosync_adapters import zookeeper as zk
from geosync_core import deletions


def _exists(client: adm.AdminClient, namespace: str) -> bool:
    try:
        client.namespace_policies(namespace)
    except adminhttp.AdminNotFound:
        return False
    return True


def _backlogs(client: adm.AdminClient, topic: str) -> dict[str, int]:
    try:
        subs = client.topic_stats(topic).get("subscriptions") or {}
    except adminhttp.AdminError:
        return {}  # a partitioned topic's own name, or a non-persistent topic gone meanwhile
    return {str(name): int(s.get("msgBacklog", 0)) for name, s in sorted(subs.items())}


@click.command("release")
@click.option("--region", required=True, help="The region whose policy mirror holds the deletion.")
@click.argument("namespace")
@click.option("--yes", is_flag=True, help="Do not ask; delete what the plan lists.")
@click.option(
    "--wait-s",
    type=click.FloatRange(0),
    default=120.0,
    show_default=True,
    help="How long to wait for the mirror to apply the deletion once the topics are gone (0: do not wait).",
)
@access.options
@output_option
def release(
    *, region: str, namespace: str, yes: bool, wait_s: float, sites: dict[str, access.Site], output: str
) -> None:
    """Delete the topics that hold another region's deletion of NAMESPACE (tenant/ns) in --region.

    \b
    The namespace must be gone from every other region and still exist in --region: that is a deletion
    the policy mirror holds there ('geoctl status' lists them, with what holds each). The command lists
    every topic it would delete, with each subscription's backlog (messages nobody consumed there), and
    asks before deleting; the mirror then deletes the namespace at its next recheck.
    """
    if region not in sites:
        raise GeoctlError(f"unknown region {region!r}; known: {', '.join(sorted(sites))}")
    if not sites[region].region.zookeeper:  # asked before anything is read, let alone deleted
        raise GeoctlError(
            f"region {region} has no zookeeper address: the namespace must be marked deleted there first "
            "(give 'zookeeper' in --config)",
            exit_code=EXIT_PRECONDITION,
        )
    clients = {
        name: site.admin(retry=adminhttp.RetryPolicy(attempts=3, deadline=10.0))
        for name, site in sites.items()
    }
    try:
        still = sorted(
            name for name, client in clients.items() if name != region and _exists(client, namespace)
        )
        if not _exists(clients[region], namespace):
            raise GeoctlError(f"{namespace} does not exist in {region}: nothing to release")
        if still:
            raise GeoctlError(
                f"{namespace} still exists in {', '.join(still)}: no deletion of it is held in {region}; "
                "delete it where it was created first",
                exit_code=EXIT_PRECONDITION,
            )
        topics = clients[region].every_topic(namespace)
        plan = [(t, _backlogs(clients[region], t)) for t in topics]
    except adminhttp.AdminError as e:
        raise GeoctlError(
            f"cannot read {namespace}: {e}; is the region up?", exit_code=EXIT_UNREACHABLE
        ) from e

    if output == "text":
        click.echo(f"In {region}, deleting {namespace} destroys {len(plan)} topic(s):")
        for topic, backlogs in plan:
            waiting = ", ".join(f"{s}: {n} unconsumed" for s, n in backlogs.items()) or "no subscriptions"
            click.echo(f"  {topic}  ({waiting})")
    if plan and not yes:
        if not sys.stdin.isatty():
            raise GeoctlError(
                "not deleting without --yes (no terminal to ask on)", exit_code=EXIT_PRECONDITION
            )
        click.confirm(f"Delete these {len(plan)} topic(s) in {region}?", abort=True)
    partitioned = {t for t in topics if clients[region].partitioned_metadata(t) > 0}
    _mark_deleted(sites[region], namespace)
    for topic in topics:
        with contextlib.suppress(adminhttp.AdminNotFound):  # a partition deleted with its partitioned topic
            clients[region].delete_topic(topic, partitioned=topic in partitioned, force=True)
    applied = _wait_gone(sites[region], namespace, wait_s) if wait_s else None
    deleted = [{"topic": t, "backlogs": b} for t, b in plan]
    data: dict[str, Any] = {"region": region, "namespace": namespace, "deleted": deleted, "applied": applied}

    def text(_d: dict[str, Any]) -> None:
        if applied is None:
            click.echo(
                f"topics deleted; the policy mirror of {region} deletes {namespace} at its next recheck"
            )
        elif applied:
            click.echo(f"{namespace} deleted in {region} by its policy mirror")
        else:
            click.echo(f"{namespace} still exists in {region} after {wait_s:.0f} s: see 'geoctl status'")

    emit(data, output, text)
    if applied is False:
        raise SystemExit(EXIT_PRECONDITION)


@contextlib.contextmanager
def _zookeeper(site: access.Site, doing: str) -> Iterator[zk.Store]:
    """The region's ZooKeeper for the block; its errors say what could not be done there."""
    store = zk.Store(site.region.zookeeper, session_timeout_s=10.0)
    try:
        store.start(timeout_s=10.0)
        yield store
    except (zk.ZkError, ValueError) as e:
        raise GeoctlError(
            f"cannot {doing} in {site.name}'s ZooKeeper: {e}", exit_code=EXIT_UNREACHABLE
        ) from e
    finally:
        store.stop()


def _mark_deleted(site: access.Site, namespace: str) -> None:
    """Pulsar's mark on the namespace document in the region's ZooKeeper (compare-and-set)."""
    path = f"/admin/policies/{namespace}"
    with _zookeeper(site, f"mark {namespace} deleted") as store:
        node = store.read(path)
        if node is not None and not deletions.is_marked_deleted(node.value):
            store.write(path, deletions.mark_deleted(node.value), expected=node, public=True)


def _wait_gone(site: access.Site, namespace: str, wait_s: float) -> bool:
    """Whether the namespace document left the region's ZooKeeper within ``wait_s`` (the brokers' API
    answers 404 for a namespace marked deleted already, so it cannot tell)."""
    with _zookeeper(site, f"read {namespace}") as store:
        deadline = time.monotonic() + wait_s
        while store.read(f"/admin/policies/{namespace}") is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)
        return True
