"""The plugin endpoints' codec against the vectors the Java plugin is tested with, and its invariants."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core.pluginapi import MAX_BATCH_SIZE, BatchState, CursorReport, Feed, PluginApiError, Status
from geosync_core.pluginwrites import (
    WRITE_VERSION,
    AckItem,
    AckResult,
    BadRequest,
    BatchAck,
    ack_set,
    decode_ack_request,
    encode_ack_request,
    unacked,
)
from geosync_core.positions import Position

from .strategies import entries, fast, positions

VECTORS: dict[str, Any] = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "plugin-api" / "vectors.json").read_text(
        "utf-8"
    )
)


def named(key: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("vector", VECTORS[key], ids=lambda v: v["name"])


def test_status_strings_and_limits_are_the_shared_ones() -> None:
    assert [s.value for s in Status] == VECTORS["statuses"]
    assert VECTORS["max_batch_size"] == MAX_BATCH_SIZE
    assert VECTORS["version"] == 1


@named("ack_sets")
def test_ack_sets_convert_both_ways(vector: dict[str, Any]) -> None:
    words = ack_set(vector["size"], vector["acked"])
    assert list(words) == vector["ack_set"]
    assert list(unacked(words)) == vector["unacked"]


@named("cursor_reports")
def test_reports_decode_and_encode_to_the_same_object(vector: dict[str, Any]) -> None:
    report = CursorReport.from_wire(vector["wire"])
    assert report.to_wire() == vector["wire"]


def test_a_report_decodes_to_typed_values() -> None:
    [vector] = [v for v in VECTORS["cursor_reports"] if v["name"] == "partly-acknowledged-batches"]
    report = CursorReport.from_wire(vector["wire"])
    assert report.mark_delete == Position(12, 4)
    assert report.batches == (
        BatchState(Position(12, 8), (3, 4, 9)),
        BatchState(Position(13, 0), (0,)),
    )
    assert not report.batches_truncated


def test_reports_from_plugins_without_batches_decode_with_none() -> None:
    wire = {
        "topic": "t",
        "subscription": "s",
        "status": "ok",
        "mark_delete": "3:-1",
        "individually_deleted": "[]",
    }
    assert CursorReport.from_wire(wire).batches == ()


@named("feeds")
def test_feeds_decode_and_encode_to_the_same_object(vector: dict[str, Any]) -> None:
    feed = Feed.from_wire(vector["wire"])
    assert feed.to_wire() == vector["wire"]
    assert feed.seq == vector["wire"]["seq"]


@named("results")
def test_results_decode_and_encode_to_the_same_object(vector: dict[str, Any]) -> None:
    result = AckResult.from_wire(vector["wire"])
    assert result.to_wire() == vector["wire"]
    assert result.status.value == vector["wire"]["status"]
    assert (result.cursor is not None) == (result.status is Status.OK)


@named("ack_items")
def test_valid_items_parse_and_encode_canonically(vector: dict[str, Any]) -> None:
    item = AckItem.from_wire(vector["item"])
    assert item == AckItem.from_wire(vector["canonical"])
    assert item.to_wire() == vector["canonical"]
    assert [(str(b.position), b.whole, list(b.ack_set())) for b in item.batches] == [
        (s["position"], s["whole"], s["ack_set"]) for s in vector["ack_sets"]
    ]


@named("bad_items")
def test_bad_items_are_refused_with_the_brokers_reason(vector: dict[str, Any]) -> None:
    with pytest.raises(BadRequest) as e:
        AckItem.from_wire(vector["item"])
    assert vector["error_contains"] in str(e.value)


@named("bad_bodies")
def test_bad_bodies_are_refused_whole(vector: dict[str, Any]) -> None:
    with pytest.raises(BadRequest) as e:
        decode_ack_request(vector["body"].encode())
    assert vector["error_contains"] in str(e.value)


def test_a_request_round_trips() -> None:
    items = [AckItem.from_wire(v["canonical"]) for v in VECTORS["ack_items"]]
    body = json.dumps(encode_ack_request(items)).encode()
    assert [AckItem.from_wire(i) for i in decode_ack_request(body)] == items


def test_malformed_answers_are_errors_not_values() -> None:
    with pytest.raises(PluginApiError):
        AckResult.from_wire({"status": "exploded"})
    with pytest.raises(PluginApiError):
        CursorReport.from_wire({"topic": "t", "subscription": "s", "mark_delete": "x"})
    with pytest.raises(PluginApiError):
        Feed.from_wire({"epoch": "e", "seq": "7", "cursors": []})
    with pytest.raises(BadRequest):
        BatchAck(Position(1, 1), 3, frozenset({3}))


# -- properties ------------------------------------------------------------------------------------


@st.composite
def batch_acks(draw: st.DrawFn) -> BatchAck:
    size = draw(st.integers(1, 200))
    acked = draw(st.frozensets(st.integers(0, size - 1)))
    return BatchAck(draw(entries), size, acked)


items = st.builds(
    AckItem,
    st.text(min_size=1, max_size=8),
    st.text(min_size=1, max_size=8),
    st.none() | entries,
    st.lists(entries, max_size=4).map(tuple),
    st.lists(batch_acks(), max_size=3).map(tuple),
)


@fast
@given(batch_acks())
def test_ack_sets_leave_exactly_the_unacknowledged_indexes(batch: BatchAck) -> None:
    words = batch.ack_set()
    assert len(words) == (batch.size + 63) // 64
    assert all(-(2**63) <= w < 2**63 for w in words)
    assert unacked(words) == tuple(i for i in range(batch.size) if i not in batch.acked)
    assert batch.whole == (unacked(words) == ())


@fast
@given(items)
def test_items_round_trip(item: AckItem) -> None:
    assert AckItem.from_wire(json.loads(json.dumps(item.to_wire()))) == item


@fast
@given(positions, st.lists(st.tuples(entries, st.lists(st.integers(0, 300), max_size=5)), max_size=3))
def test_reports_round_trip(mark_delete: Position, raw: list[tuple[Position, list[int]]]) -> None:
    report = CursorReport(
        "persistent://geo/ab/t",
        "s",
        mark_delete,
        "[]",
        tuple(BatchState(p, tuple(sorted(set(i)))) for p, i in raw),
    )
    assert CursorReport.from_wire(json.loads(json.dumps(report.to_wire()))) == report


def test_a_write_planned_from_a_mark_delete_is_stale_on_a_cursor_below_it() -> None:
    """``planned_from`` (write_version 2): the plugin applies nothing on a cursor moved below the mark-delete
    the write was planned from (a reset since), and writes as always on one at or above it."""
    item = AckItem("t", "s", mark_delete=Position(12, 43), planned_from=Position(12, 41))
    assert item.stale_on(Position(12, -1))
    assert item.stale_on(Position(11, 99))
    assert not item.stale_on(Position(12, 41))
    assert not item.stale_on(Position(12, 50))
    assert not AckItem("t", "s", mark_delete=Position(12, 43)).stale_on(Position(12, -1))
    assert "planned_from" not in AckItem("t", "s").to_wire()  # what an older plugin takes


def test_feeds_say_which_write_items_the_plugin_takes() -> None:
    assert all(Feed.from_wire(v["wire"]).write_version == 1 for v in VECTORS["feeds"])  # older plugins
    assert all(Feed.from_wire(v["wire"]).write_version == WRITE_VERSION == 2 for v in VECTORS["acked_feeds"])
    assert Feed.from_wire(VECTORS["acked_feeds"][0]["wire"], acked=False).write_version == 2
    for bad in ("2", True, 0, None):
        with pytest.raises(PluginApiError, match="write_version"):
            Feed.from_wire({**VECTORS["feeds"][0]["wire"], "write_version": bad})


def test_a_stale_answer_is_the_cursor_with_nothing_acknowledged() -> None:
    [vector] = [v for v in VECTORS["results"] if v["name"] == "stale"]
    result = AckResult.from_wire(vector["wire"])
    assert result.stale
    assert result.acknowledged == 0
    assert result.cursor is not None
    assert result.cursor.mark_delete == Position(12, -1)
    assert not AckResult.from_wire({**vector["wire"], "stale": False}).stale  # not written by plugins
    for bad in ({"stale": 1}, {"stale": "yes"}, {"acknowledged": 3}):
        with pytest.raises(PluginApiError, match="stale"):
            AckResult.from_wire({**vector["wire"], **bad})
