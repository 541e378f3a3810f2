"""``geoctl failover serve``: a PIP-121 service-URL provider that moves clients only when the move is exact.

Pulsar's Java client built with ``ControlledClusterFailover`` polls an HTTP URL (every ``checkInterval``)
and, when the JSON it gets names another service URL, closes its connections and reconnects its producers
and consumers there by itself. What the client expects (Pulsar 4.0's ``ControlledClusterFailover``):

* ``GET`` with ``Accept: application/json`` and the headers the application configured
  (``urlProviderHeader``); redirects are followed; 10 s to connect, 30 s to read;
* status 200 and a JSON object ``serviceUrl`` (required), ``tlsTrustCertsFilePath``, ``authPluginClassName``,
  ``authParamsString`` (unknown keys are ignored). Any other status, an unreachable provider, or a body that
  is not such JSON: the client logs it and stays where it is. The client compares the whole object with the
  last one it applied (its first poll always applies one, which closes and reopens its connections once);
  authentication is replaced only when both auth fields are set, the trust file only when set.

This module serves that (``GET /service-url``) for the active region, and ``GET /status``, ``POST /switch``
(``{"to": "b", "max_wait_s": 60, "by": "..."}``), ``DELETE /switch`` (cancel) and ``GET /healthz``. When to
move is ``geosync_core.switching``; this module performs its effects in one place (``Provider._apply``):
checks run one at a time on a worker, every request, cancel and switch is appended to ``switches.jsonl``
before ``state.json`` is replaced (atomically), and a restarted provider serves the region it last served.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import http.server
import json
import logging
import os
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from geoctl.errors import GeoctlError
from geosync_core import switching
from geosync_core.errors import MalformedMessage

log = logging.getLogger("geoctl.failover.provider")

Check = Callable[[str, str], switching.Figures]
"""Run ``failover check`` from a region to another; raise or return figures with ``error`` on failure."""

STATUS_BY_REFUSAL = {
    "unknown-region": 400,
    "bad-request": 400,
    "already-active": 409,
    "pending": 409,
    "none-pending": 409,
}
SWITCHES_SHOWN = 20
MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class ClientConfig:
    """What clients are told for one region: the PIP-121 fields (paths are paths on the clients' hosts)."""

    service_url: str
    tls_trust_certs_file: str | None = None
    auth_plugin: str | None = None
    auth_params: str | None = None

    def document(self) -> dict[str, str]:
        doc = {"serviceUrl": self.service_url}
        if self.tls_trust_certs_file:
            doc["tlsTrustCertsFilePath"] = self.tls_trust_certs_file
        if self.auth_plugin and self.auth_params:
            doc["authPluginClassName"] = self.auth_plugin
            doc["authParamsString"] = self.auth_params
        return doc


class Store:
    """The provider's directory: ``state.json`` (replaced atomically), ``switches.jsonl`` (appended, one
    JSON object a line, fsynced) and ``lock`` (one provider per directory)."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self.state_path = directory / "state.json"
        self.journal_path = directory / "switches.jsonl"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "lock").open("a+b") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise GeoctlError(
                    f"another provider is using {self.directory}; stop it or give another --state-dir"
                ) from None
            yield

    def read_state(self) -> switching.State | None:
        try:
            text = self.state_path.read_text()
        except FileNotFoundError:
            return None
        try:
            return switching.load(json.loads(text))
        except (ValueError, MalformedMessage) as e:
            raise GeoctlError(
                f"{self.state_path} is not a provider state ({e}); move it away to start afresh"
            ) from e

    def save(self, state: switching.State) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        with tmp.open("wb") as f:
            f.write(json.dumps(switching.dump(state), indent=2, sort_keys=True).encode() + b"\n")
            _sync(f)
        os.replace(tmp, self.state_path)
        _sync_dir(self.directory)

    def append(self, entry: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.journal_path.open("ab") as f:
            f.write(json.dumps(entry, sort_keys=True).encode() + b"\n")
            _sync(f)

    def entries(self) -> list[dict[str, Any]]:
        """Every journal entry; a torn last line (a crash mid-write) is skipped."""
        try:
            lines = self.journal_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict):
                    out.append(entry)
        return out


def _sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


def _sync_dir(directory: pathlib.Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def start_state(
    store: Store, regions: tuple[str, ...], initial_region: str | None, now: float
) -> switching.State:
    """The saved state (finishing a switch the journal recorded but the state file missed), else a new
    one serving ``initial_region``."""
    saved = store.read_state()
    if saved is None:
        if initial_region is None:
            raise GeoctlError(
                f"{store.directory} holds no provider state yet: give --initial-region (the region clients "
                "use now)"
            )
        if initial_region not in regions:
            raise GeoctlError(f"unknown region {initial_region!r}; known regions: {', '.join(regions)}")
        return switching.initial(regions, initial_region, now)
    if initial_region is not None and initial_region != saved.active:
        log.warning(
            "--initial-region %s ignored: %s says clients are sent to %s",
            initial_region,
            store.state_path,
            saved.active,
        )
    switches = [e for e in store.entries() if e.get("event") == "switched"]
    state = switching.resume(saved, switches[-1] if switches else None, now)
    missing = [
        r for r in (state.active, *([state.pending.target] if state.pending else [])) if r not in regions
    ]
    if missing:
        raise GeoctlError(
            f"{store.state_path} names region(s) {', '.join(missing)} that the topology does not know "
            f"({', '.join(regions)})"
        )
    return switching.State(
        regions=tuple(sorted(regions)),
        active=state.active,
        active_since=state.active_since,
        pending=state.pending,
        last_id=state.last_id,
    )


class Provider:
    """Owns the switch state; every event goes through ``submit``, every effect through ``_apply``."""

    def __init__(
        self,
        state: switching.State,
        store: Store,
        clients: dict[str, ClientConfig],
        check: Check,
        checks: Executor,
        *,
        timing: switching.Timing = switching.DEFAULT_TIMING,
        clock: Callable[[], float] = time.time,
        scope: dict[str, Any] | None = None,
    ) -> None:
        self._state = state
        self._store = store
        self._clients = clients
        self._check = check
        self._checks = checks
        self._timing = timing
        self._clock = clock
        self._scope = scope or {}
        self._lock = threading.Lock()
        self._switches = [e for e in store.entries() if e.get("event") == "switched"][-SWITCHES_SHOWN:]

    @property
    def state(self) -> switching.State:
        return self._state

    def submit(self, event: switching.Event) -> switching.Accepted | switching.Refused | None:
        """Apply one event; the answer to a request or cancel (None for ticks and check results)."""
        with self._lock:
            result = switching.step(self._state, event, self._clock(), self._timing)
            if result.state == self._state and not result.effects:
                return None
            answer = self._apply(result)
            self._state = result.state
            return answer

    def _apply(self, result: switching.Step) -> switching.Accepted | switching.Refused | None:
        answer: switching.Accepted | switching.Refused | None = None
        for effect in result.effects:
            if isinstance(effect, switching.Record):
                self._store.append(effect.entry)
                self._log(effect.entry)
                if effect.entry.get("event") == "switched":
                    self._switches = [*self._switches, effect.entry][-SWITCHES_SHOWN:]
            elif isinstance(effect, switching.Save):
                self._store.save(result.state)
            elif isinstance(effect, switching.StartCheck):
                self._checks.submit(self._run_check, effect)
            else:
                answer = effect
        return answer

    def _run_check(self, start: switching.StartCheck) -> None:
        try:
            figures = self._check(start.source, start.target)
        except Exception as e:  # any failure of a check means "not known to be exact"; keep serving
            log.warning("check %s -> %s failed: %s", start.source, start.target, e)
            figures = switching.Figures(
                exact=False, duplicates=None, error=f"{type(e).__name__}: {e}", checked_at=self._clock()
            )
        else:
            log.info(
                "check %d of request %d (%s -> %s): %s over %d subscription(s), %s duplicates, %d in flight",
                start.check,
                start.request_id,
                start.source,
                start.target,
                "exact" if figures.exact else "not exact",
                figures.subscriptions,
                figures.duplicates,
                figures.in_flight,
            )
            if not figures.subscriptions:
                log.warning("no subscription matched the check (misnamed --subscription or --namespace?)")
        self.submit(switching.Checked(start.request_id, start.check, figures))

    @staticmethod
    def _log(entry: dict[str, Any]) -> None:
        event = entry.get("event")
        if event == "switched":
            log.warning(
                "SWITCHED clients from %s to %s (%s) after %.1f s; predicted duplicates: %s",
                entry["from"],
                entry["to"],
                entry["reason"],
                entry["waited_s"],
                entry["predicted_duplicates"],
            )
        else:
            log.info(
                "%s: switch %s -> %s (request %s)", event, entry["from"], entry["to"], entry["request_id"]
            )

    def service_url(self) -> tuple[str, dict[str, str]]:
        active = self._state.active
        return active, self._clients[active].document()

    def status(self) -> dict[str, Any]:
        state = self._state
        return {
            "active": state.active,
            "active_since": state.active_since,
            "service_url": self._clients[state.active].service_url,
            "regions": list(state.regions),
            "pending": None if state.pending is None else state.pending.to_dict(),
            "switches": list(self._switches),
            "journal": str(self._store.journal_path),
            **self._scope,
        }


def handler(provider: Provider, token: str | None) -> type[http.server.BaseHTTPRequestHandler]:
    """The HTTP endpoints; with ``token``, every one but /healthz wants ``Authorization: Bearer TOKEN``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "geosync-failover-provider"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), fmt % args)

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body, sort_keys=True, default=str).encode() + b"\n"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if token is None:
                return True
            given = self.headers.get("Authorization", "")
            if given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip(), token):
                return True
            self._send(401, {"error": "missing or wrong token (Authorization: Bearer ...)"})
            return False

        def _path(self) -> str:
            return urlsplit(self.path).path.rstrip("/") or "/"

        def do_GET(self) -> None:
            path = self._path()
            if path == "/healthz":
                self._send(200, {"ok": True})
            elif not self._authorized():
                return
            elif path == "/service-url":
                region, doc = provider.service_url()
                self._send(200, doc, {"X-GeoSync-Region": region})
            elif path == "/status":
                self._send(200, provider.status())
            else:
                self._send(404, {"error": f"no such endpoint {path}; try /service-url or /status"})

        def do_POST(self) -> None:
            if self._path() != "/switch":
                self._send(404, {"error": "POST only to /switch"})
                return
            if not self._authorized():
                return
            body = self._body()
            if body is None:
                return
            target, max_wait = body.get("to"), body.get("max_wait_s")
            if not isinstance(target, str) or not target:
                self._send(400, {"error": '"to" (the region to move clients to) is required'})
                return
            if max_wait is not None and (isinstance(max_wait, bool) or not isinstance(max_wait, int | float)):
                self._send(400, {"error": '"max_wait_s" must be a number of seconds or null'})
                return
            by = str(body.get("by") or self.address_string())
            self._submit(switching.Requested(target, max_wait, by))

        def do_DELETE(self) -> None:
            if self._path() != "/switch":
                self._send(404, {"error": "DELETE only on /switch (cancels the pending switch)"})
                return
            if self._authorized():
                self._submit(switching.Cancelled(by=self.address_string()))

        def _body(self) -> dict[str, Any] | None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY:
                self._send(400, {"error": f"send a JSON object of at most {MAX_BODY} bytes"})
                return None
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError as e:
                self._send(400, {"error": f"the body is not JSON: {e}"})
                return None
            if not isinstance(body, dict):
                self._send(400, {"error": "the body must be a JSON object"})
                return None
            return body

        def _submit(self, event: switching.Requested | switching.Cancelled) -> None:
            try:
                answer = provider.submit(event)
            except OSError as e:  # journal or state file not written: the provider keeps its old state
                log.error("cannot record %s: %s", event, e)
                self._send(500, {"error": f"cannot record the request: {e}"})
                return
            if isinstance(answer, switching.Refused):
                self._send(STATUS_BY_REFUSAL[answer.why], {"error": answer.message, "why": answer.why})
            elif isinstance(answer, switching.Accepted):
                body = {"request": answer.request.to_dict(), "status": provider.status()}
                self._send(202 if answer.changed else 200, body)
            else:  # pragma: no cover - requests and cancels are always answered
                self._send(500, {"error": "no answer"})

    return Handler


def run(
    provider: Provider,
    server: http.server.ThreadingHTTPServer,
    stop: threading.Event,
    *,
    tick_s: float = 0.25,
) -> None:
    """The composition root's loop: the HTTP server on its own named thread, ticks on this one, until
    ``stop``; then the server is shut down before returning (checks in flight are abandoned)."""
    http_thread = threading.Thread(target=server.serve_forever, name="failover-http", daemon=True)
    http_thread.start()
    try:
        while not stop.wait(tick_s):
            provider.submit(switching.Tick())
    finally:
        server.shutdown()
        server.server_close()
        http_thread.join(timeout=5)
