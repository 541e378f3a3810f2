"""The broker plugin's acknowledgement feed carries exactly what consumers acknowledged (``acked``), on a real
region: individual acknowledgements with holes, a cumulative one, batch indexes; and nothing that admin
operations moved (skip, clear-backlog, reset-cursor, expiry, a subscription created at Latest).

The lab's agents read the feed and confirm what it hands over, so this needs a lab without agents: set
``GEOSYNC_ACKED_LAB=DIR`` to one started with ``geoctl lab up --dir DIR --regions a,b --no-agents``, or the
module boots such a lab itself (and stops it). The brokers must run with
``acknowledgmentAtBatchIndexLevelEnabled=true`` (the lab's default).
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
import requests

from geosync_adapters import messaging
from geosync_core import pluginapi
from geosync_core.positions import Position
from geosync_core.rangesets import Range, RangeSet
from geosync_lab import labs
from integration_tests.helpers import Lab, given_or_booted, produce

pytestmark = pytest.mark.lab

NS = "geo/ab"


def _reusable(path: pathlib.Path) -> bool:
    try:
        state = labs.status(path)
    except Exception:
        return False
    return bool(state["healthy"]) and not labs.load(path).agents


@pytest.fixture(scope="module")
def ack_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def boot(lab_dir: pathlib.Path) -> None:
        labs.up(lab_dir, ["a", "b"], agents=False)

    with given_or_booted("GEOSYNC_ACKED_LAB", _reusable, boot, tmp_path_factory.mktemp("acklab")) as handle:
        status = requests.get(f"{handle.topology.region('a').admin_url}/admin/v2/geosync/status", timeout=10)
        if status.status_code != 200 or "acked_version" not in status.json().get("ack_feed", {}):
            pytest.fail(f"region a's plugin records no acknowledged positions: {status.text[:300]}")
        yield handle


def feed(lab: Lab, since: int = 0, epoch: str | None = None) -> pluginapi.Feed:
    params: dict[str, Any] = {"since": since}
    if epoch is not None:
        params["epoch"] = epoch
    url = f"{lab.topology.region('a').admin_url}/admin/v2/geosync/cursors"
    response = requests.get(url, params=params, timeout=10)
    response.raise_for_status()
    return pluginapi.Feed.from_wire(response.json())


def acked_of(answer: pluginapi.Feed, topic: str) -> dict[str, pluginapi.AckedSet]:
    assert answer.acked is not None, "the plugin answered without 'acked' (an older plugin)"
    return {a.subscription: a for a in answer.acked if a.topic == topic}


def admin_post(lab: Lab, topic: str, path: str, body: Any = None) -> None:
    name = topic.removeprefix("persistent://")
    sub_path = f"/admin/v2/persistent/{name}/{path}"
    url = f"{lab.topology.region('a').admin_url}{sub_path}"
    response = requests.post(url, json=body, timeout=30)
    assert response.status_code in (200, 204), f"{sub_path}: {response.status_code} {response.text[:200]}"


def cursor_of(lab: Lab, topic: str, sub: str) -> dict[str, Any]:
    stats = lab.admin("a").internal_stats(topic)
    return dict(stats["cursors"][sub])


def runs(positions: list[Position]) -> RangeSet:
    return RangeSet.of(Range.single(p) for p in positions)


def produce_batch(service_url: str, topic: str, n: int) -> Position:
    """One batched entry of ``n`` messages; its position."""
    with messaging.client(service_url) as c:
        producer = c.create_producer(
            topic, batching_enabled=True, batching_max_messages=n, batching_max_publish_delay_ms=5_000
        )
        ids: list[Any] = []
        for i in range(n):
            producer.send_async(f"b{i}".encode(), lambda _res, mid: ids.append(mid))
        producer.flush()
        producer.close()
    assert len(ids) == n
    entries = {(m.ledger_id(), m.entry_id()) for m in ids}
    assert len(entries) == 1, f"the batch was split over entries {entries}"
    ((ledger, entry),) = entries
    return Position(ledger, entry)


def test_the_feed_holds_what_consumers_acknowledged_and_nothing_admin_operations_moved(
    ack_lab: Lab, unique: str
) -> None:
    topic = f"persistent://{NS}/acked-{unique}"
    admin = ack_lab.admin("a")
    url = ack_lab.service_url("a")
    for sub in ("holes", "cum", "batch", "expired"):
        admin.create_subscription(topic, sub)
    positions = [p for _, p in produce(url, topic, [f"m{i}".encode() for i in range(20)])]
    batch_at = produce_batch(url, topic, 10)
    # Created at Latest by a consumer (the jump issue 45 is about): no consumer acknowledged anything there.
    with messaging.client(url) as c:
        c.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Latest).close()
    before = feed(ack_lab)

    holes_acked = [positions[i] for i in (0, 1, 2, 3, 4, 6, 8, 9)]
    with messaging.client(url) as c:
        # Individual acknowledgements with holes (5 and 7, and everything from 10 on).
        shared = c.subscribe(topic, "holes", consumer_type=pulsar.ConsumerType.Shared)
        got = [shared.receive(10_000) for _ in range(20)]
        by_position = {messaging.position_of(m.message_id()): m for m in got}
        for p in holes_acked:
            shared.acknowledge(by_position[p])
        # Cumulative: up to message 7, from an exclusive consumer.
        exclusive = c.subscribe(topic, "cum", consumer_type=pulsar.ConsumerType.Exclusive)
        last = None
        for _ in range(8):
            last = exclusive.receive(10_000)
        assert last is not None
        exclusive.acknowledge_cumulative(last)
        # Batch indexes 0, 1, 2 and 5 of the batched entry.
        batcher = c.subscribe(
            topic, "batch", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        received = [batcher.receive(10_000) for _ in range(30)]
        in_batch = {
            m.message_id().batch_index(): m for m in received if m.message_id().entry_id() == batch_at.entry
        }
        assert sorted(in_batch) == list(range(10))
        for i in (0, 1, 2, 5):
            batcher.acknowledge(in_batch[i])
        time.sleep(1.0)  # the client groups acknowledgements (100 ms): let them go out before closing
        shared.close()
        exclusive.close()
        batcher.close()

    # What the cursors show now, before any admin operation: the acknowledgements were applied.
    assert cursor_of(ack_lab, topic, "cum")["markDeletePosition"] == str(positions[7])

    # Admin operations that move cursors without any consumer: skip, clear-backlog, reset, expiry.
    admin_post(ack_lab, topic, "subscription/holes/skip/3")
    admin_post(ack_lab, topic, "subscription/batch/skip_all")
    admin.reset_cursor(topic, "cum", mark_delete=(positions[15].ledger, positions[15].entry))
    admin.expire_messages(topic, "expired", ledger=positions[12].ledger, entry=positions[12].entry)
    admin_post(ack_lab, topic, "subscription/late/skip_all")
    deadline = time.monotonic() + 20
    while cursor_of(ack_lab, topic, "expired")["markDeletePosition"] != str(positions[12]):
        assert time.monotonic() < deadline, cursor_of(ack_lab, topic, "expired")
        time.sleep(0.2)
    assert cursor_of(ack_lab, topic, "holes")["markDeletePosition"] != str(positions[4]), "skip moved nothing"

    # One read after another, never confirming (a foreign epoch): everything since the first read is held.
    answer = feed(ack_lab, since=before.seq, epoch="not-this-broker")
    acked = acked_of(answer, topic)
    assert set(acked) == {"holes", "cum", "batch"}, acked
    assert acked["holes"] == pluginapi.AckedSet(topic, "holes", runs(holes_acked))
    assert acked["cum"] == pluginapi.AckedSet(topic, "cum", cumulative=positions[7])
    assert acked["batch"] == pluginapi.AckedSet(
        topic, "batch", batches=(pluginapi.BatchState(batch_at, (3, 4, 6, 7, 8, 9)),)
    )
    assert answer.acked_lost == 0
    # The cursor states in the same answer (what the agent claims today) hold the admin operations' jumps.
    reports = {c.subscription: c for c in answer.cursors if c.topic == topic}
    assert reports["batch"].mark_delete == batch_at  # skip_all: all 30 messages
    assert reports["cum"].mark_delete == positions[14]  # the forward reset (to before message 15)
    assert reports["holes"].mark_delete > positions[4]  # skip 3: over 5, 7 and 10

    # A read naming the answer it received confirms it: the blocks are not handed over again.
    again = feed(ack_lab, since=answer.seq, epoch=answer.epoch)
    assert acked_of(again, topic) == {}
    # The cursors meanwhile show what the admin operations did, which the feed never claimed.
    assert cursor_of(ack_lab, topic, "batch")["markDeletePosition"] == str(batch_at)


def test_an_answer_lost_on_its_way_is_handed_over_again(ack_lab: Lab, unique: str) -> None:
    topic = f"persistent://{NS}/acked-again-{unique}"
    ack_lab.admin("a").create_subscription(topic, "s")
    url = ack_lab.service_url("a")
    positions = [p for _, p in produce(url, topic, [b"x", b"y", b"z"])]
    start = feed(ack_lab)
    with messaging.client(url) as c:
        consumer = c.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        message = consumer.receive(10_000)
        consumer.acknowledge(message)
        time.sleep(1.0)
        consumer.close()
    first = messaging.position_of(message.message_id())
    assert first == positions[0]
    lost = feed(ack_lab, since=start.seq, epoch=start.epoch)
    assert acked_of(lost, topic)["s"].ranges == runs([first])
    # The reader never got 'lost': it asks with the seq it had before, and gets the same again.
    retried = feed(ack_lab, since=start.seq, epoch=start.epoch)
    assert acked_of(retried, topic)["s"].ranges == runs([first])
    assert acked_of(feed(ack_lab, since=retried.seq, epoch=retried.epoch), topic) == {}
