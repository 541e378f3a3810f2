"""A subscription deleted in a passive region while the active one consumes with holes (issue 45, case 1).

Region a consumes with holes; b's copy of the subscription is deleted (by an operator, or by Pulsar's
inactive-subscription expiry), and a's consumers then acknowledge more, so b's agent has holes to apply to a
subscription that no longer exists. Before the fix, b asked ``skipByMessageIds``, took its 404 for "no such
API" and fell back to a shadow consumer, which subscribed at the client's default initial position
(Latest) and so re-created b's subscription with every message acknowledged; b's agent then claimed that
jump, and a acknowledged its whole unconsumed backlog. Whatever b's agent does now, no message a's
consumers did not acknowledge may be acknowledged in a, nor in b's subscription should it exist again.

Both cursor paths run (the broker plugin's feed and writes, and the admin API alone, where the shadow
consumer applies holes). On the lab this order of events did not reach the loss before the fix either (the
agent's rule for a subscription deleted here held, as in the issue's own lab check): it guards the
outcome; ``tests/agent/test_effects.py`` and ``tests/adapters/test_messaging_consumers.py`` reach the path."""

from __future__ import annotations

import random
import time

import pulsar
import pytest

from integration_tests.helpers import Lab, consume_all, produce, wait_for
from integration_tests.test_exact_sync import (  # cursor_path: the same two cursor paths, as a fixture
    backlog,
    consume_some,
    cursor_path,  # noqa: F401
    subscribe_first,
    wait_backlog,
)

pytestmark = pytest.mark.lab

SETTLE_S = 20.0
"""How long a's and b's agents get, after b's copy is gone and a acknowledged more, to do something wrong."""


def delete_subscription(lab: Lab, region: str, topic: str, sub: str) -> None:
    admin = lab.admin(region)
    admin.delete(f"/admin/v2/{admin.topic_path(topic)}/subscription/{sub}", params={"force": "true"})


def test_a_subscription_deleted_in_the_passive_region_loses_nothing_in_either_region(
    lab: Lab,
    unique: str,
    cursor_path: str,  # noqa: F811 (the fixture imported above)
) -> None:
    topic, sub = f"persistent://geo/ab/deleted-{unique}-{cursor_path}", f"deleted-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    payloads = [f"m{i}" for i in range(80)]
    produce(lab.service_url("a"), topic, [p.encode() for p in payloads])
    rng = random.Random(unique)
    # a: ~60% of the first 40 acknowledged (holes), the rest not yet
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=80,
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda i: i < 40 and rng.random() < 0.6,
    )
    unacked = len(payloads) - len(acked)
    wait_backlog(lab, "b", topic, sub, unacked)  # b synced
    delete_subscription(lab, "b", topic, sub)
    # a acknowledges more at once, leaving holes: claims for b's agent to apply to a subscription it lacks
    more = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=unacked,
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda i: i % 3 == 0,
    )
    acked |= more
    expected = sorted(set(payloads) - acked)
    wait_backlog(lab, "a", topic, sub, len(expected))
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        in_a = backlog(lab, "a", topic, sub)
        assert in_a == len(expected), (
            f"a's subscription lost messages its consumers never acknowledged: {in_a}"
        )
        in_b = backlog(lab, "b", topic, sub)
        assert in_b is None or in_b >= len(expected), (
            f"b's subscription came back with only {in_b} of {len(expected)} unacknowledged messages"
        )
        time.sleep(1.0)
    # b, if its subscription exists again, holds every message a did not acknowledge (read without
    # acknowledging: an acknowledgement in b would travel to a).
    if backlog(lab, "b", topic, sub) is not None:
        wait_for(
            lambda: (backlog(lab, "b", topic, sub) or 0) >= len(expected),
            what="b's re-created subscription to hold every unacknowledged message",
        )
    assert sorted(consume_all(lab.service_url("a"), topic, sub)) == expected
