"""One admin client for a region of several brokers: the deployment-mode agent's view of its region.

Why: every broker serves the admin API, but the GeoSync plugin's endpoints answer for the topics the broker
asked owns and Pulsar does not redirect them: a broker's acknowledgement feed lists its own topics only, its
origin index answers no runs and its cursor writes ``not_loaded`` for the others. ``RegionAdmin`` is an
``AdminClient`` that

* learns the region's brokers from ``/admin/v2/brokers/{cluster}`` (their web service addresses), asked again
  every ``refresh_s``; until that answers, the configured URLs (``admin_url`` and ``seeds``) are the list;
* reads every broker's feed and merges them: each broker keeps its own epoch and sequence number here; the
  merged feed's epoch names every broker's, so a restarted (or vanished, or new) broker changes it and the
  agent polls the cursors the feeds may have missed;
* sends origin-index reads and cursor writes to the topic's owner (``/lookup/v2/topic/...``, cached), asks
  again and retries once where the answer says the topic is elsewhere (``not_loaded``, an empty index after
  an unload, a broker that does not answer);
* sends every other call to a broker that answers: a refused or timed-out connection moves the call to the
  next broker, and that one is asked first from then on.

With one broker known it is an ``AdminClient``: no look-ups, that broker's feed as it answers.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import NO_RETRY, AdminError, AdminTemporary, OwnerUnreachable, RetryPolicy
from geosync_core import pluginapi, pluginwrites
from geosync_core.indexing import OriginRun

log = logging.getLogger(__name__)

BROKER_CALL = RetryPolicy(attempts=2, initial_delay=0.1, max_delay=0.5, deadline=3.0)
"""Calls pinned to one broker: short, since another broker or the next round can do the work."""
MAX_OWNERS = 100_000
"""Topic owners cached; the cache starts over beyond (each miss costs one look-up)."""
DOWN = "down"
"""A broker's epoch in the merged feed while its feed does not answer."""


def broker_urls(ids: Iterable[str], scheme: str) -> list[str]:
    """``/admin/v2/brokers/{cluster}`` answers broker ids ``host:port`` (the web service address since Pulsar
    3.0): as URLs with the configured admin API's scheme."""
    return [i.rstrip("/") if "://" in i else f"{scheme}://{i}" for i in ids]


def merged_epoch(epochs: Mapping[str, str]) -> str:
    """One epoch naming every broker's: it changes when any broker restarts, leaves or joins."""
    return " ".join(f"{url}={epoch}" for url, epoch in sorted(epochs.items()))


def _unique(urls: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(u.rstrip("/") for u in urls if u))


@dataclass
class RegionAdmin(AdminClient):
    """An ``AdminClient`` for every broker of one region (see the module docstring). Not thread-safe: one per
    thread, as the agent keeps its admin clients."""

    region: str = ""
    """The region's cluster name, whose active brokers are listed ("": only the configured URLs)."""
    seeds: tuple[str, ...] = ()
    """Further broker admin URLs (config ``broker_admin_urls``), asked when ``base_url`` does not answer."""
    refresh_s: float = 30.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    stats: Callable[[str], None] = field(default=lambda name: None, repr=False)
    """Counts routing events (``owner_lookups``, ``owner_retries``, ``admin_failovers``)."""
    _discovered: list[str] = field(init=False, default_factory=list)
    _refresh_at: float = field(init=False, default=0.0)
    _refreshing: bool = field(init=False, default=False)
    _preferred: str = field(init=False, default="")
    _owners: dict[str, str] = field(init=False, default_factory=dict)
    _feeds: dict[str, tuple[str, int]] = field(init=False, default_factory=dict)
    _acked_lost: dict[str, int] = field(init=False, default_factory=dict)
    _clients: dict[str, AdminClient] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._preferred = self.base_url

    # -- the region's brokers ------------------------------------------------------------------------

    def brokers(self) -> list[str]:
        """The brokers' admin URLs: as the region lists its active brokers, else as configured."""
        self._refresh()
        return list(self._discovered) or _unique([self.base_url, *self.seeds])

    def _refresh(self) -> None:
        if self._refreshing or not self.region or self.clock() < self._refresh_at:
            return
        self._refreshing = True
        self._refresh_at = self.clock() + self.refresh_s
        try:
            ids = self.get(f"/admin/v2/brokers/{urllib.parse.quote(self.region, safe='')}", retry=NO_RETRY)
            found = sorted(broker_urls((str(i) for i in ids or []), self._scheme()))
            if found != self._discovered:
                log.info("region %s: brokers %s", self.region, ", ".join(found))
            self._discovered = found
        except AdminError as e:
            log.warning("cannot list the brokers of %s (keeping %s): %s", self.region, self._discovered, e)
        finally:
            self._refreshing = False

    def _scheme(self) -> str:
        return urllib.parse.urlsplit(self.base_url).scheme or "http"

    def _single(self) -> bool:
        return len(self.brokers()) <= 1

    def client(self, url: str) -> AdminClient:
        """A client pinned to one broker (same credentials, session and TLS settings)."""
        found = self._clients.get(url)
        if found is None:
            found = AdminClient(
                url,
                token=self.token,
                timeout=self.timeout,
                retry=BROKER_CALL,
                verify=self.verify,
                on_call=self.on_call,
            )
            found.session = self.session
            self._clients[url] = found
        return found

    # -- any broker ----------------------------------------------------------------------------------

    def _once(self, method: str, path: str, body: Any, params: Mapping[str, Any] | None) -> requests.Response:
        if path.startswith("http"):
            return super()._once(method, path, body, params)
        order = _unique([self._preferred, self.base_url, *self.seeds, *self._discovered])
        for i, url in enumerate(order):
            try:
                response = super()._once(method, url + path, body, params)
            except AdminTemporary as e:
                if e.status is not None or isinstance(e, OwnerUnreachable) or i == len(order) - 1:
                    # The broker answered (its 5xx is retried by the policy), or redirected the call to an
                    # owner that does not answer (every broker would), or none is left.
                    raise
                log.warning("admin API at %s does not answer (%s); trying %s", url, e, order[i + 1])
                self.stats("admin_failovers")
                continue
            self._preferred = url
            return response
        raise AssertionError("unreachable: the order always holds base_url")

    # -- the topic's owner ---------------------------------------------------------------------------

    def owner(self, topic: str, *, fresh: bool = False) -> str:
        """The admin URL of the broker owning ``topic`` (a look-up loads it on some broker if none does)."""
        if not fresh and topic in self._owners:
            return self._owners[topic]
        self.stats("owner_lookups")
        answer = self.lookup_topic(topic)
        tls = self._scheme() == "https"
        url = str((answer.get("httpUrlTls") if tls else answer.get("httpUrl")) or "").rstrip("/")
        if not url:
            raise pluginapi.PluginApiError(f"the look-up of {topic} named no web service URL: {answer!r}")
        if len(self._owners) >= MAX_OWNERS:
            self._owners.clear()
        self._owners[topic] = url
        return url

    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]:
        """The origin index of ``topic``'s owner. A broker that does not own the topic answers no runs: an
        empty answer makes the owner looked up again, and asked again if it changed (a bundle unload)."""
        if self._single():
            return super().plugin_origins(topic, start=start)
        owner = self.owner(topic)
        try:
            runs = self.client(owner).plugin_origins(topic, start=start)
        except AdminTemporary as e:
            if e.status is not None:
                raise
            runs = []
        if runs:
            return runs
        moved = self.owner(topic, fresh=True)
        if moved == owner:
            return runs
        self.stats("owner_retries")
        return self.client(moved).plugin_origins(topic, start=start)

    def plugin_write(self, items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckResult]:
        """Each item written on its topic's owner; items answered ``not_loaded`` (or whose owner does not
        answer) are looked up again and written once more. One result per item, in order."""
        if self._single():
            return super().plugin_write(items)
        results = self._write_at_owners(items, range(len(items)), fresh=False)
        again = [i for i, r in enumerate(results) if r.status is pluginapi.Status.NOT_LOADED]
        if again:
            self.stats("owner_retries")
            for i, result in zip(again, self._write_at_owners(items, again, fresh=True), strict=True):
                results[i] = result
        return results

    def _write_at_owners(
        self, items: list[pluginwrites.AckItem], which: Iterable[int], *, fresh: bool
    ) -> list[pluginwrites.AckResult]:
        owners = {t: self.owner(t, fresh=fresh) for t in dict.fromkeys(items[i].topic for i in which)}
        by_owner: dict[str, list[int]] = {}
        for i in which:
            by_owner.setdefault(owners[items[i].topic], []).append(i)
        out: dict[int, pluginwrites.AckResult] = {}
        for url, indexes in by_owner.items():
            try:
                answered = self.client(url).plugin_write([items[i] for i in indexes])
            except AdminTemporary as e:
                if e.status is not None:
                    raise
                log.warning("broker %s does not answer cursor writes: %s", url, e)
                answered = [
                    pluginwrites.AckResult(pluginapi.Status.NOT_LOADED, error=str(e)) for _ in indexes
                ]
            out.update(zip(indexes, answered, strict=True))
        return [out[i] for i in sorted(out)]

    # -- every broker --------------------------------------------------------------------------------

    def plugin_topics(self, namespace: str) -> dict[str, dict[str, Any]]:
        """Every broker's list of its loaded topics of ``namespace`` (``AdminClient.plugin_topics``), merged.
        A broker that does not answer, or answers without the plugin, is left out (its topics are then read
        from their stats) unless none answers: then a broker that did not answer is raised (ask again next
        time), else the refusal."""
        brokers = self.brokers()
        if len(brokers) <= 1:
            return super().plugin_topics(namespace)
        out: dict[str, dict[str, Any]] = {}
        failures: list[AdminError] = []
        for url in brokers:
            try:
                listed = self.client(url).plugin_topics(namespace)
            except AdminError as e:
                log.warning("topic list of %s at %s unavailable: %s", namespace, url, e)
                failures.append(e)
                continue
            for topic, view in listed.items():
                out.setdefault(topic, view)
        if failures and len(failures) == len(brokers):
            raise next((e for e in failures if isinstance(e, AdminTemporary)), failures[-1])
        return out

    def plugin_feed(self, *, since: int, epoch: str = "", acked: bool = True) -> pluginapi.Feed:
        """Every broker's feed, merged (see the module docstring). ``since`` 0 starts every broker's feed
        over; otherwise each broker is asked from its own last sequence number. A broker that does not
        answer is left out (its epoch shows ``down``) unless none answers; one without the plugin or with
        the feed off raises, as ``AdminClient.plugin_feed`` does."""
        brokers = self.brokers()
        if len(brokers) <= 1:
            self._feeds.clear()
            return super().plugin_feed(since=since, epoch=epoch, acked=acked)
        if since == 0:
            self._feeds.clear()
        self._feeds = {url: pos for url, pos in self._feeds.items() if url in brokers}
        self._acked_lost = {url: n for url, n in self._acked_lost.items() if url in brokers}
        epochs: dict[str, str] = {}
        cursors: list[pluginapi.CursorReport] = []
        blocks: list[pluginapi.AckedSet] | None = [] if acked else None
        wire: list[Any] = []  # the blocks as the brokers gave them, for the agent's journal
        failed: AdminTemporary | None = None
        for url in brokers:
            run, seq = self._feeds.get(url, ("", 0))
            try:
                feed = self.client(url).plugin_feed(since=seq, epoch=run, acked=acked)
            except AdminTemporary as e:
                log.warning("acknowledgement feed of %s unavailable: %s", url, e)
                failed, epochs[url] = e, DOWN
                continue
            if run and feed.epoch != run:
                log.info("broker %s restarted (feed epoch %s -> %s)", url, run, feed.epoch)
            self._feeds[url] = (feed.epoch, feed.seq)
            epochs[url] = feed.epoch
            cursors.extend(feed.cursors)
            if feed.acked is None:
                blocks = None  # one broker that records no acknowledgements: none are (an older plugin)
            elif blocks is not None:
                blocks.extend(feed.acked)
                wire.extend(feed.acked_wire_or_encoded())
                self._acked_lost[url] = feed.acked_lost
        if failed is not None and all(e == DOWN for e in epochs.values()):
            raise failed
        seq = sum(seq for _, seq in self._feeds.values())
        return pluginapi.Feed(
            epoch=merged_epoch(epochs),
            seq=seq,
            cursors=tuple(cursors),
            acked=None if blocks is None else tuple(blocks),
            # Each broker's count as it last answered: one that does not answer this time neither lowers the
            # sum nor makes it grow again at its next answer (a grown count makes the agent claim less).
            acked_lost=sum(self._acked_lost.get(url, 0) for url in brokers) if blocks is not None else 0,
            acked_wire=None if blocks is None else tuple(wire),
        )
