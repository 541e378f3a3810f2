"""One agent per region on multi-broker regions (the deployment mode), on real Pulsar: with topics on both
brokers of a, a Shared consumer acknowledges about 90 % of batched messages at random, and a failover to b
then delivers exactly what a left unacknowledged (nothing lost, nothing twice) for the topics of BOTH
brokers; the same while a bundle unload moves a topic to the other broker in the middle of the traffic,
and while the broker the agents' ``admin_url`` names is killed (the last test; it restarts region a). One
test prints the sync lag per broker (a's last acknowledgement to b's backlog 0); ``bench/multibroker_lag.py``
measures it before and after routing for BENCHMARKS.md.

Shares ``test_multibroker``'s lab (booted per module without agents, or ``GEOSYNC_TEST_MULTIBROKER_LAB``);
the module starts both agents with the lab's agent configuration and stops them at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError, RetryPolicy
from geosync_lab import labs, regions
from integration_tests.helpers import (
    Lab,
    agent_state,
    assert_exact,
    consume_all,
    produce_batched,
    produce_in_both,
    wait_for,
)
from integration_tests.test_batch_failover import consume_and_ack, synced_entry, wait_applied
from integration_tests.test_multibroker import NAMESPACE, mb_lab, move_bundle, owner  # noqa: F401

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def agents(mb_lab: Lab) -> Iterator[Lab]:  # noqa: F811
    for name in ("a", "b"):
        labs.start_agent(mb_lab.dir, name)
    try:
        for name in ("a", "b"):
            labs.wait_agent_ready(mb_lab.dir, name, timeout_s=120)
        yield mb_lab
    finally:
        for name in ("a", "b"):
            labs.stop_agent(mb_lab.dir, name)


def topics_on_each_broker(lab: Lab, prefix: str) -> dict[str, str]:
    """One new topic per broker of a: broker service URL -> topic (created, owned by that broker)."""
    admin = lab.admin("a")
    found: dict[str, str] = {}
    for i in range(16):
        topic = f"persistent://{NAMESPACE}/{prefix}-{i}"
        admin.put(f"/admin/v2/{topic.replace('persistent://', 'persistent/')}")
        found.setdefault(owner(admin, topic), topic)
        if len(found) == len(lab.topology.region("a").brokers):
            return found
    raise AssertionError(f"16 topics did not spread over a's brokers: {found}")


def fail_over_exactly(
    lab: Lab,
    topic: str,
    sub: str,
    everything: set[str],
    acked: set[str],
    *,
    copies: bool = False,
    where: dict[str, Any] | None = None,
) -> None:
    """b delivers every message a's consumers left unacknowledged and none they acknowledged (``copies``:
    see ``assert_exact``; test_multibroker shows Pulsar storing such copies), except the acknowledged
    messages a's broker gives again itself, which b may give or not: Pulsar 4.0.8 forgets the batch indexes
    of a cursor it kept in the metadata store when its topic is unloaded (apache/pulsar#26474,
    ``docs/limits.md``). What the agent in a claimed before the unload reached b (b does not give it); what
    it had not claimed yet is gone from a's cursor, so GeoSync, which claims only what the cursor holds, never
    claims it (b gives it). On failure the message carries both cursors and both agents' view of the
    subscription, as they were before b's consumer came (a CI run cannot be replayed)."""
    evidence = {
        name: {"cursor": cursor_stats(lab, name, topic, sub), "agent": synced_entry(lab, name, topic, sub)}
        for name in ("a", "b")
    }
    forgotten = acked & set(consume_all(lab.service_url("a"), topic, sub, acknowledge=False))
    if forgotten:
        print(f"{topic}: a's broker gives again {len(forgotten)} messages its consumers acknowledged")
    got = consume_all(lab.service_url("b"), topic, sub)
    if forgotten:
        print(f"{topic}: b gives {len(forgotten & set(got))} of them, not {len(forgotten - set(got))}")
    try:
        given = [m for m in got if m not in forgotten]
        assert_exact(given, everything - forgotten, acked - forgotten, f"{topic} in b", copies=copies)
    except AssertionError as failed:
        again = {m: (where or {}).get(m) for m in sorted(set(got) & (acked - forgotten))[:10]}
        raise AssertionError(
            f"{failed}\nin a at {again}; {len(forgotten)} acknowledged in a that a's broker gives again; "
            f"before b's consumer came: {evidence}"
        ) from None


def cursor_stats(lab: Lab, region: str, topic: str, sub: str) -> Any:
    """``sub``'s cursor in ``region``'s internal stats, from the first broker that answers at once (one may be
    down on purpose); the errors where none does. For a failure's message only."""
    errors = []
    for broker in lab.topology.region(region).brokers:
        try:
            stats = AdminClient(broker.admin_url, retry=RetryPolicy(attempts=1)).internal_stats(topic)
        except AdminError as e:
            errors.append(str(e)[:200])
            continue
        return stats.get("cursors", {}).get(sub)
    return errors


def traffic_on_each_broker(lab: Lab, name: str) -> dict[str, set[str]]:
    """One topic per broker of a (``topics_on_each_broker``), a Shared subscription ``name`` on each in a,
    then 300 batched messages produced in each region: topic -> every message."""
    sent: dict[str, set[str]] = {}
    for n, topic in enumerate(topics_on_each_broker(lab, name).values()):
        with messaging.client(lab.service_url("a")) as c:
            c.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared).close()
        sent[topic] = produce_in_both(lab, topic, 300, tag=f"{n}-")
    return sent


def acknowledge_most(lab: Lab, sent: dict[str, set[str]], sub: str) -> dict[str, set[str]]:
    """A consumer in a acknowledges about 90 % of each topic's messages at random: topic -> acknowledged."""
    acked: dict[str, set[str]] = {}
    for topic, everything in sent.items():
        acked[topic], _ = consume_and_ack(lab, "a", topic, sub, total=len(everything), share=0.9, seed=topic)
        assert 0 < len(acked[topic]) < len(everything)
    return acked


def test_random_batched_acks_fail_over_exactly_for_topics_on_both_brokers(agents: Lab, unique: str) -> None:
    lab = agents
    sub = f"mbsync-{unique}"
    sent = traffic_on_each_broker(lab, sub)
    started = time.time()
    acked = acknowledge_most(lab, sent, sub)
    for topic in sent:
        wait_applied(lab, "b", topic, sub, after=started)
    for topic, everything in sent.items():
        fail_over_exactly(lab, topic, sub, everything, acked[topic])


def test_a_bundle_unload_mid_traffic_still_fails_over_exactly(agents: Lab, unique: str) -> None:
    lab = agents
    region = lab.topology.region("a")
    admin = lab.admin("a")
    topic = next(iter(topics_on_each_broker(lab, f"mbmove-{unique}").values()))
    sub = f"mbmove-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    payloads = [f"m{i}" for i in range(600)]
    started = time.time()
    acked: set[str] = set()
    moved: list[int] = []

    def unload_mid_way() -> None:
        before = owner(admin, topic)
        other = next(b for b in region.brokers if b.service_url != before)
        moved.append(move_bundle(admin, topic, other))

    # The first half is produced and partly acknowledged, the bundle moves, then the second half.
    produce_batched(lab.service_url("a"), topic, payloads[:300])
    first, where = consume_and_ack(lab, "a", topic, sub, total=300, share=0.9, seed=f"{unique}-1")
    mover = threading.Thread(target=unload_mid_way, name="unload")
    mover.start()
    produce_batched(lab.service_url("a"), topic, payloads[300:])
    mover.join(timeout=120)
    assert moved, "the bundle did not move"
    second, where_after = consume_and_ack(lab, "a", topic, sub, total=300, share=0.9, seed=f"{unique}-2")
    acked = first | second
    wait_applied(lab, "b", topic, sub, after=started)
    fail_over_exactly(lab, topic, sub, set(payloads), acked, copies=True, where={**where, **where_after})


def test_sync_lag_is_alike_on_both_brokers(agents: Lab, unique: str) -> None:
    """Prints, per broker of a, the seconds from a's last acknowledgement to b's backlog 0 (all acked)."""
    lab = agents
    by_broker = topics_on_each_broker(lab, f"mblag-{unique}")
    sub = f"mblag-{unique}"
    lags: dict[str, list[float]] = {url: [] for url in by_broker}
    for round_ in range(3):
        for url, topic in by_broker.items():
            lags[url].append(sync_lag(lab, topic, sub, n=100, tag=f"{round_}"))
    for url, values in lags.items():
        print(f"sync lag, topic on {url}: " + ", ".join(f"{v:.2f}" for v in values) + " s")
    worst = max(max(v) for v in lags.values())
    assert worst < 5.0, lags


def sync_lag(lab: Lab, topic: str, sub: str, *, n: int, tag: str) -> float:
    remote = lab.admin("b")
    remote.create_subscription(topic, sub)  # at the earliest message; the agents would create it later
    with messaging.client(lab.service_url("a")) as c:
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
        produce_batched(lab.service_url("a"), topic, [f"{tag}-{i}" for i in range(n)])
        messages: list[Any] = [consumer.receive(timeout_millis=30_000) for _ in range(n)]
        # Replicated to b before a acknowledges anything: the same backlog (in entries) on both sides.
        local = lab.admin("a")
        wait_for(
            lambda: remote.backlog(topic, sub) == local.backlog(topic, sub),
            timeout_s=60,
            what=f"{sub}'s backlog in b to be a's",
        )
        for msg in messages:
            consumer.acknowledge(msg)
        acked_at = time.monotonic()
        consumer.close()
    wait_for(lambda: remote.backlog(topic, sub) == 0, timeout_s=60, what=f"b's backlog of {topic} to be 0")
    return time.monotonic() - acked_at


SYNC_SETTING = "configurationMetadataSyncEventTopic"


def test_pulsars_own_pip136_synchronizer_runs_beside_the_agents_and_its_subscription_is_left_alone(
    agents: Lab, unique: str
) -> None:
    """Pulsar's synchronizer (it runs only where the configuration store is separate: these regions) consumes
    its sync topic as ``metadata-syncer`` in every region. On a topic of a synced namespace, the agents track
    an application subscription there but never the synchronizer's (claims from a region whose synchronizer
    went further would skip events in the other), and Pulsar's own sync still works."""
    lab = agents
    topic = f"persistent://{NAMESPACE}/{unique}-config-sync"
    app = f"app-{unique}"  # made after the synchronizer's, and acknowledged by no one: only a discovery
    admins = {r: lab.admin(r) for r in ("a", "b")}  # pass that lists it lists the synchronizer's too
    tenant = f"bench-{unique}"  # the lab's agents do not mirror bench-* tenants: only Pulsar copies it
    try:
        for admin in admins.values():
            admin.set_dynamic_configuration(SYNC_SETTING, topic)

        def consumed_everywhere() -> bool:
            for admin in admins.values():
                with contextlib.suppress(AdminError):
                    subs = admin.topic_stats(topic).get("subscriptions", {})
                    if subs.get("metadata-syncer", {}).get("consumers"):
                        continue
                return False
            return True

        wait_for(consumed_everywhere, timeout_s=60, what="Pulsar's synchronizer consuming in a and b")
        for region in ("a", "b"):
            with messaging.client(lab.service_url(region)) as c:
                c.subscribe(topic, app, consumer_type=pulsar.ConsumerType.Shared).close()
        admins["a"].upsert_tenant(tenant, allowed_clusters=["a", "b"])
        wait_for(lambda: tenant in admins["b"].tenants(), timeout_s=30, what=f"Pulsar copying {tenant} to b")

        def tracked(region: str) -> set[str]:
            return {s["subscription"] for s in agent_state(lab, region)["synced"] if s["topic"] == topic}

        wait_for(
            lambda: all(app in tracked(r) for r in ("a", "b")),
            timeout_s=60,
            what=lambda: f"both agents tracking {app} on {topic}: {tracked('a')} / {tracked('b')}",
        )
        for region in ("a", "b"):
            assert "metadata-syncer" not in tracked(region), region
            assert "metadata-syncer" in admins[region].topic_stats(topic)["subscriptions"], region
    finally:
        for admin in admins.values():
            with contextlib.suppress(AdminError):
                admin.set_dynamic_configuration(SYNC_SETTING, None)
        for admin in admins.values():
            with contextlib.suppress(AdminError):
                admin.delete_tenant(tenant)


def test_with_the_first_broker_killed_the_agent_fails_over_and_stays_exact(agents: Lab, unique: str) -> None:
    """The agents' ``admin_url`` is broker 1's. With broker 1 of a killed, a's agent keeps discovering,
    reading broker 2's feed and publishing (its admin calls go to broker 2), and a failover to b of a topic
    on broker 2 is exact. Last in the module: it restarts region a afterwards."""
    lab = agents
    region = lab.topology.region("a")
    first, second = region.brokers
    topic = topics_on_each_broker(lab, f"mbdown-{unique}")[second.service_url]
    sub = f"mbdown-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    marker = regions.region_marker(labs.region_process(lab.dir, region))
    assert first.pid is not None
    regions.signal_region(first.pid, marker, signal.SIGKILL)
    try:
        killed_at = time.monotonic()
        payloads = [f"d{i}" for i in range(300)]
        produce_batched(second.service_url, topic, payloads)
        started = time.time()
        acked, _ = consume_and_ack(lab, "a", topic, sub, total=len(payloads), share=0.9, seed=unique)

        def applied() -> bool:
            entry = synced_entry(lab, "b", topic, sub)
            return entry is not None and (entry.get("last_applied_at") or 0) >= started

        # a's control topic may have been on broker 1: it moves once broker 1's metadata session expires.
        waited = wait_for(applied, timeout_s=150, what="b to apply what a acknowledged with broker 1 down")
        since_kill = time.monotonic() - killed_at
        print(f"broker 1 killed: b applied a's acks {since_kill:.1f} s after it ({waited:.1f} s after a's)")
        wait_applied(lab, "b", topic, sub, after=started)
        with urllib.request.urlopen(labs.agent_metrics_url(lab.dir, "a") + "/readyz", timeout=5) as answer:
            assert answer.status == 200
        fail_over_exactly(lab, topic, sub, set(payloads), acked)
    finally:
        labs.stop_region(lab.dir, "a", kill=True)
        labs.start_region(lab.dir, "a")
        spread_bundles(lab)


def spread_bundles(lab: Lab) -> None:
    """Every other bundle of the namespace back to a's first broker: while it was dead they all moved to the
    second, and they stay there after its restart (the other tests want topics on both)."""
    admin = lab.admin("a")
    edges = admin.get(f"/admin/v2/namespaces/{NAMESPACE}/bundles")["boundaries"]
    first = lab.topology.region("a").brokers[0].admin_url.removeprefix("http://")
    leader = AdminClient(str(admin.get("/admin/v2/brokers/leaderBroker")["serviceUrl"]))
    bundles = [f"{low}_{high}" for low, high in itertools.pairwise(edges)]
    for bundle in bundles[::2]:
        with contextlib.suppress(AdminError):  # a bundle nobody owns has nothing to move
            leader.put(
                f"/admin/v2/namespaces/{NAMESPACE}/{bundle}/unload", params={"destinationBroker": first}
            )
