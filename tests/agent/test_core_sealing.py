"""The core's control messages out (``core.sealing``) and its readiness rules (``core.readiness``).

Driven through their public functions with values: states in, signed messages out, opened again with the
same keyring a peer uses; the readiness rules by table.
"""

from __future__ import annotations

import hashlib

import pytest

from geosync_agent.core import readiness, sealing, tuning
from geosync_core import ackstates, envelopes
from geosync_core.batches import BatchAcks
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position

TOPIC = "persistent://geo/ab/orders"
NOW_MS = 1_700_000_000_000


class HashSigner:
    """A test signer: a keyed hash for a signature (the real ones are Ed25519; sealing calls ``sign``)."""

    key_id = "a-test"

    def sign(self, message: bytes) -> str:
        return hashlib.sha256(b"a" + message).hexdigest()

    def verify(self, message: bytes, sig: str) -> bool:
        return sig == self.sign(message)


KEYRING = envelopes.Keyring.of({"a": {HashSigner.key_id: HashSigner()}})


def state(i: int, *, spans: int = 1, partial: bool = False) -> ackstates.AckStateMessage:
    acks = OriginAcks.of(
        {"a": [Span(5, 3 * k, 3 * k + 1) for k in range(spans)]},
        {"a": [(Position(6, i), BatchAcks.of(4, [0]))]} if partial else (),
    )
    return ackstates.AckStateMessage(TOPIC, f"sub-{i}", "a", acks)


def opened(data: bytes) -> tuple[envelopes.Envelope, list[ackstates.AckStateMessage]]:
    envelope = envelopes.open_envelope(KEYRING, data)
    assert isinstance(envelope, envelopes.Envelope)
    states = ackstates.decode_ack_states(envelope)
    assert isinstance(states, list)
    return envelope, states


def seal(states: list[ackstates.AckStateMessage], *, seq: int = 0, now_ms: int = NOW_MS) -> sealing.Sealed:
    return sealing.seal(states, signer=HashSigner(), region="a", seq=seq, now_ms=now_ms, incarnations=None)


def test_states_go_out_in_envelope_sized_chunks_whole_ones_first_each_once() -> None:
    n = tuning.STATES_PER_ENVELOPE * 2 + 5
    states = [state(i, partial=i % 3 == 0) for i in range(n)]
    chunks = sealing.chunks(states)
    assert all(0 < len(c) <= tuning.STATES_PER_ENVELOPE for c in chunks)
    flat = [m for c in chunks for m in c]
    whole = [m for m in states if not m.acks.partials]
    partial = [m for m in states if m.acks.partials]
    assert flat == whole + partial  # in order, each once
    assert not any(m.acks.partials for m in chunks[0])
    assert all(m.acks.partials for m in chunks[-1])
    assert sealing.chunks([]) == []


def test_sealed_states_open_as_they_were_numbered_after_the_last_and_the_clock() -> None:
    states = [state(i) for i in range(3)]
    first = seal(states, seq=0)
    assert first.seq == NOW_MS * 1000  # the clock's microseconds: above a number never used
    assert first.splits == 0
    (data,) = first.messages
    envelope, back = opened(data)
    assert (envelope.seq, envelope.sent_at_ms, back) == (first.seq, NOW_MS, states)
    again = seal(states, seq=first.seq)  # the same millisecond: still strictly after
    assert again.seq == first.seq + 1
    assert opened(again.messages[0])[0].seq == again.seq


def test_an_envelope_over_the_limit_goes_out_in_parts_that_say_what_the_whole_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    states = [state(i, spans=6) for i in range(4)]
    whole = seal(states).messages[0]
    monkeypatch.setattr(tuning, "MAX_ENVELOPE_BYTES", len(whole) // 5)
    sealed = seal(states, seq=5)
    assert len(sealed.messages) > len(states)  # states apart, and claims halved
    assert sealed.splits > 0
    numbers, got = [], []
    for data in sealed.messages:
        envelope, back = opened(data)
        assert len(data) <= tuning.MAX_ENVELOPE_BYTES or len(back) == 1
        numbers.append(envelope.seq)
        got.extend(back)
    assert numbers == sorted(set(numbers))  # strictly increasing
    assert sealed.seq == numbers[-1]
    for original in states:
        parts = [m.acks for m in got if m.subscription == original.subscription]
        merged = parts[0]
        for part in parts[1:]:
            merged = merged.merge(part)
        assert merged == original.acks


def test_a_single_state_that_cannot_be_halved_goes_out_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuning, "MAX_ENVELOPE_BYTES", 10)
    sealed = seal([state(0)])
    (data,) = sealed.messages
    assert len(data) > 10
    assert opened(data)[1] == [state(0)]


STALL, FAILING = tuning.STALL_S, tuning.FAILING_S


@pytest.mark.parametrize(
    ("facts", "now", "ready", "reason"),
    [
        ({"round_done_at": None}, 100.0, False, "starting"),
        ({"round_done_at": 100.0}, 100.0 + STALL, True, "ready"),
        ({"round_done_at": 100.0}, 100.1 + STALL, False, "stalled"),
        ({"failing_since": 95.0}, 95.0 + FAILING - 0.1, True, "ready"),
        ({"failing_since": 95.0, "last_error": "503"}, 95.0 + FAILING, False, "failing: every round"),
        ({"publish_failing_since": 90.0}, 90.0 + FAILING, False, "failing: no control message"),
        ({"parts_failing": {"discovery": (90.0, "403")}}, 90.0 + FAILING, False, "failing: discovery"),
        ({"parts_failing": {"discovery": (90.0, "403")}}, 90.0 + FAILING / 2, True, "ready"),
    ],
)
def test_readiness_by_what_the_loop_and_its_parts_last_did(
    facts: dict[str, object], now: float, ready: bool, reason: str
) -> None:
    known: dict[str, object] = {
        "round_done_at": now - 1.0,
        "failing_since": None,
        "last_error": "",
        "publish_failing_since": None,
        "parts_failing": {},
    }
    known.update(facts)
    got = readiness.readiness(now, **known)  # type: ignore[arg-type]
    assert got[0] is ready
    assert got[1].startswith(reason)
