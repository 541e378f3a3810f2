"""Small, bounded helpers for producing and reading in the lab's regions."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import pulsar

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_core.positions import Position
from geosync_lab import labs, regions


@dataclass
class Lab:
    dir: pathlib.Path
    owned: bool

    @property
    def topology(self) -> topo.Topology:
        return labs.load(self.dir)

    def admin(self, region: str) -> AdminClient:
        return AdminClient(self.topology.region(region).admin_url)

    def service_url(self, region: str) -> str:
        return self.topology.region(region).service_url

    def log_tails(self, lines: int = 40) -> str:
        out = []
        for region in self.topology.regions.values():
            out.append(regions.log_tail(labs.region_process(self.dir, region), lines))
        return "\n\n".join(out)


def produce(
    service_url: str,
    topic: str,
    payloads: list[bytes],
    *,
    key: Callable[[int], str] | None = None,
) -> list[tuple[int, Position]]:
    """Send each payload synchronously; return (partition, position) per message, in order."""
    out = []
    with messaging.client(service_url) as c:
        producer = c.create_producer(topic, batching_enabled=False)
        for i, data in enumerate(payloads):
            kwargs = {"partition_key": key(i)} if key else {}
            mid = producer.send(data, **kwargs)
            out.append((mid.partition(), messaging.position_of(mid)))
        producer.close()
    return out


def read_all(
    service_url: str,
    topic: str,
    *,
    expect: int,
    timeout_s: float = 45.0,
    match: Callable[[messaging.Received], bool] = lambda _m: True,
) -> list[messaging.Received]:
    """Read ``topic`` from the earliest message until ``expect`` matching messages arrived (or time out)."""
    found: list[messaging.Received] = []
    deadline = time.monotonic() + timeout_s
    with messaging.client(service_url) as c:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        try:
            while len(found) < expect and time.monotonic() < deadline:
                try:
                    msg = reader.read_next(timeout_millis=500)
                except pulsar.Timeout:
                    continue
                got = messaging.received(msg)
                if match(got):
                    found.append(got)
        finally:
            reader.close()
    return found
