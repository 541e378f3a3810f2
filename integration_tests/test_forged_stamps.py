"""Forged source-position stamps where the interceptor's index is not used (issue 45, case 3), on the lab.

An application in b stamps its message with ``__MSG_PROP_REPL_SOURCE_POSITION`` naming the position of b's
next message. Its copy in a then carries two stamps (the application's first, the replicator's after it),
and clients see the first: a reader in a is shown the forged stamp. The resolver without the interceptor
(``header_resolver(..., plugin=False)``, what an agent without a usable index, geoctl and the audit do)
must name the copy as b's message it is, by the broker's own view, never as the later message the stamp
names; and an application in a that reuses b's producer name with such a stamp names nothing of b's.
"""

from __future__ import annotations

import pytest

from geosync_adapters import adminorigins, messaging
from geosync_core import resolving
from geosync_core.origins import Origin
from geosync_core.positions import Position
from integration_tests.helpers import Lab, produce, read_all

pytestmark = pytest.mark.lab


def test_a_forged_stamp_names_no_other_message_without_the_interceptors_index(lab: Lab, unique: str) -> None:
    topic = f"persistent://geo/ab/stamps-{unique}"
    ((_, first),) = produce(lab.service_url("b"), topic, [b"b-first"])
    predicted = Position(first.ledger, first.entry + 2)  # b's message after the forged one
    name = f"b-0-{int(unique[:6], 16)}"  # as a broker of b names producers: verified once seen
    with messaging.client(lab.service_url("b")) as c:
        producer = c.create_producer(topic, batching_enabled=False, producer_name=name)
        forged = producer.send(b"forged-in-b", properties={resolving.REPL_SOURCE_POSITION: str(predicted)})
        later = producer.send(b"b-later")
        producer.close()
    forged_at, later_at = messaging.position_of(forged), messaging.position_of(later)
    assert later_at == predicted, "the forger predicted the next position in b"
    # An application in a reuses the same producer name with the same forged stamp.
    with messaging.client(lab.service_url("a")) as c:
        producer = c.create_producer(topic, batching_enabled=False, producer_name=name)
        local_id = producer.send(b"forged-in-a", properties={resolving.REPL_SOURCE_POSITION: str(predicted)})
        producer.close()
    local_at = messaging.position_of(local_id)
    got = {m.data: m for m in read_all(lab.service_url("a"), topic, expect=4)}
    copy = got[b"forged-in-b"]
    assert copy.properties[resolving.REPL_SOURCE_POSITION] == str(predicted), "clients keep the first stamp"
    r = adminorigins.header_resolver("a", lab.admin("a"), plugin=False)
    named = {
        data: r.origin_of(
            topic,
            m.position,
            properties=m.properties,
            producer=m.producer,
            batched=m.batch_index >= 0,
        )
        for data, m in got.items()
    }
    assert named[b"b-later"] == Origin("b", later_at)
    assert named[b"forged-in-b"] == Origin("b", forged_at)
    assert named[b"forged-in-a"] == Origin("a", local_at)
    assert r.spoofed == 2


def test_the_brokers_view_of_a_copy_keeps_the_replicators_stamp(lab: Lab, unique: str) -> None:
    """What the resolver relies on: the admin API's entry headers name the region and the replicator's
    stamp (the entry's last property of that name), whatever stamp the application set."""
    topic = f"persistent://geo/ab/stamp-headers-{unique}"
    with messaging.client(lab.service_url("b")) as c:
        producer = c.create_producer(topic, batching_enabled=False)
        sent = producer.send(b"x", properties={resolving.REPL_SOURCE_POSITION: "1:2"})
        producer.close()
    [copy] = read_all(lab.service_url("a"), topic, expect=1)
    headers = lab.admin("a").entry_headers(topic, ledger=copy.position.ledger, entry=copy.position.entry)
    assert headers.replicated_from == "b"
    assert headers.origin("a", copy.position) == Origin("b", messaging.position_of(sent))
