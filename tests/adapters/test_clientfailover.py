"""The Python clients' PIP-121 follower (``geosync_adapters.clientfailover``) against a loopback provider:
what it applies, what it ignores (Java's contract), and that it pushes each change once. (Against real
regions: ``integration_tests/test_client_failover.py``.)"""

from __future__ import annotations

import http.server
import json
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from geosync_adapters.clientfailover import ControlledFailover, service_info


class Answers:
    """What the loopback provider answers: (status, body bytes)."""

    def __init__(self) -> None:
        self.status, self.body = 200, b'{"serviceUrl": "pulsar://a:6650"}'
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def provider() -> Iterator[tuple[str, Answers]]:
    answers = Answers()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:
            answers.headers.append(dict(self.headers))
            self.send_response(answers.status)
            self.send_header("Content-Length", str(len(answers.body)))
            self.end_headers()
            self.wfile.write(answers.body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/service-url", answers
    server.shutdown()
    server.server_close()


def test_service_info_maps_the_pip121_fields(tmp_path: pathlib.Path) -> None:
    plain = service_info({"serviceUrl": "pulsar://a:6650"})
    assert plain is not None
    assert (plain.service_url, plain.tls_trust_certs_file_path) == ("pulsar://a:6650", None)
    tls = service_info({"serviceUrl": "pulsar+ssl://b:6651", "tlsTrustCertsFilePath": "/etc/ca.pem"})
    assert tls is not None
    assert (tls.use_tls, tls.tls_trust_certs_file_path) == (True, "/etc/ca.pem")
    token_file = tmp_path / "token"
    token_file.write_text("t0k3n\n")
    for params in ("token:t0k3n", f"file://{token_file}", "t0k3n"):
        doc = {
            "serviceUrl": "pulsar://b:6650",
            "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "authParamsString": params,
        }
        assert service_info(doc) is not None


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"serviceUrl": ""},
        {"serviceUrl": 7},
        {"serviceUrl": "pulsar://b:6650", "authPluginClassName": "x.Oauth2", "authParamsString": "{}"},
    ],
)
def test_answers_the_client_cannot_use_are_not_applied(doc: dict[str, Any]) -> None:
    assert service_info(doc) is None


def test_the_first_answer_is_where_the_client_starts(provider: tuple[str, Answers]) -> None:
    url, answers = provider
    follower = ControlledFailover(url, "pulsar://default:6650", headers={"Authorization": "Bearer x"})
    assert follower.initial_service_info().service_url == "pulsar://a:6650"
    assert answers.headers[0]["Accept"] == "application/json"
    assert answers.headers[0]["Authorization"] == "Bearer x"


@pytest.mark.parametrize(
    ("status", "body"), [(500, b'{"serviceUrl": "pulsar://a:6650"}'), (200, b"{not json"), (200, b'["x"]')]
)
def test_without_a_usable_answer_the_client_starts_on_the_default(
    provider: tuple[str, Answers], status: int, body: bytes
) -> None:
    url, answers = provider
    answers.status, answers.body = status, body
    assert ControlledFailover(url, "pulsar://default:6650").initial_service_info().service_url == (
        "pulsar://default:6650"
    )


def test_an_unreachable_provider_starts_on_the_default() -> None:
    follower = ControlledFailover("http://127.0.0.1:9/service-url", "pulsar://default:6650", timeout_s=2)
    assert follower.initial_service_info().service_url == "pulsar://default:6650"


def test_each_change_is_pushed_once_and_bad_answers_are_skipped(provider: tuple[str, Answers]) -> None:
    url, answers = provider
    follower = ControlledFailover(url, "pulsar://default:6650", interval_s=0.05)
    follower.initial_service_info()
    pushed: list[str] = []
    changed = threading.Event()

    def update(info: pulsar.ServiceInfo) -> None:
        pushed.append(info.service_url)
        changed.set()

    follower.initialize(update)
    try:
        answers.status = 503  # the provider failing: stay
        threading.Event().wait(0.3)
        answers.status, answers.body = 200, json.dumps({"serviceUrl": "pulsar://b:6650"}).encode()
        assert changed.wait(5)
        threading.Event().wait(0.3)  # the same answer again and again: nothing more
    finally:
        follower.close()
    assert pushed == ["pulsar://b:6650"]
