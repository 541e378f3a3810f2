"""The lab's WAN on real regions: latency set with ``lab wan`` delays replication by at least that much,
a bandwidth cap paces it, and a partition stops it until healed, with nothing lost.

These need a lab booted with ``--wan`` (the shared lab has none), so the module boots its own two-region
lab without agents (about 35 s), or reuses the one ``GEOSYNC_TEST_WAN_LAB`` names (``geoctl lab up --wan
--regions a,b --dir DIR``), which is then left running. Skipped when toxiproxy-server is not installed.
"""

from __future__ import annotations

import pathlib
import statistics
import time
from collections.abc import Iterator

import pulsar
import pytest

from geosync_adapters import messaging
from geosync_lab import labs, wan
from integration_tests.helpers import Lab, given_or_booted

NAMESPACE = "geo/ab"


def _reusable(path: pathlib.Path) -> bool:
    try:
        state = labs.status(path)
        return bool(state["healthy"]) and bool(labs.load(path).wan)
    except Exception:
        return False


@pytest.fixture(scope="module")
def wan_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def boot(lab_dir: pathlib.Path) -> None:
        if wan.server_binary() is None:
            pytest.skip("toxiproxy-server is not installed (scripts/setup.sh builds it with Go)")
        labs.up(lab_dir, ["a", "b"], agents=False, with_wan=True)

    with given_or_booted("GEOSYNC_TEST_WAN_LAB", _reusable, boot, tmp_path_factory.mktemp("wanlab")) as lab:
        yield lab


@pytest.fixture
def lab(wan_lab: Lab) -> Iterator[Lab]:
    """The WAN lab, its links left unshaped and connected after each test."""
    yield wan_lab
    topology = wan_lab.topology
    wan.partition(topology, wan_lab.dir, ("a", "b"), heal=True)
    wan.shape_links(topology, wan_lab.dir, wan.Shape(), None)


def replication_delays_ms(lab: Lab, topic: str, count: int) -> list[float]:
    """Publish ``count`` messages in a, one at a time, and time each until a consumer in b receives it."""
    delays = []
    with messaging.client(lab.service_url("a")) as ca, messaging.client(lab.service_url("b")) as cb:
        consumer = cb.subscribe(topic, "wan-test", initial_position=pulsar.InitialPosition.Earliest)
        producer = ca.create_producer(topic, batching_enabled=False)
        # The first message also creates the topic in b and connects its replicator: not timed.
        producer.send(b"warm-up")
        consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        for i in range(count):
            sent = time.monotonic()
            producer.send(f"m{i}".encode())
            msg = consumer.receive(timeout_millis=10_000)
            delays.append((time.monotonic() - sent) * 1000)
            assert msg.data() == f"m{i}".encode()
            consumer.acknowledge(msg)
        producer.close()
        consumer.close()
    return delays


def test_latency_delays_replication_by_at_least_the_one_way_latency(lab: Lab, unique: str) -> None:
    base = replication_delays_ms(lab, f"persistent://{NAMESPACE}/wan-base-{unique}", 15)
    wan.shape_links(lab.topology, lab.dir, wan.Shape(latency_ms=40), ("a", "b"))
    shaped = replication_delays_ms(lab, f"persistent://{NAMESPACE}/wan-40-{unique}", 15)
    p50_base, p50_shaped = statistics.median(base), statistics.median(shaped)
    print(f"replication a->b p50: {p50_base:.1f} ms unshaped, {p50_shaped:.1f} ms with 40 ms one way")
    assert min(shaped) >= 40
    assert p50_shaped >= 40
    # Unshaped replication takes 5-20 ms on a busy two-core machine; the shaped link adds its 40 ms to that.
    assert p50_base < 40
    assert p50_shaped - p50_base >= 30


def test_a_partition_stops_replication_and_healing_resumes_it_losing_nothing(lab: Lab, unique: str) -> None:
    topic = f"persistent://{NAMESPACE}/wan-cut-{unique}"
    replication_delays_ms(lab, topic, 1)  # the topic exists in both regions, its replicator connected
    wan.partition(lab.topology, lab.dir, ("a", "b"), heal=False)
    sent = [f"cut-{i}".encode() for i in range(20)]
    with messaging.client(lab.service_url("a")) as ca, messaging.client(lab.service_url("b")) as cb:
        consumer = cb.subscribe(topic, "wan-test", initial_position=pulsar.InitialPosition.Earliest)
        producer = ca.create_producer(topic, batching_enabled=False)
        for data in sent:
            producer.send(data)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=3000)
        healed = time.monotonic()
        wan.partition(lab.topology, lab.dir, ("a", "b"), heal=True)
        got: list[bytes] = []
        while len(got) < len(sent):
            msg = consumer.receive(timeout_millis=45_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        print(f"replication resumed {time.monotonic() - healed:.1f} s after healing")
        producer.close()
        consumer.close()
    assert got == sent


def test_a_bandwidth_cap_paces_replication(lab: Lab, unique: str) -> None:
    topic = f"persistent://{NAMESPACE}/wan-slow-{unique}"
    replication_delays_ms(lab, topic, 1)
    wan.shape_links(lab.topology, lab.dir, wan.Shape(bandwidth_kbps=64), ("a", "b"))
    payload = b"x" * 16_000
    with messaging.client(lab.service_url("a")) as ca, messaging.client(lab.service_url("b")) as cb:
        consumer = cb.subscribe(topic, "wan-test", initial_position=pulsar.InitialPosition.Earliest)
        producer = ca.create_producer(topic, batching_enabled=False)
        started = time.monotonic()
        for _ in range(16):
            producer.send(payload)
        for _ in range(16):
            consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        took = time.monotonic() - started
        producer.close()
        consumer.close()
    print(f"256 kB replicated in {took:.1f} s at 64 kB/s")
    # 256 kB at 64 KB/s take about 4 s; unshaped, well under a second.
    assert took >= 3.0
