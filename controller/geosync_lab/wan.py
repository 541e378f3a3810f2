"""The lab's WAN: replication between regions goes through Toxiproxy, with latency, jitter, bandwidth and
partitions set per pair of regions (``geoctl lab wan``, ``geoctl lab partition``).

A WAN lab (``geoctl lab up --wan``) runs one ``toxiproxy-server`` and one proxy per ordered pair x->y,
listening on its own loopback port and forwarding to y's broker port. Region y's broker advertises, besides
its internal listener, one listener ``wan-x`` per peer x at the x->y proxy's port; region x's cluster record
for y names that proxy as ``brokerServiceUrl`` and ``wan-x`` as ``listenerName``, so the replicator's
lookups send it back to the proxy rather than straight to y's broker. Everything else (agents, tests,
clients, the admin API and its ``serviceUrl``) connects to the regions directly.

Shapes apply to both streams of both proxies of a pair: "40 ms latency" is 40 ms one way, each way, so a
message published in x is in y no sooner than 40 ms later and its receipt is back in x 80 ms after sending.
A partition disables both proxies of the pair (their connections close and new ones are refused);
healing enables them again and the replicators reconnect by themselves.

Plans (which requests to send) are values built by pure functions; ``ToxiproxyApi`` sends them.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from geosync_core import topology as topo
from geosync_lab import regions
from geosync_lab.errors import LabError

SERVER = "toxiproxy-server"
TOXIC_PREFIX = "wan-"
INTERNAL_LISTENER = "internal"


def listener_name(source: str) -> str:
    """The listener a region advertises for replicators coming from region ``source``."""
    return f"wan-{source}"


def proxy_name(source: str, target: str) -> str:
    return f"{source}-to-{target}"


# -- shapes and plans (pure) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What a pair's link adds: one-way latency and jitter (ms), bandwidth cap (KB/s, None: unlimited)."""

    latency_ms: int = 0
    jitter_ms: int = 0
    bandwidth_kbps: int | None = None


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: dict[str, Any] | None = None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$")


def parse_duration_ms(text: str) -> int:
    """``40ms``, ``0.5s`` or a bare number of milliseconds -> whole milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise LabError(f"not a duration: {text!r}", hint="write e.g. 40ms, 0.5s or 40 (milliseconds)")
    value = float(match.group(1)) * (1000 if match.group(2) == "s" else 1)
    return round(value)


def parse_pair(text: str, known: Iterable[str]) -> tuple[str, str]:
    """``a,b`` -> (a, b), both known regions and different."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or parts[0] == parts[1] or not all(parts):
        raise LabError(f"not a pair of regions: {text!r}", hint="name two different regions, e.g. --pair a,b")
    return check_pair(parts[0], parts[1], known)


def check_pair(x: str, y: str, known: Iterable[str]) -> tuple[str, str]:
    names = sorted(known)
    unknown = [r for r in (x, y) if r not in names]
    if unknown:
        raise LabError(
            f"unknown region(s) {', '.join(unknown)}; this lab has {', '.join(names)}",
            hint="name regions of this lab",
        )
    if x == y:
        raise LabError(f"a pair needs two different regions (got {x} twice)")
    return x, y


def proxies_of(pair: tuple[str, str] | None, region_names: Iterable[str]) -> list[str]:
    """The proxies a command acts on: both directions of ``pair``, or every ordered pair of the lab."""
    names = sorted(region_names)
    pairs = [pair] if pair else [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    return [proxy_name(a, b) for x, y in pairs for a, b in ((x, y), (y, x))]


def toxics(shape: Shape) -> list[dict[str, Any]]:
    """The Toxiproxy toxics of a shape, on both streams (each way of the link)."""
    out: list[dict[str, Any]] = []
    for stream in ("upstream", "downstream"):
        if shape.latency_ms or shape.jitter_ms:
            out.append(
                {
                    "name": f"{TOXIC_PREFIX}latency-{stream}",
                    "type": "latency",
                    "stream": stream,
                    "toxicity": 1.0,
                    "attributes": {"latency": shape.latency_ms, "jitter": shape.jitter_ms},
                }
            )
        if shape.bandwidth_kbps is not None:
            out.append(
                {
                    "name": f"{TOXIC_PREFIX}bandwidth-{stream}",
                    "type": "bandwidth",
                    "stream": stream,
                    "toxicity": 1.0,
                    "attributes": {"rate": shape.bandwidth_kbps},
                }
            )
    return out


def plan_shape(proxies: list[str], existing: dict[str, list[str]], shape: Shape) -> list[Request]:
    """Replace the WAN toxics of ``proxies`` by those of ``shape`` (``Shape()`` clears them).
    ``existing`` maps each proxy to the names of its current toxics; toxics we did not add are kept."""
    plan: list[Request] = []
    for proxy in proxies:
        for name in existing.get(proxy, []):
            if name.startswith(TOXIC_PREFIX):
                plan.append(Request("DELETE", f"/proxies/{proxy}/toxics/{name}"))
        plan.extend(Request("POST", f"/proxies/{proxy}/toxics", toxic) for toxic in toxics(shape))
    return plan


def plan_partition(proxies: list[str], *, heal: bool) -> list[Request]:
    return [Request("POST", f"/proxies/{p}", {"enabled": heal}) for p in proxies]


def plan_proxies(wan: dict[str, Any]) -> list[dict[str, Any]]:
    """The body of ``POST /populate`` that creates (or resets) every proxy recorded in a lab's WAN."""
    return [
        {"name": name, "listen": p["listen"], "upstream": p["upstream"], "enabled": True}
        for name, p in sorted(wan["proxies"].items())
    ]


def advertised_listeners(target: str, broker_port: int, wan: dict[str, Any]) -> dict[str, str]:
    """Broker settings of region ``target`` in a WAN lab: its internal listener plus one per peer's proxy."""
    listeners = [f"{INTERNAL_LISTENER}:pulsar://127.0.0.1:{broker_port}"]
    for p in sorted(wan["proxies"].values(), key=lambda p: str(p["source"])):
        if p["target"] == target:
            listeners.append(f"{listener_name(p['source'])}:pulsar://{p['listen']}")
    # Pulsar refuses advertisedAddress together with advertisedListeners.
    return {
        "advertisedAddress": "",
        "advertisedListeners": ",".join(listeners),
        "internalListenerName": INTERNAL_LISTENER,
    }


def layout(region_names: list[str], api_port: int, proxy_ports: list[int]) -> dict[str, Any]:
    """A WAN's record before the regions boot (their broker ports are filled in by ``with_upstreams``)."""
    pairs = [(x, y) for x in region_names for y in region_names if x != y]
    if len(proxy_ports) != len(pairs):
        raise ValueError(f"need {len(pairs)} proxy ports, got {len(proxy_ports)}")
    return {
        "api": f"http://127.0.0.1:{api_port}",
        "pid": None,
        "proxies": {
            proxy_name(x, y): {"source": x, "target": y, "listen": f"127.0.0.1:{port}", "upstream": ""}
            for (x, y), port in zip(pairs, proxy_ports, strict=True)
        },
    }


def with_upstreams(wan: dict[str, Any], broker_ports: dict[str, int]) -> dict[str, Any]:
    proxies = {
        name: {**p, "upstream": f"127.0.0.1:{broker_ports[p['target']]}"}
        for name, p in wan["proxies"].items()
    }
    return {**wan, "proxies": proxies}


def proxy_service_url(wan: dict[str, Any], source: str, target: str) -> str:
    return f"pulsar://{wan['proxies'][proxy_name(source, target)]['listen']}"


# -- the server and its API ------------------------------------------------------------------------


def server_binary() -> pathlib.Path | None:
    """``toxiproxy-server`` next to this Python (scripts/setup.sh installs it there), else on PATH."""
    import sys

    local = pathlib.Path(sys.executable).parent / SERVER
    if local.exists():
        return local
    found = shutil.which(SERVER)
    return pathlib.Path(found) if found else None


class ToxiproxyApi:
    """Toxiproxy's HTTP API; failures become ``LabError`` with what to check."""

    def __init__(self, base_url: str, *, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def send(self, request: Request) -> Any:
        data = None if request.body is None else json.dumps(request.body).encode()
        http = urllib.request.Request(
            self.base_url + request.path,
            data=data,
            method=request.method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(http, timeout=self.timeout) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace").strip()
            raise LabError(f"Toxiproxy refused {request.method} {request.path}: {e.code} {detail}") from e
        except OSError as e:
            raise LabError(
                f"Toxiproxy at {self.base_url} does not answer: {e}",
                hint="is the lab up? 'geoctl lab status' shows it; 'geoctl lab up --wan' restarts a WAN lab",
            ) from e
        return json.loads(text) if text.strip() else None

    def apply(self, plan: list[Request]) -> None:
        for request in plan:
            self.send(request)

    def toxic_names(self) -> dict[str, list[str]]:
        proxies = self.send(Request("GET", "/proxies")) or {}
        return {name: [t["name"] for t in p.get("toxics") or []] for name, p in proxies.items()}

    def proxies(self) -> dict[str, Any]:
        return dict(self.send(Request("GET", "/proxies")) or {})

    def ready(self) -> bool:
        try:
            self.send(Request("GET", "/version"))
            return True
        except LabError:
            return False


def config_path(lab_dir: pathlib.Path) -> pathlib.Path:
    """The server's proxy list; its path on the command line is what identifies the lab's server."""
    return lab_dir / "wan" / "proxies.json"


def start_server(
    lab_dir: pathlib.Path,
    wan: dict[str, Any],
    *,
    timeout_s: float = 10.0,
    on_launch: Callable[[int, str], None] = lambda _pid, _role: None,
) -> int:
    """Start the lab's toxiproxy-server on its recorded API port with every proxy; return its pid.
    ``on_launch`` is told ``(pid, "wan")`` as soon as it starts (the lab's launch record)."""
    binary = server_binary()
    if binary is None:
        raise LabError(
            "toxiproxy-server is not installed, so this lab cannot have a WAN",
            hint="run scripts/setup.sh (by default it builds toxiproxy-server with Go), then 'lab up --wan'",
        )
    port = wan["api"].rsplit(":", 1)[1]
    config = config_path(lab_dir)
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(plan_proxies(wan), indent=2) + "\n")
    log = config.parent / "toxiproxy.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(binary), "-host", "127.0.0.1", "-port", port, "-config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    on_launch(proc.pid, "wan")
    api = ToxiproxyApi(wan["api"])
    started = time.monotonic()
    while not (api.ready() and len(api.proxies()) == len(wan["proxies"])):
        if proc.poll() is not None or time.monotonic() - started > timeout_s:
            proc.kill()
            raise LabError(f"toxiproxy-server did not start on port {port}", hint=f"read its log: {log}")
        time.sleep(0.05)
    return proc.pid


def owns_server(lab_dir: pathlib.Path, wan: dict[str, Any]) -> bool:
    pid = wan.get("pid")
    return bool(pid) and regions.owns(int(pid or 0), str(config_path(lab_dir)))


def stop_server(lab_dir: pathlib.Path, wan: dict[str, Any]) -> str:
    if not owns_server(lab_dir, wan):
        return "not running"
    return regions.stop(int(wan["pid"]), str(config_path(lab_dir)), grace_s=5)


def require(topology: topo.Topology, lab_dir: pathlib.Path) -> ToxiproxyApi:
    """The API of a lab's running WAN, or a LabError saying why there is none."""
    if not topology.wan:
        raise LabError(
            f"the lab in {lab_dir} has no WAN (it was booted without Toxiproxy)",
            hint=f"boot it with 'geoctl lab down --dir {lab_dir}' then 'geoctl lab up --wan --dir {lab_dir}'",
        )
    if not owns_server(lab_dir, topology.wan):
        raise LabError(
            f"the lab's toxiproxy-server (pid {topology.wan.get('pid')}) is not running",
            hint=f"restart the lab: 'geoctl lab down --dir {lab_dir}' then 'geoctl lab up --wan'",
        )
    return ToxiproxyApi(topology.wan["api"])


def shape_links(
    topology: topo.Topology, lab_dir: pathlib.Path, shape: Shape, pair: tuple[str, str] | None
) -> list[str]:
    """Set ``shape`` on a pair (or every pair) of a lab's WAN; return the proxies changed."""
    api = require(topology, lab_dir)
    proxies = proxies_of(pair, topology.regions)
    api.apply(plan_shape(proxies, api.toxic_names(), shape))
    return proxies


def partition(
    topology: topo.Topology, lab_dir: pathlib.Path, pair: tuple[str, str], *, heal: bool
) -> list[str]:
    api = require(topology, lab_dir)
    proxies = proxies_of(pair, topology.regions)
    api.apply(plan_partition(proxies, heal=heal))
    return proxies


def describe(topology: topo.Topology, lab_dir: pathlib.Path) -> dict[str, Any]:
    """Every proxy of a lab's WAN: whether it is enabled and its toxics."""
    api = require(topology, lab_dir)
    out: dict[str, Any] = {}
    for name, p in sorted(api.proxies().items()):
        out[name] = {
            "enabled": bool(p.get("enabled")),
            "listen": p.get("listen"),
            "upstream": p.get("upstream"),
            "toxics": {t["name"]: t.get("attributes", {}) for t in p.get("toxics") or []},
        }
    return out
