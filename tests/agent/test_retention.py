"""Namespaces that retain no acknowledged message are named: a message replicated into a region before
GeoSync creates its subscription there is held by no cursor, and Pulsar deletes its ledger at the next
rollover, unload or broker restart (a CI failover lost two messages that way)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from geosync_agent import discovering
from tests.agent.fakes import AdminView
from tests.agent.pairs import NS, pair


@pytest.mark.parametrize(
    ("policy", "defaults", "kept"),
    [
        (None, {}, False),  # Pulsar's defaults: 0 and 0
        (None, {"defaultRetentionTimeInMinutes": "0", "defaultRetentionSizeInMB": "0"}, False),
        (None, {"defaultRetentionTimeInMinutes": "60", "defaultRetentionSizeInMB": "-1"}, True),
        ({"retentionTimeInMinutes": 0, "retentionSizeInMB": -1}, {}, False),
        ({"retentionTimeInMinutes": 60, "retentionSizeInMB": 0}, {}, False),
        ({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}, {}, True),
        (
            {"retentionTimeInMinutes": 120, "retentionSizeInMB": 1024},
            {"defaultRetentionTimeInMinutes": "0"},
            True,
        ),
        ({"retentionTimeInMinutes": "x", "retentionSizeInMB": 10}, {}, False),
        ({"retentionTimeInMinutes": True, "retentionSizeInMB": 10}, {}, False),
    ],
)
def test_retention_is_the_namespaces_policy_or_the_brokers_defaults(
    policy: dict[str, Any] | None, defaults: dict[str, Any], kept: bool
) -> None:
    assert discovering.retains(policy, defaults) is kept


def test_a_namespace_without_retention_is_named_once_until_it_gets_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, _ = pair()
    a.region.retained[NS] = None  # no policy; the fake brokers' defaults are Pulsar's: none
    with caplog.at_level(logging.WARNING, logger="geosync.agent"):
        for _ in range(3):
            a.discover()
            a.step()
    assert a.agent.status()["namespaces_without_retention"] == [NS]
    said = [r.getMessage() for r in caplog.records if "retains no acknowledged message" in r.getMessage()]
    assert len(said) == 1, said
    assert f"pulsar-admin namespaces set-retention {NS}" in said[0]
    a.region.retained[NS] = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    a.discover()
    a.step()
    assert a.agent.status()["namespaces_without_retention"] == []


def test_the_brokers_defaults_are_read_only_for_namespaces_without_a_policy() -> None:
    a, _ = pair()
    calls: list[str] = []

    def runtime_configuration() -> dict[str, Any]:
        calls.append("runtime")
        return {}

    a.region.runtime_configuration = runtime_configuration  # type: ignore[method-assign]
    assert discovering.unretained(AdminView(a.region), [NS]) == ()
    assert calls == []
    a.region.retained[NS] = None
    assert discovering.unretained(AdminView(a.region), [NS, NS]) == (NS, NS)
    assert calls == ["runtime"]  # once per pass
