from __future__ import annotations

import json
import pathlib
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_adapters import signing
from geosync_core.envelopes import (
    KEYED_VERSION,
    LEGACY_VERSION,
    Envelope,
    Keyring,
    Reason,
    Rejected,
    open_envelope,
    seal,
)
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
    is_genuine,
    is_marker,
    kind_of,
)
from geosync_core.positions import Position

from .strategies import fast

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "markers" / "vectors.json").read_text("utf-8")
)
TOPIC = VECTORS["topic"]
REGIONS = ("a", "b", "c")
KEYS = signing.in_memory(REGIONS)
RING = KEYS["a"].keyring
OTHER_RING = signing.in_memory(REGIONS)["a"].keyring
"""The same key ids with other keys."""

names = st.text(min_size=1, max_size=8).filter(
    lambda s: s.encode("utf-8", "surrogatepass") == s.encode("utf-8", "ignore")
)
entries = st.builds(Position, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
position_maps = st.dictionaries(names, entries, max_size=4).map(lambda d: tuple(d.items()))
senders = st.sampled_from(REGIONS)
"""Regions that sign markers (with their own keys); positions may name any region."""
markers: st.SearchStrategy[Marker] = st.one_of(
    st.builds(SnapshotRequest, snapshot_id=names, source_region=senders, round=st.sampled_from([1, 2])),
    st.builds(SnapshotResponse, snapshot_id=names, source_region=names, region=senders, position=entries),
    st.builds(Snapshot, snapshot_id=names, region=senders, local_position=entries, positions=position_maps),
    st.builds(Update, subscription=names, region=senders, positions=position_maps),
)


def encode(marker: Marker, *, seq: int, sent_at_ms: int = 0) -> tuple[dict[str, str], bytes]:
    """``marker`` as its sender publishes it, sealed with the sender's key."""
    return encode_marker(KEYS[marker.sender].signer, marker, topic=TOPIC, seq=seq, sent_at_ms=sent_at_ms)


def unverified(data: bytes) -> Envelope | None:
    """The envelope ``data`` carries, its signature not checked (the vectors' shared-key envelopes)."""
    try:
        message = json.loads(data)
        message.pop("sig")
        return Envelope(**message)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


# --- shared vectors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["valid"], ids=lambda v: v["name"])
def test_valid_vectors_keep_their_bodies_and_are_refused_as_shared_key_envelopes(
    vector: dict[str, Any],
) -> None:
    """The vectors (shared with the Java codec) carry their bodies in envelopes sealed with the shared HMAC
    key (version 1): each body still decodes to its marker and encodes back, the shared-key envelope is
    refused (issue 47), and the marker sealed by its sender's key decodes."""
    wire = bytes.fromhex(vector["wire_hex"])
    assert wire == vector["wire"].encode()
    assert vector["properties"] == {PROPERTY: vector["kind"]}
    envelope = unverified(wire)
    assert envelope is not None
    assert envelope.version == LEGACY_VERSION
    marker = decode_body(envelope, topic=TOPIC)
    assert not isinstance(marker, Rejected), marker
    assert kind_of(marker) == vector["kind"]
    assert marker.sender == vector["region"]
    assert encode_body(marker, topic=TOPIC) == vector["body"]
    assert decode_marker(RING, vector["properties"], wire, topic=TOPIC) == Rejected(Reason.UNKNOWN_KEY)
    if marker.sender in KEYS:
        props, again = encode(marker, seq=vector["seq"], sent_at_ms=vector["sent_at_ms"])
        assert props == vector["properties"]
        assert decode_marker(RING, props, again, topic=TOPIC) == marker


@pytest.mark.parametrize("vector", VECTORS["rejected"], ids=lambda v: v["name"])
def test_rejected_vectors(vector: dict[str, Any]) -> None:
    """Each vector's shared-key envelope is refused; what it carries, sealed by its sender's key, is refused
    for the vector's reason (the wrong-key vector's, as a bad signature, under other keys)."""
    data = bytes.fromhex(vector["wire_hex"])
    properties, reason = vector["properties"], Rejected(Reason(vector["reason"]))
    got = decode_marker(RING, properties, data, topic=TOPIC)
    envelope = unverified(data)
    if envelope is None or PROPERTY not in properties:
        assert got == reason  # refused before any key is looked at
        return
    assert got == Rejected(Reason.UNKNOWN_KEY)
    keyed = encode_marker_envelope(envelope)
    ring = OTHER_RING if vector["reason"] == Reason.BAD_SIGNATURE.value else RING
    assert decode_marker(ring, properties, keyed, topic=TOPIC) == reason


def encode_marker_envelope(envelope: Envelope) -> bytes:
    """``envelope`` sealed by its region's key, as a version 2 envelope."""
    return seal(KEYS[envelope.region].signer, replace(envelope, version=KEYED_VERSION))


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
    props, wire = encode(marker, seq=seq)
    assert is_marker(props)
    assert decode_marker(RING, props, wire, topic=TOPIC) == marker
    assert decode_marker(OTHER_RING, props, wire, topic=TOPIC) == Rejected(Reason.BAD_SIGNATURE)
    # A genuine marker copied into another topic (or another partition of its topic) is refused.
    assert decode_marker(RING, props, wire, topic=TOPIC + "x") == Rejected(Reason.MISPLACED)
    opened = open_envelope(RING, wire)
    assert isinstance(opened, Envelope)
    assert (opened.kind, opened.region, opened.seq) == (kind_of(marker), marker.sender, seq)


@settings(fast, max_examples=200)
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=3), st.binary(max_size=200))
def test_decode_never_raises_on_garbage(properties: dict[str, str], data: bytes) -> None:
    assert isinstance(
        decode_marker(RING, properties, data, topic=TOPIC),
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


_MARKER_KEYS = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "marker-keys" / "vectors.json").read_text()
)


def _vector_keyring() -> Keyring:
    return Keyring.of(
        {
            region: {key_id: signing.parse_public(text, where=key_id) for key_id, text in keys.items()}
            for region, keys in _MARKER_KEYS["keyring"].items()
        }
    )


@pytest.mark.parametrize("vector", _MARKER_KEYS["genuine"], ids=lambda v: v["name"])
def test_a_marker_an_agent_sealed_is_genuine(vector: dict[str, Any]) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    signer = signing.Ed25519Signer(
        vector["key_id"], Ed25519PrivateKey.from_private_bytes(bytes.fromhex(vector["signer_seed_hex"]))
    )
    wire = bytes.fromhex(vector["wire_hex"])
    opened = open_envelope(_vector_keyring(), wire)
    assert not isinstance(opened, Rejected)
    marker = decode_body(opened, topic=_MARKER_KEYS["topic"])
    assert not isinstance(marker, Rejected)
    props, again = encode_marker(
        signer, marker, topic=_MARKER_KEYS["topic"], seq=vector["seq"], sent_at_ms=vector["sent_at_ms"]
    )
    assert (props, again) == (vector["properties"], wire)
    assert is_genuine(_vector_keyring(), vector["properties"], wire)


@pytest.mark.parametrize("vector", _MARKER_KEYS["forged"], ids=lambda v: v["name"])
def test_an_application_message_carrying_the_marker_property_is_not_genuine(vector: dict[str, Any]) -> None:
    """Issue 45, case 4: the property is application data; only a signed marker may be hidden."""
    assert not is_genuine(_vector_keyring(), vector["properties"], bytes.fromhex(vector["wire_hex"]))


@given(value=st.text(max_size=20), data=st.binary(max_size=200))
@fast
def test_no_property_value_or_payload_a_producer_chooses_is_genuine(value: str, data: bytes) -> None:
    assert not is_genuine(_vector_keyring(), {PROPERTY: value}, data)
