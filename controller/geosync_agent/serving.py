"""The agent's HTTP side: Prometheus metrics, liveness and readiness probes, and a JSON state dump.

Runs on its own thread and only reads the agent's counters and snapshot, so a slow scrape never delays
syncing.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from geosync_agent.runtime import Agent


class Component(Protocol):
    def stop(self) -> None: ...


class _AgentCollector:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Any]:
        snap = self.agent.snapshot()
        counters = CounterMetricFamily(
            "geosync_agent_events", "Agent events by kind", labels=["region", "event"]
        )
        for name, value in sorted(snap["counters"].items()):
            counters.add_metric([snap["region"], name], value)
        yield counters
        for key in ("topics", "subscriptions", "index_runs", "bytes_read", "messages_read"):
            gauge = GaugeMetricFamily(
                f"geosync_agent_{key}", f"Agent {key.replace('_', ' ')}", labels=["region"]
            )
            gauge.add_metric([snap["region"]], float(snap[key]))
            yield gauge


@dataclass
class HttpEndpoint:
    server: http.server.ThreadingHTTPServer
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start(agent: Agent) -> list[Component]:
    port = agent.config.metrics_port
    if not port:
        return []
    registry = CollectorRegistry()
    registry.register(_AgentCollector(agent))

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
                alive = not agent.stop_event.is_set()
                self._send(200 if alive else 503, b"ok\n" if alive else b"stopping\n", "text/plain")
            elif self.path == "/readyz":
                self._send(
                    200 if agent.ready else 503, b"ready\n" if agent.ready else b"starting\n", "text/plain"
                )
            elif self.path == "/state":
                self._send(200, json.dumps(agent.snapshot(), default=str).encode(), "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

    server = http.server.ThreadingHTTPServer((agent.config.metrics_host, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return [HttpEndpoint(server, thread)]
