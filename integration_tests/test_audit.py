"""The drift audit against the real lab: known drift is made by hand, and the audit reports exactly it.

Subscriptions are named ``unsynced-*`` so the lab's agents leave them alone: acknowledgements made in
one region stay there. One audit run (``geoctl audit drift`` through click's runner, on the session's
SparkSession) covers three topics, each with its own drift:

* ``acks``: region a acknowledges 5 of the first 10 messages (with holes), b the first 4, c nothing;
* ``moved``: a's consumers get 5 messages, then a's cursor is moved by hand past 7 more
  (``expireMessages``); b's cursor is moved to where a's consumers got to (as an agent would);
* ``order``: a delivery log where a key goes back after a failover from a to b.
"""

from __future__ import annotations

import json
import pathlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from geoctl.cli import main
from geosync_adapters import messaging
from geosync_audit.sessions import session
from geosync_core.positions import Position
from integration_tests.helpers import Lab, produce, read_all, wait_for

pytestmark = pytest.mark.lab

N = 20


@dataclass
class Audited:
    summary: dict[str, Any]
    out: pathlib.Path
    topics: dict[str, str]
    subs: dict[str, str]

    def subscription(self, name: str) -> dict[str, Any]:
        topic, sub = self.topics[name], self.subs[name]
        found = [s for s in self.summary["subscriptions"] if (s["topic"], s["subscription"]) == (topic, sub)]
        assert len(found) == 1, f"{name}: {self.summary['subscriptions']}"
        return dict(found[0])


def backlog(lab: Lab, region: str, topic: str, sub: str) -> int | None:
    try:
        subs = lab.admin(region).topic_stats(topic).get("subscriptions") or {}
    except Exception:
        return None
    return None if sub not in subs else int(subs[sub]["msgBacklog"])


def wait_backlog(lab: Lab, region: str, topic: str, sub: str, expected: int) -> None:
    wait_for(
        lambda: backlog(lab, region, topic, sub) == expected,
        timeout_s=45,
        what=lambda: f"{sub} in {region} to have backlog {expected} (has {backlog(lab, region, topic, sub)})",
    )


def consume(
    lab: Lab, region: str, topic: str, sub: str, *, count: int, ack: Callable[[int], bool]
) -> list[dict[str, Any]]:
    """Receive ``count`` messages in ``region``, acknowledge those ``ack(i)`` picks; return log lines."""
    lines = []
    with messaging.client(lab.service_url(region)) as c:
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
        for i in range(count):
            msg = consumer.receive(timeout_millis=30000)
            got = messaging.received(msg)
            origin = got.source_position or got.position
            lines.append(
                {
                    "region": region,
                    "topic": got.topic,
                    "subscription": sub,
                    "key": got.key or None,
                    "origin_region": "a",
                    "origin_ledger": origin.ledger,
                    "origin_entry": origin.entry,
                    "delivered_at": int(time.time() * 1000),
                }
            )
            if ack(i):
                consumer.acknowledge(msg)
        time.sleep(0.3)  # let grouped acknowledgements flush before closing
        consumer.close()
    return lines


def prepare(lab: Lab, topic: str, sub: str, *, keys: Callable[[int], str] | None = None) -> list[Position]:
    """Create ``sub`` in every region at the earliest message, publish N messages in a, wait until every
    region holds them; return their positions in a."""
    for region in ("a", "b", "c"):
        lab.admin(region).create_subscription(topic, sub)
    sent = produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(N)], key=keys)
    for region in ("a", "b", "c"):
        wait_backlog(lab, region, topic, sub, N)
    return [p for _, p in sent]


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return SparkSession.getActiveSession() or session("local[2]", app="geosync-audit-it", small=True)


@pytest.fixture(scope="module")
def audited(lab: Lab, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Audited:
    run = uuid.uuid4().hex[:8]
    topics = {name: f"persistent://geo/abc/audit-{name}-{run}" for name in ("acks", "moved", "order")}
    subs = {name: f"unsynced-{name}-{uuid.uuid4().hex[:8]}" for name in topics}
    log: list[dict[str, Any]] = []

    # acks: a acknowledges 0, 2, 4, 6, 8 of the first 10; b acknowledges 0..3; c nothing
    t, s = topics["acks"], subs["acks"]
    prepare(lab, t, s)
    log += consume(lab, "a", t, s, count=10, ack=lambda i: i % 2 == 0)
    log += consume(lab, "b", t, s, count=4, ack=lambda _i: True)
    wait_backlog(lab, "a", t, s, N - 5)
    wait_backlog(lab, "b", t, s, N - 4)

    # moved: a's consumers get and acknowledge 0..4; a's cursor is then expired past 5..11 by hand;
    # b's cursor is moved to 4 (what a's consumers acknowledged: synced, not lost)
    t, s = topics["moved"], subs["moved"]
    in_a = prepare(lab, t, s)
    log += consume(lab, "a", t, s, count=5, ack=lambda _i: True)
    wait_backlog(lab, "a", t, s, N - 5)
    lab.admin("a").expire_messages(t, s, ledger=in_a[11].ledger, entry=in_a[11].entry)
    copies_b = read_all(lab.service_url("b"), t, expect=N)
    b_of_4 = next(m.position for m in copies_b if m.source_position == in_a[4])
    lab.admin("b").expire_messages(t, s, ledger=b_of_4.ledger, entry=b_of_4.entry)
    wait_backlog(lab, "a", t, s, N - 12)
    wait_backlog(lab, "b", t, s, N - 5)

    # order: key k1 is delivered 0, 2 in a, then after a failover 1 in b (a violation) and 2 again
    # (a redelivery, not a violation); k2 stays in order
    t, s = topics["order"], subs["order"]
    in_o = produce(
        lab.service_url("a"), t, [f"o{i}".encode() for i in range(5)], key=lambda i: "k2" if i > 2 else "k1"
    )
    seeded = [("a", 0, 100), ("a", 2, 110), ("a", 3, 120), ("b", 1, 200), ("b", 2, 210), ("b", 4, 220)]
    for region, i, at in seeded:
        log.append(
            {
                "region": region,
                "topic": t,
                "subscription": s,
                "key": "k2" if i > 2 else "k1",
                "origin_region": "a",
                "origin_ledger": in_o[i][1].ledger,
                "origin_entry": in_o[i][1].entry,
                "delivered_at": 1_700_000_000_000 + at,
            }
        )

    out = tmp_path_factory.mktemp("audit")
    deliveries = out / "deliveries.jsonl"
    deliveries.write_text("".join(json.dumps(line) + "\n" for line in log))
    result = CliRunner().invoke(
        main,
        [
            "audit",
            "drift",
            "--topology",
            str(lab.dir / "topology.json"),
            "--out",
            str(out / "report"),
            "--namespace",
            "geo/abc",
            "--topics",
            f"audit-[a-z]+-{run}$",
            "--deliveries",
            str(deliveries),
            "-o",
            "json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    return Audited(summary, out / "report", topics, subs)


def test_acks_in_one_region_only_are_reported_per_region_pair(audited: Audited) -> None:
    acks = audited.subscription("acks")
    assert acks["regions"] == ["a", "b", "c"]
    assert acks["unsynced"] == {"a->b": 3, "a->c": 5, "b->a": 2, "b->c": 4, "c->a": 0, "c->b": 0}
    assert acks["acked"] == {"a": 5, "b": 4, "c": 0}
    assert acks["lost"] == {"a": 0, "b": 0, "c": 0}
    assert acks["sync_lag_ms"]["c->a"] == 0
    assert acks["sync_lag_ms"]["a->c"] >= 0


def test_a_cursor_moved_by_hand_is_loss_with_the_right_count(audited: Audited) -> None:
    moved = audited.subscription("moved")
    assert moved["acked"] == {"a": 12, "b": 5, "c": 0}
    assert moved["lost"] == {"a": 7, "b": 0, "c": 0}
    assert moved["unsynced"]["a->b"] == 7
    assert moved["unsynced"]["b->c"] == 5


def test_a_seeded_out_of_order_delivery_log_is_reported(audited: Audited, spark: SparkSession) -> None:
    order = audited.subscription("order")
    assert order["order_violations"] == 1
    rows = spark.read.parquet(str(audited.out / "order_violations")).collect()
    mine = [r for r in rows if r.subscription == audited.subs["order"]]
    assert [(r.key, r.region, r.delivered_at) for r in mine] == [("k1", "b", 1_700_000_000_200)]
    # a real one too: b's consumers got 0..3 (no key) after a's had got up to 9
    assert audited.subscription("acks")["order_violations"] == 4
    assert audited.subscription("moved")["order_violations"] == 0


def test_replication_is_complete_and_outputs_are_written(audited: Audited) -> None:
    summary = audited.summary
    assert summary["messages"] == {"a": 2 * N + 5, "b": 2 * N + 5, "c": 2 * N + 5}
    assert summary["unresolved"] == 0
    for row in summary["replication"]:
        assert (row["origin_region"], row["gaps"], row["lag"], row["trimmed"]) == ("a", 0, 0, 0)
    assert {r["region"] for r in summary["replication"]} == {"b", "c"}
    for table in ("messages", "cursors", "pairs", "unsynced", "loss", "lost", "replication", "missing"):
        assert (audited.out / table).is_dir(), table
    assert json.loads((audited.out / "summary.json").read_text())["totals"] == summary["totals"]
    assert (audited.out / "drift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
