from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.envelopes import Envelope, Reason, Rejected, open_envelope
from geosync_core.markers import (
    PROPERTY,
    SNAPSHOT_REQUEST,
    Marker,
    Snapshot,
    SnapshotRequest,
    SnapshotResponse,
    Update,
    decode_body,
    decode_marker,
    encode_body,
    encode_marker,
    is_marker,
    kind_of,
)
from geosync_core.positions import Position

from .strategies import fast

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "markers" / "vectors.json").read_text("utf-8")
)
KEY = bytes.fromhex(VECTORS["key_hex"])
TOPIC = VECTORS["topic"]

names = st.text(min_size=1, max_size=8).filter(
    lambda s: s.encode("utf-8", "surrogatepass") == s.encode("utf-8", "ignore")
)
entries = st.builds(Position, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
position_maps = st.dictionaries(names, entries, max_size=4).map(lambda d: tuple(d.items()))
markers: st.SearchStrategy[Marker] = st.one_of(
    st.builds(SnapshotRequest, snapshot_id=names, source_region=names, round=st.sampled_from([1, 2])),
    st.builds(SnapshotResponse, snapshot_id=names, source_region=names, region=names, position=entries),
    st.builds(Snapshot, snapshot_id=names, region=names, local_position=entries, positions=position_maps),
    st.builds(Update, subscription=names, region=names, positions=position_maps),
)


# --- shared vectors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vectors(vector: dict[str, Any]) -> None:
    wire = bytes.fromhex(vector["wire_hex"])
    assert wire == vector["wire"].encode()
    assert vector["properties"] == {PROPERTY: vector["kind"]}
    marker = decode_marker(KEY, vector["properties"], wire, topic=TOPIC)
    assert not isinstance(marker, Rejected), marker
    assert kind_of(marker) == vector["kind"]
    assert marker.sender == vector["region"]
    assert encode_body(marker, topic=TOPIC) == vector["body"]
    props, again = encode_marker(KEY, marker, topic=TOPIC, seq=vector["seq"], sent_at_ms=vector["sent_at_ms"])
    assert (props, again) == (vector["properties"], wire)


@pytest.mark.parametrize("vector", VECTORS["rejected"], ids=lambda v: v["name"])
def test_rejected_vectors(vector: dict[str, Any]) -> None:
    got = decode_marker(KEY, vector["properties"], bytes.fromhex(vector["wire_hex"]), topic=TOPIC)
    assert got == Rejected(Reason(vector["reason"]))


def test_vectors_cover_every_kind() -> None:
    assert {v["kind"] for v in VECTORS["valid"]} == {
        "snapshot-request",
        "snapshot-response",
        "snapshot",
        "update",
    }


# --- properties -------------------------------------------------------------------------------------


@fast
@given(markers, st.integers(0, 2**63 - 1))
def test_encode_decode_round_trips(marker: Marker, seq: int) -> None:
    props, wire = encode_marker(KEY, marker, topic=TOPIC, seq=seq, sent_at_ms=0)
    assert is_marker(props)
    assert decode_marker(KEY, props, wire, topic=TOPIC) == marker
    assert decode_marker(b"other key", props, wire, topic=TOPIC) == Rejected(Reason.BAD_SIGNATURE)
    # A genuine marker copied into another topic (or another partition of its topic) is refused.
    assert decode_marker(KEY, props, wire, topic=TOPIC + "x") == Rejected(Reason.MISPLACED)
    opened = open_envelope(KEY, wire)
    assert isinstance(opened, Envelope)
    assert (opened.kind, opened.region, opened.seq) == (kind_of(marker), marker.sender, seq)


@settings(fast, max_examples=200)
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=3), st.binary(max_size=200))
def test_decode_never_raises_on_garbage(properties: dict[str, str], data: bytes) -> None:
    assert isinstance(
        decode_marker(KEY, properties, data, topic=TOPIC),
        SnapshotRequest | SnapshotResponse | Snapshot | Update | Rejected,
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(fast, max_examples=200)
@given(
    st.sampled_from(["snapshot-request", "snapshot-response", "snapshot", "update", "x"]),
    st.dictionaries(
        st.sampled_from(
            [
                "version",
                "snapshot_id",
                "source_region",
                "region",
                "round",
                "position",
                "local_position",
                "positions",
                "subscription",
                "topic",
            ]
        ),
        json_values,
    ),
)
def test_decode_body_never_raises(kind: str, body: dict[str, Any]) -> None:
    envelope = Envelope(kind=kind, region="a", seq=1, sent_at_ms=0, payload=body)
    assert isinstance(
        decode_body(envelope, topic=TOPIC), SnapshotRequest | SnapshotResponse | Snapshot | Update | Rejected
    )


def test_is_marker_looks_at_the_property_key_only() -> None:
    assert is_marker({PROPERTY: ""})
    assert is_marker({PROPERTY: "\x00garbage", "other": "x"})
    assert not is_marker({"__geosync_markers": SNAPSHOT_REQUEST})
    assert not is_marker({})


@pytest.mark.parametrize(
    "build",
    [
        lambda: SnapshotRequest(snapshot_id="", source_region="a"),
        lambda: SnapshotRequest(snapshot_id="s", source_region="a", round=3),
        lambda: SnapshotRequest(snapshot_id="s", source_region="a", round=True),
        lambda: SnapshotResponse(snapshot_id="s", source_region="a", region="b", position=Position(1, -1)),
        lambda: Snapshot(snapshot_id="s", region="a", local_position=Position(-1, 0), positions=()),
        lambda: Update(
            subscription="s", region="a", positions=(("b", Position(1, 1)), ("b", Position(1, 2)))
        ),
        lambda: Update(subscription="s", region="a", positions=(("", Position(1, 1)),)),
    ],
)
def test_invalid_markers_cannot_be_built(build: Any) -> None:
    with pytest.raises(ValueError, match=r"must|one position"):
        build()


def test_positions_are_kept_sorted_by_region() -> None:
    update = Update(subscription="s", region="a", positions=(("c", Position(1, 1)), ("b", Position(2, 2))))
    assert update.positions == (("b", Position(2, 2)), ("c", Position(1, 1)))
