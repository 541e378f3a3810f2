"""Bundle ownership as sidecar agents decide it (``geosync_core.ownership``): ranges, the last bundle's closed
end, what ``ownedNamespaces`` answers, and the broker id from the runtime configuration. The lab test
``test_sidecar_agents`` checks the hash against real brokers' ``/bundle`` answers."""

from __future__ import annotations

import pytest

from geosync_core.ownership import FULL_UPPER, Owned, broker_id_from_runtime, moved, topic_hash

NS = "geo/ab"


def topic_hashing(lo: int, hi: int) -> str:
    """A topic of NS whose hash is in [lo, hi)."""
    for i in range(10_000):
        topic = f"persistent://{NS}/t{i}"
        if lo <= topic_hash(topic) < hi:
            return topic
    raise AssertionError("no such topic name in 10,000")


def test_the_hash_is_the_crc32_pulsar_placed_a_real_topic_by() -> None:
    # Seen on a 4.0.8 lab broker: /lookup/v2/topic/persistent/geo/ab/hashcheck-0/bundle answered
    # 0xc0000000_0xffffffff.
    assert topic_hash("persistent://geo/ab/hashcheck-0") == 0xE6F22C44


def test_a_topic_belongs_to_the_bundle_holding_its_hash() -> None:
    owned = Owned.from_owned_namespaces({f"{NS}/0x40000000_0x80000000": {"is_active": True}})
    inside = topic_hashing(0x40000000, 0x80000000)
    below, above = topic_hashing(0, 0x40000000), topic_hashing(0x80000000, FULL_UPPER)
    assert owned.owns(inside)
    assert not owned.owns(below)
    assert not owned.owns(above)
    assert not owned.owns(inside.replace(NS, "geo/other"))


def test_ranges_are_half_open() -> None:
    topic = f"persistent://{NS}/edge"
    h = topic_hash(topic)
    assert Owned({NS: ((h, h + 1),)}).owns(topic)
    assert not Owned({NS: ((h - 1, h),)}).owns(topic)  # the upper end belongs to the next bundle
    assert Owned({NS: ((h, FULL_UPPER),)}).owns(topic)


def test_owned_namespaces_answer_keeps_active_bundles_only() -> None:
    owned = Owned.from_owned_namespaces(
        {
            f"{NS}/0x00000000_0x40000000": {"is_active": True},
            f"{NS}/0x40000000_0x80000000": {"is_active": False},
            "pulsar/127.0.0.1:8080/0x00000000_0xffffffff": {"is_active": True},
            "not a bundle": {},
        }
    )
    assert owned.bundles[NS] == ((0, 0x40000000),)
    assert owned.names()[0] == f"{NS}/0x00000000_0x40000000"
    assert owned.count() == 2  # the broker's own heartbeat namespace counts as a bundle too


def test_moved_names_what_was_lost_and_gained() -> None:
    a, b = topic_hashing(0, 0x80000000), topic_hashing(0x80000000, FULL_UPPER)
    before = Owned({NS: ((0, 0x80000000),)})
    after = Owned({NS: ((0x80000000, FULL_UPPER),)})
    assert moved(before, after, [a, b]) == ([a], [b])
    assert moved(after, after, [a, b]) == ([], [])


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        ({"advertisedAddress": "10.0.0.7", "webServicePort": "Optional[8080]"}, "10.0.0.7:8080"),
        (
            {"advertisedAddress": "b-0", "webServicePort": "Optional.empty", "webServicePortTls": "8443"},
            "b-0:8443",
        ),
        ({"advertisedAddress": "", "webServicePort": "Optional[8080]"}, None),
        ({"advertisedAddress": "b-0", "webServicePort": "Optional.empty"}, None),
        ({}, None),
    ],
)
def test_broker_id_from_runtime_configuration(runtime: dict[str, str], expected: str | None) -> None:
    assert broker_id_from_runtime(runtime) == expected
