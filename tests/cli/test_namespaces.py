"""``geoctl namespaces`` with click's CliRunner against loopback fake admin servers.

The real brokers' answers are proven in ``integration_tests/test_policy_mirror.py``; here the fakes pin
that geoctl refuses PIP-321 violations before calling anything (no write reaches the server), maps
every broker status to its own exit code, and says what to do.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from geoctl import errors
from geoctl.cli import main


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, Any]]] = {}
    writes: ClassVar[list[tuple[str, str, Any]]] = []

    def log_message(self, *_: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        if self.command != "GET":
            self.writes.append((self.command, self.path, body))
        status, payload = self.routes.get(f"{self.command} {self.path}", (404, {"reason": "not found"}))
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = _serve


def _region(routes: dict[str, tuple[int, Any]]) -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"routes": routes, "writes": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


def _routes(
    *, tenant_allowed: list[str] | None, policies: dict[str, Any] | None
) -> dict[str, tuple[int, Any]]:
    routes: dict[str, tuple[int, Any]] = {
        "GET /admin/v2/clusters": (200, ["a", "b", "c"]),
        "GET /admin/v2/clusters/a": (200, {"serviceUrl": "http://a"}),
        "GET /admin/v2/clusters/b": (200, {"serviceUrl": "http://b", "peerClusterNames": ["c"]}),
        "GET /admin/v2/clusters/c": (200, {"serviceUrl": "http://c"}),
        "PUT /admin/v2/namespaces/t/ns": (204, None),
        "POST /admin/v2/namespaces/t/ns/allowedClusters": (204, None),
        "POST /admin/v2/namespaces/t/ns/replication": (204, None),
    }
    if tenant_allowed is not None:
        routes["GET /admin/v2/tenants/t"] = (200, {"adminRoles": [], "allowedClusters": tenant_allowed})
    if policies is not None:
        routes["GET /admin/v2/namespaces/t/ns"] = (200, policies)
    return routes


@pytest.fixture
def region_a() -> Iterator[tuple[str, type[_Handler]]]:
    routes = _routes(
        tenant_allowed=["a", "b", "c"],
        policies={"replication_clusters": ["a"], "allowed_clusters": ["a", "b"]},
    )
    yield from _region(routes)


def _topology(tmp_path: pathlib.Path, urls: dict[str, str]) -> str:
    regions = {n: {"service_url": "pulsar://x", "admin_url": u, "zookeeper": ""} for n, u in urls.items()}
    path = tmp_path / "topology.json"
    path.write_text(json.dumps({"pulsar_version": "4.0.8", "regions": regions}))
    return str(path)


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("command", "clusters", "code", "words"),
    [
        ("set-allowed-clusters", "b", errors.EXIT_BAD_REQUEST, "do not contain replication cluster(s) a"),
        ("set-allowed-clusters", "a,x", errors.EXIT_FORBIDDEN, "not registered"),
        ("set-allowed-clusters", "a,b,c", errors.EXIT_CONFLICT, "peer cluster(s) c"),
        ("set-clusters", "a,c", errors.EXIT_BAD_REQUEST, "not in the namespace's allowed clusters"),
        ("set-clusters", "global", errors.EXIT_PRECONDITION, "'global'"),
    ],
)
def test_violations_are_refused_before_any_call(  # noqa: PLR0917 (pytest passes fixtures by position)
    tmp_path: pathlib.Path,
    region_a: tuple[str, type[_Handler]],
    command: str,
    clusters: str,
    code: int,
    words: str,
) -> None:
    url, handler = region_a
    topology = _topology(tmp_path, {"a": url})
    result = _run(
        "namespaces", command, "t/ns", "--region", "a", "--clusters", clusters, "--topology", topology
    )
    assert result.exit_code == code, result.output
    assert words in result.output
    assert handler.writes == []


def test_a_missing_tenant_is_404_with_what_to_do(tmp_path: pathlib.Path) -> None:
    for url, handler in _region(_routes(tenant_allowed=None, policies=None)):
        topology = _topology(tmp_path, {"a": url})
        result = _run(
            "namespaces", "create", "t/ns", "--region", "a", "--clusters", "a", "--topology", topology
        )
        assert result.exit_code == errors.EXIT_NOT_FOUND
        assert "create the tenant first" in result.output
        assert handler.writes == []


def test_create_sends_both_cluster_sets_and_checks_other_regions(tmp_path: pathlib.Path) -> None:
    for url_a, handler_a in _region(_routes(tenant_allowed=["a", "b"], policies=None)):
        for url_b, handler_b in _region(_routes(tenant_allowed=["b"], policies=None)):
            topology = _topology(tmp_path, {"a": url_a, "b": url_b})
            args = [
                "namespaces",
                "create",
                "t/ns",
                "--region",
                "a",
                "--clusters",
                "a",
                "--topology",
                topology,
            ]
            refused = _run(*args, "--allowed-clusters", "a,b")
            assert refused.exit_code == errors.EXIT_FORBIDDEN  # region b's tenant does not allow a
            assert "region b:" in refused.output
            assert handler_a.writes == []
            assert handler_b.writes == []
            handler_b.routes["GET /admin/v2/tenants/t"] = (200, {"allowedClusters": ["a", "b"]})
            done = _run(*args, "--allowed-clusters", "a,b", "-o", "json")
            assert done.exit_code == 0, done.output
            assert json.loads(done.output)["allowed_clusters"] == ["a", "b"]
            assert handler_a.writes == [
                (
                    "PUT",
                    "/admin/v2/namespaces/t/ns",
                    {"replication_clusters": ["a"], "allowed_clusters": ["a", "b"]},
                )
            ]


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, errors.EXIT_BAD_REQUEST),
        (403, errors.EXIT_FORBIDDEN),
        (404, errors.EXIT_NOT_FOUND),
        (409, errors.EXIT_CONFLICT),
        (412, errors.EXIT_PRECONDITION),
    ],
)
def test_broker_statuses_map_to_exit_codes(
    tmp_path: pathlib.Path, region_a: tuple[str, type[_Handler]], status: int, code: int
) -> None:
    url, handler = region_a
    handler.routes["POST /admin/v2/namespaces/t/ns/allowedClusters"] = (
        status,
        {"reason": "the broker says no"},
    )
    topology = _topology(tmp_path, {"a": url})
    result = _run(
        "namespaces",
        "set-allowed-clusters",
        "t/ns",
        "--region",
        "a",
        "--clusters",
        "a",
        "--no-check",
        "--topology",
        topology,
    )
    assert result.exit_code == code
    assert "the broker says no" in result.output
    assert "region a refused" in result.output


def test_get_allowed_clusters_in_every_region(
    tmp_path: pathlib.Path, region_a: tuple[str, type[_Handler]]
) -> None:
    url, handler = region_a
    handler.routes["GET /admin/v2/namespaces/t/ns/allowedClusters"] = (200, ["b", "a"])
    topology = _topology(tmp_path, {"a": url, "z": "http://127.0.0.1:9"})
    result = _run("namespaces", "get-allowed-clusters", "t/ns", "--topology", topology, "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["regions"] == {"a": ["a", "b"], "z": None}


def test_config_file_names_the_regions(tmp_path: pathlib.Path, region_a: tuple[str, type[_Handler]]) -> None:
    url, handler = region_a
    handler.routes["GET /admin/v2/namespaces/t/ns/allowedClusters"] = (200, ["a"])
    config = tmp_path / "geoctl.yaml"
    config.write_text(f"regions:\n  a:\n    admin_url: {url}\n")
    result = _run("namespaces", "get-allowed-clusters", "t/ns", "--region", "a", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "a: a"


def _secured(routes: dict[str, tuple[int, Any]], token: str) -> Iterator[tuple[str, type[_Handler]]]:
    """A fake region that answers 401 to every request without ``Bearer <token>``."""

    class Secured(_Handler):
        def _serve(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {token}":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super()._serve()

        do_GET = do_PUT = do_POST = do_DELETE = _serve

    handler = type("H", (Secured,), {"routes": routes, "writes": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


TOKEN = "header.claims.signature-never-printed"


@pytest.mark.parametrize(
    "args",
    [
        ["namespaces", "get-allowed-clusters", "t/ns"],
        ["namespaces", "create", "t/ns", "--region", "a", "--clusters", "a"],
        ["namespaces", "set-allowed-clusters", "t/ns", "--region", "a", "--clusters", "a,b"],
        ["namespaces", "set-clusters", "t/ns", "--region", "a", "--clusters", "a"],
        ["policies", "diff", "--source", "admin"],
    ],
)
def test_every_namespace_and_policy_command_sends_the_token(tmp_path: pathlib.Path, args: list[str]) -> None:
    routes = _routes(
        tenant_allowed=["a", "b"], policies={"replication_clusters": ["a"], "allowed_clusters": ["a"]}
    )
    routes["GET /admin/v2/namespaces/t/ns/allowedClusters"] = (200, ["a"])
    routes["GET /admin/v2/tenants"] = (200, ["t"])
    routes["GET /admin/v2/namespaces/t"] = (200, ["t/ns"])
    if args[1] == "create":
        del routes["GET /admin/v2/namespaces/t/ns"]
    for url, handler in _secured(routes, TOKEN):
        config = tmp_path / "geoctl.yaml"
        config.write_text(f"regions:\n  a:\n    admin_url: {url}\n")
        without = CliRunner().invoke(main, [*args, "--config", str(config)], env={"GEOCTL_TOKEN": ""})
        assert without.exit_code == errors.EXIT_REFUSED, without.output
        assert "token" in without.output
        assert handler.writes == []
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        config.write_text(f"regions:\n  a:\n    admin_url: {url}\ntoken_file: {token_file}\n")
        with_token = CliRunner().invoke(main, [*args, "--config", str(config)], env={"GEOCTL_TOKEN": ""})
        assert with_token.exit_code == 0, with_token.output
        assert TOKEN not in with_token.output + without.output
        by_env = CliRunner().invoke(
            main, [*args, "--config", str(config)], env={"GEOCTL_TOKEN": TOKEN, "GEOCTL_TOKEN_FILE": ""}
        )
        assert by_env.exit_code == 0, by_env.output
