"""Exact subscription sync against the real lab: consumers fail over and carry on where they left off.

Each test acknowledges in one region the way an application would, lets the agents sync, then connects
a consumer in another region on the same subscription and checks that exactly the unacknowledged
messages arrive there: nothing lost, nothing acknowledged delivered again, ack holes included.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pulsar
import pytest
import requests

from geosync_adapters import messaging
from geosync_core import ackstates, envelopes
from geosync_core.origins import OriginAcks, Span
from geosync_lab import labs
from integration_tests.helpers import Lab, consume_all, produce, read_all, wait_for
from integration_tests.helpers import agent_state as _agent_state


def backlog(lab: Lab, region: str, topic: str, sub: str) -> int | None:
    try:
        subs = lab.admin(region).topic_stats(topic).get("subscriptions") or {}
    except Exception:
        return None
    return None if sub not in subs else int(subs[sub]["msgBacklog"])


def wait_backlog(
    lab: Lab, region: str, topic: str, sub: str, expected: int, *, timeout_s: float = 45
) -> float:
    return wait_for(
        lambda: backlog(lab, region, topic, sub) == expected,
        timeout_s=timeout_s,
        what=lambda: (
            f"{sub} in {region} to have {expected} unacknowledged (has {backlog(lab, region, topic, sub)})"
        ),
    )


def consume_some(
    lab: Lab,
    region: str,
    topic: str,
    sub: str,
    *,
    total: int,
    consumer_type: pulsar.ConsumerType,
    choose: Callable[[int], bool],
    cumulative_upto: int | None = None,
) -> set[str]:
    """Receive ``total`` messages in ``region``; acknowledge those ``choose(i)`` picks; return them."""
    acked: set[str] = set()
    with messaging.client(lab.service_url(region)) as c:
        consumer = c.subscribe(
            topic, sub, consumer_type=consumer_type, initial_position=pulsar.InitialPosition.Earliest
        )
        received = []
        for _ in range(total):
            received.append(consumer.receive(timeout_millis=30000))
        if cumulative_upto is not None:
            consumer.acknowledge_cumulative(received[cumulative_upto])
            acked = {m.data().decode() for m in received[: cumulative_upto + 1]}
        else:
            for i, msg in enumerate(received):
                if choose(i):
                    consumer.acknowledge(msg)
                    acked.add(msg.data().decode())
        time.sleep(0.3)  # let the client flush grouped acknowledgements before closing
        consumer.close()
    return acked


def subscribe_first(lab: Lab, region: str, topic: str, sub: str, consumer_type: pulsar.ConsumerType) -> None:
    with messaging.client(lab.service_url(region)) as c:
        c.subscribe(
            topic, sub, consumer_type=consumer_type, initial_position=pulsar.InitialPosition.Earliest
        ).close()


def _agent_ready(lab: Lab, region: str) -> bool:
    try:
        return _answers(labs.agent_metrics_url(lab.dir, region) + "/readyz")
    except KeyError:
        return False


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).ok
    except requests.RequestException:
        return False


def _restart_agents(lab: Lab, *, plugin_cursors: bool) -> None:
    _restart(lab, tuple(lab.topology.regions), plugin_cursors=plugin_cursors, plugin_index=True)


@pytest.fixture(scope="module", params=["plugin", "admin-api"])
def cursor_path(request: pytest.FixtureRequest, lab: Lab) -> Iterator[str]:
    """Which way the agents read and move cursors: the broker plugin's feed and writes (the lab's
    default), or the admin API alone (internalStats polls, expireMessages, a shadow consumer for holes), as
    with brokers that do not load the plugin."""
    path = str(request.param)
    if path == "admin-api":
        _restart_agents(lab, plugin_cursors=False)
    try:
        yield path
    finally:
        if path == "admin-api":
            _restart_agents(lab, plugin_cursors=True)


def _applied_by(lab: Lab, region: str) -> Counter[str]:
    counters = _agent_state(lab, region)["counters"]
    return Counter({k: int(counters.get(k, 0)) for k in ("plugin_acks", "mark_delete_moves", "holes_acked")})


def _check_path(lab: Lab, cursor_path: str, before: Counter[str], *, holes: bool) -> None:
    # The agent counts a write when its next round takes the write's answer, which may be after the broker
    # applied it (and after the backlog the test waited for): a moment's wait for the count.
    expected = "plugin_acks" if cursor_path == "plugin" else "holes_acked" if holes else "mark_delete_moves"
    deadline = time.monotonic() + 10
    moved = _applied_by(lab, "b") - before
    while moved[expected] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        moved = _applied_by(lab, "b") - before
    if cursor_path == "plugin":
        assert moved["plugin_acks"] > 0, f"b's agent applied nothing through the plugin: {moved}"
        calls = _agent_state(lab, "b")["broker_calls"]  # what the round waited on, timed by kind
        assert calls["POST acks"]["n"] > 0, calls
        assert calls["GET cursors"]["n"] > 0, calls
        assert 0 < calls["POST acks"]["p50"] <= calls["POST acks"]["max"], calls
    else:
        assert moved["plugin_acks"] == 0, f"b's agent used the plugin although told not to: {moved}"
        # Cumulative acks move the mark-delete; with random holes the first message may be one of them, so
        # only the shadow consumer's acknowledgements are certain.
        assert moved["holes_acked" if holes else "mark_delete_moves"] > 0, moved


def cumulative_acks_in_a(lab: Lab, topic: str, sub: str) -> tuple[list[str], set[str]]:
    """An Exclusive subscription in a acknowledges the first 60 of 100 messages cumulatively; b shows the 40
    left. The messages, and those acknowledged."""
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Exclusive)
    payloads = [f"m{i}" for i in range(100)]
    produce(lab.service_url("a"), topic, [p.encode() for p in payloads])
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=60,
        consumer_type=pulsar.ConsumerType.Exclusive,
        choose=lambda _i: False,
        cumulative_upto=59,
    )
    assert len(acked) == 60
    wait_backlog(lab, "b", topic, sub, 40)
    return payloads, acked


def test_exclusive_failover_after_cumulative_acks(lab: Lab, unique: str, cursor_path: str) -> None:
    before = _applied_by(lab, "b")
    topic, sub = f"persistent://geo/ab/excl-{unique}", f"excl-{unique}"
    payloads, acked = cumulative_acks_in_a(lab, topic, sub)
    _check_path(lab, cursor_path, before, holes=False)
    got = consume_all(lab.service_url("b"), topic, sub, consumer_type=pulsar.ConsumerType.Exclusive)
    assert sorted(got) == sorted(set(payloads) - acked)


def test_shared_random_holes_and_unacked_tail(lab: Lab, unique: str, cursor_path: str) -> None:
    before = _applied_by(lab, "b")
    topic, sub = f"persistent://geo/ab/shared-{unique}", f"shared-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    payloads = [f"m{i}" for i in range(120)]
    produce(lab.service_url("a"), topic, [p.encode() for p in payloads])
    rng = random.Random(unique)
    # acknowledge ~70% of the first 100 at random (holes), none of the last 20 (unacknowledged tail)
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=120,
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda i: i < 100 and rng.random() < 0.7,
    )
    expected = sorted(set(payloads) - acked)
    wait_backlog(lab, "a", topic, sub, len(expected))
    wait_backlog(lab, "b", topic, sub, len(expected))
    _check_path(lab, cursor_path, before, holes=True)
    got = consume_all(lab.service_url("b"), topic, sub)
    assert sorted(got) == expected


def test_producers_in_two_regions_at_once(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/two-{unique}", f"two-{unique}"
    for region in ("a", "b"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    produce(lab.service_url("a"), topic, [f"a{i}".encode() for i in range(40)])
    produce(lab.service_url("b"), topic, [f"b{i}".encode() for i in range(40)])
    wait_backlog(lab, "a", topic, sub, 80)
    acked = consume_some(
        lab, "a", topic, sub, total=80, consumer_type=pulsar.ConsumerType.Shared, choose=lambda i: i % 3 != 0
    )
    everything = {f"a{i}" for i in range(40)} | {f"b{i}" for i in range(40)}
    wait_backlog(lab, "b", topic, sub, 80 - len(acked))
    got = consume_all(lab.service_url("b"), topic, sub)
    assert sorted(got) == sorted(everything - acked)


def test_copies_from_a_region_removed_from_the_namespace_are_named_by_the_brokers(
    lab: Lab, unique: str, cursor_path: str
) -> None:
    """Region c takes part in a namespace, then is removed from it (issue 17.1): a's and b's topics keep c's
    copies, and agents restarted afterwards re-read them with a cluster list of two. They used to take every
    copy for "the other region's" message, so a's claims on c's messages matched nothing in b (duplicates
    after failover) or, with colliding ledger ids, a message of a or b (loss)."""
    namespace = f"geo/removed-{unique}"
    for region in ("a", "b", "c"):
        lab.admin(region).create_namespace(namespace)
        lab.admin(region).set_replication_clusters(namespace, ["a", "b", "c"])
    topic, sub = f"persistent://{namespace}/t", f"removed-{unique}"
    for region in ("a", "b"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    payloads = {f"{region}{i}" for region in ("a", "b", "c") for i in range(30)}
    for region in ("c", "a", "b"):
        produce(lab.service_url(region), topic, [f"{region}{i}".encode() for i in range(30)])
    wait_backlog(lab, "a", topic, sub, len(payloads))
    wait_backlog(lab, "b", topic, sub, len(payloads))
    for region in ("a", "b", "c"):
        lab.admin(region).set_replication_clusters(namespace, ["a", "b"])
    # Agents restarted now re-read c's copies with a cluster list of two; on the admin path they name origins
    # from entry headers, as with brokers without the interceptor (its index would name them right anyway).
    plugin = cursor_path == "plugin"
    _restart(lab, ("a", "b"), plugin_cursors=plugin, plugin_index=plugin)
    try:
        _fail_over_from_a_to_b(lab, unique, topic, sub, payloads)
    finally:
        if not plugin:  # the other tests of this phase expect the interceptor's index
            _restart(lab, ("a", "b"), plugin_cursors=False, plugin_index=True)


def _restart(lab: Lab, regions: tuple[str, ...], *, plugin_cursors: bool, plugin_index: bool) -> None:
    for region in regions:
        labs.stop_agent(lab.dir, region)
    for region in regions:
        labs.start_agent(lab.dir, region, plugin_cursors=plugin_cursors, plugin_index=plugin_index)
    for region in regions:
        wait_for(functools.partial(_agent_ready, lab, region), timeout_s=120, what=f"agent {region} ready")


def _fail_over_from_a_to_b(lab: Lab, unique: str, topic: str, sub: str, payloads: set[str]) -> None:
    """A Shared consumer in a acknowledges about 70 % at random; one in b gets exactly the rest."""
    rng = random.Random(unique)
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=len(payloads),
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda _i: rng.random() < 0.7,
    )
    expected = sorted(payloads - acked)
    wait_backlog(lab, "b", topic, sub, len(expected), timeout_s=60)
    got = consume_all(lab.service_url("b"), topic, sub)
    assert sorted(got) == expected


def ack_half_in_c_then_fail_over(
    lab: Lab, unique: str, topic: str, sub: str, *, per_region: int, to: str
) -> None:
    """Messages ``{region}{i}`` from a, b and c: c acknowledges about half at random; a and b must hold
    exactly the rest, and a consumer failing over to ``to`` gets exactly those."""
    total = 3 * per_region
    wait_backlog(lab, "c", topic, sub, total)
    rng = random.Random(unique)
    acked = consume_some(
        lab,
        "c",
        topic,
        sub,
        total=total,
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda _i: rng.random() < 0.5,
    )
    expected = sorted({f"{r}{i}" for r in "abc" for i in range(per_region)} - acked)
    wait_backlog(lab, "a", topic, sub, len(expected))
    wait_backlog(lab, "b", topic, sub, len(expected))
    assert sorted(consume_all(lab.service_url(to), topic, sub)) == expected


def test_three_regions_with_colliding_ledgers(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/abc/three-{unique}", f"three-{unique}"
    for region in ("a", "b", "c"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    for region in ("a", "b", "c"):
        produce(lab.service_url(region), topic, [f"{region}{i}".encode() for i in range(30)])
    ack_half_in_c_then_fail_over(lab, unique, topic, sub, per_region=30, to="a")


def test_two_live_regions_keep_syncing_while_a_third_is_frozen(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/abc/frozen-{unique}", f"frozen-{unique}"
    for region in ("a", "b"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    labs.freeze_region(lab.dir, "c", frozen=True)
    try:
        produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(50)])
        wait_backlog(lab, "b", topic, sub, 50)
        acked = consume_some(
            lab,
            "a",
            topic,
            sub,
            total=50,
            consumer_type=pulsar.ConsumerType.Shared,
            choose=lambda i: i % 2 == 0,
        )
        wait_backlog(lab, "b", topic, sub, 50 - len(acked))
    finally:
        labs.freeze_region(lab.dir, "c", frozen=False)
    assert sorted(consume_all(lab.service_url("b"), topic, sub)) == sorted(
        {f"m{i}" for i in range(50)} - acked
    )


def test_agent_killed_mid_apply_restarts_idempotently(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/restart-{unique}", f"restart-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(200)])
    wait_backlog(lab, "b", topic, sub, 200)
    acked = consume_some(
        lab, "a", topic, sub, total=200, consumer_type=pulsar.ConsumerType.Shared, choose=lambda i: i % 4 != 1
    )
    labs.stop_agent(lab.dir, "b", kill=True)  # mid-apply: b's agent may have moved part of the cursor
    try:
        state_before = backlog(lab, "b", topic, sub)
        assert state_before is not None
    finally:
        labs.start_agent(lab.dir, "b")
    wait_backlog(lab, "b", topic, sub, 200 - len(acked))
    settled = lab.admin("b").internal_stats(topic)["cursors"][sub]
    time.sleep(3)  # several more rounds of the restarted agent: nothing may change
    again = lab.admin("b").internal_stats(topic)["cursors"][sub]
    assert (settled["markDeletePosition"], settled["individuallyDeletedMessages"]) == (
        again["markDeletePosition"],
        again["individuallyDeletedMessages"],
    )
    assert sorted(consume_all(lab.service_url("b"), topic, sub)) == sorted(
        {f"m{i}" for i in range(200)} - acked
    )


def test_forged_and_garbage_control_messages_change_nothing(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/forged-{unique}", f"forged-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(10)])
    wait_backlog(lab, "b", topic, sub, 10)
    before = _agent_state(lab, "b")["counters"]
    # A claim that everything of a's ledgers 0..10^6 was acknowledged, signed with a shared HMAC key as
    # earlier releases did (version 1, refused whatever the key), unsigned, altered after signing, and
    # garbage: none may move b's cursor.
    claim = ackstates.encode_ack_state(topic, sub, region="a", acks=_everything())
    forged = envelopes.Envelope(kind=ackstates.ACK_STATE, region="a", seq=2**62, sent_at_ms=0, payload=claim)
    legacy = {**forged.fields(), "version": envelopes.LEGACY_VERSION}
    shared_key = envelopes.canonical(
        {**legacy, "sig": hmac.new(b"k" * 32, envelopes.canonical(legacy), hashlib.sha256).hexdigest()}
    )
    unsigned = json.dumps(forged.fields()).encode()
    key = labs.signer(lab.dir, "a")  # a's own signing key: these messages are genuine
    genuine = envelopes.seal(key, forged)
    altered = genuine.replace(b'"seq":4611686018427387904', b'"seq":4611686018427387905')
    assert altered != genuine, "the alteration must take effect, or the test would send a valid claim"
    control = f"persistent://geo/ab/{labs.CONTROL_TOPIC}"
    produce(lab.service_url("a"), control, [shared_key, unsigned, altered, b"\x00\xffgarbage", b"{}"])

    def rejected() -> int:
        counters = _agent_state(lab, "b")["counters"]
        return sum(v - before.get(k, 0) for k, v in counters.items() if k.startswith("control_rejected_"))

    wait_for(lambda: rejected() >= 5, what="b's agent to reject the five bad control messages")
    time.sleep(1)
    assert backlog(lab, "b", topic, sub) == 10
    unknown_key = "control_rejected_" + envelopes.Reason.UNKNOWN_KEY.value
    assert _agent_state(lab, "b")["counters"].get(unknown_key, 0) - before.get(unknown_key, 0) == 1
    assert _agent_state(lab, "b")["ready"] is True


def _everything() -> OriginAcks:
    return OriginAcks.of({"a": [Span(ledger, 0, 10**6) for ledger in range(200)]})


def test_genuine_messages_copied_onto_a_control_topic_do_not_block_its_claims(lab: Lab, unique: str) -> None:
    """Issue 14: with produce permission only (no key), copy genuine signed envelopes onto geo/ab's control
    topic: a policy-mirror event (here with a sequence number far above the agent's) and a's states for a
    topic of another namespace. b refuses both as misplaced, its replay guard for a does not jump, and a's
    next claims are still applied (they were refused until a restart before)."""
    key = labs.signer(lab.dir, "a")  # a's own signing key: these messages are genuine
    control = f"persistent://geo/ab/{labs.CONTROL_TOPIC}"
    before = _agent_state(lab, "b")["counters"].get("control_rejected_misplaced", 0)
    event = envelopes.Envelope(
        kind="policy-event", region="a", seq=2**62, sent_at_ms=0, payload={"path": "/x"}
    )
    elsewhere = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region="a",
        seq=2**62 + 1,
        sent_at_ms=0,
        payload=ackstates.encode_ack_states(
            [ackstates.AckStateMessage(f"persistent://geo/abc/x-{unique}", "s", "a", _everything())],
            region="a",
        ),
    )
    produce(lab.service_url("a"), control, [envelopes.seal(key, event), envelopes.seal(key, elsewhere)])
    wait_for(
        lambda: _agent_state(lab, "b")["counters"].get("control_rejected_misplaced", 0) >= before + 2,
        what="b's agent to refuse both copied messages as misplaced",
    )
    assert _agent_state(lab, "b")["guard"].get(control, {}).get("a", 0) < 2**62
    topic, sub = f"persistent://geo/ab/copied-{unique}", f"copied-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    produce(lab.service_url("a"), topic, [f"m{i}".encode() for i in range(20)])
    wait_backlog(lab, "b", topic, sub, 20)
    acked = consume_some(
        lab, "a", topic, sub, total=20, consumer_type=pulsar.ConsumerType.Shared, choose=lambda i: i % 2 == 0
    )
    wait_backlog(lab, "b", topic, sub, 20 - len(acked))


def test_replayed_old_control_message_is_rejected(lab: Lab, unique: str) -> None:
    key = labs.signer(lab.dir, "a")  # a's own signing key: these messages are genuine
    control = f"persistent://geo/ab/{labs.CONTROL_TOPIC}"
    # Only meaningful once b has accepted a newer message from a (a restarted agent starts a new guard).
    wait_for(
        lambda: _agent_state(lab, "b")["guard"].get(control, {}).get("a", 0) > 1,
        timeout_s=60,
        what="b's agent to have accepted a message from a",
    )
    before = _agent_state(lab, "b")["counters"].get("control_rejected_replayed", 0)
    old = envelopes.Envelope(
        kind=ackstates.ACK_STATE,
        region="a",
        seq=1,
        sent_at_ms=0,
        payload=ackstates.encode_ack_state(
            f"persistent://geo/ab/x-{unique}", "s", region="a", acks=_everything()
        ),
    )
    produce(lab.service_url("a"), control, [envelopes.seal(key, old)])
    wait_for(
        lambda: _agent_state(lab, "b")["counters"].get("control_rejected_replayed", 0) > before,
        what="b's agent to reject a replayed (old sequence number) message",
    )


def test_key_shared_failover_keeps_per_key_order(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/keys-{unique}", f"keys-{unique}"
    for region in ("a", "b"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.KeyShared)
    keys = [f"k{i % 6}" for i in range(60)]
    produce(lab.service_url("a"), topic, [f"m{i:02d}".encode() for i in range(60)], key=keys.__getitem__)
    wait_backlog(lab, "b", topic, sub, 60)
    # Acknowledge everything but m13 (k1's third message) and m04 (k4's first): the later k1 and k4
    # messages are acknowledged in a, out of order.
    unacked = {"m13", "m04"}
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=60,
        consumer_type=pulsar.ConsumerType.KeyShared,
        choose=lambda i: f"m{i:02d}" not in unacked,
    )
    assert len(acked) == 58
    # b must not hold the later k1/k4 messages as acknowledged while m13/m04 are not: it gets k1 from m13
    # on and k4 from m04 on again (duplicates), everything else acknowledged.
    redelivered = {
        f"m{i:02d}" for i in range(60) if (keys[i] == "k1" and i >= 13) or (keys[i] == "k4" and i >= 4)
    }
    wait_backlog(lab, "b", topic, sub, len(redelivered))
    got = consume_all(lab.service_url("b"), topic, sub, consumer_type=pulsar.ConsumerType.KeyShared)
    assert set(got) == redelivered
    for key in ("k1", "k4"):
        mine = [m for m in got if keys[int(m[1:])] == key]
        assert mine == sorted(mine), f"{key} delivered out of order in b: {mine}"


def test_same_producer_name_in_three_regions_is_resolved_by_the_interceptor(lab: Lab, unique: str) -> None:
    # Producer names that do not name their cluster, the same in every region, and colliding ledger ids:
    # only the entry's real origin (the broker interceptor's index, or the replicated-from header) can tell
    # the copies apart. A wrong guess would acknowledge the wrong messages in the third region.
    topic, sub = f"persistent://geo/abc/named-{unique}", f"named-{unique}"
    for region in ("a", "b", "c"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    before = {r: _agent_state(lab, r)["counters"] for r in ("a", "b", "c")}
    for region in ("a", "b", "c"):
        with messaging.client(lab.service_url(region)) as c:
            producer = c.create_producer(topic, producer_name=f"orders-{unique}", batching_enabled=False)
            for i in range(20):
                producer.send(f"{region}{i}".encode())
            producer.close()
    ack_half_in_c_then_fail_over(lab, unique, topic, sub, per_region=20, to="b")
    after = {r: _agent_state(lab, r)["counters"] for r in ("a", "b", "c")}
    hits = sum(after[r].get("origin_plugin_hits", 0) - before[r].get("origin_plugin_hits", 0) for r in after)
    lookups = sum(after[r].get("origin_lookups", 0) - before[r].get("origin_lookups", 0) for r in after)
    # 40 replicated entries per region: the interceptor names them; per-entry lookups stay rare.
    assert hits >= 100, (hits, lookups)
    assert lookups < hits, (hits, lookups)


def test_a_stamp_set_by_an_application_acknowledges_nothing_in_another_region(lab: Lab, unique: str) -> None:
    """Anyone with produce permission can set ``__MSG_PROP_REPL_SOURCE_POSITION`` (brokers keep it). An
    application in a stamps its message with the position in b of a message b published: acknowledging the
    forged message in a must not acknowledge b's message (with two regions the stamp alone names it). The
    interceptor's record says the forged entry was published in a, so it is indexed as a's own."""
    topic, sub = f"persistent://geo/ab/forged-{unique}", f"forged-{unique}"
    for region in ("a", "b"):
        subscribe_first(lab, region, topic, sub, pulsar.ConsumerType.Shared)
    ((_, in_b),) = produce(lab.service_url("b"), topic, [b"published-in-b"])
    with messaging.client(lab.service_url("a")) as c:
        producer = c.create_producer(topic, batching_enabled=False)
        producer.send(b"forged-in-a", properties={"__MSG_PROP_REPL_SOURCE_POSITION": str(in_b)})
        producer.close()
    wait_backlog(lab, "a", topic, sub, 2)
    kept = [m for m in read_all(lab.service_url("a"), topic, expect=2) if m.data == b"forged-in-a"]
    assert kept[0].properties.get("__MSG_PROP_REPL_SOURCE_POSITION") == str(in_b), "the broker kept the stamp"
    acked_at = time.time()
    with messaging.client(lab.service_url("a")) as c:  # acknowledge only the forged message
        consumer = c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
        for _ in range(2):
            msg = consumer.receive(timeout_millis=30000)
            if msg.data() == b"forged-in-a":
                consumer.acknowledge(msg)
        time.sleep(0.3)
        consumer.close()
    wait_backlog(lab, "a", topic, sub, 1)
    wait_for(
        lambda: _agent_state(lab, "a")["counters"].get("spoofed_stamps", 0) >= 1,
        timeout_s=30,
        what="a's agent to count the forged stamp",
    )

    def b_heard_from_a() -> bool:
        for entry in _agent_state(lab, "b")["synced"]:
            if entry["topic"] == topic and entry["subscription"] == sub:
                return float((entry.get("received_from") or {}).get("a") or 0) >= acked_at
        return False

    wait_for(b_heard_from_a, timeout_s=45, what="b's agent to receive a's claims")
    wait_backlog(lab, "b", topic, sub, 1)  # the forged message's copy acknowledged, b's own message not
    got = consume_all(lab.service_url("b"), topic, sub)
    # b's own message is still there, and the forged message's copy was matched to a's acknowledgement: the
    # copy carries two stamp properties, and the interceptor records the replicator's (the last one).
    assert got == ["published-in-b"], got
