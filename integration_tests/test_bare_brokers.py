"""Brokers without GeoSync's plugins (Pulsar as shipped): the agents find out by themselves and sync through
the admin API, exactly for what that path promises (docs/limits.md: per entry, holes through a shadow
consumer while no application consumer is connected in the target).

The shared lab loads the plugins (its agents are told not to use them in ``test_exact_sync``'s
``admin-api`` runs); here the brokers have none at all, so what is tested is the agent learning it from the
brokers' answers: no feed, no origin index, no cursor writes. The module boots its own two-region lab
(``geoctl lab up --no-plugins``), or reuses the one ``GEOSYNC_TEST_BARE_LAB`` names (left running).
"""

from __future__ import annotations

import pathlib
import random
from collections.abc import Iterator

import pulsar
import pytest
import requests

from geosync_lab import labs
from integration_tests.helpers import Lab, agent_state, consume_all, given_or_booted, produce, wait_for
from integration_tests.test_exact_sync import (
    consume_some,
    cumulative_acks_in_a,
    subscribe_first,
    wait_backlog,
)

REGIONS = ["a", "b"]


def _reusable(path: pathlib.Path) -> bool:
    try:
        state = labs.status(path)
        topology = labs.load(path)
    except Exception:
        return False
    bare = all(r.lab.get("plugins") is False for r in topology.regions.values())
    return bool(state["healthy"]) and sorted(state["regions"]) == REGIONS and bare


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def boot(lab_dir: pathlib.Path) -> None:
        labs.up(lab_dir, REGIONS, plugins_loaded=False)

    with given_or_booted("GEOSYNC_TEST_BARE_LAB", _reusable, boot, tmp_path_factory.mktemp("bare")) as lab:
        yield lab


def test_the_brokers_load_no_plugin_and_the_agents_learn_it(bare: Lab, unique: str) -> None:
    topic = f"persistent://geo/ab/bare-{unique}"
    produce(bare.service_url("a"), topic, [b"x"])
    # The plugin's endpoints are not there (the shared lab's brokers answer them).
    answer = requests.get(
        f"{bare.topology.region('a').admin_url}/admin/v2/geosync/cursors?since=0", timeout=5
    )
    assert answer.status_code == 404, answer.text[:200]

    def learned() -> bool:
        caps = agent_state(bare, "b")["capabilities"]
        return caps["plugin_feed"] is False and caps["plugin_cursor_writes"] is not True

    wait_for(
        learned, timeout_s=30, what=lambda: f"b's agent to learn: {agent_state(bare, 'b')['capabilities']}"
    )


def test_cumulative_acknowledgements_fail_over_exactly(bare: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/bare-excl-{unique}", f"excl-{unique}"
    payloads, acked = cumulative_acks_in_a(bare, topic, sub)
    got = consume_all(bare.service_url("b"), topic, sub, consumer_type=pulsar.ConsumerType.Exclusive)
    assert sorted(got) == sorted(set(payloads) - acked)


def test_holes_from_both_regions_fail_over_exactly(bare: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/bare-shared-{unique}", f"shared-{unique}"
    subscribe_first(bare, "a", topic, sub, pulsar.ConsumerType.Shared)
    produce(bare.service_url("a"), topic, [f"a{i}".encode() for i in range(50)])
    produce(bare.service_url("b"), topic, [f"b{i}".encode() for i in range(50)])
    wait_backlog(bare, "a", topic, sub, 100)
    rng = random.Random(unique)
    acked = consume_some(
        bare,
        "a",
        topic,
        sub,
        total=100,
        consumer_type=pulsar.ConsumerType.Shared,
        choose=lambda _i: rng.random() < 0.6,
    )
    everything = {f"a{i}" for i in range(50)} | {f"b{i}" for i in range(50)}
    expected = sorted(everything - acked)
    wait_backlog(bare, "b", topic, sub, len(expected), timeout_s=60)
    counters = agent_state(bare, "b")["counters"]
    assert int(counters.get("plugin_acks", 0)) == 0, counters
    got = consume_all(bare.service_url("b"), topic, sub)
    assert sorted(got) == expected
