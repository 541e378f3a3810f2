"""Ack-state payloads may say the subscription is Key_Shared (``"key_shared": true``): a region where nobody
consumed cannot tell the type (its stats say ``None``), and it keeps per-key order applying claims only when
it knows (issue 45, the rebuilt region's seeds 5043 and 5430)."""

from __future__ import annotations

from typing import Any

import pytest

from geosync_core.ackstates import (
    ACK_STATE,
    ACK_STATES,
    AckStateMessage,
    decode_ack_state,
    decode_ack_states,
    encode_ack_state,
    encode_ack_states,
)
from geosync_core.envelopes import Envelope, Reason, Rejected
from geosync_core.origins import OriginAcks, Span

TOPIC = "persistent://geo/ns/orders"
ACKS = OriginAcks.of({"us": [Span(7, 5, 9)]})


def _opened(payload: dict[str, Any], kind: str = ACK_STATES) -> Envelope:
    return Envelope(kind=kind, region="eu", seq=1, sent_at_ms=0, payload=payload)


def test_key_shared_round_trips_and_is_written_only_when_true() -> None:
    batch = [
        AckStateMessage(TOPIC, "s", "eu", ACKS, 0, True),
        AckStateMessage(f"{TOPIC}-2", "s", "eu", ACKS, 5, False),
    ]
    payload = encode_ack_states(batch, region="eu")
    assert [("key_shared" in state) for state in payload["states"]] == [True, False]
    assert payload["states"][0]["key_shared"] is True
    assert decode_ack_states(_opened(payload)) == batch
    # a state that does not say it is byte for byte what agents without the field write
    assert "key_shared" not in encode_ack_state(TOPIC, "s", region="eu", acks=ACKS)


@pytest.mark.parametrize("value", [False, 1, "true", None, [True]])
def test_key_shared_other_than_true_is_malformed(value: object) -> None:
    payload = {**encode_ack_state(TOPIC, "s", region="eu", acks=ACKS), "key_shared": value}
    assert decode_ack_state(_opened(payload, ACK_STATE)) == Rejected(Reason.MALFORMED)


def test_key_shared_is_read_in_both_payload_versions() -> None:
    cases: list[tuple[int, dict[str, Any]]] = [(1, {}), (2, {"partials": {}})]
    for version, extra in cases:
        payload = {
            "version": version,
            "topic": TOPIC,
            "subscription": "s",
            "region": "eu",
            "acks": {"us": [[[7, 5], [7, 9]]]},
            "key_shared": True,
            **extra,
        }
        decoded = decode_ack_state(_opened(payload, ACK_STATE))
        assert isinstance(decoded, AckStateMessage)
        assert decoded.key_shared
