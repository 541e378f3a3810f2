"""Subscriptions and topics that change shape under a running agent (issue 17.3), on the shared lab.

Semantics (README, "Deletions and rewinds"): a subscription deleted in a region on purpose is not created
there again from other regions' claims; once someone creates it there again it is synced again. A deleted
topic is forgotten: its reader closes, its state and its metric series go.
"""

from __future__ import annotations

import random
import time

import requests

from geosync_lab import labs
from integration_tests.helpers import Lab, ack_some, consume_all, produce_batched, wait_for
from integration_tests.helpers import agent_state as _state


def _metrics(lab: Lab, region: str) -> str:
    return requests.get(labs.agent_metrics_url(lab.dir, region) + "/metrics", timeout=5).text


def _subscriptions(lab: Lab, region: str, topic: str) -> set[str]:
    return set(lab.admin(region).topic_stats(topic).get("subscriptions") or {})


def test_a_subscription_deleted_in_b_stays_deleted_until_created_there_again(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/deleted-sub-{unique}", f"deleted-{unique}"
    payloads = [f"m{i}" for i in range(60)]
    for region in ("a", "b"):
        lab.admin(region).create_subscription(topic, sub)
    produce_batched(lab.service_url("a"), topic, payloads, batch=1000)
    wait_for(
        lambda: sub in {s["subscription"] for s in _state(lab, "b")["synced"]}, what="b's agent to sync it"
    )
    lab.admin("b").delete(f"/admin/v2/{lab.admin('b').topic_path(topic)}/subscription/{sub}")
    label = f"{topic} / {sub}"
    wait_for(
        lambda: label in _state(lab, "b")["deleted_here"], timeout_s=30, what="b's agent to see the deletion"
    )

    claims_before = _state(lab, "b")["counters"].get("claims_received", 0)
    acked = ack_some(
        lab.service_url("a"), topic, sub, total=len(payloads), share=0.7, rng=random.Random(unique)
    )
    wait_for(
        lambda: _state(lab, "b")["counters"].get("claims_received", 0) > claims_before,
        timeout_s=30,
        what="b's agent to receive a's claims",
    )
    time.sleep(2)  # several rounds: the old agent created the subscription again within one
    assert sub not in _subscriptions(lab, "b", topic)
    assert label in _state(lab, "b")["deleted_here"]

    created_at = time.time()
    lab.admin("b").create_subscription(topic, sub)  # at the earliest message: synced again from here

    def applied_since_created() -> bool:
        # In step is not enough: right after discovery finds it again its cursor is unread, nothing is
        # planned, and nothing is behind yet. a's claims are not empty, so b must write them after this.
        state = _state(lab, "b")
        return label not in state["deleted_here"] and any(
            s["subscription"] == sub
            and s["mark_delete"] is not None
            and not s["behind_since"]
            and (s["last_applied_at"] or 0) >= created_at
            for s in state["synced"]
        )

    wait_for(
        applied_since_created,
        timeout_s=45,
        what="b's agent to sync the subscription created again",
    )
    got = consume_all(lab.service_url("b"), topic, sub)
    assert sorted(got) == sorted(set(payloads) - acked)


def test_a_deleted_topic_is_forgotten_with_its_series(lab: Lab, unique: str) -> None:
    # Topics are deleted where auto-creation is off, as Pulsar advises for geo-replicated topics: with it on,
    # any client that reconnects (GeoSync's readers, the other region's replicator) creates the topic again
    # within milliseconds of its deletion (seen on the lab).
    namespace = f"geo/deleted-{unique}"
    topic, sub = f"persistent://{namespace}/t", f"gone-{unique}"
    for region in ("a", "b"):
        admin = lab.admin(region)
        admin.create_namespace(namespace)
        admin.set_replication_clusters(namespace, ["a", "b"])
        admin.post(f"/admin/v2/namespaces/{namespace}/autoTopicCreation", {"allowAutoTopicCreation": False})
        admin.put(f"/admin/v2/{admin.topic_path(topic)}", None)
        admin.create_subscription(topic, sub)
    produce_batched(lab.service_url("a"), topic, [f"m{i}" for i in range(20)], batch=1000)
    ack_some(lab.service_url("a"), topic, sub, total=20, share=0.7, rng=random.Random(unique))
    wait_for(lambda: topic in _metrics(lab, "b"), timeout_s=30, what="b's agent to export the topic's series")
    forgotten = _state(lab, "b")["counters"].get("topics_forgotten", 0)
    for region in ("a", "b"):
        lab.admin(region).delete(f"/admin/v2/{lab.admin(region).topic_path(topic)}", params={"force": "true"})
    wait_for(
        lambda: _state(lab, "b")["counters"].get("topics_forgotten", 0) > forgotten,
        timeout_s=45,
        what="b's agent to forget the deleted topic",
    )
    assert topic not in _metrics(lab, "b")
    assert all(s["topic"] != topic for s in _state(lab, "b")["synced"])
    assert topic not in lab.admin("b").topics(namespace)  # and the agent did not bring it back
