"""Agents with per-region keys (issue 14): claims signed with the sender region's key are applied; a
region's genuine key signing another region's claim is refused and counted, and moves nothing."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import replace

from geosync_adapters import signing
from geosync_core import ackstates, envelopes
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import message
from tests.agent.pairs import A_LOG, B_LOG, CONTROL, SUB, TOPIC, carry, pair

SIGNERS = {r: signing.generate(f"{r}-1") for r in "abc"}
RING = envelopes.Keyring.of(
    {r: {s.key_id: signing.parse_public(s.public(), where=r)} for r, s in SIGNERS.items()}
)


def test_claims_signed_by_their_region_apply_and_a_region_key_cannot_speak_for_another() -> None:
    a, b = pair(keys=envelopes.Keys(SIGNERS["a"], RING))
    b.agent.keys = envelopes.Keys(SIGNERS["b"], RING)
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    assert carry(a, b) == 1
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1])
    # a's own key, claiming to be c, that everything of a's ledger was acknowledged there.
    forged = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region="c",
        seq=2**62,
        sent_at_ms=0,
        payload=ackstates.encode_ack_states(
            [ackstates.AckStateMessage(TOPIC, SUB, "c", OriginAcks.of({"a": [Span(5, 0, 5)]}))], region="c"
        ),
    )
    b.messaging.deliver(CONTROL, message(CONTROL, Position(79, 0), data=envelopes.seal(SIGNERS["a"], forged)))
    b.step()
    b.step(1.0)
    counters = b.agent.stats.counters
    assert counters["control_rejected_" + envelopes.Reason.FOREIGN_KEY.value] == 1
    assert sum(v for k, v in counters.items() if k.startswith("control_rejected_")) == 1
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1])


def _shared_key_envelope(envelope: envelopes.Envelope, secret: bytes) -> bytes:
    """``envelope`` as the shared-HMAC mode of earlier releases sealed it (version 1, no key id): HMAC-SHA256
    of the canonical fields (``testdata/envelopes/vectors.json``)."""
    fields = {**envelope.fields(), "version": envelopes.LEGACY_VERSION}
    fields.pop("key_id", None)
    sig = hmac.new(secret, envelopes.canonical(fields), hashlib.sha256).hexdigest()
    return envelopes.canonical({**fields, "sig": sig})


def test_an_envelope_signed_with_the_old_shared_key_changes_nothing_and_is_counted() -> None:
    """Issue 47: a's claim that its consumers acknowledged the first five messages, sealed with the shared
    key every region once held: b refuses it, counts it, and moves nothing; the same claim signed with a's
    own key is then applied (what was refused was the key, not the claim)."""
    _, b = pair(keys=envelopes.Keys(SIGNERS["a"], RING))
    b.agent.keys = envelopes.Keys(SIGNERS["b"], RING)
    before = b.region.cursors[(TOPIC, SUB)]
    claim = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region="a",
        seq=2**62,
        sent_at_ms=0,
        payload=ackstates.encode_ack_states(
            [ackstates.AckStateMessage(TOPIC, SUB, "a", OriginAcks.of({"a": [Span(5, 0, 4)]}))], region="a"
        ),
    )
    legacy = _shared_key_envelope(claim, b"k" * 32)
    assert envelopes.open_envelope(RING, legacy) == envelopes.Rejected(envelopes.Reason.UNKNOWN_KEY)
    b.messaging.deliver(CONTROL, message(CONTROL, Position(79, 0), data=legacy))
    b.step()
    b.step(1.0)
    counters = b.agent.stats.counters
    assert counters["control_rejected_" + envelopes.Reason.UNKNOWN_KEY.value] == 1
    assert sum(v for k, v in counters.items() if k.startswith("control_rejected_")) == 1
    assert b.region.cursors[(TOPIC, SUB)] == before
    keyed = envelopes.seal(SIGNERS["a"], replace(claim, seq=2**62 + 1))
    b.messaging.deliver(CONTROL, message(CONTROL, Position(79, 1), data=keyed))
    b.step()
    b.step(1.0)
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[4])
