"""Subscription states as the signed control messages that carry them to the other regions.

A round's states for one namespace go out together, ``tuning.STATES_PER_ENVELOPE`` to an envelope, those
with partly acknowledged batches in envelopes of their own (version 2: an agent not upgraded yet refuses
those whole and still reads every other state). An envelope larger than ``tuning.MAX_ENVELOPE_BYTES`` is
sent as two, and a single state's claims too large for one as two halves: receivers merge claims, so the
parts say what the whole says.

Invariants (tests in ``tests/agent/test_core_sealing.py``): every state given goes out, in order, in
exactly one chunk; sequence numbers strictly increase across everything sealed and are never below the wall
clock's microseconds (another agent of this region numbers its messages alike during a rolling update); no
message is larger than the limit unless it holds one state whose claims cannot be halved any more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosync_agent.core import tuning
from geosync_core import ackstates, envelopes
from geosync_core.incarnations import Incarnation


def chunks(states: list[ackstates.AckStateMessage]) -> list[list[ackstates.AckStateMessage]]:
    """``states`` in envelope-sized chunks: those without partly acknowledged batches, then those with."""
    whole = [m for m in states if not m.acks.partials]
    partial = [m for m in states if m.acks.partials]
    size = tuning.STATES_PER_ENVELOPE
    return [group[start : start + size] for group in (whole, partial) for start in range(0, len(group), size)]


@dataclass(frozen=True, slots=True)
class Sealed:
    """Control messages ready to send, the last sequence number they used, and how many states were split."""

    messages: list[bytes]
    seq: int
    splits: int


def seal(
    states: list[ackstates.AckStateMessage],
    *,
    signer: envelopes.Signer,
    region: str,
    seq: int,
    now_ms: int,
    incarnations: dict[str, Incarnation] | None,
) -> Sealed:
    """``states`` as signed control messages of at most MAX_ENVELOPE_BYTES each, numbered after ``seq`` (the
    last number used) and no lower than ``now_ms`` in microseconds; a single state whose claims cannot be
    halved any more goes out as it is."""
    last, splits = seq, 0

    def sealed(part: list[ackstates.AckStateMessage]) -> list[bytes]:
        nonlocal last, splits
        number = max(last + 1, now_ms * 1000)
        envelope = envelopes.Envelope(
            kind=ackstates.ACK_STATES,
            region=region,
            seq=number,
            sent_at_ms=now_ms,
            payload=ackstates.encode_ack_states(part, region=region, incarnations=incarnations),
        )
        data = envelopes.seal(signer, envelope)
        if len(data) <= tuning.MAX_ENVELOPE_BYTES:
            last = number
            return [data]
        if len(part) > 1:
            half = len(part) // 2
            return sealed(part[:half]) + sealed(part[half:])
        (state,) = part
        try:
            first, second = state.acks.split()
        except ValueError:
            last = number
            return [data]
        splits += 1
        return sealed([replace(state, acks=first)]) + sealed([replace(state, acks=second)])

    messages = sealed(states)
    return Sealed(messages, last, splits)
