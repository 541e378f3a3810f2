"""Batched producers and batch-index acknowledgements, in real Pulsar regions with GeoSync's plugin.

Why: Pulsar clients batch by default, and a consumer that acknowledged most of a batch must not get the
whole batch again after a failover. That needs three things from the brokers, proven here: replication
keeps each batch as it was (same size, same message at each index, in every region), the plugin's feed
reports which indexes of a partly acknowledged entry are still unacknowledged, and the plugin's cursor
writes acknowledge single indexes (never backwards), so a consumer then gets exactly the rest.

The lab's brokers run with ``acknowledgmentAtBatchIndexLevelEnabled=true`` (``geosync_lab``'s default).
Subscriptions are named ``unsynced-*`` so the agents leave them alone.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator

import pulsar
import pytest
import requests

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_core.pluginapi import CursorReport, Status
from geosync_core.pluginwrites import AckItem, BatchAck
from geosync_core.positions import Position
from geosync_lab import distribution, labs, plugins, regions
from integration_tests import helpers
from integration_tests.helpers import Lab, assert_exact, consume_all, read_all, wait_for
from integration_tests.test_batch_failover import consume_and_ack, synced_entry, wait_applied

pytestmark = pytest.mark.lab

BURST = 10


def produce_batched(service_url: str, topic: str, payloads: list[bytes]) -> None:
    """Publish in bursts of ``BURST`` through a batching producer, one flush per burst (one entry each,
    unless the broker or client splits it)."""
    with messaging.client(service_url) as c:
        producer = c.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=BURST,
            batching_max_publish_delay_ms=1000,
        )
        for start in range(0, len(payloads), BURST):
            for data in payloads[start : start + BURST]:
                producer.send_async(data, None)
            producer.flush()
        producer.close()


def entries_of(messages: list[messaging.Received]) -> dict[Position, list[messaging.Received]]:
    """Messages grouped by the entry holding them, in batch-index order."""
    out: dict[Position, list[messaging.Received]] = defaultdict(list)
    for m in messages:
        out[m.position].append(m)
    return {p: sorted(ms, key=lambda m: m.batch_index) for p, ms in out.items()}


def batch_index_acks_on(lab: Lab, region: str) -> bool:
    url = f"{lab.topology.region(region).admin_url}/admin/v2/geosync/status"
    try:
        body = requests.get(url, timeout=10).json()
    except (requests.RequestException, ValueError):
        return False
    return body.get("configuration", {}).get("acknowledgmentAtBatchIndexLevelEnabled") is True


def test_the_lab_records_its_batch_index_setting(lab: Lab) -> None:
    for name, region in lab.topology.regions.items():
        assert region.lab.get("batch_index_acks") is batch_index_acks_on(lab, name), name


def test_replication_keeps_each_batch_as_it_was(lab: Lab, unique: str) -> None:
    topic = f"persistent://geo/abc/layout-{unique}"
    origins = ("a", "c")
    per_region = 4 * BURST
    for origin in origins:
        produce_batched(lab.service_url(origin), topic, [f"{origin}-{i}".encode() for i in range(per_region)])
    total = per_region * len(origins)
    read = {r: read_all(lab.service_url(r), topic, expect=total) for r in lab.topology.regions}
    for region, got in read.items():
        assert len(got) == total, f"region {region} has {len(got)} of {total} messages"
    # Where each message sits in its origin: entry, batch index, batch size.
    home: dict[bytes, tuple[Position, int, int]] = {}
    for origin in origins:
        for position, batch in entries_of(
            [m for m in read[origin] if m.data.startswith(f"{origin}-".encode())]
        ).items():
            home.update({m.data: (position, m.batch_index, len(batch)) for m in batch})
    assert len(home) == total
    sizes = sorted({size for _, _, size in home.values()})
    assert max(sizes) > 1, f"the producers did not batch at all (batch sizes {sizes})"
    per_message = 0
    for region, got in read.items():
        for position, batch in entries_of(got).items():
            origin_entries = {home[m.data][0] for m in batch}
            assert len(origin_entries) == 1, f"{region} {position} mixes origin entries {origin_entries}"
            [origin_entry] = origin_entries
            for m in batch:
                assert (m.batch_index, len(batch)) == home[m.data][1:], (region, position, m.data)
                # The size comes with every message (the agent must not count it from the messages read).
                assert m.batch_size == len(batch), (region, position, m.batch_index, m.batch_size)
                per_message += m.source_position is not None
            if batch[0].data.startswith(f"{region}-".encode()):
                assert position == origin_entry
                continue
            # The stamp is in the entry's metadata; consumers of a batched entry do not see it per message.
            stamp, size = entry_headers(lab, region, topic, position)
            assert (stamp, size) == (str(origin_entry), len(batch)), (region, position)
    print(f"batch sizes {sizes}; {per_message} replicated messages showed their source position per message")


def entry_headers(lab: Lab, region: str, topic: str, position: Position) -> tuple[str | None, int]:
    """An entry's replication stamp and batch size, as the admin API's get-message-by-id reports them."""
    path = topic.replace("persistent://", "persistent/")
    admin_url = lab.topology.region(region).admin_url
    url = f"{admin_url}/admin/v2/{path}/ledger/{position.ledger}/entry/{position.entry}"
    response = requests.get(url, timeout=10)
    assert response.status_code == 200, (url, response.status_code)
    properties = json.loads(response.headers.get("X-Pulsar-PROPERTY") or "{}")
    stamp = properties.get("__MSG_PROP_REPL_SOURCE_POSITION")
    return stamp, int(response.headers.get("X-Pulsar-num-batch-message", "1"))


def _subscribe(c: pulsar.Client, topic: str, sub: str) -> pulsar.Consumer:
    return c.subscribe(
        topic,
        sub,
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
    )


def _drain(service_url: str, topic: str, sub: str, *, quiet_s: float = 3.0) -> list[messaging.Received]:
    """What a fresh consumer on ``sub`` is given (nothing acknowledged: the consumer closes after)."""
    got: list[messaging.Received] = []
    with messaging.client(service_url) as c:
        consumer = _subscribe(c, topic, sub)
        try:
            while True:
                try:
                    got.append(messaging.received(consumer.receive(timeout_millis=int(quiet_s * 1000))))
                except pulsar.Timeout:
                    break
        finally:
            consumer.close()
    return got


def _report(admin: AdminClient, since: int, topic: str, sub: str) -> CursorReport | None:
    mine = [c for c in admin.plugin_feed(since=since).cursors if (c.topic, c.subscription) == (topic, sub)]
    return mine[-1] if mine else None


def test_partial_batches_are_fed_and_written_per_index(lab: Lab, unique: str) -> None:
    region = lab.topology.region("a")
    if not batch_index_acks_on(lab, "a"):
        pytest.skip("region a runs without batch-index acknowledgements (GEOSYNC_BATCH_INDEX_ACKS=0?)")
    admin = AdminClient(region.admin_url)
    topic, sub = f"persistent://geo/ab/partial-{unique}", f"unsynced-partial-{unique}"
    seen = admin.plugin_feed(since=2**62).seq
    with messaging.client(region.service_url) as c:
        consumer = _subscribe(c, topic, sub)
        produce_batched(region.service_url, topic, [f"m{i}".encode() for i in range(3 * BURST)])
        received = []
        for _ in range(3 * BURST):
            received.append((m := consumer.receive(timeout_millis=20000), messaging.received(m)))
        layout = entries_of([r for _, r in received])
        batched = [p for p, ms in layout.items() if len(ms) >= 5]
        assert batched, f"no batch of 5 or more among {[len(ms) for ms in layout.values()]}"
        first = batched[0]
        size = len(layout[first])
        acked_by_consumer = {0, 1, 2, size - 1}
        for msg, got in received:
            if got.position == first and got.batch_index in acked_by_consumer:
                consumer.acknowledge(msg)
        consumer.close()  # flushes the grouped acknowledgements
    rest = [i for i in range(size) if i not in acked_by_consumer]

    # (b) The feed reports the partly acknowledged entry with exactly the indexes still unacknowledged.
    def fed() -> bool:
        report = _report(admin, seen, topic, sub)
        return report is not None and any(b.position == first for b in report.batches)

    wait_for(fed, timeout_s=20, what="the feed to report the partly acknowledged batch")
    report = _report(admin, seen, topic, sub)
    assert report is not None
    assert {b.position: list(b.unacked) for b in report.batches} == {first: rest}
    assert report.mark_delete < first
    internal = admin.internal_stats(topic)["cursors"][sub]
    assert (str(report.mark_delete), report.individually_deleted) == (
        internal["markDeletePosition"],
        internal["individuallyDeletedMessages"],
    )

    # (c) A write acknowledges two more indexes; a fresh consumer gets exactly the remaining messages.
    more = set(rest[:2])
    [written] = admin.plugin_write([AckItem(topic, sub, batches=(BatchAck(first, size, frozenset(more)),))])
    assert written.status is Status.OK, written
    assert written.cursor is not None
    assert written.acknowledged == 1
    left = [i for i in rest if i not in more]
    assert {b.position: list(b.unacked) for b in written.cursor.batches} == {first: left}
    expected = sorted(
        [m.data for m in layout[first] if m.batch_index in left]
        + [m.data for p, ms in layout.items() if p != first for m in ms]
    )
    assert sorted(m.data for m in _drain(region.service_url, topic, sub)) == expected

    # Wrong sizes are refused before anything moves: checked against the cursor's bits, or the entry.
    others = [p for p in layout if p != first]
    [small, wrong] = admin.plugin_write(
        [
            AckItem(topic, sub, batches=(BatchAck(first, left[-1], frozenset({0})),)),
            AckItem(topic, sub, batches=(BatchAck(others[0], len(layout[others[0]]) + 1, frozenset({0})),)),
        ]
    )
    assert (small.status, wrong.status) == (Status.BAD_REQUEST, Status.BAD_REQUEST), (small, wrong)
    assert "smaller than the batch" in (small.error or "")
    assert "does not match the entry" in (wrong.error or "")

    # Acknowledging every index acknowledges the entry whole; never backwards afterwards.
    [whole] = admin.plugin_write(
        [AckItem(topic, sub, batches=(BatchAck(first, size, frozenset(range(size))),))]
    )
    assert whole.status is Status.OK, whole
    assert whole.cursor is not None
    assert whole.cursor.batches == ()
    assert whole.cursor.mark_delete >= first or str(first) in whole.cursor.individually_deleted
    # Never backwards: move the mark-delete past the next entry, then ask for less; nothing changes.
    [forward] = admin.plugin_write([AckItem(topic, sub, mark_delete=others[0])])
    assert forward.cursor is not None, forward
    assert forward.cursor.mark_delete == others[0]
    [back] = admin.plugin_write(
        [
            AckItem(
                topic,
                sub,
                mark_delete=first,
                positions=(first,),
                batches=(BatchAck(first, size, frozenset({0})),),
            )
        ]
    )
    assert back.status is Status.OK, back
    assert back.cursor is not None
    assert (back.acknowledged, back.cursor.mark_delete, back.cursor.batches) == (0, others[0], ())
    assert sorted(m.data for m in _drain(region.service_url, topic, sub)) == sorted(
        m.data for p, ms in layout.items() if p > others[0] for m in ms
    )


@pytest.fixture(scope="module")
def acks_off_region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[regions.RegionProcess]:
    """One more standalone with GeoSync's plugin and batch-index acknowledgements off (Pulsar 4.0's
    default), beside the shared lab whose brokers run as Pulsar 4.1+ does."""
    root = tmp_path_factory.mktemp("acks-off")
    extra = {**plugins.plugin_conf(plugins.ensure_plugins()), **regions.batch_index_conf(False)}
    proc, pid, _ = labs._boot_region(
        distribution.ensure_pulsar(), root / "off", "off", set(), deadline_s=240, extra_conf=extra
    )
    try:
        admin = AdminClient(proc.admin_url)

        def default_namespace() -> bool:
            try:
                return "public/default" in admin.namespaces("public")
            except AdminError:
                return False

        # The standalone creates public/default shortly after it answers: wait for it.
        wait_for(default_namespace, timeout_s=60, what="public/default in the acks-off region")
        yield proc
    finally:
        regions.stop(pid, regions.region_marker(proc), grace_s=10)


def test_without_batch_index_acks_partial_writes_are_refused(
    acks_off_region: regions.RegionProcess, unique: str
) -> None:
    """Brokers that do not track batch indexes would drop a partial ack set: the plugin refuses it with a
    status the agent can act on (send whole entries only), and still acknowledges whole batches."""
    region = acks_off_region
    admin = AdminClient(region.admin_url)
    topic, sub = f"persistent://public/default/nobatch-{unique}", f"unsynced-nobatch-{unique}"
    with messaging.client(region.service_url) as c:
        _subscribe(c, topic, sub).close()
    produce_batched(region.service_url, topic, [f"m{i}".encode() for i in range(2 * BURST)])
    layout = entries_of(read_all(region.service_url, topic, expect=2 * BURST))
    first = min(layout)
    size = len(layout[first])
    [partial] = admin.plugin_write([AckItem(topic, sub, batches=(BatchAck(first, size, frozenset({0})),))])
    assert partial.status is Status.BATCH_ACKS_OFF, partial
    assert "acknowledgmentAtBatchIndexLevelEnabled" in (partial.error or "")
    [whole] = admin.plugin_write(
        [AckItem(topic, sub, batches=(BatchAck(first, size, frozenset(range(size))),))]
    )
    assert whole.status is Status.OK, whole
    assert whole.cursor is not None
    assert whole.cursor.mark_delete == first
    assert whole.cursor.batches == ()
    assert sorted(m.data for m in _drain(region.service_url, topic, sub)) == sorted(
        m.data for p, ms in layout.items() if p != first for m in ms
    )


def test_the_plugin_records_where_batched_replicated_entries_came_from(lab: Lab, unique: str) -> None:
    """The Python client shows a batched replicated message without its source-position stamp (the stamp is
    entry metadata; each message's own properties replace it), so the agent asks the broker plugin: its
    origin index records, for every entry a replicator published, the entry's position in its origin."""
    topic = f"persistent://geo/ab/sources-{unique}"
    total = 100
    with messaging.client(lab.service_url("b")) as c:
        producer = c.create_producer(
            topic, batching_enabled=True, batching_max_messages=20, batching_max_publish_delay_ms=50
        )
        for i in range(total):
            producer.send_async(f"b-{i}".encode(), None)
        producer.flush()
        producer.close()
    in_b = entries_of(read_all(lab.service_url("b"), topic, expect=total))
    in_a = entries_of(read_all(lab.service_url("a"), topic, expect=total))
    assert sum(len(ms) for ms in in_a.values()) == total, f"region a has {len(in_a)} entries, not all {total}"
    assert max(len(ms) for ms in in_a.values()) > 1, "the producer did not batch at all"
    home = {m.data: position for position, batch in in_b.items() for m in batch}

    runs = lab.admin("a").plugin_origins(topic)
    for position, batch in in_a.items():
        covering = [r for r in runs if r.covers(position.ledger, position.entry)]
        assert len(covering) == 1, (position, runs)
        [run] = covering
        assert run.origin == "b", (position, run)
        assert {home[m.data] for m in batch} == {run.origin_at(position.entry)}, (position, run)
    # Consecutive entries from consecutive source entries share a run.
    assert len(runs) < len(in_a), runs
    print(f"{len(in_a)} replicated entries (batch sizes {sorted({len(b) for b in in_a.values()})}): {runs}")


def test_batch_indexes_pulsar_forgets_on_an_unload_are_written_again(lab: Lab, unique: str) -> None:
    """Pulsar 4.0.8 forgets the batch indexes of partly acknowledged entries when a topic is unloaded (a
    bundle moved, a broker restarted), those the agent wrote as well as a consumer's. b's agent sees the
    topic write to another ledger at its next poll and writes them again from the claims it holds, so a
    failover after the unload is still exact. (Here, not in test_batch_failover: that module's tests run
    its last ones with the agents on the admin-API path, which cannot write batch indexes.)"""
    topic, sub = f"persistent://geo/ab/reloaded-{unique}", f"reloaded-{unique}"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    everything = helpers.produce_in_both(lab, topic, 100, batch=10)
    started = time.time()
    acked, _ = consume_and_ack(lab, "a", topic, sub, total=len(everything), share=0.6, seed=unique)
    wait_applied(lab, "b", topic, sub, after=started, nothing_pending=True)
    before = (synced_entry(lab, "b", topic, sub) or {}).get("last_applied_at") or 0.0
    b_admin = AdminClient(lab.topology.regions["b"].admin_url)
    b_admin.put(f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/unload")
    unloaded = time.time()
    wait_applied(lab, "b", topic, sub, after=max(unloaded, before + 0.001), nothing_pending=True)
    got = consume_all(lab.service_url("b"), topic, sub, batch_index_acks=True)
    assert_exact(got, everything, acked, "b after an unload")


def test_pulsar_gives_again_batch_acknowledgements_made_before_an_unload(lab: Lab, unique: str) -> None:
    """The fact ``docs/limits.md`` (batch indexes Pulsar forgets) and the multi-broker bundle-unload test rest
    on, without GeoSync (an ``unsynced-*`` topic the agents leave alone): Pulsar 4.0.8 loads a cursor it
    kept in the metadata store without its batch indexes (apache/pulsar#26474), so after an unload a
    consumer is given again exactly the acknowledged messages of the entries left partly acknowledged;
    whole entries stay acknowledged. Fails on a Pulsar with the fix: then the limit and that test's check
    against a's broker can go."""
    topic, sub = f"persistent://geo/ab/unsynced-forgets-{unique}", "forgets"
    with messaging.client(lab.service_url("a")) as c:
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    payloads = [f"m{i}" for i in range(100)]
    helpers.produce_batched(lab.service_url("a"), topic, payloads, batch=10)
    acked, where = consume_and_ack(lab, "a", topic, sub, total=len(payloads), share=0.9, seed=unique)
    entries: dict[object, set[str]] = defaultdict(set)
    for payload, (entry, _) in where.items():
        entries[entry].add(payload)
    partly = {m for ms in entries.values() if not ms <= acked for m in ms & acked}
    assert partly, "every entry was acknowledged whole or not at all: nothing to forget"
    lab.admin("a").unload_topic(topic)
    again = acked & set(consume_all(lab.service_url("a"), topic, sub, acknowledge=False))
    print(f"of {len(acked)} acknowledged before the unload, {len(again)} given again ({len(partly)} in part)")
    assert again == partly, (
        f"given again: {sorted(again)}; acknowledged in partly acknowledged entries: {sorted(partly)}"
    )


def test_more_partly_acknowledged_batches_than_one_plugin_answer_carries_fail_over_exactly(
    lab: Lab, unique: str
) -> None:
    """The plugin reports at most 1,000 partly acknowledged entries per cursor and answer; the agent reads the
    rest page by page (here, not beside test_batch_failover's module-scoped admin-API mode, in which a's agent
    cannot see batch indexes at all). Both regions publish batches of 2, a's consumer acknowledges the first
    message of each (1,400 partly acknowledged entries): b must then deliver exactly the second ones."""
    topic, sub = f"persistent://geo/ab/many-partial-{unique}", f"many-partial-{unique}"
    with messaging.client(lab.service_url("a")) as c:  # the subscription starts with the traffic
        c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    everything = helpers.produce_in_both(lab, topic, 1400, batch=2)
    started = time.time()
    acked, where = consume_and_ack(
        lab, "a", topic, sub, total=len(everything), pick=lambda msg: msg.message_id().batch_index() == 0
    )
    per_entry: dict[tuple[int, int], int] = defaultdict(int)
    for data in everything:
        per_entry[where[data][0]] += 1
    partial = sum(1 for n in per_entry.values() if n > 1)
    page = AdminClient(lab.topology.region("a").admin_url).plugin_cursor(topic, sub)
    assert page is not None
    assert page.batches_truncated, (
        f"{partial} partly acknowledged entries fit in one plugin answer: the test proves nothing about pages"
    )
    wait_applied(lab, "b", topic, sub, after=started, nothing_pending=True)
    got = consume_all(lab.service_url("b"), topic, sub)
    assert_exact(got, everything, acked, "b after a failover")
