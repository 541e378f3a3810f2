"""The agent's own short-lived consumers never create a subscription at Latest (issue 45, case 1).

Subscribing creates a missing subscription at the consumer's initial position, and the client's default is
Latest: a subscription deleted in a region and brought back so has every message acknowledged that nobody
there consumed, and that jump travelled to the other regions as acknowledgements. A fake client records
what the adapter asks of Pulsar; the lab test (``integration_tests/test_deleted_subscription.py``) runs the
real thing."""

from __future__ import annotations

from typing import Any

import pulsar

from geosync_adapters import messaging
from geosync_core.positions import Position


class Recorder:
    def __init__(self) -> None:
        self.subscribed: list[dict[str, Any]] = []
        self.acked: list[Any] = []
        self.closed = 0

    def subscribe(self, topic: str, subscription: str, **options: Any) -> Recorder:
        self.subscribed.append({"topic": topic, "subscription": subscription, **options})
        return self

    def acknowledge(self, message_id: Any) -> None:
        self.acked.append(message_id)

    def close(self) -> None:
        self.closed += 1


def adapter() -> tuple[messaging.Messaging, Recorder]:
    m = messaging.Messaging.__new__(messaging.Messaging)
    fake = Recorder()
    m._client = fake
    return m, fake


def test_a_shadow_consumer_subscribes_at_the_earliest_message() -> None:
    m, fake = adapter()
    m.shadow_ack("persistent://t/n/x", "orders", partition=-1, positions=[Position(3, 1)], name="geosync-s")
    [options] = fake.subscribed
    assert options["initial_position"] == pulsar.InitialPosition.Earliest
    assert options["receiver_queue_size"] == 0
    assert len(fake.acked) == 1
    assert fake.closed == 1


def test_creating_a_subscription_subscribes_at_the_earliest_message() -> None:
    m, fake = adapter()
    m.subscribe_at_earliest("persistent://t/n/x", "orders", name="geosync-c")
    assert [o["initial_position"] for o in fake.subscribed] == [pulsar.InitialPosition.Earliest]
