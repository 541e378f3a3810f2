"""Sidecar agents, one per broker (``shard_by_ownership``, the Helm chart's sidecar mode), on real
multi-broker regions: Pulsar places topics in bundles by the CRC-32 of their names (what the sidecars
decide ownership by); each topic is synced by the sidecar of the broker that owns it and by no other, in
both regions; random acknowledgements of batched messages fail over exactly for topics on both brokers; a
bundle moved in both regions in the middle of the traffic is handed over to the new owners' sidecars and
still fails over exactly; a region has one policy-mirror leader among its sidecars; and with the broker
that owns a topic killed, the surviving broker's sidecar takes the topic over (last: it restarts region b).

Boots its own two-region lab of two brokers each (``test_multibroker``'s fixture), or reuses the one
``GEOSYNC_TEST_MULTIBROKER_LAB`` names; region agents left running there are stopped for the module.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
import requests

from geosync_adapters import messaging
from geosync_core import ownership
from geosync_lab import labs, regions
from integration_tests.helpers import Lab, assert_exact, consume_all, produce_batched, replicated, wait_for
from integration_tests.test_batch_failover import consume_and_ack, wait_applied
from integration_tests.test_multibroker import BROKERS, NAMESPACE, mb_lab, move_bundle, owner  # noqa: F401
from integration_tests.test_multibroker_agents import (
    acknowledge_most,
    spread_bundles,
    topics_on_each_broker,
    traffic_on_each_broker,
)

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def sidecars(mb_lab: Lab) -> Iterator[Lab]:  # noqa: F811
    names: list[str] = []
    for region in ("a", "b"):
        labs.stop_agent(mb_lab.dir, region)  # a region-wide agent would sync the same topics
        for i in range(BROKERS):
            labs.start_agent(mb_lab.dir, region, broker=i)
            names.append(labs.sidecar_name(region, i))
    try:
        for name in names:
            labs.wait_agent_ready(mb_lab.dir, name, timeout_s=120)
        yield mb_lab
    finally:
        for name in names:
            labs.stop_agent(mb_lab.dir, name)


def agent_state(lab: Lab, agent: str) -> dict[str, Any]:
    try:
        answer = requests.get(labs.agent_metrics_url(lab.dir, agent) + "/state", timeout=5)
        return dict(answer.json())
    except (requests.RequestException, ValueError):
        return {}


def sidecar_of(lab: Lab, region: str, topic: str) -> str:
    """The sidecar of the broker of ``region`` that owns ``topic`` now."""
    url = owner(lab.admin(region), topic)
    brokers = lab.topology.region(region).brokers
    return labs.sidecar_name(region, next(i for i, b in enumerate(brokers) if b.service_url == url))


def trackers(lab: Lab, region: str, topic: str) -> list[str]:
    """The sidecars of ``region`` that sync ``topic``."""
    return [
        name
        for name in labs.sidecar_names(lab.topology, region)
        if topic in agent_state(lab, name).get("tracked_topics", [])
    ]


def wait_synced_by_owner_only(lab: Lab, region: str, topic: str) -> str:
    """Until ``topic`` is synced in ``region`` by its owner's sidecar and no other; that sidecar."""
    seen: list[Any] = []

    def only_owner() -> bool:
        want, have = sidecar_of(lab, region, topic), trackers(lab, region, topic)
        seen[:] = [want, have]
        return have == [want]

    wait_for(only_owner, timeout_s=60, what=f"{topic} synced in {region} by its owner's sidecar only {seen}")
    return str(seen[0])


def test_pulsar_places_topics_by_the_crc32_of_their_names(mb_lab: Lab) -> None:  # noqa: F811
    """What the sidecars decide ownership by, checked against the broker's own answer (partitions too)."""
    admin = mb_lab.admin("a")
    names = [f"persistent://{NAMESPACE}/placed-{i}" for i in range(24)]
    names += [f"persistent://{NAMESPACE}/placed-p-partition-{i}" for i in range(8)]
    for topic in names:
        bundle = str(admin.get(f"/lookup/v2/topic/{topic.replace('persistent://', 'persistent/')}/bundle"))
        owned = ownership.Owned.from_owned_namespaces({f"{NAMESPACE}/{bundle}": {"is_active": True}})
        assert owned.owns(topic), (topic, bundle, hex(ownership.topic_hash(topic)))


def test_each_topic_is_synced_by_its_owners_sidecar_and_fails_over_exactly(
    sidecars: Lab, unique: str
) -> None:
    lab = sidecars
    sub = f"scsync-{unique}"
    sent = traffic_on_each_broker(lab, sub)
    # a's two topics are on different brokers, so on different sidecars.
    owners_in_a = {wait_synced_by_owner_only(lab, "a", topic) for topic in sent}
    assert owners_in_a == set(labs.sidecar_names(lab.topology, "a")), owners_in_a
    started = time.time()
    acked = acknowledge_most(lab, sent, sub)
    for topic in sent:
        applier = wait_synced_by_owner_only(lab, "b", topic)
        wait_applied(lab, applier, topic, sub, after=started)
    for topic, everything in sent.items():
        assert_exact(consume_all(lab.service_url("b"), topic, sub), everything, acked[topic], f"{topic} in b")


def test_one_policy_mirror_leader_per_region(sidecars: Lab) -> None:
    lab = sidecars
    for region in ("a", "b"):

        def leaders(region: str = region) -> list[str]:
            out = []
            for name in labs.sidecar_names(lab.topology, region):
                text = requests.get(labs.agent_metrics_url(lab.dir, name) + "/metrics", timeout=5).text
                if any(
                    line.startswith("geosync_policy_mirror_leader") and line.rstrip().endswith(" 1.0")
                    for line in text.splitlines()
                ):
                    out.append(name)
            return out

        wait_for(lambda: len(leaders()) == 1, timeout_s=30, what=f"one mirror leader of {region}'s sidecars")
        time.sleep(2)
        assert len(leaders()) == 1, leaders()


def test_bundles_moved_in_both_regions_mid_traffic_are_handed_over_exactly(
    sidecars: Lab, unique: str
) -> None:
    """The bundle moves in a (the sidecar that publishes a's acknowledgements changes) and in b (the one that
    applies them changes) between two halves of the traffic; b still delivers exactly what a left."""
    lab = sidecars
    topic = next(iter(topics_on_each_broker(lab, f"scmove-{unique}").values()))
    sub = f"scmove-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    payloads = [f"m{i}" for i in range(600)]
    produce_batched(lab.service_url("a"), topic, payloads[:300])
    before = {r: wait_synced_by_owner_only(lab, r, topic) for r in ("a", "b")}
    started = time.time()
    first, _ = consume_and_ack(lab, "a", topic, sub, total=300, share=0.9, seed=f"{unique}-1")
    moved: list[str] = []

    def move(region: str) -> None:
        brokers = lab.topology.region(region).brokers
        current = owner(lab.admin(region), topic)
        move_bundle(lab.admin(region), topic, next(b for b in brokers if b.service_url != current))
        moved.append(region)

    movers = [threading.Thread(target=move, args=(r,), name=f"unload-{r}") for r in ("a", "b")]
    for mover in movers:
        mover.start()
    produce_batched(lab.service_url("a"), topic, payloads[300:])
    for mover in movers:
        mover.join(timeout=120)
    assert sorted(moved) == ["a", "b"], f"the bundle did not move in every region: {moved}"
    second, _ = consume_and_ack(lab, "a", topic, sub, total=300, share=0.9, seed=f"{unique}-2")
    after = {r: wait_synced_by_owner_only(lab, r, topic) for r in ("a", "b")}
    assert all(after[r] != before[r] for r in after), (before, after)
    for old in before.values():
        counters = agent_state(lab, old).get("counters", {})
        assert counters.get("topics_handed_off", 0) >= 1, (old, counters)
    wait_applied(lab, after["b"], topic, sub, after=started)
    acked = first | second
    # An unload can make Pulsar store a message twice in b (test_multibroker shows it): copies allowed.
    assert_exact(consume_all(lab.service_url("b"), topic, sub), set(payloads), acked, "b", copies=True)


def cursors_and_claims(lab: Lab, agent: str, topic: str, sub: str) -> dict[str, Any]:
    """Both regions' cursor of ``sub`` (internal stats) and ledgers, and what ``agent`` shows of it."""
    seen: dict[str, Any] = {}
    for region in ("a", "b"):
        try:
            stats = lab.admin(region).internal_stats(topic)
        except Exception as e:  # evidence only: never the reason a test fails
            seen[region] = repr(e)[:200]
            continue
        cursor = (stats.get("cursors") or {}).get(sub) or {}
        seen[region] = {
            "markDelete": cursor.get("markDeletePosition"),
            "deleted": cursor.get("individuallyDeletedMessages"),
            "ledgers": [(x.get("ledgerId"), x.get("entries")) for x in stats.get("ledgers") or []],
        }
    state = agent_state(lab, agent)
    seen[agent] = [x for x in state.get("synced", []) if x["topic"] == topic and x["subscription"] == sub]
    return seen


def beside_the_control_topic(lab: Lab, prefix: str) -> str:
    """A new topic (created in a) whose bundle in b is on the broker that holds b's control topic."""
    holder = owner(lab.admin("b"), f"persistent://{NAMESPACE}/{labs.CONTROL_TOPIC}")
    for i in range(32):
        topic = f"persistent://{NAMESPACE}/{prefix}-{i}"
        if owner(lab.admin("b"), topic) == holder:
            lab.admin("a").create_topic(topic)
            return topic
    raise AssertionError(f"none of 32 topics landed on {holder} in b")


def test_the_surviving_brokers_sidecar_takes_over_from_a_killed_one(sidecars: Lab, unique: str) -> None:
    """The broker of b owning a topic and b's control topic is killed: once its bundles move (its metadata
    session expires), the other broker's sidecar syncs the topic, its reader of the control topic (which the
    client would retry for up to a minute more) is opened again, and a failover to b is exact. Last: it
    restarts region b."""
    lab = sidecars
    topic = beside_the_control_topic(lab, f"sckill-{unique}")
    sub = f"sckill-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    produce_batched(lab.service_url("a"), topic, [f"w{i}" for i in range(50)])
    victim_name = wait_synced_by_owner_only(lab, "b", topic)
    region = lab.topology.region("b")
    index = labs.sidecar_names(lab.topology, "b").index(victim_name)
    victim = region.brokers[index]
    survivor = labs.sidecar_name("b", 1 - index)
    marker = regions.region_marker(labs.region_process(lab.dir, region))
    assert victim.pid is not None
    regions.signal_region(victim.pid, marker, signal.SIGKILL)
    try:
        killed_at = time.monotonic()
        payloads = [f"w{i}" for i in range(50)] + [f"k{i}" for i in range(300)]
        produce_batched(lab.service_url("a"), topic, payloads[50:])
        started = time.time()
        acked, _ = consume_and_ack(lab, "a", topic, sub, total=len(payloads), share=0.9, seed=unique)
        survivor_host = urllib.parse.urlsplit(region.brokers[1 - index].admin_url).netloc

        def taken_over() -> bool:
            state = agent_state(lab, survivor)
            return topic in state.get("tracked_topics", []) and state["ownership"]["broker"] == survivor_host

        wait_for(taken_over, timeout_s=150, what=f"{survivor} to take {topic} over")
        print(f"broker killed: {survivor} took the topic over {time.monotonic() - killed_at:.1f} s after it")
        replicated(lab, "a", "b", [topic])
        try:
            wait_applied(lab, survivor, topic, sub, after=started)
            applied_in = time.monotonic() - killed_at
            print(f"broker killed: {survivor} applied a's acknowledgements {applied_in:.1f} s after it")
        except AssertionError as e:
            state = agent_state(lab, survivor)
            entry = [x for x in state.get("synced", []) if x["topic"] == topic]
            raise AssertionError(f"{e}: {survivor} shows {entry}; counters {state.get('counters')}") from e
        # What the cursors and the survivor held before the failover consumes. Two losses seen in CI: a batch
        # read in part taken for its size (session 15; the 3 of 2045f7c, session 13, had its signature), and
        # the victim's broker killed between the admin API's create-subscription (cursor persisted at the
        # latest entry) and its reset to the earliest
        # (session 16: b's cursor came back at 27:2 on the survivor; agents now subscribe at the earliest).
        # Third (session 17): killed before b's subscription existed, so on the survivor the topic had only
        # the replicator's cursor, done with ledger 28, and Pulsar deleted the ledger as it loaded the topic;
        # lab namespaces now keep messages (retention; test_retention.py makes that case on purpose).
        evidence = cursors_and_claims(lab, survivor, topic, sub)
        try:
            assert_exact(consume_all(lab.service_url("b"), topic, sub), set(payloads), acked, "b")
        except AssertionError as e:
            raise AssertionError(f"{e}; before the failover: {evidence}") from e
    finally:
        labs.stop_region(lab.dir, "b", kill=True)
        labs.start_region(lab.dir, "b")
        spread_bundles(lab)
