"""A cursor jump no consumer made in a passive region acknowledges nothing elsewhere (issue 45, invariant 7).

Region a consumes with holes; in b, where no consumer is connected, an operator skips the backlog, clears it
or expires it, and b's cursor jumps to the end. With ``claims_from: acknowledgements``, the default (decision
0015), b's agent claims only what b's consumers acknowledged, read from the broker plugin's feed, so a's
unacknowledged messages stay unacknowledged in a. The first test is the control: with ``claims_from: cursor``
(what an agent without the plugin does) b claims its cursor, and the jump takes a's backlog with it (the loss
the issue describes; a limit the docs state). It also shows that this order of events reaches the path on a
real region."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterator

import pulsar
import pytest

from geosync_lab import labs
from integration_tests.helpers import Lab, consume_all, produce, wait_for
from integration_tests.test_exact_sync import (
    _agent_ready,
    backlog,
    consume_some,
    subscribe_first,
    wait_backlog,
)

pytestmark = pytest.mark.lab

SETTLE_S = 15.0
"""How long the agents get, after b's jump, to carry it to a."""

JUMPS = {"skip": "skip/100", "clear-backlog": "skip_all", "expiry": "expireMessages/1"}
"""Admin operations that move a cursor with no consumer (``pulsar-admin topics skip``, ``clear-backlog``,
``expire-messages``): their REST path under the subscription."""


def jump(lab: Lab, region: str, topic: str, sub: str, op: str) -> None:
    admin = lab.admin(region)
    if op == "expiry":
        time.sleep(1.5)  # every message older than a second
    admin.post(f"/admin/v2/{admin.topic_path(topic)}/subscription/{sub}/{JUMPS[op]}")


def _restart(lab: Lab, settings: dict[str, object]) -> None:
    for region in ("a", "b"):
        labs.stop_agent(lab.dir, region)
    for region in ("a", "b"):
        labs.start_agent(lab.dir, region, settings=settings)
    for region in ("a", "b"):
        wait_for(functools.partial(_agent_ready, lab, region), timeout_s=120, what=f"agent {region} ready")


@pytest.fixture
def cursor_mode(lab: Lab) -> Iterator[None]:
    """a's and b's agents with ``claims_from: cursor``, the lab's own settings (the default) again after."""
    _restart(lab, {"claims_from": "cursor"})
    try:
        yield
    finally:
        _restart(lab, {})


def _with_holes_then_jump(lab: Lab, unique: str, op: str) -> tuple[str, str, list[str]]:
    """a's Shared consumers acknowledge about half of the first 40 of 60 messages; b syncs; then ``op`` in
    b. The topic, the subscription and the payloads a's consumers never acknowledged."""
    topic, sub = f"persistent://geo/ab/jump-{unique}-{op}", f"jump-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    payloads = [f"m{i}" for i in range(60)]
    produce(lab.service_url("a"), topic, [p.encode() for p in payloads])
    rng = random.Random(unique)
    acked = consume_some(
        lab,
        "a",
        topic,
        sub,
        total=60,
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda i: i < 40 and rng.random() < 0.5,
    )
    expected = sorted(set(payloads) - acked)
    wait_backlog(lab, "b", topic, sub, len(expected))  # b synced: its cursor holds a's holes
    jump(lab, "b", topic, sub, op)
    wait_backlog(lab, "b", topic, sub, 0, timeout_s=20)  # the jump happened
    return topic, sub, expected


def test_control_in_cursor_mode_the_jump_is_acknowledged_in_the_other_region(
    lab: Lab, unique: str, cursor_mode: None
) -> None:
    topic, sub, _held = _with_holes_then_jump(lab, unique, "clear-backlog")
    wait_for(
        lambda: backlog(lab, "a", topic, sub) == 0,
        timeout_s=SETTLE_S + 30,
        what=lambda: f"the jump to reach a in cursor mode (a's backlog {backlog(lab, 'a', topic, sub)})",
    )


@pytest.mark.parametrize("op", sorted(JUMPS))
def test_a_jump_in_the_passive_region_acknowledges_nothing_in_the_consuming_one(
    lab: Lab, unique: str, op: str
) -> None:
    topic, sub, expected = _with_holes_then_jump(lab, unique, op)
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        in_a = backlog(lab, "a", topic, sub)
        assert in_a == len(expected), f"b's {op} acknowledged messages in a no consumer acknowledged: {in_a}"
        time.sleep(1.0)
    assert sorted(consume_all(lab.service_url("a"), topic, sub)) == expected
