"""The shared origin rule for tools, over the admin API: where a stored entry's messages were published.

``geoctl`` and the Spark audit name an entry's origin as the agent does (``geosync_core.resolving``), with
what they can ask a region's brokers: the GeoSync interceptor's origin index where it answers, else the
entry's own headers (``admin.AdminClient.entry_headers``), else its ``X-Pulsar-replicated-from``.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError, AdminNotFound
from geosync_core.indexing import OriginRun, covering
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.resolving import OriginResolver

log = logging.getLogger(__name__)


def header_resolver(region: str, admin: AdminClient, *, plugin: bool = True) -> OriginResolver:
    """The shared origin rule (``geosync_core.resolving``) for tools (``geoctl``, the audit): a batched
    entry's origin comes from the GeoSync interceptor's origin index where it answers (one call covers a
    stretch of the topic; ``plugin``), else from the entry's headers (region and entry-level stamp, one call
    per entry); the last resort is the entry's ``X-Pulsar-replicated-from`` header; an admin error leaves the
    origin unnamed."""

    def lookup(topic: str, local: Position) -> str | None:
        try:
            return admin.replicated_from(topic, ledger=local.ledger, entry=local.entry)
        except AdminError:
            return None

    index = _PluginIndex(admin) if plugin else None

    def source(topic: str, local: Position) -> Origin | None:
        run = index.run(topic, local) if index is not None else None
        if run is not None:
            if run.origin == region:
                return Origin(region, local)
            at = run.origin_at(local.entry)
            if at is not None:
                return Origin(run.origin, at)
        # One call per entry, not per message (a batch's messages come one after another), and none for an
        # entry asked before: a stored entry never changes (a check run every few seconds reads the same
        # topic again).
        key = (admin.base_url, topic, local)
        known: tuple[Origin | None] | None = _HEADER_ORIGINS.get(key)
        if known is not None:
            return known[0]
        try:
            headers = admin.entry_headers(topic, ledger=local.ledger, entry=local.entry)
        except AdminError:
            return None
        found = headers.origin(region, local)
        _HEADER_ORIGINS.put(key, (found,))
        return found

    return OriginResolver(local=region, lookup=lookup, source=source)


class _Memo:
    """A bounded, thread-safe map that forgets its oldest entries first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            return self.items.get(key)

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.limit:
                self.items.popitem(last=False)


_HEADER_ORIGINS = _Memo(500_000)
"""(admin URL, topic, position) -> (origin named by that stored entry's headers,): entries never change."""


class _PluginIndex:
    """The interceptor's origin runs of the topic being read, asked for from the first position not covered
    and kept while one topic is read (positions come in order). Off for good where the plugin is missing or
    refuses the caller (``geosyncOriginIndexAllowRemoteReads`` off and the tool not on the broker's host)."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self.usable = True
        self.topic = ""
        self.runs: list[OriginRun] = []
        self.asked: tuple[Position, Position] | None = None
        """(asked from, last entry the answer covered): what is not in a run between them is not recorded."""

    def run(self, topic: str, local: Position) -> OriginRun | None:
        if not self.usable:
            return None
        if topic != self.topic:
            self.topic, self.runs, self.asked = topic, [], None
        for attempt in range(2):
            run = covering(self.runs, local)
            if run is not None:
                return run
            if attempt or (self.asked is not None and self.asked[0] <= local <= self.asked[1]):
                return None
            try:
                runs = self.admin.plugin_origins(topic, start=(local.ledger, local.entry))
            except AdminError as e:
                if isinstance(e, AdminNotFound) or e.status in (401, 403):
                    self.usable = False
                    log.info("no usable GeoSync origin index here (%s): one admin call per batched entry", e)
                return None
            self.runs = sorted(runs, key=lambda run: run.start)
            end = max((Position(r.ledger, r.first + r.count - 1) for r in self.runs), default=local)
            self.asked = (local, max(end, local))
        return None
