"""Pulsar admin REST client: the only code that speaks ``/admin/v2``, one method per endpoint.

``AdminClient`` names the calls the agent and the tools make (clusters, tenants, namespaces, topics,
cursors, the GeoSync interceptor's endpoints) over the HTTP session of ``adminhttp`` (credentials,
redirects, retries, and the error types every call raises). The origin rule for tools over these calls is
``adminorigins``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from geosync_adapters.adminhttp import (
    NO_RETRY,
    AdminBadRequest,
    AdminConflict,
    AdminError,
    AdminNotFound,
    AdminSession,
)
from geosync_core import pluginapi, pluginwrites
from geosync_core.indexing import OriginRun
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.resolving import stamp_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EntryHeaders:
    """The entry-level facts the admin API returns as headers with a stored entry."""

    replicated_from: str | None
    properties: dict[str, str]
    """The entry's own properties (header ``X-Pulsar-PROPERTY``, a JSON object); {} if absent or not one."""
    batch_size: int | None
    """Messages in the entry if it is a batch (``X-Pulsar-num-batch-message``), else None."""

    def origin(self, region: str, local: Position) -> Origin | None:
        """The origin of the entry at ``local`` held by ``region``: itself if not replicated, else the
        region it came from and the position its entry-level stamp names (None without a valid stamp)."""
        if self.replicated_from is None:
            return Origin(region, local)
        stamp = stamp_of(self.properties)
        return Origin(self.replicated_from, stamp) if isinstance(stamp, Position) else None

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> EntryHeaders:
        try:
            raw = json.loads(headers.get("X-Pulsar-PROPERTY") or "{}")
        except ValueError:
            raw = {}
        properties = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        count = headers.get("X-Pulsar-num-batch-message")
        return cls(
            replicated_from=headers.get("X-Pulsar-replicated-from") or None,
            properties=properties,
            batch_size=int(count) if count is not None and count.isdigit() else None,
        )


MAX_BATCH_PAGES = 1000
"""Pages of 1,000 partly acknowledged entries read per cursor report at most (a million entries): beyond,
the report stays truncated (``pluginapi.CursorReport.batches_truncated``)."""


class AdminClient(AdminSession):
    """A client for one region's admin API (``http://host:port``): its endpoints, over ``AdminSession``."""

    # -- clusters, tenants, namespaces -------------------------------------------------------------

    def clusters(self, **kw: Any) -> list[str]:
        return list(self.get("/admin/v2/clusters", **kw) or [])

    def upsert_cluster(
        self, name: str, *, service_url: str, broker_service_url: str, listener_name: str | None = None
    ) -> None:
        """Create or update a peer cluster; ``listener_name`` picks which of the peer's advertised
        listeners this region's replicators are sent to by lookups (the lab's WAN proxies)."""
        body = {"serviceUrl": service_url, "brokerServiceUrl": broker_service_url}
        if listener_name:
            body["listenerName"] = listener_name
        try:
            self.put(f"/admin/v2/clusters/{name}", body)
        except AdminConflict:
            self.post(f"/admin/v2/clusters/{name}", body)

    def tenants(self) -> list[str]:
        return list(self.get("/admin/v2/tenants") or [])

    def upsert_tenant(
        self, tenant: str, *, allowed_clusters: list[str], admin_roles: list[str] | None = None
    ) -> None:
        body = {"adminRoles": admin_roles or [], "allowedClusters": allowed_clusters}
        try:
            self.put(f"/admin/v2/tenants/{tenant}", body)
        except AdminConflict:
            self.post(f"/admin/v2/tenants/{tenant}", body)

    def namespaces(self, tenant: str) -> list[str]:
        return list(self.get(f"/admin/v2/namespaces/{tenant}") or [])

    def create_namespace(self, namespace: str, *, exist_ok: bool = True) -> bool:
        """Create ``tenant/ns``; True if created, False if it existed (and ``exist_ok``)."""
        try:
            self.put(f"/admin/v2/namespaces/{namespace}")
        except AdminConflict:
            if not exist_ok:
                raise
            return False
        return True

    def namespace_policies(self, namespace: str) -> dict[str, Any]:
        return dict(self.get(f"/admin/v2/namespaces/{namespace}") or {})

    def set_replication_clusters(self, namespace: str, clusters: list[str]) -> None:
        self.post(f"/admin/v2/namespaces/{namespace}/replication", clusters)

    def replication_clusters(self, namespace: str) -> list[str]:
        return list(self.get(f"/admin/v2/namespaces/{namespace}/replication") or [])

    def set_retention(self, namespace: str, *, minutes: int, size_mb: int) -> None:
        """Keep acknowledged messages ``minutes`` and up to ``size_mb`` per topic (-1: without limit)."""
        body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}
        self.post(f"/admin/v2/namespaces/{namespace}/retention", body)

    def retention(self, namespace: str) -> dict[str, Any] | None:
        """The namespace's own retention policy; None when it has none (the brokers' defaults apply)."""
        got = self.get(f"/admin/v2/namespaces/{namespace}/retention")
        return dict(got) if isinstance(got, dict) else None

    def set_allowed_clusters(self, namespace: str, clusters: list[str]) -> None:
        self.post(f"/admin/v2/namespaces/{namespace}/allowedClusters", clusters)

    def allowed_clusters(self, namespace: str) -> list[str]:
        return list(self.get(f"/admin/v2/namespaces/{namespace}/allowedClusters") or [])

    # -- topics ------------------------------------------------------------------------------------

    @staticmethod
    def topic_path(topic: str) -> str:
        """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` (each segment URL-quoted)."""
        domain, _, rest = topic.partition("://")
        if not rest:
            raise AdminBadRequest(f"not a full topic name: {topic!r} (expected persistent://tenant/ns/topic)")
        return "/".join([domain, *(urllib.parse.quote(part, safe="") for part in rest.split("/"))])

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        self.put(f"/admin/v2/{self.topic_path(topic)}/partitions", partitions)

    def partitioned_metadata(self, topic: str) -> int:
        """Number of partitions; 0 for a non-partitioned topic and for one that does not exist (yet)."""
        try:
            meta = self.get(f"/admin/v2/{self.topic_path(topic)}/partitions") or {}
        except AdminNotFound:
            return 0
        return int(meta.get("partitions", 0))

    def topic_stats(self, topic: str, **kw: Any) -> dict[str, Any]:
        return dict(self.get(f"/admin/v2/{self.topic_path(topic)}/stats", **kw) or {})

    def backlog(self, topic: str, subscription: str) -> int | None:
        """A subscription's ``msgBacklog`` from the topic's stats (entries, for batched messages); None if the
        topic or the subscription does not exist."""
        try:
            subs = self.topic_stats(topic).get("subscriptions") or {}
        except AdminNotFound:
            return None
        return None if subscription not in subs else int(subs[subscription].get("msgBacklog", -1))

    def internal_stats(self, topic: str, **kw: Any) -> dict[str, Any]:
        return dict(self.get(f"/admin/v2/{self.topic_path(topic)}/internalStats", **kw) or {})

    def unload_topic(self, topic: str) -> None:
        """Close the topic on its broker (its clients reconnect, and it loads again, with new replicators)."""
        self.put(f"/admin/v2/{self.topic_path(topic)}/unload")

    def topics(self, namespace: str) -> list[str]:
        return list(self.get(f"/admin/v2/namespaces/{namespace}/topics") or [])

    def every_topic(self, namespace: str) -> list[str]:
        """Every topic of ``namespace`` the brokers know: persistent and non-persistent (partitions listed
        one by one), and partitioned topics by their own names."""
        found = set(self.get(f"/admin/v2/namespaces/{namespace}/topics", params={"mode": "ALL"}) or [])
        for domain in ("persistent", "non-persistent"):
            found.update(self.get(f"/admin/v2/{domain}/{namespace}/partitioned") or [])
        return sorted(found)

    def delete_topic(self, topic: str, *, partitioned: bool, force: bool = False) -> None:
        """Delete a topic (``partitioned``: the partitioned topic, every partition with it)."""
        suffix = "/partitions" if partitioned else ""
        self.delete(
            f"/admin/v2/{self.topic_path(topic)}{suffix}", params={"force": "true"} if force else None
        )

    def create_topic(self, topic: str) -> bool:
        """Create a non-partitioned topic; False if it exists already."""
        try:
            self.put(f"/admin/v2/{self.topic_path(topic)}")
        except AdminConflict:
            return False
        return True

    # -- subscriptions and cursors -----------------------------------------------------------------

    def create_subscription(self, topic: str, subscription: str, *, at: tuple[int, int] = (-1, -1)) -> bool:
        """Create a durable subscription at ``(ledger, entry)``; (-1, -1) is the earliest message.

        True if created, False if it existed already (then it is left untouched).
        """
        path = f"/admin/v2/{self.topic_path(topic)}/subscription/{urllib.parse.quote(subscription, safe='')}"
        try:
            self.put(path, {"ledgerId": at[0], "entryId": at[1]}, params={"replicated": "false"})
        except AdminConflict:
            return False
        return True

    def expire_messages(
        self, topic: str, subscription: str, *, ledger: int, entry: int, partition: int = -1
    ) -> None:
        """Move a subscription's mark-delete forward to ``ledger:entry`` (never backwards, keeps holes above,
        does not disconnect consumers). Asynchronous on the broker: poll the cursor to see it done."""
        sub = urllib.parse.quote(subscription, safe="")
        body = {
            "ledgerId": ledger,
            "entryId": entry,
            "partitionIndex": partition,
            "batchIndex": -1,
            "excluded": False,
        }
        self.post(f"/admin/v2/{self.topic_path(topic)}/subscription/{sub}/expireMessages", body)

    def reset_cursor(self, topic: str, subscription: str, *, mark_delete: tuple[int, int] | None) -> None:
        """Move a subscription's cursor to mark-delete ``(ledger, entry)``, backwards too, or before the
        earliest message (``None``). Clears every individual acknowledgement above it and disconnects the
        subscription's consumers (they reconnect): for rewinds only (a user's rewind in another region)."""
        sub = urllib.parse.quote(subscription, safe="")
        path = f"/admin/v2/{self.topic_path(topic)}/subscription/{sub}/resetcursor"
        if mark_delete is None:
            self.post(f"{path}/0")
        else:
            self.post(path, {"ledgerId": mark_delete[0], "entryId": mark_delete[1], "isExcluded": True})

    def skip_by_message_ids(self, topic: str, subscription: str, positions: list[tuple[int, int]]) -> None:
        """Individually acknowledge entries (PIP-423).

        Raises AdminNotFound or AdminNotAllowed on brokers without it (4.0.8 answers 404)."""
        sub = urllib.parse.quote(subscription, safe="")
        body = {"type": "messageId", "messageIds": [{"ledgerId": lg, "entryId": e} for lg, e in positions]}
        self.post(f"/admin/v2/{self.topic_path(topic)}/subscription/{sub}/skipByMessageIds", body)

    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]:
        """The runs of the GeoSync broker interceptor's origin index (``/admin/v2/geosync/origins``) that
        end at or after ``start``: local entries, their origin region and, for replicated entries whose
        source position the broker saw, that position. Runs that are not the documented shape are skipped
        and logged (what is missing is only unknown, never guessed). Raises AdminNotFound where the plugin
        is not loaded."""
        params = {"topic": topic}
        if start is not None:
            params["from"] = f"{start[0]}:{start[1]}"
        body = self.get("/admin/v2/geosync/origins", params=params)
        items = body.get("runs") if isinstance(body, dict) else None
        if not isinstance(items, list):
            log.warning("%s: the interceptor's origin index answered no list of runs: %.200r", topic, body)
            return []
        runs = [OriginRun.from_wire(item) for item in items]
        kept = [run for run in runs if run is not None]
        if len(kept) < len(items):
            skipped = len(items) - len(kept)
            log.warning("%s: skipped %d malformed runs of the interceptor's origin index", topic, skipped)
        return kept

    def plugin_cursors(self, *, since: int) -> tuple[str, int, list[dict[str, str]]]:
        """The GeoSync interceptor's acknowledgement feed (``/admin/v2/geosync/cursors``): its epoch (new at
        each broker start), its current sequence number, and the cursor state (``topic``, ``subscription``,
        ``mark_delete``, ``individually_deleted``) of every subscription consumers acknowledged on since
        ``since``. Raises AdminNotFound where the plugin is not loaded."""
        body = self.get("/admin/v2/geosync/cursors", params={"since": since}) or {}
        return str(body.get("epoch", "")), int(body.get("seq", 0)), list(body.get("cursors") or [])

    def plugin_topics(self, namespace: str) -> dict[str, dict[str, Any]]:
        """What the GeoSync interceptor lists of ``namespace``'s topics this broker has loaded
        (``/admin/v2/geosync/subscriptions``): per topic its ``subscriptions`` and ``replication`` as a subset
        of the topic stats, with the stats' field names. Topics whose entry is not an object are left out and
        logged. Raises AdminNotFound where the plugin is older or not loaded."""
        body = self.get("/admin/v2/geosync/subscriptions", params={"namespace": namespace})
        topics = body.get("topics") if isinstance(body, dict) else None
        if not isinstance(topics, dict):
            log.warning(
                "%s: the interceptor's topic list is not an object of topics: %.200r", namespace, body
            )
            return {}
        kept = {t: v for t, v in topics.items() if isinstance(t, str) and isinstance(v, dict)}
        if len(kept) < len(topics):
            log.warning(
                "%s: left out %d malformed topics of the interceptor's list",
                namespace,
                len(topics) - len(kept),
            )
        return kept

    def plugin_acks(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Acknowledge through the GeoSync interceptor (``POST /admin/v2/geosync/acks``): per item ``topic``,
        ``subscription``, ``mark_delete`` ("L:E" or None) and ``positions`` (["L:E", ...]). Returns one
        result per item: ``status`` ("ok" with the cursor's ``mark_delete`` and ``individually_deleted``
        afterwards, "not_loaded", "no_subscription" or "bad_request"). Raises AdminNotFound without the
        plugin and AdminForbidden where the broker keeps cursor writes off."""
        body = self.post("/admin/v2/geosync/acks", {"acks": items}) or {}
        return list(body.get("results") or [])

    def plugin_feed(self, *, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        """``plugin_cursors`` as typed values: each reported cursor with its partly acknowledged batch
        entries (``CursorReport.batches``), all of them (``complete_batches``); with ``acked`` false, the
        answer's ``acked`` blocks are not read (``Feed.from_wire``). Raises AdminNotFound where the plugin
        is not loaded and ``PluginApiError`` for an answer that is not the documented shape. ``epoch``: the
        run of the broker ``since`` counts in (the previous answer's); a broker that restarted since then
        confirms nothing by it (decision 0015), and "" confirms by ``since`` alone."""
        params: dict[str, Any] = {"since": since}
        if epoch:
            params["epoch"] = epoch
        answer = self.get("/admin/v2/geosync/cursors", params=params) or {}
        feed = pluginapi.Feed.from_wire(answer, acked=acked)
        if not any(c.batches_truncated for c in feed.cursors):
            return feed
        return dataclasses.replace(feed, cursors=tuple(self.complete_batches(c) for c in feed.cursors))

    def plugin_cursor(
        self, topic: str, subscription: str, *, after: Position | None = None
    ) -> pluginapi.CursorReport | None:
        """One cursor's state from the interceptor (``/admin/v2/geosync/cursor``), its partly acknowledged
        entries only those above ``after`` (the next page of a truncated report); None when this broker has
        not loaded the topic or the subscription is gone. Raises AdminNotFound where the plugin is older."""
        params = {"topic": topic, "subscription": subscription}
        if after is not None:
            params["after"] = str(after)
        body = self.get("/admin/v2/geosync/cursor", params=params) or {}
        ok = pluginapi.Status.OK.value
        if isinstance(body, dict) and body.get("status", ok) != ok:
            return None
        return pluginapi.CursorReport.from_wire(body)

    def complete_batches(self, report: pluginapi.CursorReport) -> pluginapi.CursorReport:
        """``report`` with every partly acknowledged entry of its cursor: the broker answers at most 1,000 per
        report and says so (``batches_truncated``); the rest are read page by page, up to MAX_BATCH_PAGES.
        A page that cannot be read leaves the report truncated as it is (those indexes are claimed later:
        duplicates after a failover meanwhile, never a loss); so does a plugin too old to page."""
        pages = 0
        while report.batches_truncated and report.batches and pages < MAX_BATCH_PAGES:
            try:
                after = report.batches[-1].position
                page = self.plugin_cursor(report.topic, report.subscription, after=after)
            except (AdminError, pluginapi.PluginApiError) as e:
                log.warning(
                    "%s / %s: %d partly acknowledged entries reported, the next page unreadable: %s",
                    report.topic,
                    report.subscription,
                    len(report.batches),
                    e,
                )
                return report
            if page is None:
                return report
            report, pages = report.followed_by(page), pages + 1
        return report

    def plugin_write(self, items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckResult]:
        """``plugin_acks`` as typed values, with batch-index acknowledgements (``AckItem.batches``). One
        result per item, in order, each cursor with all its partly acknowledged entries
        (``complete_batches``). Raises AdminNotFound without the plugin, AdminForbidden where the broker
        keeps cursor writes off, and ``PluginApiError`` for an answer that is not the documented shape."""
        body = self.post("/admin/v2/geosync/acks", pluginwrites.encode_ack_request(items)) or {}
        results = [pluginwrites.AckResult.from_wire(r) for r in body.get("results") or []]
        if len(results) != len(items):
            raise pluginapi.PluginApiError(f"{len(items)} items written but {len(results)} results answered")
        return [
            dataclasses.replace(r, cursor=self.complete_batches(r.cursor))
            if r.cursor is not None and r.cursor.batches_truncated
            else r
            for r in results
        ]

    def replicated_from(self, topic: str, *, ledger: int, entry: int) -> str | None:
        """The region a stored entry was replicated from (None for a local one), from the entry's headers."""
        return self.entry_headers(topic, ledger=ledger, entry=entry).replicated_from

    def entry_headers(self, topic: str, *, ledger: int, entry: int) -> EntryHeaders:
        """What the broker says of a stored entry beyond its first message (``GET .../ledger/L/entry/E``):
        the region it was replicated from, the entry's own properties (where a batched replicated copy
        keeps its source-position stamp) and its number of messages."""
        path = f"/admin/v2/{self.topic_path(topic)}/ledger/{ledger}/entry/{entry}"
        response: requests.Response = self.retry.retrying()(self._once, "GET", path, None, None)
        return EntryHeaders.of(response.headers)

    def runtime_configuration(self) -> dict[str, Any]:
        """The brokers' runtime configuration (``/admin/v2/brokers/configuration/runtime``)."""
        return dict(self.get("/admin/v2/brokers/configuration/runtime") or {})

    def set_dynamic_configuration(self, name: str, value: str | None) -> None:
        """Set (``None``: delete) one of the region's dynamic broker settings; every broker of the region
        reads it from the region's metadata store."""
        path = f"/admin/v2/brokers/configuration/{urllib.parse.quote(name, safe='')}"
        if value is None:
            self.delete(path)
        else:
            self.post(f"{path}/{urllib.parse.quote(value, safe='')}")

    def active_brokers(self, cluster: str) -> list[str]:
        """The ids (``host:webServicePort``) of ``cluster``'s active brokers."""
        return [str(b) for b in self.get(f"/admin/v2/brokers/{urllib.parse.quote(cluster, safe='')}") or []]

    def owned_bundles(self, cluster: str, broker: str) -> dict[str, Any]:
        """The bundles ``broker`` owns (``ownedNamespaces``): ``{"tenant/ns/0xLO_0xHI": status}``."""
        path = f"/admin/v2/brokers/{urllib.parse.quote(cluster, safe='')}/{broker}/ownedNamespaces"
        return dict(self.get(path) or {})

    def lookup_topic(self, topic: str) -> dict[str, Any]:
        """The topic's owner (``brokerUrl``, ``httpUrl``...); the look-up has some broker take its bundle
        when none owns it."""
        return dict(self.get(f"/lookup/v2/topic/{self.topic_path(topic)}") or {})

    # -- policy mirror and geoctl namespaces -------------------------------------------------------

    def tenant(self, tenant: str, **kw: Any) -> dict[str, Any]:
        """``TenantInfo`` (``adminRoles``, ``allowedClusters``); raises ``AdminNotFound`` if absent."""
        return dict(self.get(f"/admin/v2/tenants/{tenant}", **kw) or {})

    def delete_tenant(self, tenant: str) -> None:
        self.delete(f"/admin/v2/tenants/{tenant}")

    def cluster(self, name: str, **kw: Any) -> dict[str, Any]:
        """A registered cluster's ``ClusterData`` (with ``peerClusterNames``); ``AdminNotFound`` if absent."""
        return dict(self.get(f"/admin/v2/clusters/{name}", **kw) or {})

    def create_namespace_with_policies(self, namespace: str, policies: dict[str, Any]) -> None:
        """Create ``tenant/ns`` with an initial ``Policies`` body (e.g. replication and allowed clusters)."""
        self.put(f"/admin/v2/namespaces/{namespace}", policies)

    def delete_namespace(self, namespace: str, *, force: bool = False) -> None:
        self.delete(f"/admin/v2/namespaces/{namespace}", params={"force": "true"} if force else None)

    def set_message_ttl(self, namespace: str, seconds: int) -> None:
        self.post(f"/admin/v2/namespaces/{namespace}/messageTTL", seconds)


def is_ready(client: AdminClient, cluster: str, *, probe: Callable[[], list[str]] | None = None) -> bool:
    """A region is ready when its admin API answers and lists its own cluster (created after start)."""
    try:
        names = probe() if probe else client.clusters(retry=NO_RETRY)
    except AdminError:
        return False
    return cluster in names
