"""Retention (README, "Retention"), on the shared lab.

A message replicated into a region before GeoSync creates its subscription there is held by no cursor there:
only the replicator's, which is done with it. Without retention Pulsar deletes its ledger as soon as it is
closed (a ledger rollover, a bundle unload, a broker restart), and the subscription created afterwards at the
earliest message does not have it: a failover there loses it. CI saw exactly that (a broker killed seconds
after the traffic began). The lab's namespaces keep messages 120 minutes; agents name the synced namespaces
that keep none, in their log, ``/state`` and ``geoctl status``.
"""

from __future__ import annotations

import time

import pulsar
import requests

from geosync_adapters import messaging
from geosync_adapters.adminhttp import AdminNotFound
from geosync_lab import labs
from integration_tests.helpers import Lab, assert_exact, consume_all, produce_batched, wait_for
from integration_tests.test_batch_failover import consume_and_ack, wait_applied


def _namespace_without_retention(lab: Lab, unique: str) -> str:
    namespace = f"geo/noret-{unique}"
    for region in ("a", "b"):
        lab.admin(region).create_namespace(namespace)
        lab.admin(region).set_allowed_clusters(namespace, ["a", "b"])
    for region in ("a", "b"):
        lab.admin(region).set_replication_clusters(namespace, ["a", "b"])
    return namespace


def _replicated(lab: Lab, topic: str, count: int) -> None:
    def held() -> bool:
        try:
            stats = lab.admin("b").topic_stats(topic)
        except AdminNotFound:
            return False  # replication has not created it in b yet
        return int(stats.get("msgInCounter") or 0) >= count

    wait_for(held, timeout_s=60, what=f"b to hold {count} messages of {topic}")


def test_without_retention_an_unload_deletes_what_no_subscription_holds_yet(lab: Lab, unique: str) -> None:
    """Pulsar's own behaviour (an unsynced topic: no agent acts): 30 messages replicated into b, then the
    topic unloaded in b before any subscription exists there. A subscription created then at the earliest
    message has none of them without retention, and all of them with the lab's retention."""
    backlog: dict[str, int | None] = {}
    for namespace in (_namespace_without_retention(lab, unique), "geo/ab"):
        topic = f"persistent://{namespace}/unsynced-trim-{unique}"
        produce_batched(lab.service_url("a"), topic, [f"m{i}" for i in range(30)], batch=10)
        _replicated(lab, topic, 30)
        lab.admin("b").unload_topic(topic)
        lab.admin("b").create_subscription(topic, "late")
        backlog[namespace] = lab.admin("b").backlog(topic, "late")
    assert backlog[f"geo/noret-{unique}"] == 0, backlog
    assert (backlog["geo/ab"] or 0) >= 3, backlog  # 3 entries of 10 messages (or 30 messages)


def test_agents_name_the_synced_namespaces_that_keep_no_acknowledged_message(lab: Lab, unique: str) -> None:
    namespace = _namespace_without_retention(lab, unique)

    def named(region: str) -> bool:
        url = labs.agent_metrics_url(lab.dir, region) + "/state"
        state = requests.get(url, timeout=5).json()
        return (
            namespace in state["namespaces_without_retention"]
            and "geo/ab" not in (state["namespaces_without_retention"])
        )

    wait_for(lambda: named("a") and named("b"), timeout_s=60, what=f"both agents to name {namespace}")
    lab.admin("b").set_retention(namespace, minutes=10, size_mb=100)
    wait_for(lambda: not named("b"), timeout_s=60, what=f"b's agent to drop {namespace} once it retains")


def test_with_retention_a_failover_is_exact_after_an_unload_before_the_subscription_existed_there(
    lab: Lab, unique: str
) -> None:
    """The CI failure's shape, made on purpose: the subscription starts with the traffic in a; b's topic is
    unloaded as soon as it holds the messages, before b's agent has created the subscription there."""
    topic, sub = f"persistent://geo/ab/early-unload-{unique}", f"early-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    payloads = [f"m{i}" for i in range(60)]
    produce_batched(lab.service_url("a"), topic, payloads)
    _replicated(lab, topic, len(payloads))
    existed = sub in (lab.admin("b").topic_stats(topic).get("subscriptions") or {})
    lab.admin("b").unload_topic(topic)
    started = time.time()
    acked, _ = consume_and_ack(lab, "a", topic, sub, total=len(payloads), share=0.9, seed=unique)
    wait_applied(lab, "b", topic, sub, after=started, nothing_pending=True)
    assert_exact(consume_all(lab.service_url("b"), topic, sub), set(payloads), acked, "b")
    print(f"b's subscription existed before the unload: {existed}")
