"""``RegionAdmin`` against fake brokers on loopback (transport-level, no call mocks): a region of two or
three small HTTP servers that answer the admin API's broker list and topic look-up, and the GeoSync plugin's
endpoints only for the topics they own, as the real plugin does. The real thing is the multi-broker lab
(``integration_tests/test_multibroker_agents.py``)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from geosync_adapters import adminhttp, routing
from geosync_core import pluginapi, pluginwrites
from geosync_core.positions import Position

FAST = adminhttp.RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.02, deadline=2)


@dataclass
class Region:
    """What the fake brokers share: who owns which topic, who is listed as active."""

    owners: dict[str, int] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)
    listed: list[int] | None = None
    """Indexes of the brokers ``/admin/v2/brokers`` lists (None: all)."""


@dataclass
class Broker:
    index: int
    region: Region
    epoch: str = "e1"
    seq: int = 0
    feed: list[dict[str, Any]] = field(default_factory=list)
    acked: list[dict[str, Any]] | None = None
    """The plugin's ``acked`` blocks, handed over until a read confirms them; None: an older plugin."""
    acked_lost: int = 0
    epochs_asked: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    lists: bool = True
    """Whether the plugin lists topics (``/admin/v2/geosync/subscriptions``)."""
    redirect: str = ""
    """Where topic calls are redirected to (a 307 to the topic's owner), if anywhere."""

    def answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        self.calls.append(f"{method} {path}")
        if path == "/admin/v2/brokers/a":
            listed = self.region.listed if self.region.listed is not None else range(len(self.region.urls))
            return 200, [self.region.urls[i].removeprefix("http://") for i in listed]
        if path.startswith("/lookup/v2/topic/"):
            topic = "persistent://" + urllib.parse.unquote(path.removeprefix("/lookup/v2/topic/persistent/"))
            url = self.region.urls[self.region.owners[topic]]
            return 200, {"brokerUrl": "pulsar://x:6650", "httpUrl": url}
        if path == "/admin/v2/geosync/cursors":
            since = int(query.get("since", "0"))
            self.epochs_asked.append(query.get("epoch", ""))
            cursors = [c for c in self.feed if c["seq"] > since]
            out: dict[str, Any] = {"epoch": self.epoch, "seq": self.seq, "cursors": cursors}
            if self.acked is not None:
                out |= {"acked_version": 1, "acked": self.acked, "acked_lost": self.acked_lost}
            return 200, out
        if path == "/admin/v2/geosync/origins":
            if self.region.owners.get(query["topic"]) != self.index:
                return 200, {"runs": []}
            return 200, {"runs": [[7, 0, 10, "b"]]}
        if path == "/admin/v2/geosync/acks":
            return 200, {"results": [self._ack(item) for item in body["acks"]]}
        if path == "/admin/v2/geosync/subscriptions":
            if not self.lists:
                return 404, {"error": "unknown GeoSync path"}
            prefix = f"persistent://{query['namespace']}/"
            mine = [t for t, i in self.region.owners.items() if i == self.index and t.startswith(prefix)]
            return 200, {"topics": {t: {"subscriptions": {f"s{self.index}": {}}} for t in mine}}
        if path == "/admin/v2/tenants":
            return 200, [f"from-{self.index}"]
        if self.redirect and path.startswith("/admin/v2/persistent/"):
            return 307, {"Location": self.redirect + path}
        return 404, {"reason": "no route"}

    def _ack(self, item: dict[str, Any]) -> dict[str, Any]:
        if self.region.owners.get(item["topic"]) != self.index:
            return {"status": "not_loaded", "topic": item["topic"], "subscription": item["subscription"]}
        return {
            "topic": item["topic"],
            "subscription": item["subscription"],
            "status": "ok",
            "mark_delete": item["mark_delete"] or "7:0",
            "individually_deleted": "[]",
            "acknowledged": 1,
        }

    def report(self, topic: str, mark_delete: str) -> None:
        self.seq += 1
        cursor = {"topic": topic, "subscription": "s", "status": "ok", "mark_delete": mark_delete}
        self.feed.append({**cursor, "individually_deleted": "[]", "seq": self.seq})


def _serve(broker: Broker) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            status, payload = broker.answer(self.command, parts.path, query, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            if status == 307:
                self.send_header("Location", payload["Location"])
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def region() -> Iterator[tuple[Region, list[Broker], list[http.server.ThreadingHTTPServer]]]:
    shared = Region()
    brokers = [Broker(i, shared) for i in range(2)]
    servers = [_serve(b) for b in brokers]
    shared.urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        yield shared, brokers, servers
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def _admin(url: str, **kw: Any) -> routing.RegionAdmin:
    return routing.RegionAdmin(url, region="a", retry=FAST, timeout=2, **kw)


def _stop(server: http.server.ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


T1, T2 = "persistent://geo/ab/t1", "persistent://geo/ab/t2"


def test_the_brokers_come_from_the_region_and_are_refreshed(region: Any) -> None:
    shared, _, _ = region
    now = [0.0]
    admin = _admin(shared.urls[0], clock=lambda: now[0], refresh_s=30)
    assert admin.brokers() == sorted(shared.urls)
    shared.listed = [1]
    now[0] = 10.0
    assert admin.brokers() == sorted(shared.urls)  # not asked again before refresh_s
    now[0] = 31.0
    assert admin.brokers() == [shared.urls[1]]


def test_without_a_cluster_the_configured_urls_are_the_brokers(region: Any) -> None:
    shared, _, _ = region
    admin = routing.RegionAdmin(shared.urls[0], seeds=(shared.urls[1], shared.urls[0]))
    assert admin.brokers() == shared.urls


def test_every_brokers_feed_is_read_from_its_own_sequence_and_merged(region: Any) -> None:
    shared, brokers, _ = region
    admin = _admin(shared.urls[0])
    brokers[0].report(T1, "7:1")
    brokers[1].report(T2, "8:1")
    brokers[1].report(T2, "8:2")
    feed = admin.plugin_feed(since=0)
    merged = sorted((c.topic, str(c.mark_delete)) for c in feed.cursors)
    assert merged == [(T1, "7:1"), (T2, "8:1"), (T2, "8:2")]
    assert feed.seq == 3
    brokers[1].report(T2, "8:3")
    again = admin.plugin_feed(since=feed.seq)
    assert [(c.topic, str(c.mark_delete)) for c in again.cursors] == [(T2, "8:3")]
    assert again.epoch == feed.epoch


def test_one_brokers_restart_changes_the_merged_epoch(region: Any) -> None:
    shared, brokers, _ = region
    admin = _admin(shared.urls[0])
    first = admin.plugin_feed(since=0)
    brokers[1].epoch, brokers[1].seq, brokers[1].feed = "e2", 0, []
    brokers[1].report(T2, "9:0")
    second = admin.plugin_feed(since=first.seq)
    assert second.epoch != first.epoch
    assert f"{shared.urls[1]}=e2" in second.epoch
    assert f"{shared.urls[0]}=e1" in second.epoch
    assert [str(c.mark_delete) for c in second.cursors] == ["9:0"]


def test_every_brokers_acknowledged_blocks_are_merged_and_each_read_names_its_brokers_run(
    region: Any,
) -> None:
    shared, brokers, servers = region
    admin = _admin(shared.urls[0])
    brokers[0].acked = [
        {"topic": T1, "subscription": "s", "ranges": "[(7:1..7:3]]", "overflowed": False, "batches": []}
    ]
    brokers[1].acked = [
        {"topic": T2, "subscription": "s", "ranges": "[(8:0..8:2]]", "overflowed": False, "batches": []}
    ]
    brokers[0].acked_lost, brokers[1].acked_lost = 2, 3
    brokers[0].report(T1, "7:3")
    first = admin.plugin_feed(since=0)
    assert first.acked is not None
    assert sorted(b.topic for b in first.acked) == [T1, T2]
    # the blocks as the brokers gave them, for the agent's journal, in the same order
    assert [pluginapi.AckedSet.from_wire(w) for w in first.acked_wire_or_encoded()] == list(first.acked)
    assert sorted(w["topic"] for w in first.acked_wire or ()) == [T1, T2]
    assert first.acked_lost == 5
    assert [b.epochs_asked for b in brokers] == [[""], [""]]
    admin.plugin_feed(since=first.seq)
    assert [b.epochs_asked[-1] for b in brokers] == ["e1", "e1"]  # each broker's own run, as it answered
    _stop(servers[1])
    down = admin.plugin_feed(since=first.seq)
    assert down.acked is not None
    assert [b.topic for b in down.acked] == [T1]
    assert down.acked_lost == 5  # the silent broker's count as it last answered: no spurious growth later


def test_one_broker_without_acknowledged_blocks_makes_the_merged_feed_carry_none(region: Any) -> None:
    shared, brokers, _ = region
    brokers[0].acked = [
        {"topic": T1, "subscription": "s", "ranges": "[(7:1..7:3]]", "overflowed": False, "batches": []}
    ]
    feed = _admin(shared.urls[0]).plugin_feed(since=0)
    assert (
        feed.acked is None
    )  # an older plugin on one broker: nothing tells consumers' acknowledgements there


def test_a_broker_whose_feed_is_down_is_left_out_and_named_in_the_epoch(region: Any) -> None:
    shared, brokers, servers = region
    admin = _admin(shared.urls[0])
    first = admin.plugin_feed(since=0)
    brokers[0].report(T1, "7:5")
    _stop(servers[1])
    feed = admin.plugin_feed(since=first.seq)
    assert [str(c.mark_delete) for c in feed.cursors] == ["7:5"]
    assert f"{shared.urls[1]}={routing.DOWN}" in feed.epoch


def test_every_brokers_topic_list_is_read_and_merged(region: Any) -> None:
    shared, brokers, servers = region
    shared.owners = {T1: 0, T2: 1, "persistent://other/ns/t": 1}
    admin = _admin(shared.urls[0])
    assert admin.plugin_topics("geo/ab") == {
        T1: {"subscriptions": {"s0": {}}},
        T2: {"subscriptions": {"s1": {}}},
    }
    brokers[1].lists = False  # an older plugin there: its topics are left to their stats
    assert set(admin.plugin_topics("geo/ab")) == {T1}
    _stop(servers[0])
    brokers[1].lists = True
    assert set(admin.plugin_topics("geo/ab")) == {T2}
    brokers[1].lists = False
    with pytest.raises(adminhttp.AdminTemporary):  # nobody lists, one is down: asked again next pass
        admin.plugin_topics("geo/ab")


def test_a_region_whose_brokers_all_lack_the_list_refuses(region: Any) -> None:
    shared, brokers, _ = region
    for b in brokers:
        b.lists = False
    with pytest.raises(adminhttp.AdminNotFound):
        _admin(shared.urls[0]).plugin_topics("geo/ab")


def test_origins_and_writes_go_to_the_owner_and_follow_an_unload(region: Any) -> None:
    shared, brokers, _ = region
    shared.owners = {T1: 0, T2: 1}
    counted: list[str] = []
    admin = _admin(shared.urls[0], stats=counted.append)
    assert [r.origin for r in admin.plugin_origins(T2, start=(7, 0))] == ["b"]
    items = [
        pluginwrites.AckItem(topic=t, subscription="s", mark_delete=Position(7, 1), positions=())
        for t in (T1, T2, T1)
    ]
    assert [r.status for r in admin.plugin_write(items)] == [pluginapi.Status.OK] * 3
    assert sum("acks" in c for c in brokers[0].calls) == 1
    assert sum("acks" in c for c in brokers[1].calls) == 1
    shared.owners[T2] = 0  # a bundle unload moves t2 to broker 0; the cached owner is stale
    assert [r.status for r in admin.plugin_write(items)] == [pluginapi.Status.OK] * 3
    assert [r.origin for r in admin.plugin_origins(T2, start=(7, 0))] == ["b"]
    assert counted.count("owner_retries") == 1  # the write's retry; origins were asked at the new owner
    assert counted.count("owner_lookups") == 3


def test_calls_fail_over_to_a_broker_that_answers(region: Any) -> None:
    shared, _, servers = region
    counted: list[str] = []
    admin = _admin(shared.urls[0], seeds=(shared.urls[1],), stats=counted.append)
    assert admin.tenants() == ["from-0"]
    _stop(servers[0])
    assert admin.tenants() == ["from-1"]
    assert admin.tenants() == ["from-1"]
    assert counted == ["admin_failovers"]  # the broker that answered is asked first from then on


def test_a_call_redirected_to_a_dead_owner_does_not_fail_over(region: Any) -> None:
    """Every broker would redirect it to the same dead owner: asking them all only delays the round."""
    shared, brokers, _ = region
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    brokers[0].redirect = dead
    brokers[1].redirect = dead
    counted: list[str] = []
    admin = _admin(shared.urls[0], seeds=(shared.urls[1],), stats=counted.append)
    with pytest.raises(adminhttp.OwnerUnreachable):
        admin.internal_stats(T1)
    assert counted == []
    assert brokers[1].calls == []


def test_a_refused_call_does_not_fail_over(region: Any) -> None:
    shared, _, _ = region
    admin = _admin(shared.urls[0], seeds=(shared.urls[1],))
    with pytest.raises(adminhttp.AdminNotFound):
        admin.get("/admin/v2/nothing")


def test_one_broker_is_an_admin_client(region: Any) -> None:
    shared, brokers, _ = region
    shared.listed = [0]
    shared.owners = {T1: 1}  # never looked up: with one broker every call goes to it
    admin = _admin(shared.urls[0])
    brokers[0].report(T1, "7:3")
    feed = admin.plugin_feed(since=0)
    assert (feed.epoch, feed.seq, [str(c.mark_delete) for c in feed.cursors]) == ("e1", 1, ["7:3"])
    assert admin.plugin_origins(T1) == []
    item = pluginwrites.AckItem(topic=T1, subscription="s", mark_delete=None, positions=())
    assert admin.plugin_write([item])[0].status is pluginapi.Status.NOT_LOADED
    assert not any("lookup" in c for b in brokers for c in b.calls)
    assert brokers[1].calls == []


def test_a_look_up_without_the_web_service_url_of_the_admin_scheme_is_an_error(region: Any) -> None:
    shared, _, _ = region
    shared.owners = {T1: 0}
    # An https admin API (refused here, so the call fails over to the plain seed) needs httpUrlTls.
    admin = routing.RegionAdmin("https://127.0.0.1:1", seeds=(shared.urls[0],), retry=FAST, timeout=2)
    with pytest.raises(pluginapi.PluginApiError):
        admin.owner(T1)


def test_every_call_is_timed_by_kind_at_each_broker(region: Any) -> None:
    shared, brokers, _ = region
    shared.owners = {T1: 0, T2: 1}
    timed: list[tuple[str, float]] = []
    admin = _admin(shared.urls[0], on_call=lambda kind, seconds: timed.append((kind, seconds)))
    brokers[1].report(T2, "8:1")
    admin.plugin_feed(since=0)
    item = pluginwrites.AckItem(topic=T2, subscription="s", mark_delete=Position(7, 1), positions=())
    admin.plugin_write([item])  # at broker 1, the owner, through a pinned client
    kinds = [kind for kind, _ in timed]
    assert kinds.count("GET cursors") == 2  # each broker's feed
    assert kinds.count("POST acks") == 1
    assert "GET lookup" in kinds
    assert all(0 <= seconds < 5 for _, seconds in timed)


@pytest.mark.parametrize(
    ("method", "url", "kind"),
    [
        ("GET", "http://b:8080/admin/v2/geosync/cursors?since=3", "GET cursors"),
        ("POST", "http://b:8080/admin/v2/geosync/acks", "POST acks"),
        ("GET", "http://b:8080/admin/v2/persistent/geo/ab/my-topic/stats", "GET stats"),
        ("GET", "http://b:8080/admin/v2/persistent/geo/ab/t/ledger/12/entry/7", "GET entry"),
        (
            "POST",
            "http://b:8080/admin/v2/persistent/geo/ab/t/subscription/s/resetcursor/0",
            "POST resetcursor",
        ),
        ("GET", "http://b:8080/lookup/v2/topic/persistent/geo/ab/any-name", "GET lookup"),
        ("GET", "http://b:8080/admin/v2/namespaces/geo/some-ns", "GET namespaces"),
        ("GET", "http://b:8080/metrics", "GET other"),
    ],
)
def test_a_calls_kind_never_holds_a_topic_or_subscription_name(method: str, url: str, kind: str) -> None:
    assert adminhttp.call_kind(method, url) == kind
