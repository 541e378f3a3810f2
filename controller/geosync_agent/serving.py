"""The agent's HTTP side: Prometheus metrics, liveness and readiness probes, and a JSON state dump.

Served by the composition root's ``http`` task; it only reads the agent's counters and ``status()``, so a
slow scrape never delays syncing.

Metrics (every one labelled with ``region``):

* ``geosync_sync_lag_seconds{topic,subscription}``: how long remote acknowledgements have waited to be
  applied here (0 when in step); ``geosync_sync_lag_max_seconds`` over all subscriptions;
* ``geosync_pending_holes``: holes held back because application consumers are connected;
* ``geosync_applied_updates_total{kind}``: mark-delete moves and holes acknowledged;
* ``geosync_control_rejected_total{reason}``: control messages refused (unsigned, bad signature, replayed,
  malformed, misplaced, unknown key, another region's key);
* ``geosync_admin_errors_total{operation}``: failed admin API work (apply, discovery, sync round, publish);
* ``geosync_policy_events_total{event}`` and ``geosync_policy_mirror_leader``: the policy mirror;
* ``geosync_agent_ready``: 1 while /readyz answers 200 (the sidecar's broker pod does not depend on it: this
  and the alerts on it are how a sidecar's sync health is seen); ``geosync_agent_loop_progress_age_seconds
  {loop}``: seconds since each watched loop last got on (at ``stuck_after_s`` the process ends);
  ``geosync_agent_start_time_seconds``: when the process started (restarts show as changes);
* ``geosync_agent_events_total{event}`` (every raw counter) and ``geosync_agent_{topics,...}`` gauges.

``/debug/memory`` says where the agent's memory goes (the largest allocation sites, traced and resident
totals) when the agent runs with Python's ``PYTHONTRACEMALLOC`` set (tracing costs CPU, and taking the
report pauses the agent for a moment: for diagnosis, not for scraping).
"""

from __future__ import annotations

import http.server
import json
import pathlib
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from geosync_agent.runtime import Agent
from geosync_agent.watching import Watchdog
from geosync_core import envelopes

ADMIN_ERRORS = {
    "apply_errors": "apply",
    "discovery_errors": "discovery",
    "loop_errors": "round",
    "publish_errors": "publish",
    "replicator_unload_errors": "unload",
}
REJECTED_PREFIX = "control_rejected_"


class _AgentCollector:
    def __init__(self, agent: Agent, mirror: Any = None, watchdog: Watchdog | None = None) -> None:
        self.agent = agent
        self.mirror = mirror
        self.watchdog = watchdog
        self.started = time.time()

    def collect(self) -> Iterator[Any]:
        snap = self.agent.status()
        region = snap["region"]
        counts = snap["counters"]
        now = time.time()
        lag = GaugeMetricFamily(
            "geosync_sync_lag_seconds",
            "Seconds remote acknowledgements have waited to be applied here (0: in step)",
            labels=["region", "topic", "subscription"],
        )
        lags = []
        for sub in snap.get("synced", []):
            value = max(0.0, now - sub["behind_since"]) if sub.get("behind_since") else 0.0
            lags.append(value)
            lag.add_metric([region, sub["topic"], sub["subscription"]], value)
        yield lag
        yield _gauge(
            "geosync_sync_lag_max_seconds",
            "Largest sync lag over all subscriptions",
            region,
            max(lags, default=0.0),
        )
        yield _gauge(
            "geosync_unresolved_entries",
            "Entries read here whose origin could not be named (mark-delete stops at them; retried)",
            region,
            float(sum(snap.get("unresolved", {}).values())),
        )
        yield _gauge(
            "geosync_pending_holes",
            "Holes held back while application consumers are connected",
            region,
            float(sum(s.get("pending_holes") or 0 for s in snap.get("synced", []))),
        )
        yield _gauge(
            "geosync_replicators_stalled",
            "Pulsar replicators out of this region with a backlog that sent nothing for replicator_stall_s",
            region,
            float(len(snap.get("replicators_stalled") or [])),
        )
        applied = CounterMetricFamily(
            "geosync_applied_updates", "Cursor updates applied here", labels=["region", "kind"]
        )
        applied.add_metric([region, "mark_delete"], counts.get("mark_delete_moves", 0))
        applied.add_metric([region, "holes"], counts.get("holes_acked", 0))
        yield applied
        rejected = CounterMetricFamily(
            "geosync_control_rejected", "Control messages refused, by reason", labels=["region", "reason"]
        )
        for name, value in sorted(counts.items()):
            if name.startswith(REJECTED_PREFIX):
                rejected.add_metric([region, name[len(REJECTED_PREFIX) :]], value)
        yield rejected
        errors = CounterMetricFamily(
            "geosync_admin_errors", "Failed admin API work, by operation", labels=["region", "operation"]
        )
        for name, operation in ADMIN_ERRORS.items():
            errors.add_metric([region, operation], counts.get(name, 0))
        yield errors
        if self.mirror is not None:
            mirror = self.mirror.snapshot()
            events = CounterMetricFamily(
                "geosync_policy_events", "Policy mirror events, by kind", labels=["region", "event"]
            )
            for name, value in sorted((mirror.get("counters") or {}).items()):
                events.add_metric([region, name], value)
            yield events
            yield _gauge(
                "geosync_policy_mirror_leader",
                "1 while this agent leads the policy mirror",
                region,
                1.0 if mirror.get("leader") else 0.0,
            )
            yield _gauge(
                "geosync_policy_mirror_held_changes",
                "Peers' deletions held by the policy mirror: they would destroy what this region holds",
                region,
                float(len(mirror.get("held") or {})),
            )
        yield from self._health(region)
        counters = CounterMetricFamily(
            "geosync_agent_events", "Agent events by kind", labels=["region", "event"]
        )
        for name, value in sorted(snap["counters"].items()):
            counters.add_metric([snap["region"], name], value)
        yield counters
        for key in ("topics", "subscriptions", "index_runs", "bytes_read", "messages_read", "inbox"):
            gauge = GaugeMetricFamily(
                f"geosync_agent_{key}", f"Agent {key.replace('_', ' ')}", labels=["region"]
            )
            gauge.add_metric([snap["region"]], float(snap[key]))
            yield gauge

    def _health(self, region: str) -> Iterator[Any]:
        ready, _ = self.agent.readiness(time.monotonic())
        yield _gauge("geosync_agent_ready", "1 while the agent's /readyz answers 200", region, float(ready))
        yield _gauge(
            "geosync_agent_start_time_seconds",
            "When the agent process started (Unix time)",
            region,
            self.started,
        )
        ages = GaugeMetricFamily(
            "geosync_agent_loop_progress_age_seconds",
            "Seconds since each of the agent's loops last got on (stuck_after_s: the process ends)",
            labels=["region", "loop"],
        )
        for loop, age in (self.watchdog.ages() if self.watchdog is not None else {}).items():
            ages.add_metric([region, loop], age)
        yield ages


NOT_TRACING = (
    "memory tracing is off: start the agent with PYTHONTRACEMALLOC=1 (or more frames) in its environment "
    "to see where its memory goes"
)


def memory_report(top: int = 25) -> dict[str, Any] | None:
    """The ``top`` allocation sites holding the most memory, with the traced, peak and resident totals;
    None when tracemalloc is not tracing."""
    if not tracemalloc.is_tracing():
        return None
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    return {
        "traced_mib": round(current / 2**20, 1),
        "peak_mib": round(peak / 2**20, 1),
        "rss_mib": _rss_mib(),
        "allocated_blocks": sys.getallocatedblocks(),
        "top": [
            {"site": str(stat.traceback[0]), "kib": round(stat.size / 1024, 1), "blocks": stat.count}
            for stat in snapshot.statistics("lineno")[:top]
        ],
    }


def _rss_mib() -> float | None:
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _gauge(name: str, documentation: str, region: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, documentation, labels=["region"])
    gauge.add_metric([region], value)
    return gauge


def signing_state(keys: envelopes.Keys) -> dict[str, Any]:
    """Which key the agent signs with and which it accepts, for /state: key ids only, never key material."""
    return {"key_id": keys.signer.key_id, "accepts": keys.keyring.key_ids()}


def endpoint(
    agent: Agent,
    mirror: Any = None,
    *,
    liveness: Callable[[], tuple[bool, str]],
    watchdog: Watchdog | None = None,
) -> http.server.ThreadingHTTPServer | None:
    """The server for /metrics, /healthz, /readyz and /state on ``metrics_port`` (None when it is 0), not yet
    serving; ``mirror`` (the policy mirror, if running) adds its counters to the metrics, ``liveness``
    answers /healthz (whether the process gets on, and why not), ``watchdog`` its loops' progress metric."""
    port = agent.config.metrics_port
    if not port:
        return None
    registry = CollectorRegistry()
    registry.register(_AgentCollector(agent, mirror, watchdog))

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, generate_latest(registry), "text/plain; version=0.0.4")
            elif self.path == "/healthz":
                ok, why = liveness()
                self._send(200 if ok else 503, f"{why}\n".encode(), "text/plain")
            elif self.path == "/readyz":
                ok, why = agent.readiness(time.monotonic())
                self._send(200 if ok else 503, f"{why}\n".encode(), "text/plain")
            elif self.path == "/debug/memory":
                report = memory_report()
                if report is None:
                    self._send(404, f"{NOT_TRACING}\n".encode(), "text/plain")
                else:
                    self._send(200, json.dumps(report).encode(), "application/json")
            elif self.path == "/state":
                state = {**agent.status(), "signing": signing_state(agent.keys)}
                if mirror is not None:
                    state["mirror"] = mirror.snapshot()
                self._send(200, json.dumps(state, default=str).encode(), "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

    return http.server.ThreadingHTTPServer((agent.config.metrics_host, port), Handler)
