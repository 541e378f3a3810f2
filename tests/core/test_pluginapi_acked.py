"""The feed's ``acked`` blocks (what consumers acknowledged, from the broker plugin): the shared vectors the
Java plugin builds by replaying acknowledgements, the reader's refusals, and that no input crashes it."""

from __future__ import annotations

import contextlib
import json
import pathlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.pluginapi import ACKED_VERSION, AckedSet, BatchState, Feed, PluginApiError
from geosync_core.positions import Position
from geosync_core.rangesets import RangeSet

from .strategies import entries, fast, positions, ranges

VECTORS: dict[str, Any] = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "plugin-api" / "vectors.json").read_text(
        "utf-8"
    )
)
T = "persistent://geo/ab/orders"


def named(key: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("vector", VECTORS[key], ids=lambda v: v["name"])


@named("acked_feeds")
def test_acked_feeds_decode_and_encode_to_the_same_object(vector: dict[str, Any]) -> None:
    feed = Feed.from_wire(vector["wire"])
    assert feed.acked is not None
    assert feed.to_wire() == vector["wire"]


@named("acked_decoded_only")
def test_other_acked_answers_decode_and_encode_to_the_same_object(vector: dict[str, Any]) -> None:
    assert Feed.from_wire(vector["wire"]).to_wire() == vector["wire"]


def test_an_acked_block_decodes_to_what_consumers_acknowledged() -> None:
    feed = Feed.from_wire(VECTORS["acked_feeds"][0]["wire"])
    assert feed.acked is not None
    (billing,) = feed.acked
    assert billing.topic == T
    assert billing.subscription == "billing"
    assert billing.cumulative == Position(12, 3)
    assert Position(12, 5) in billing.ranges
    assert Position(12, 7) not in billing.ranges
    assert Position(13, 0) in billing.ranges
    assert billing.batches == (BatchState(Position(12, 11), (3, 4, 5, 6, 7, 8, 9)),)
    assert not billing.overflowed
    assert feed.acked_lost == 0
    lost = Feed.from_wire(VECTORS["acked_decoded_only"][0]["wire"])
    assert lost.acked is not None
    assert lost.acked[0].overflowed
    assert lost.acked_lost == 2


def test_a_plugin_without_acked_sets_is_told_by_their_absence() -> None:
    old = Feed.from_wire(VECTORS["feeds"][1]["wire"])
    assert old.acked is None
    assert "acked_version" not in old.to_wire()
    empty = Feed.from_wire(
        {"epoch": "e", "seq": 1, "cursors": [], "acked_version": 1, "acked": [], "acked_lost": 0}
    )
    assert empty.acked == ()


def test_an_acked_version_this_reader_does_not_know_is_read_without_them() -> None:
    newer = {"epoch": "e", "seq": 1, "cursors": [], "acked_version": ACKED_VERSION + 1, "acked": "anything"}
    assert Feed.from_wire(newer).acked is None


def test_a_reader_that_claims_from_cursors_leaves_the_acked_blocks_unread() -> None:
    wire = VECTORS["acked_feeds"][0]["wire"]
    unread = Feed.from_wire(wire, acked=False)
    assert unread.acked is None
    assert unread.acked_lost == 0
    assert unread.cursors == Feed.from_wire(wire).cursors
    # Not read, so not refused either: what the blocks hold is no concern of such a reader.
    bad = {**wire, "acked": [VECTORS["bad_acked"][0]["acked"]], "acked_lost": -1}
    assert Feed.from_wire(bad, acked=False).acked is None


@named("bad_acked")
def test_bad_acked_blocks_are_refused(vector: dict[str, Any]) -> None:
    with pytest.raises(PluginApiError, match=vector["error_contains"]):
        AckedSet.from_wire(vector["acked"])
    feed = {
        "epoch": "e",
        "seq": 1,
        "cursors": [],
        "acked_version": 1,
        "acked": [vector["acked"]],
        "acked_lost": 0,
    }
    with pytest.raises(PluginApiError):
        Feed.from_wire(feed)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"acked": {}}, "'acked' must be a list"),
        ({"acked_lost": -1}, "acked_lost"),
        ({"acked_lost": "0"}, "acked_lost"),
        ({"acked_lost": True}, "acked_lost"),
        ({"acked_version": "1"}, "acked_version"),
        ({"acked_version": 1.0}, "acked_version"),
        (
            {"acked": [VECTORS["acked_feeds"][0]["wire"]["acked"][0]] * 2},
            "twice",
        ),
    ],
)
def test_bad_feed_level_acked_fields_are_refused(change: dict[str, Any], error: str) -> None:
    wire = {**VECTORS["acked_feeds"][0]["wire"], **change}
    with pytest.raises(PluginApiError, match=error):
        Feed.from_wire(wire)


def test_a_batch_listed_twice_is_refused() -> None:
    block = {
        "topic": T,
        "subscription": "s",
        "ranges": "[]",
        "cumulative": None,
        "batches": [{"position": "1:1", "unacked": [1]}, {"position": "1:1", "unacked": [2]}],
        "overflowed": False,
    }
    with pytest.raises(PluginApiError, match="twice"):
        AckedSet.from_wire(block)


# -- properties ------------------------------------------------------------------------------------


@st.composite
def acked_sets(draw: st.DrawFn) -> AckedSet:
    batches = draw(st.dictionaries(entries, st.frozensets(st.integers(0, 130), min_size=1), max_size=3))
    return AckedSet(
        T,
        draw(st.text(min_size=1, max_size=6)),
        RangeSet.of(draw(st.lists(ranges(), max_size=5))),
        draw(st.none() | positions),
        tuple(BatchState(p, tuple(sorted(i))) for p, i in sorted(batches.items())),
        draw(st.booleans()),
    )


@fast
@given(st.lists(acked_sets(), max_size=3, unique_by=lambda a: a.subscription), st.integers(0, 5))
def test_feeds_with_acked_sets_round_trip(acked: list[AckedSet], lost: int) -> None:
    feed = Feed("e", 3, (), tuple(acked), lost)
    assert Feed.from_wire(json.loads(json.dumps(feed.to_wire()))) == feed


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@fast
@given(
    st.fixed_dictionaries(
        {"topic": st.sampled_from([T, "", 5]), "subscription": st.sampled_from(["s", None])},
        optional={
            "ranges": st.sampled_from(["[]", "[(1:1..1:3]]", "[(1:3..1:1]]", "(", 7]) | st.text(max_size=12),
            "cumulative": st.sampled_from([None, "1:1", "-1:3", "1:-1", "x", 1]),
            "batches": json_values,
            "overflowed": json_values,
        },
    )
)
def test_any_acked_block_is_a_value_or_a_plugin_api_error(block: dict[str, Any]) -> None:
    with contextlib.suppress(PluginApiError):
        AckedSet.from_wire(block)


@fast
@given(json_values)
def test_any_json_in_the_acked_fields_is_a_feed_or_a_plugin_api_error(value: Any) -> None:
    for key in ("acked", "acked_lost", "acked_version"):
        wire = {**VECTORS["acked_feeds"][0]["wire"], key: value}
        with contextlib.suppress(PluginApiError):
            Feed.from_wire(wire)


@named("acked_feeds")
def test_the_blocks_are_kept_as_the_answer_gave_them_for_the_journal(vector: dict[str, Any]) -> None:
    """The agent's journal writes the blocks as they came (``acked_wire``), not encoded again; read back, they
    are the same blocks."""
    feed = Feed.from_wire(vector["wire"])
    assert feed.acked is not None
    assert feed.acked_wire_or_encoded() == vector["wire"]["acked"]
    assert tuple(AckedSet.from_wire(b) for b in feed.acked_wire_or_encoded()) == feed.acked
    # not from an answer: encoded
    built = Feed(epoch=feed.epoch, seq=feed.seq, acked=feed.acked, write_version=feed.write_version)
    assert built.acked_wire is None
    assert built.acked_wire_or_encoded() == vector["wire"]["acked"]
    assert built == feed  # the wire form is no part of the value
