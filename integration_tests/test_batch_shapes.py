"""Batched failovers of more shapes (issue 11.7), with the agents' default cursor path (the broker plugin).

Kept apart from ``test_batch_failover``: its module-scoped ``cursor_path`` fixture runs a phase with the
agents on the admin-API path, where batch indexes can be neither read nor written, and tests that do not ask
for the fixture may run in that phase.
"""

from __future__ import annotations

import time

import pulsar

from geosync_adapters import messaging
from integration_tests.helpers import Lab, consume_all, produce_batched
from integration_tests.test_batch_failover import consume_and_ack, wait_applied


def test_batched_three_regions_with_colliding_ledgers_fail_over_exactly(lab: Lab, unique: str) -> None:
    """Batched producers in a, b and c (ledger ids collide between regions), c acknowledges about half at
    random with batch-index acknowledgements; a consumer failing over to a, and then one to b, gets exactly
    the rest."""
    topic, sub = f"persistent://geo/abc/batched3-{unique}", f"batched3-{unique}"
    with messaging.client(lab.service_url("c")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    everything: set[str] = set()
    for region in ("a", "b", "c"):
        sent = [f"{region}{i}" for i in range(120)]
        produce_batched(lab.service_url(region), topic, sent)
        everything |= set(sent)
    started = time.time()
    acked, _ = consume_and_ack(lab, "c", topic, sub, total=len(everything), share=0.5, seed=unique)
    for region in ("a", "b"):
        wait_applied(lab, region, topic, sub, after=started)
    expected = sorted(everything - acked)
    assert sorted(consume_all(lab.service_url("a"), topic, sub)) == expected
    assert sorted(consume_all(lab.service_url("b"), topic, sub)) == expected


def test_batched_exclusive_cumulative_ack_inside_a_batch_fails_over_exactly(lab: Lab, unique: str) -> None:
    """A cumulative acknowledgement that ends inside a batch: with batch-index acknowledgements the broker
    keeps the rest of that batch unacknowledged, and b must too."""
    topic, sub = f"persistent://geo/ab/batched-excl-{unique}", f"batched-excl-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Exclusive).close()
    payloads = [f"m{i}" for i in range(100)]
    produce_batched(lab.service_url("a"), topic, payloads, batch=16)  # 59 falls inside the 4th batch
    started = time.time()
    with messaging.client(lab.service_url("a")) as c:
        consumer = c.subscribe(
            topic, sub, consumer_type=pulsar.ConsumerType.Exclusive, batch_index_ack_enabled=True
        )
        received = [consumer.receive(timeout_millis=30000) for _ in range(60)]
        consumer.acknowledge_cumulative(received[59])
        assert received[59].message_id().batch_index() > 0, "the ack does not end inside a batch"
        time.sleep(0.5)
        consumer.close()
    wait_applied(lab, "b", topic, sub, after=started)
    got = consume_all(lab.service_url("b"), topic, sub, consumer_type=pulsar.ConsumerType.Exclusive)
    assert sorted(got) == sorted(payloads[60:])
