"""Multi-broker lab regions (``geoctl lab up --brokers 2``) on real Pulsar: a namespace's topics are spread
over both brokers of a region, geo-replication works between the regions, a bundle unload moves a topic to
the other broker while a producer keeps sending and nothing is lost, and the broker plugin's endpoints answer
only for topics the broker they are asked on owns (what a one-agent-per-region deployment runs into).

The module boots its own two-region lab of two brokers each, without agents (about 50 s on two cores), or
reuses the one ``GEOSYNC_TEST_MULTIBROKER_LAB`` names (``geoctl lab up --regions a,b --brokers 2 --dir
DIR``), which is then left running.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_lab import labs, regions
from integration_tests.helpers import Lab, given_or_booted

NAMESPACE = "geo/ab"
BROKERS = 2


def _reusable(path: pathlib.Path) -> bool:
    try:
        state = labs.status(path)
        shape = {n: len(r.brokers) for n, r in labs.load(path).regions.items()}
    except Exception:
        return False
    return bool(state["healthy"]) and shape == {"a": BROKERS, "b": BROKERS}


@pytest.fixture(scope="module")
def mb_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def boot(lab_dir: pathlib.Path) -> None:
        labs.up(lab_dir, ["a", "b"], agents=False, brokers=BROKERS)

    lab_dir = tmp_path_factory.mktemp("multibroker")
    with given_or_booted("GEOSYNC_TEST_MULTIBROKER_LAB", _reusable, boot, lab_dir) as lab:
        yield lab


def _rest(topic: str) -> str:
    return topic.replace("persistent://", "persistent/")


def owner(admin: AdminClient, topic: str) -> str:
    """The service URL of the broker that owns ``topic`` (loading it if no broker does)."""
    return str(admin.get(f"/lookup/v2/topic/{_rest(topic)}")["brokerUrl"])


def _broker_of(region: topo.Region, service_url: str) -> topo.Broker:
    return next(b for b in region.brokers if b.service_url == service_url)


def test_every_broker_is_recorded_and_running(mb_lab: Lab) -> None:
    state = labs.status(mb_lab.dir)
    assert state["healthy"], state
    for name, region in mb_lab.topology.regions.items():
        assert len(region.brokers) == BROKERS
        # ZooKeeper, configuration store, bookie and every broker are processes of the region.
        assert len(region.pids) == 3 + BROKERS
        assert region.service_url == "pulsar://" + ",".join(
            b.service_url.removeprefix("pulsar://") for b in region.brokers
        )
        assert region.admin_url == region.brokers[0].admin_url
        assert [b["process"] for b in state["regions"][name]["brokers"]] == ["running"] * BROKERS
        brokers = AdminClient(region.admin_url).get(f"/admin/v2/brokers/{name}")
        assert sorted(brokers) == sorted(b.admin_url.removeprefix("http://") for b in region.brokers)


def test_a_namespaces_topics_are_spread_over_both_brokers(mb_lab: Lab, unique: str) -> None:
    region = mb_lab.topology.region("a")
    admin = mb_lab.admin("a")
    topics = [f"persistent://{NAMESPACE}/spread-{unique}-{i}" for i in range(8)]
    for topic in topics:
        admin.put(f"/admin/v2/{_rest(topic)}")
    owners = {topic: owner(admin, topic) for topic in topics}
    # Eight names fall into the namespace's four bundles; the load manager gives each broker some.
    assert set(owners.values()) == {b.service_url for b in region.brokers}, owners


def test_geo_replication_between_multi_broker_regions(mb_lab: Lab, unique: str) -> None:
    topic = f"persistent://{NAMESPACE}/repl-{unique}"
    payloads = [f"m{i}".encode() for i in range(20)]
    with messaging.client(mb_lab.service_url("b")) as cb:
        consumer = cb.subscribe(topic, "repl-test", initial_position=pulsar.InitialPosition.Earliest)
        with messaging.client(mb_lab.service_url("a")) as ca:
            producer = ca.create_producer(topic, batching_enabled=False)
            for data in payloads:
                producer.send(data)
            producer.close()
        received = []
        for _ in payloads:
            msg = consumer.receive(timeout_millis=30_000)
            received.append(msg.data())
            consumer.acknowledge(msg)
        consumer.close()
    assert received == payloads


def test_a_bundle_unload_moves_a_topic_to_the_other_broker_while_producing(mb_lab: Lab, unique: str) -> None:
    region = mb_lab.topology.region("a")
    admin = mb_lab.admin("a")
    topic = f"persistent://{NAMESPACE}/move-{unique}"
    sent: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        with messaging.client(region.service_url) as c:
            producer = c.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
            i = 0
            while not stop.is_set() or i < 200:
                try:
                    producer.send(str(i).encode())
                    sent.append(i)
                except pulsar.PulsarException as e:
                    failures.append(f"{i}: {e}")
                i += 1
            producer.close()

    # A durable subscription in a keeps the topic's first ledger, which the move closes, from being trimmed
    # once the replicator has read it (the namespace keeps nothing without one).
    admin.put(f"/admin/v2/{_rest(topic)}")
    admin.create_subscription(topic, "keep")
    with messaging.client(mb_lab.service_url("b")) as cb:
        remote = cb.subscribe(topic, "move-test", initial_position=pulsar.InitialPosition.Earliest)
        thread = threading.Thread(target=produce, name="move-producer")
        thread.start()
        try:
            _until(lambda: len(sent) >= 50, "the producer to send 50 messages")
            before = owner(admin, topic)
            other = next(b for b in region.brokers if b.service_url != before)
            moves = move_bundle(admin, topic, other)
            moved_at = len(sent)
            _until(lambda: len(sent) >= moved_at + 50, "the producer to send 50 more after the move")
            after = owner(admin, topic)
        finally:
            stop.set()
            thread.join(timeout=120)
        assert after == other.service_url, f"the topic went back to {before} after {moves} unload(s)"
        assert not failures, failures[:5]
        # Every message sent is stored in a and replicated to b, in order. Without broker deduplication
        # (the lab's brokers run without it, as Pulsar's default) the producer's resend of a message in flight
        # during the move may store it twice: a duplicate, never a loss or a reordering.
        with messaging.client(region.service_url) as ca:
            reader = ca.create_reader(topic, pulsar.MessageId.earliest)
            local: list[int] = []
            while not local or local[-1] != sent[-1]:
                local.append(int(reader.read_next(timeout_millis=30_000).data()))
            reader.close()
        replicated: list[int] = []
        # The replicator may send again what it sent just before the move (from its cursor in a): b can
        # hold more duplicates than a, after later messages, but never fewer messages.
        while not replicated or replicated[-1] != sent[-1]:
            msg = remote.receive(timeout_millis=30_000)
            replicated.append(int(msg.data()))
            remote.acknowledge(msg)
        remote.close()
    assert _first_seen(local) == sent
    assert _first_seen(replicated) == sent
    assert local == sorted(local)
    assert len(local) - len(sent) <= 5, "more duplicates than messages in flight at the move"


def _first_seen(values: list[int]) -> list[int]:
    return list(dict.fromkeys(values))


def move_bundle(admin: AdminClient, topic: str, to: topo.Broker, *, attempts: int = 5) -> int:
    """Unload ``topic``'s bundle with ``to`` as destination until ``to`` owns it; the unloads it took.

    The modular load manager keeps the requested destination on the broker that handled the request, and
    the assignment after the unload is made by the leader, so the request goes to the leader; a lookup
    that reaches the assignment first can still place the bundle elsewhere, hence the retries."""
    bundle = admin.get(f"/lookup/v2/topic/{_rest(topic)}/bundle")
    for attempt in range(1, attempts + 1):
        leader = AdminClient(str(admin.get("/admin/v2/brokers/leaderBroker")["serviceUrl"]))
        leader.put(
            f"/admin/v2/namespaces/{NAMESPACE}/{bundle}/unload",
            params={"destinationBroker": to.admin_url.removeprefix("http://")},
        )
        if owner(admin, topic) == to.service_url:
            return attempt
        time.sleep(1)
    raise AssertionError(f"{topic} did not move to {to.service_url} in {attempts} unloads")


def test_plugin_endpoints_answer_only_for_topics_their_broker_owns(mb_lab: Lab, unique: str) -> None:
    """What an agent that talks to one broker of a multi-broker region gets from the plugin: the origin index
    and the cursor writes of the broker it asks, never redirected to the owner."""
    region = mb_lab.topology.region("a")
    admin = mb_lab.admin("a")
    topics = [f"persistent://{NAMESPACE}/plugin-{unique}-{i}" for i in range(8)]
    for topic in topics:
        admin.put(f"/admin/v2/{_rest(topic)}")
        admin.create_subscription(topic, "plugin-test")
    with messaging.client(region.service_url) as c:
        for topic in topics:
            producer = c.create_producer(topic, batching_enabled=False)
            producer.send(b"x")
            producer.close()
    for topic in topics:
        own = _broker_of(region, owner(admin, topic))
        for broker in region.brokers:
            ask = AdminClient(broker.admin_url)
            runs = ask.get("/admin/v2/geosync/origins", params={"topic": topic})["runs"]
            item: dict[str, object] = {
                "topic": topic,
                "subscription": "plugin-test",
                "mark_delete": None,
                "positions": [],
            }
            (result,) = ask.plugin_acks([item])
            expected = "ok" if broker == own else "not_loaded"
            assert bool(runs) == (broker == own), (topic, broker, runs)
            assert result["status"] == expected, (topic, broker, result)


def test_a_stopped_region_stops_every_process_and_starts_again(mb_lab: Lab, unique: str) -> None:
    """``stop-region``/``start-region`` (and so ``down``) act on every process of a multi-broker region."""
    before = mb_lab.topology.region("b")
    marker = regions.region_marker(labs.region_process(mb_lab.dir, before))
    stopped = labs.stop_region(mb_lab.dir, "b").region("b")
    assert stopped.pids == ()
    assert all(b.pid is None for b in stopped.brokers)
    assert not any(regions.owns(pid, marker) for pid in before.pids)
    started = labs.start_region(mb_lab.dir, "b").region("b")
    assert len(started.pids) == 3 + BROKERS
    assert all(regions.owns(pid, marker) for pid in started.pids)
    assert [b.pid for b in started.brokers] == list(started.pids[3:])
    test_geo_replication_between_multi_broker_regions(mb_lab, unique)


def _until(condition: Callable[[], bool], what: str, *, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
