"""The PIP-121 provider (``geoctl failover serve`` / ``switch`` / ``status``) with a fake check: the HTTP
contract Pulsar's ``ControlledClusterFailover`` relies on, the switch endpoints, the state directory across
restarts, and the CLI's errors. (A real Java client following it between real regions:
``integration_tests/test_client_failover.py``.)"""

from __future__ import annotations

import http.server
import json
import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from geoctl import providing
from geoctl.cli import main
from geoctl.errors import EXIT_BAD_REQUEST, EXIT_CONFLICT, EXIT_REFUSED, EXIT_UNREACHABLE, GeoctlError
from geoctl.failover import DURATION, Verdict, figures
from geosync_core import switching as sw

EXACT = sw.Figures(exact=True, duplicates=0, subscriptions=1)
NOT_YET = sw.Figures(exact=False, duplicates=4, wait_for=("b has not applied 4",), subscriptions=1)
CLIENTS = {
    "a": providing.ClientConfig("pulsar://a:6650"),
    "b": providing.ClientConfig(
        "pulsar+ssl://b:6651",
        "/etc/pulsar/ca.pem",
        "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "file:///var/run/secrets/pulsar/token",
    ),
}


class Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        return self.now


class Checks:
    """An executor that keeps submitted checks until the test runs them (deterministic, no threads)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self.queued.append((fn, args))

    def run_all(self) -> None:
        queued, self.queued = self.queued, []
        for fn, args in queued:
            fn(*args)


class FakeCheck:
    def __init__(self) -> None:
        self.answer: sw.Figures | Exception = NOT_YET
        self.calls: list[tuple[str, str]] = []

    def __call__(self, source: str, target: str) -> sw.Figures:
        self.calls.append((source, target))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Rig:
    def __init__(self, directory: pathlib.Path, token: str | None = None) -> None:
        self.clock, self.checks, self.check = Clock(), Checks(), FakeCheck()
        self.store = providing.Store(directory)
        state = providing.start_state(self.store, ("a", "b"), "a", self.clock())
        self.provider = providing.Provider(
            state, self.store, CLIENTS, self.check, self.checks, clock=self.clock,  # type: ignore[arg-type]
            timing=sw.Timing(first_delay_s=1, max_delay_s=4), scope={"namespaces": ["geo/ab"]},
        )  # fmt: skip
        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), providing.handler(self.provider, token)
        )
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self.base + path, timeout=5, **kw)

    def post(self, body: Any, **kw: Any) -> requests.Response:
        return requests.post(self.base + "/switch", json=body, timeout=5, **kw)

    def tick(self, seconds: float) -> None:
        self.clock.now += seconds
        self.provider.submit(sw.Tick())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def rig(tmp_path: pathlib.Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "state")
    yield r
    r.close()


# -- what Pulsar clients read ------------------------------------------------------------------------


def test_service_url_is_the_pip121_document_of_the_active_region(rig: Rig) -> None:
    r = rig.get("/service-url", headers={"Accept": "application/json"})
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["Cache-Control"] == "no-store"
    assert r.headers["X-GeoSync-Region"] == "a"
    assert r.json() == {"serviceUrl": "pulsar://a:6650"}  # nothing else: no TLS or auth configured for a


def test_tls_and_auth_fields_are_served_where_configured() -> None:
    assert CLIENTS["b"].document() == {
        "serviceUrl": "pulsar+ssl://b:6651",
        "tlsTrustCertsFilePath": "/etc/pulsar/ca.pem",
        "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "authParamsString": "file:///var/run/secrets/pulsar/token",
    }
    # Pulsar clients apply authentication only when both fields are set: never serve one alone.
    assert providing.ClientConfig("pulsar://x:6650", auth_plugin="P").document() == {
        "serviceUrl": "pulsar://x:6650"
    }


def test_unknown_paths_and_methods_say_what_exists(rig: Rig) -> None:
    assert rig.get("/nope").status_code == 404
    assert "/service-url" in rig.get("/nope").json()["error"]
    assert requests.post(rig.base + "/service-url", json={}, timeout=5).status_code == 404
    assert rig.get("/healthz").json() == {"ok": True}


# -- switching over HTTP -------------------------------------------------------------------------------


def test_not_exact_keeps_serving_the_old_region_then_exact_switches(rig: Rig) -> None:
    r = rig.post({"to": "b", "max_wait_s": None, "by": "test"})
    assert r.status_code == 202
    assert r.json()["request"]["to"] == "b"
    rig.checks.run_all()  # check 1: not exact
    assert rig.get("/service-url").json() == {"serviceUrl": "pulsar://a:6650"}
    status = rig.get("/status").json()
    assert status["active"] == "a"
    assert status["pending"]["last_check"]["duplicates"] == 4
    assert status["namespaces"] == ["geo/ab"]

    rig.tick(0.5)
    assert not rig.checks.queued  # backoff: the next check is 1 s after the first
    rig.tick(0.5)
    rig.check.answer = EXACT
    rig.checks.run_all()
    assert rig.check.calls == [("a", "b"), ("a", "b")]
    doc = rig.get("/service-url")
    assert doc.headers["X-GeoSync-Region"] == "b"
    assert doc.json()["serviceUrl"] == "pulsar+ssl://b:6651"
    status = rig.get("/status").json()
    assert status["active"] == "b"
    assert status["pending"] is None
    assert [(s["from"], s["to"], s["reason"], s["checks"]) for s in status["switches"]] == [
        ("a", "b", "exact", 2)
    ]


def test_max_wait_forces_the_switch_and_records_the_prediction(rig: Rig) -> None:
    assert rig.post({"to": "b", "max_wait_s": 2}).status_code == 202
    rig.checks.run_all()
    rig.tick(1.0)
    rig.checks.run_all()
    rig.tick(1.0)  # the deadline: one last check
    rig.checks.run_all()
    assert rig.get("/service-url").json()["serviceUrl"] == "pulsar+ssl://b:6651"
    switch = rig.get("/status").json()["switches"][-1]
    assert (switch["reason"], switch["predicted_duplicates"]) == ("forced-after-max-wait", 4)
    journal = [json.loads(line) for line in rig.store.journal_path.read_text().splitlines()]
    assert [e["event"] for e in journal] == ["requested", "switched"]
    assert journal[-1]["check"]["wait_for"] == ["b has not applied 4"]


def test_a_check_that_raises_is_not_exact_and_the_provider_keeps_serving(rig: Rig) -> None:
    rig.check.answer = RuntimeError("region a unreachable")
    assert rig.post({"to": "b"}).status_code == 202
    rig.checks.run_all()
    status = rig.get("/status").json()
    assert status["active"] == "a"
    assert "region a unreachable" in status["pending"]["last_check"]["error"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"to": "zz"}, 400, "unknown region 'zz'"),
        ({"to": "a"}, 409, "already sent to a"),
        ({}, 400, '"to"'),
        ({"to": "b", "max_wait_s": "soon"}, 400, "max_wait_s"),
        ({"to": "b", "max_wait_s": -5}, 400, "negative"),
        (["b"], 400, "JSON object"),
    ],
)
def test_bad_switch_requests_get_a_clear_error(rig: Rig, body: Any, status: int, says: str) -> None:
    r = rig.post(body)
    assert r.status_code == status
    assert says in r.json()["error"]
    assert rig.get("/status").json()["pending"] is None


def test_a_body_that_is_not_json_is_refused(rig: Rig) -> None:
    r = requests.post(rig.base + "/switch", data=b"{to: b", timeout=5)
    assert r.status_code == 400
    assert "not JSON" in r.json()["error"]


def test_a_second_target_conflicts_and_cancel_clears(rig: Rig) -> None:
    rig.provider._clients = {**CLIENTS, "c": providing.ClientConfig("pulsar://c:6650")}
    rig.provider._state = sw.initial(("a", "b", "c"), "a", rig.clock())
    assert rig.post({"to": "b"}).status_code == 202
    assert rig.post({"to": "b"}).status_code == 200  # the same request again: accepted as it is
    r = rig.post({"to": "c"})
    assert r.status_code == 409
    assert "cancel it first" in r.json()["error"]
    assert requests.delete(rig.base + "/switch", timeout=5).status_code == 202
    assert requests.delete(rig.base + "/switch", timeout=5).status_code == 409
    rig.checks.run_all()  # the cancelled request's check answers: ignored
    assert rig.get("/status").json()["active"] == "a"


def test_a_token_guards_everything_but_healthz(tmp_path: pathlib.Path) -> None:
    r = Rig(tmp_path / "state", token="s3cret")
    try:
        assert r.get("/service-url").status_code == 401
        assert r.get("/service-url", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert r.post({"to": "b"}).status_code == 401
        ok = r.get("/service-url", headers={"Authorization": "Bearer s3cret"})
        assert ok.json() == {"serviceUrl": "pulsar://a:6650"}
        assert r.get("/healthz").status_code == 200
    finally:
        r.close()


# -- the state directory ---------------------------------------------------------------------------


def test_a_restart_serves_the_region_last_switched_to(rig: Rig, tmp_path: pathlib.Path) -> None:
    rig.check.answer = EXACT
    rig.post({"to": "b"})
    rig.checks.run_all()
    store = providing.Store(tmp_path / "state")
    state = providing.start_state(store, ("a", "b"), "a", 9_999.0)  # --initial-region is ignored now
    assert state.active == "b"
    assert state.last_id == 1


def test_a_restart_keeps_a_pending_switch_and_checks_it_again(rig: Rig, tmp_path: pathlib.Path) -> None:
    rig.post({"to": "b", "max_wait_s": 600})
    state = providing.start_state(providing.Store(tmp_path / "state"), ("a", "b"), None, 5_010.0)
    assert state.active == "a"
    assert state.pending is not None
    assert state.pending.deadline == 5_600.0
    assert sw.step(state, sw.Tick(), 5_010.0).effects == (sw.StartCheck(1, 2, "a", "b"),)


def test_a_switch_the_journal_has_but_the_state_file_missed_is_finished(tmp_path: pathlib.Path) -> None:
    store = providing.Store(tmp_path)
    pending = sw.step(sw.initial(("a", "b"), "a", 1.0), sw.Requested("b"), 1.0).state
    store.save(pending)
    done = sw.step(pending, sw.Checked(1, 1, EXACT), 2.0)
    store.append(next(e.entry for e in done.effects if isinstance(e, sw.Record)))  # ...then a crash
    with store.journal_path.open("a") as f:
        f.write('{"event": "swit')  # torn last line
    state = providing.start_state(store, ("a", "b"), None, 3.0)
    assert (state.active, state.pending) == ("b", None)


def test_first_start_needs_an_initial_region(tmp_path: pathlib.Path) -> None:
    with pytest.raises(GeoctlError, match="--initial-region"):
        providing.start_state(providing.Store(tmp_path), ("a", "b"), None, 1.0)
    with pytest.raises(GeoctlError, match="unknown region 'zz'"):
        providing.start_state(providing.Store(tmp_path), ("a", "b"), "zz", 1.0)


def test_a_state_naming_a_region_no_longer_known_is_refused(tmp_path: pathlib.Path) -> None:
    store = providing.Store(tmp_path)
    store.save(sw.initial(("a", "x"), "x", 1.0))
    with pytest.raises(GeoctlError, match="x"):
        providing.start_state(store, ("a", "b"), None, 2.0)


def test_a_foreign_state_file_is_refused_with_what_to_do(tmp_path: pathlib.Path) -> None:
    (tmp_path / "state.json").write_text('{"hello": 1}')
    with pytest.raises(GeoctlError, match="move it away"):
        providing.start_state(providing.Store(tmp_path), ("a", "b"), "a", 1.0)


def test_one_provider_per_state_directory(tmp_path: pathlib.Path) -> None:
    store = providing.Store(tmp_path)
    with (
        store.locked(),
        pytest.raises(GeoctlError, match="another provider"),
        providing.Store(tmp_path).locked(),
    ):
        pass


# -- the CLI -----------------------------------------------------------------------------------------------


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, list(args), env={"GEOCTL_PROVIDER": "", "GEOCTL_PROVIDER_TOKEN_FILE": ""}
    )
    return result.exit_code, result.output


@pytest.mark.parametrize("verb", ["serve", "switch", "status"])
def test_provider_commands_explain_themselves(verb: str) -> None:
    code, out = cli("failover", verb, "--help")
    assert code == 0
    assert "Usage:" in out


def test_switch_needs_a_target_or_cancel() -> None:
    code, out = cli("failover", "switch")
    assert code == 2
    assert "--to REGION or --cancel" in out


def test_switch_through_the_cli(rig: Rig) -> None:
    code, out = cli(
        "failover", "switch", "--provider", rig.base, "--to", "b", "--max-wait", "1m", "-o", "json"
    )
    assert code == 0, out
    assert json.loads(out)["request"]["max_wait_s"] == 60.0
    code, out = cli("failover", "switch", "--provider", rig.base, "--to", "zz")
    assert code == EXIT_BAD_REQUEST
    assert "unknown region 'zz'" in out
    code, out = cli("failover", "switch", "--provider", rig.base, "--to", "a")
    assert code == EXIT_CONFLICT
    code, out = cli("failover", "status", "--provider", rig.base)
    assert code == 0
    assert "pending: switch to b" in out
    code, out = cli("failover", "switch", "--provider", rig.base, "--cancel")
    assert (code, out.strip()) == (0, "cancelled the switch to b")


def test_switch_wait_returns_the_recorded_switch(rig: Rig) -> None:
    rig.check.answer = EXACT

    def answer_checks() -> None:
        for _ in range(200):
            if rig.provider.state.pending:
                rig.checks.run_all()
                return
            threading.Event().wait(0.05)

    helper = threading.Thread(target=answer_checks)
    helper.start()
    code, out = cli("failover", "switch", "--provider", rig.base, "--to", "b", "--wait", "--timeout", "20s")
    helper.join()
    assert code == 0, out
    assert "SWITCHED to b (exact)" in out


def test_the_cli_says_when_the_provider_is_unreachable_or_wants_a_token(tmp_path: pathlib.Path) -> None:
    code, out = cli("failover", "status", "--provider", "http://127.0.0.1:9")
    assert code == EXIT_UNREACHABLE
    assert "failover serve" in out
    r = Rig(tmp_path / "state", token="s3cret")
    try:
        code, out = cli("failover", "status", "--provider", r.base)
        assert code == EXIT_REFUSED
        assert "--provider-token-file" in out
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        code, out = cli("failover", "status", "--provider", r.base, "--provider-token-file", str(token))
        assert code == 0, out
        assert "clients go to a" in out
    finally:
        r.close()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("2m", 120.0), ("1h", 3600.0), ("1m30s", 90.0), ("0.5", 0.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert DURATION.convert(text, None, None) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5d", "m"])
def test_bad_durations_are_refused(text: str) -> None:
    code, out = cli("failover", "switch", "--to", "b", "--max-wait", text)
    assert code == 2
    assert "duration" in out


def test_a_verdict_is_exact_only_when_everything_could_be_read() -> None:
    clean = Verdict(source="a", target="b", safe=True, duplicates=0, checked=2)
    assert figures(clean).exact
    assert figures(clean).subscriptions == 2
    partial = Verdict(
        source="a", target="b", safe=True, duplicates=0, errors=["region a: cannot list topics"]
    )
    said = figures(partial)
    assert not said.exact
    assert said.duplicates is None  # what b alone shows predicts nothing
    assert said.error == "region a: cannot list topics"
