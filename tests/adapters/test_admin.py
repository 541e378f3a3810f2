"""The admin adapter against a small fake admin server on loopback (transport-level, no call mocks).

The real adapter is proven against the lab's brokers in integration_tests; these tests pin the parts a
healthy lab rarely shows: status-code mapping, redirects that keep credentials, retry on 503, hop limit.
"""

from __future__ import annotations

import gc
import http.server
import json
import pathlib
import socket
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, cast

import pytest

from geosync_adapters import admin as adm
from geosync_adapters import adminhttp, adminorigins
from geosync_core import pluginwrites
from geosync_core.indexing import OriginRun
from geosync_core.origins import Origin
from geosync_core.positions import Position

FAST = adminhttp.RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02, deadline=5)


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, list[tuple[int, dict[str, str], Any]]]] = {}
    seen: ClassVar[list[tuple[str, str, str | None, bytes]]] = []

    def log_message(self, *_: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        queue = self.routes.get(f"{self.command} {self.path}") or [(404, {}, {"reason": "no route"})]
        status, headers, payload = queue.pop(0) if len(queue) > 1 else queue[0]
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = _serve


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"routes": {}, "seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, adminhttp.AdminBadRequest),
        (401, adminhttp.AdminUnauthorized),
        (403, adminhttp.AdminForbidden),
        (404, adminhttp.AdminNotFound),
        (405, adminhttp.AdminNotAllowed),
        (409, adminhttp.AdminConflict),
        (412, adminhttp.AdminPreconditionFailed),
        (418, adminhttp.AdminPermanent),
        (503, adminhttp.AdminTemporary),
    ],
)
def test_status_codes_map_to_error_types(
    server: tuple[str, type[_Handler]], status: int, error: type
) -> None:
    url, handler = server
    handler.routes["GET /admin/v2/clusters"] = [(status, {}, {"reason": "because"})]
    client = adm.AdminClient(url, retry=FAST)
    with pytest.raises(error) as info:
        client.clusters()
    assert isinstance(info.value, adminhttp.AdminError)
    assert info.value.status == status
    assert "because" in str(info.value)


def test_temporary_failures_are_retried_then_succeed(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.routes["GET /admin/v2/clusters"] = [(503, {}, None), (503, {}, None), (200, {}, ["a"])]
    assert adm.AdminClient(url, retry=FAST).clusters() == ["a"]
    assert len(handler.seen) == 3


def test_answers_are_asked_for_uncompressed(server: tuple[str, type[_Handler]]) -> None:
    """The broker gzips its answers when asked to (requests asks by default): the adapter asks for them as
    they are, sparing the broker and the agent the compression of large stats."""
    url, handler = server
    handler.routes["GET /x"] = [(200, {}, {"ok": True})]
    client = adm.AdminClient(url, retry=FAST)
    sent: list[str | None] = []
    client.session.hooks["response"].append(
        lambda r, *_a, **_k: sent.append(r.request.headers.get("Accept-Encoding"))
    )
    assert client.get("/x") == {"ok": True}
    assert sent == ["identity"]


def test_calls_leave_nothing_for_the_garbage_collector(server: tuple[str, type[_Handler]]) -> None:
    """A retry controller built per call left 17 objects in reference cycles each time (tenacity's): at tens
    of calls a second, most of the cyclic garbage an agent made, and the collections it set off."""
    url, handler = server
    handler.routes["GET /admin/v2/clusters"] = [(200, {}, ["a"])]
    client = adm.AdminClient(url, retry=FAST)
    client.clusters()  # the first call builds what every later one shares
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            client.clusters()
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_calls_from_several_threads_retry_each_on_its_own(server: tuple[str, type[_Handler]]) -> None:
    """Every call of a policy shares one retry controller: each thread's attempts are its own."""
    url, handler = server
    paths = [f"/admin/v2/tenants/t{i}/namespaces" for i in range(6)]
    for path in paths:
        handler.routes[f"GET {path}"] = [(503, {}, None), (503, {}, None), (200, {}, [path])]
    client = adm.AdminClient(url, retry=FAST)
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(client.get, paths))
    assert answers == [[p] for p in paths]
    assert sorted(path for _, path, _, _ in handler.seen) == sorted(p for p in paths for _ in range(3))


def test_permanent_failures_are_not_retried(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.routes["GET /admin/v2/tenants"] = [(403, {}, {"reason": "no"})]
    with pytest.raises(adminhttp.AdminForbidden):
        adm.AdminClient(url, retry=FAST).tenants()
    assert len(handler.seen) == 1


def test_redirect_is_followed_with_credentials_and_body(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    # Pulsar redirects a topic operation to the owning broker; here the "other broker" is a different
    # host name for the same server, which makes requests drop Authorization if it followed by itself.
    other = url.replace("127.0.0.1", "localhost")
    path = "/admin/v2/persistent/t/n/x/subscription/s/expireMessages"
    handler.routes[f"POST {path}"] = [
        (307, {"Location": f"{other}{path}?authoritative=true"}, None),
    ]
    handler.routes["POST /admin/v2/persistent/t/n/x/subscription/s/expireMessages?authoritative=true"] = [
        (204, {}, None)
    ]
    client = adm.AdminClient(url, token="secret-token", retry=FAST)
    client.post("/admin/v2/persistent/t/n/x/subscription/s/expireMessages", {"ledgerId": 1, "entryId": 2})
    assert [s[2] for s in handler.seen] == ["Bearer secret-token", "Bearer secret-token"]
    assert json.loads(handler.seen[1][3]) == {"ledgerId": 1, "entryId": 2}


def test_redirect_loops_stop_at_the_hop_limit(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.routes["GET /admin/v2/clusters"] = [(307, {"Location": f"{url}/admin/v2/clusters"}, None)]
    with pytest.raises(adminhttp.TooManyRedirects):
        adm.AdminClient(url, retry=FAST, max_redirects=3).clusters()
    assert len(handler.seen) == 4


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


def test_a_redirect_to_an_owner_that_does_not_answer_is_owner_unreachable_and_not_retried(
    server: tuple[str, type[_Handler]],
) -> None:
    url, handler = server
    path = "/admin/v2/persistent/t/n/x/internalStats"
    handler.routes[f"GET {path}"] = [(307, {"Location": f"http://127.0.0.1:{dead_port()}{path}"}, None)]
    with pytest.raises(adminhttp.OwnerUnreachable, match="redirected to"):
        adm.AdminClient(url, retry=FAST).internal_stats("persistent://t/n/x")
    assert len(handler.seen) == 1  # once: asking again at once gets the same redirect to the same dead owner


def test_unreachable_region_is_temporary() -> None:
    client = adm.AdminClient(
        "http://127.0.0.1:9", retry=adminhttp.RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.01)
    )
    with pytest.raises(adminhttp.AdminTemporary):
        client.clusters()


def test_topic_path_quotes_segments() -> None:
    assert adm.AdminClient.topic_path("persistent://geo/ab/my topic") == "persistent/geo/ab/my%20topic"
    with pytest.raises(adminhttp.AdminBadRequest):
        adm.AdminClient.topic_path("geo/ab/x")


def test_plugin_feed_and_writes_are_read_and_sent_as_documented(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    cursor = {
        "topic": "persistent://t/n/x",
        "subscription": "s",
        "mark_delete": "3:4",
        "individually_deleted": "[]",
    }
    handler.routes["GET /admin/v2/geosync/cursors?since=5"] = [
        (200, {}, {"epoch": "e1", "seq": 9, "cursors": [cursor]})
    ]
    handler.routes["POST /admin/v2/geosync/acks"] = [
        (200, {}, {"results": [{"status": "ok"}]}),
        (403, {}, {"error": "off"}),
    ]
    client = adm.AdminClient(url, retry=FAST)
    assert client.plugin_cursors(since=5) == ("e1", 9, [cursor])
    item = {"topic": "persistent://t/n/x", "subscription": "s", "mark_delete": "3:5", "positions": ["3:7"]}
    assert client.plugin_acks([item]) == [{"status": "ok"}]
    assert json.loads(handler.seen[-1][3]) == {"acks": [item]}
    with pytest.raises(adminhttp.AdminForbidden):
        client.plugin_acks([item])
    # A read names the broker run its sequence number counts in: a restarted broker confirms nothing by it.
    handler.routes["GET /admin/v2/geosync/cursors?since=9&epoch=e1"] = [(200, {}, {"epoch": "e2", "seq": 1})]
    assert client.plugin_feed(since=9, epoch="e1").epoch == "e2"


def _report(md: str, batches: list[str], *, truncated: bool, **extra: Any) -> dict[str, Any]:
    out = {
        "topic": "persistent://t/n/x",
        "subscription": "s",
        "status": "ok",
        "mark_delete": md,
        "individually_deleted": "[]",
        "batches": [{"position": p, "unacked": [1]} for p in batches],
        **extra,
    }
    if truncated:
        out["batches_truncated"] = True
    return out


def _page_path(after: str) -> str:
    query = urllib.parse.urlencode({"topic": "persistent://t/n/x", "subscription": "s", "after": after})
    return f"GET /admin/v2/geosync/cursor?{query}"


def test_truncated_batch_reports_are_completed_page_by_page(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.routes["GET /admin/v2/geosync/cursors?since=0"] = [
        (200, {}, {"epoch": "e", "seq": 3, "cursors": [_report("3:0", ["3:1", "3:2"], truncated=True)]})
    ]
    # Read later: the mark-delete moved and 3:2 is acknowledged whole; the earlier report's still win.
    handler.routes[_page_path("3:2")] = [(200, {}, _report("3:1", ["3:5", "3:6"], truncated=True))]
    handler.routes[_page_path("3:6")] = [(200, {}, _report("3:1", ["3:6", "3:9"], truncated=False))]
    client = adm.AdminClient(url, retry=FAST)
    [cursor] = client.plugin_feed(since=0).cursors
    assert [str(b.position) for b in cursor.batches] == ["3:1", "3:2", "3:5", "3:6", "3:9"]
    assert (str(cursor.mark_delete), cursor.batches_truncated) == ("3:0", False)

    # Write results are completed too; a refused page (the topic moved) leaves the report truncated.
    handler.routes["POST /admin/v2/geosync/acks"] = [
        (200, {}, {"results": [{**_report("3:0", ["3:1"], truncated=True), "acknowledged": 2}]})
    ]
    handler.routes[_page_path("3:1")] = [(200, {}, {"status": "not_loaded", "topic": "persistent://t/n/x"})]
    [written] = client.plugin_write(
        [pluginwrites.AckItem("persistent://t/n/x", "s", mark_delete=Position(3, 0))]
    )
    assert written.cursor is not None
    assert [str(b.position) for b in written.cursor.batches] == ["3:1"]
    assert written.cursor.batches_truncated
    assert written.acknowledged == 2


def test_a_plugin_too_old_to_page_leaves_the_report_truncated(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.routes["GET /admin/v2/geosync/cursors?since=0"] = [
        (200, {}, {"epoch": "e", "seq": 3, "cursors": [_report("3:0", ["3:1"], truncated=True)]})
    ]
    client = adm.AdminClient(url, retry=FAST)  # no route for the page: 404
    [cursor] = client.plugin_feed(since=0).cursors
    assert ([str(b.position) for b in cursor.batches], cursor.batches_truncated) == (["3:1"], True)


def test_pages_stop_at_the_limit(server: tuple[str, type[_Handler]], monkeypatch: pytest.MonkeyPatch) -> None:
    url, handler = server
    monkeypatch.setattr(adm, "MAX_BATCH_PAGES", 2)
    handler.routes["GET /admin/v2/geosync/cursors?since=0"] = [
        (200, {}, {"epoch": "e", "seq": 3, "cursors": [_report("3:0", ["3:1"], truncated=True)]})
    ]
    for n in range(1, 5):
        handler.routes[_page_path(f"3:{n}")] = [(200, {}, _report("3:0", [f"3:{n + 1}"], truncated=True))]
    [cursor] = adm.AdminClient(url, retry=FAST).plugin_feed(since=0).cursors
    assert [str(b.position) for b in cursor.batches] == ["3:1", "3:2", "3:3"]
    assert cursor.batches_truncated


def test_a_certificate_that_cannot_be_verified_is_a_permanent_error_that_says_what_to_set(
    server: tuple[str, type[_Handler]],
) -> None:
    url, handler = server  # plain HTTP: a TLS handshake against it fails
    client = adm.AdminClient(url.replace("http://", "https://"), retry=FAST)
    with pytest.raises(adminhttp.AdminTlsError, match="tls_trust_certs_file") as info:
        client.clusters()
    assert isinstance(info.value, adminhttp.AdminPermanent)
    assert not handler.seen


def test_plugin_origins_reads_both_run_shapes_and_skips_malformed_runs(
    server: tuple[str, type[_Handler]],
) -> None:
    url, handler = server
    path = "GET /admin/v2/geosync/origins?" + urllib.parse.urlencode(
        {"topic": "persistent://t/n/x", "from": "12:1"}
    )
    runs = [
        [12, 0, 2, "a"],
        [12, 2, 3, "b", 40, 7],
        [12, 5, "3", "b"],
        [12, 8, 1, "b", 40],
        "junk",
        [12, 9, 1, "c"],
    ]
    handler.routes[path] = [(200, {}, {"version": 2, "region": "a", "runs": runs})]
    client = adm.AdminClient(url, retry=FAST)
    assert client.plugin_origins("persistent://t/n/x", start=(12, 1)) == [
        OriginRun(12, 0, 2, "a"),
        OriginRun(12, 2, 3, "b", Position(40, 7)),
        OriginRun(12, 9, 1, "c"),
    ]


@pytest.mark.parametrize("body", [{"version": 2}, {"runs": {"12": 0}}, {"runs": None}, [[12, 0, 2, "a"]], 7])
def test_plugin_origins_without_a_list_of_runs_is_no_runs(
    server: tuple[str, type[_Handler]], body: object
) -> None:
    url, handler = server
    path = "GET /admin/v2/geosync/origins?" + urllib.parse.urlencode({"topic": "persistent://t/n/x"})
    handler.routes[path] = [(200, {}, body)]
    assert adm.AdminClient(url, retry=FAST).plugin_origins("persistent://t/n/x") == []


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, ("b", "7:3")),  # not replicated: the entry itself
        (
            {
                "X-Pulsar-replicated-from": "a",
                "X-Pulsar-PROPERTY": '{"__MSG_PROP_REPL_SOURCE_POSITION": "4:9"}',
            },
            ("a", "4:9"),
        ),
        ({"X-Pulsar-replicated-from": "a"}, None),  # replicated without a stamp: cannot tell
        ({"X-Pulsar-replicated-from": "a", "X-Pulsar-PROPERTY": "not json"}, None),
        ({"X-Pulsar-replicated-from": "a", "X-Pulsar-PROPERTY": '["4:9"]'}, None),
        (
            {
                "X-Pulsar-replicated-from": "a",
                "X-Pulsar-PROPERTY": '{"__MSG_PROP_REPL_SOURCE_POSITION": "x"}',
            },
            None,
        ),
    ],
)
def test_entry_headers_name_a_batched_entrys_origin(
    headers: dict[str, str], expected: tuple[str, str] | None
) -> None:
    origin = adm.EntryHeaders.of(headers).origin("b", Position(7, 3))
    if expected is None:
        assert origin is None
    else:
        assert origin is not None
        assert (origin.region, str(origin.position)) == expected


def test_entry_headers_batch_size() -> None:
    assert adm.EntryHeaders.of({"X-Pulsar-num-batch-message": "20"}).batch_size == 20
    assert adm.EntryHeaders.of({"X-Pulsar-num-batch-message": "-1"}).batch_size is None
    assert adm.EntryHeaders.of({}).batch_size is None


def test_a_token_file_is_read_again_when_it_changes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = adminhttp.TokenFile(path)
    client = adm.AdminClient("http://127.0.0.1:1", token=source)
    assert client._headers()["Authorization"] == "Bearer first"
    path.write_text("second-token\n")  # rotated (another size: seen even within one mtime tick)
    assert client._headers()["Authorization"] == "Bearer second-token"
    path.unlink()  # gone (a secret being swapped): the last token is kept
    assert client._headers()["Authorization"] == "Bearer second-token"
    assert "second" not in repr(client)
    assert "second" not in repr(source)


def test_an_unreadable_token_file_fails_at_once(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError):
        adminhttp.TokenFile(tmp_path / "missing")()


def test_backlog_of_a_subscription_and_of_what_does_not_exist(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    stats = {"subscriptions": {"s": {"msgBacklog": 4}}}
    handler.routes["GET /admin/v2/persistent/t/ns/x/stats"] = [(200, {}, stats)]
    client = adm.AdminClient(url, retry=FAST)
    assert client.backlog("persistent://t/ns/x", "s") == 4
    assert client.backlog("persistent://t/ns/x", "other") is None
    assert client.backlog("persistent://t/ns/gone", "s") is None  # 404


def test_a_dynamic_setting_is_set_with_its_value_quoted_in_the_path_and_deleted(
    server: tuple[str, type[_Handler]],
) -> None:
    url, handler = server
    name = "configurationMetadataSyncEventTopic"
    quoted = "persistent%3A%2F%2Fgeo%2Fabc%2Fsync"
    handler.routes[f"POST /admin/v2/brokers/configuration/{name}/{quoted}"] = [(204, {}, None)]
    handler.routes[f"DELETE /admin/v2/brokers/configuration/{name}"] = [(204, {}, None)]
    client = adm.AdminClient(url, retry=FAST)
    client.set_dynamic_configuration(name, "persistent://geo/abc/sync")
    client.set_dynamic_configuration(name, None)
    assert [(m, p) for m, p, _, _ in handler.seen] == [
        ("POST", f"/admin/v2/brokers/configuration/{name}/{quoted}"),
        ("DELETE", f"/admin/v2/brokers/configuration/{name}"),
    ]
    with pytest.raises(adminhttp.AdminNotFound):
        client.set_dynamic_configuration("noSuchSetting", None)


class _IndexedAdmin:
    """Answers the interceptor's origin index from ``runs`` (or fails with ``error``) and entry headers for
    anything; counts both."""

    def __init__(self, runs: list[OriginRun], error: adminhttp.AdminError | None = None) -> None:
        self.runs, self.error = runs, error
        self.base_url = f"http://{uuid.uuid4().hex}"  # what tools learned is remembered per admin URL
        self.asked: list[tuple[int, int] | None] = []
        self.headers: list[Position] = []

    def plugin_origins(self, topic: str, *, start: tuple[int, int] | None = None) -> list[OriginRun]:
        self.asked.append(start)
        if self.error is not None:
            raise self.error
        at = start or (0, 0)
        return [r for r in self.runs if (r.ledger, r.first + r.count - 1) >= at]

    def entry_headers(self, topic: str, *, ledger: int, entry: int) -> adm.EntryHeaders:
        self.headers.append(Position(ledger, entry))
        return adm.EntryHeaders.of(
            {
                "X-Pulsar-replicated-from": "c",
                "X-Pulsar-PROPERTY": '{"__MSG_PROP_REPL_SOURCE_POSITION": "9:9"}',
            }
        )


def test_tools_name_batched_origins_from_the_interceptors_index_with_one_call_per_stretch() -> None:
    fake = _IndexedAdmin([OriginRun(5, 0, 10, "a", Position(3, 100)), OriginRun(5, 10, 5, "b")])
    resolver = adminorigins.header_resolver("b", cast(adm.AdminClient, fake))
    assert resolver.source is not None
    found = [resolver.source("t", Position(5, e)) for e in range(15)]
    assert [(o.region, o.position) for o in found if o] == [
        *(("a", Position(3, 100 + e)) for e in range(10)),
        *(("b", Position(5, e)) for e in range(10, 15)),
    ]
    assert fake.asked == [(5, 0)]
    assert fake.headers == []
    # Past what the index answered: asked again from there; nothing recorded: the entry's headers.
    assert resolver.source("t", Position(5, 40)) == Origin("c", Position(9, 9))
    assert fake.asked == [(5, 0), (5, 40)]
    assert fake.headers == [Position(5, 40)]


@pytest.mark.parametrize("status", [403, 404])
def test_without_a_usable_index_tools_fall_back_to_entry_headers_and_stop_asking(status: int) -> None:
    error = (
        adminhttp.AdminNotFound("gone", status=404)
        if status == 404
        else adminhttp.AdminError("no", status=status)
    )
    fake = _IndexedAdmin([], error)
    resolver = adminorigins.header_resolver("b", cast(adm.AdminClient, fake))
    assert resolver.source is not None
    for e in range(3):
        assert resolver.source("t", Position(5, e)) == Origin("c", Position(9, 9))
    assert fake.asked == [(5, 0)]
    assert fake.headers == [Position(5, 0), Position(5, 1), Position(5, 2)]


def test_what_entry_headers_named_is_remembered_across_reads() -> None:
    fake = _IndexedAdmin([], adminhttp.AdminNotFound("gone", status=404))
    for _ in range(2):  # two checks, one after the other: the second asks nothing again
        resolver = adminorigins.header_resolver("b", cast(adm.AdminClient, fake))
        assert resolver.source is not None
        assert resolver.source("t", Position(5, 1)) == Origin("c", Position(9, 9))
    assert fake.headers == [Position(5, 1)]


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        (
            {"topics": {"persistent://t/n/x": {"subscriptions": {}}, "persistent://t/n/y": 7}},
            ["persistent://t/n/x"],
        ),
        ({"topics": ["persistent://t/n/x"]}, []),
        ({"namespace": "t/n"}, []),
        ([1, 2], []),
    ],
)
def test_plugin_topics_keeps_the_topics_that_are_objects(
    server: tuple[str, type[_Handler]], body: object, kept: list[str]
) -> None:
    url, handler = server
    path = "GET /admin/v2/geosync/subscriptions?" + urllib.parse.urlencode({"namespace": "t/n"})
    handler.routes[path] = [(200, {}, body)]
    assert list(adm.AdminClient(url, retry=FAST).plugin_topics("t/n")) == kept
