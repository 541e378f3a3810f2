"""Ack-state payloads: a subscription's claims as control envelopes carry them and checkpoints keep them.

A region tells the others what its subscriptions acknowledged, in origin coordinates, as ``ack-state``
payloads (one subscription) and ``ack-states`` payloads (several, with the incarnations the sender knows
of) inside signed envelopes (``geosync_core.envelopes``, which seals and opens them). The agent's checkpoint
keeps the same claims in a flatter form (``acks_to_json``). Decoding is strict and never raises: what is
malformed is a ``Rejected`` value, as for envelopes.

Invariants:

* ``decode_ack_state`` returns what ``encode_ack_state`` encoded, and ``decode_ack_states`` what
  ``encode_ack_states`` encoded (the states of several subscriptions, in order); malformed payloads are
  values, and a payload speaking for another region than its envelope's sender is malformed (a batch is
  accepted or refused whole);
* ack-state payloads are written in the lowest version that carries them: version 1 when no state claims
  part of a batch (so agents that only read version 1 keep syncing unbatched topics), version 2 otherwise;
  both are read. A version 2 state adds ``"partials": {origin region: [[ledger, entry, size, bits], ...]}``,
  ``bits`` the acknowledged batch indexes as ``BatchAcks.hex`` spells them (lowercase hex, no leading
  zeros, bit ``i`` = index ``i``). A partial that is empty, full, beyond its size, repeated, inside one of
  the region's spans, or of a size outside ``1..MAX_BATCH_SIZE`` is malformed: what was encoded from a
  canonical ``OriginAcks`` never is. All states of a batch have the batch's version.
* a state may carry ``"generation": n`` (``0 < n < 2**63``; absent means 0), in both payload versions: the
  subscription's claims generation (a rewind or a re-creation in some region starts a newer one, whose
  claims replace the older ones). It is written only when not 0, so states of subscriptions never rewound
  are byte for byte what agents without generations write and read; those agents ignore the field (they
  merge a newer generation's claims into the older ones: the rewind is not followed there, nothing more).
* a state may carry ``"key_shared": true`` (absent means false; any other value is malformed), in both
  payload versions: the sender knows the subscription for a Key_Shared one (its consumers were seen so
  there, or claims said so), and a receiver keeps per-key order where it applies them
  (``keyorder.key_ordered_plan``): a region where nobody consumed cannot tell the type (its stats say
  ``None``). Written only when true, so other states are byte for byte what agents without it write; those
  agents ignore it (they apply the claims as they come, as before).
* an ``ack-states`` payload may carry ``"incarnations": {region: [created_ms, id], ...}``: the sender's own
  incarnation and those it knows of the regions whose origins it claims (``geosync_core.incarnations``).
  ``incarnations_of`` returns what ``encode_ack_states`` wrote, ``None`` when absent (agents before
  incarnations neither write nor read it), and refuses a malformed one as ``MALFORMED``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from geosync_core.batches import MAX_BATCH_SIZE, BatchAcks
from geosync_core.envelopes import (
    INT_LIMIT,
    Envelope,
    JsonObject,
    JsonOnly,
    Reason,
    Rejected,
    derived,
    is_count,
    is_text,
)
from geosync_core.incarnations import Incarnation
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position

ACK_STATE = "ack-state"
ACK_STATE_VERSION = 1
"""The ack-state payload version without partly acknowledged batches (still written when it suffices)."""
ACK_STATE_PARTIALS_VERSION = 2
"""The ack-state payload version that adds ``partials`` (batch-index acknowledgements)."""
_ACK_STATE_VERSIONS = (ACK_STATE_VERSION, ACK_STATE_PARTIALS_VERSION)
ACK_STATES = "ack-states"
"""Several subscriptions' states in one envelope: what an agent sends per namespace and round."""


@dataclass(frozen=True, slots=True)
class AckStateMessage:
    """What ``region``'s subscription acknowledged on ``topic`` (one partition), in origin coordinates."""

    topic: str
    subscription: str
    region: str
    acks: OriginAcks
    generation: int = 0
    """The claims' generation (see the module docstring): claims of different generations never merge."""
    key_shared: bool = False
    """The sender knows the subscription for a Key_Shared one (see the module docstring)."""


def encode_ack_state(topic: str, subscription: str, *, region: str, acks: OriginAcks) -> JsonObject:
    """The payload of an ``ack-state`` envelope; spans are ``[[ledger, first], [ledger, last]]`` pairs,
    partials (version 2 only) ``[ledger, entry, size, hex bits]``."""
    return _encode_state(topic, subscription, region, acks, _version_for([acks]))


def encode_ack_states(
    states: list[AckStateMessage], *, region: str, incarnations: Mapping[str, Incarnation] | None = None
) -> JsonObject:
    """The payload of an ``ack-states`` envelope: each state as ``encode_ack_state`` writes it, in order,
    all in one version; with ``incarnations`` (the sender's own and those it knows of other regions)."""
    if any(m.region != region for m in states):
        raise ValueError(f"a batch from {region} may only carry {region}'s own states")
    version = _version_for([m.acks for m in states])
    payload: JsonObject = {
        "version": version,
        "region": region,
        "states": [
            _encode_state(
                m.topic,
                m.subscription,
                region,
                m.acks,
                version,
                generation=m.generation,
                key_shared=m.key_shared,
            )
            for m in states
        ],
    }
    if incarnations is not None:
        payload["incarnations"] = {r: i.to_wire() for r, i in sorted(incarnations.items())}
    # Integers, strings, lists and objects only, by construction (the round-trip tests hold it): not walked
    # again by Envelope (a walk of every value of every state was 5 % of a's agent at 10,000 subscriptions).
    return JsonOnly(payload)


def incarnations_of(envelope: Envelope) -> dict[str, Incarnation] | Rejected | None:
    """The incarnations an ``ack-states`` envelope speaks of (``None``: its sender predates them); never
    raises. Kept with the envelope as its states are (``decode_ack_states``); each caller gets a dict of its
    own."""
    memo = derived(envelope)
    if memo is not None and "incarnations" in memo:
        tags = memo["incarnations"]
    else:
        tags = _incarnations_of(envelope)
        if memo is not None:
            memo["incarnations"] = tags
    return dict(tags) if isinstance(tags, dict) else tags


def _incarnations_of(envelope: Envelope) -> dict[str, Incarnation] | Rejected | None:
    if envelope.kind != ACK_STATES or "incarnations" not in envelope.payload:
        return None
    value = envelope.payload["incarnations"]
    if not isinstance(value, dict) or not all(map(is_text, value)):
        return Rejected(Reason.MALFORMED)
    decoded = {str(region): Incarnation.from_wire(item) for region, item in value.items()}
    out = {region: i for region, i in decoded.items() if i is not None}
    return out if len(out) == len(decoded) else Rejected(Reason.MALFORMED)


def _version_for(acks: list[OriginAcks]) -> int:
    return ACK_STATE_PARTIALS_VERSION if any(a.partials for a in acks) else ACK_STATE_VERSION


def _encode_state(
    topic: str,
    subscription: str,
    region: str,
    acks: OriginAcks,
    version: int,
    *,
    generation: int = 0,
    key_shared: bool = False,
) -> JsonObject:
    payload: JsonObject = {
        "version": version,
        "topic": topic,
        "subscription": subscription,
        "region": region,
        "acks": {
            origin: [[[s.ledger, s.first], [s.ledger, s.last]] for s in spans]
            for origin, spans in acks.by_region
        },
    }
    if version >= ACK_STATE_PARTIALS_VERSION:
        payload["partials"] = {
            origin: [[p.ledger, p.entry, b.size, b.hex()] for p, b in batches]
            for origin, batches in acks.partials
        }
    if generation:
        payload["generation"] = generation
    if key_shared:
        payload["key_shared"] = True
    return payload


def decode_ack_state(envelope: Envelope) -> AckStateMessage | Rejected:
    """Decode the payload of an opened ``ack-state`` envelope; never raises.

    The payload's ``region`` must be the envelope's sender: a region only speaks for its own cursors.
    """
    if envelope.kind != ACK_STATE:
        return Rejected(Reason.MISPLACED)
    return _decode_state(envelope.payload, envelope.region)


def decode_ack_states(envelope: Envelope) -> list[AckStateMessage] | Rejected:
    """Decode an opened ``ack-state`` or ``ack-states`` envelope into its states; never raises. Decoded once
    for an envelope ``envelopes.open_envelope`` remembers (every agent of a process that reads the same bytes
    gets the same envelope: the simulator's regions); states are immutable values, and each caller gets a
    list of its own."""
    memo = derived(envelope)
    decoded = None if memo is None else memo.get("states")
    if decoded is None:
        made = _decode_ack_states(envelope)
        decoded = made if isinstance(made, Rejected) else tuple(made)
        if memo is not None:
            memo["states"] = decoded
    return decoded if isinstance(decoded, Rejected) else list(decoded)


def _decode_ack_states(envelope: Envelope) -> list[AckStateMessage] | Rejected:
    if envelope.kind == ACK_STATE:
        one = _decode_state(envelope.payload, envelope.region)
        return one if isinstance(one, Rejected) else [one]
    payload = envelope.payload
    version = payload.get("version")
    if envelope.kind != ACK_STATES:
        return Rejected(Reason.MISPLACED)
    if not is_count(version):
        return Rejected(Reason.MALFORMED)
    if version not in _ACK_STATE_VERSIONS:
        return Rejected(Reason.UNSUPPORTED_VERSION)
    states = payload.get("states")
    if payload.get("region") != envelope.region or not isinstance(states, list):
        return Rejected(Reason.MALFORMED)
    out: list[AckStateMessage] = []
    for item in states:
        decoded = (
            _decode_state(item, envelope.region, version)
            if isinstance(item, dict)
            else Rejected(Reason.MALFORMED)
        )
        if isinstance(decoded, Rejected):
            return decoded
        out.append(decoded)
    return out


def acks_to_json(acks: OriginAcks) -> JsonObject:
    """``acks`` as the agent's checkpoint keeps them (``acks_from_json`` reads it back): per origin region,
    its spans as one flat list ``[ledger, first, last, ...]`` and its partly claimed entries as one flat list
    ``[ledger, entry, size, hex bits, ...]``.

    Not the ack-state encoding (which ``acks_from_json`` still reads): that one builds three lists per span,
    and at 10,000 subscriptions a checkpoint encodes ~140,000 spans. The flat lists are a third of the
    objects to build (and for the collector to walk) and half the text: in a micro-benchmark of 10,000 claims
    of 9 spans and 2 partials, encoding, JSON and parsing back took 0.42 s instead of 0.59 s."""
    out: JsonObject = {
        "spans": {
            origin: [n for s in spans for n in (s.ledger, s.first, s.last)]
            for origin, spans in acks.by_region
        }
    }
    if acks.partials:
        out["partials"] = {
            origin: [v for p, b in batches for v in (p.ledger, p.entry, b.size, b.hex())]
            for origin, batches in acks.partials
        }
    return out


def acks_from_json(value: Any) -> OriginAcks:
    """The acknowledgements ``acks_to_json`` wrote, or a checkpoint written before it (the ack-state
    encoding); ``ValueError`` for anything else."""
    if isinstance(value, dict) and "version" in value:
        decoded = _decode_state(value, "-")
        if isinstance(decoded, Rejected):
            raise ValueError(f"not acknowledgements: {decoded.reason.value}")
        return decoded.acks
    if not isinstance(value, dict) or not value.keys() <= {"spans", "partials"}:
        raise ValueError("not acknowledgements: not an object of spans and partials")
    spans, partials = value.get("spans"), value.get("partials", {})
    if not (isinstance(spans, dict) and isinstance(partials, dict)):
        raise ValueError("not acknowledgements: spans or partials are not objects")
    if not all(map(is_text, spans)) or not all(map(is_text, partials)):
        raise ValueError("not acknowledgements: an origin region is not a name")
    try:
        return OriginAcks.decoded(
            {origin: _flat_spans(flat) for origin, flat in spans.items()},
            {origin: _flat_partials(flat) for origin, flat in partials.items()},
        )
    except (ValueError, TypeError) as e:
        raise ValueError(f"not acknowledgements: {e}") from e


def _flat_spans(flat: Any) -> list[Span]:
    if not isinstance(flat, list) or len(flat) % 3:
        raise ValueError("spans are not a flat list of [ledger, first, last, ...]")
    if not _counts(*flat):
        raise ValueError("a span holds something other than a position's numbers")
    return [Span(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]


def _flat_partials(flat: Any) -> list[tuple[Position, BatchAcks]]:
    if not isinstance(flat, list) or len(flat) % 4:
        raise ValueError("partials are not a flat list of [ledger, entry, size, bits, ...]")
    return _partials([flat[i : i + 4] for i in range(0, len(flat), 4)])


def _decode_state(
    payload: JsonObject, sender: str, batch_version: int | None = None
) -> AckStateMessage | Rejected:
    version = payload.get("version")
    if not is_count(version):
        return Rejected(Reason.MALFORMED)
    if version not in _ACK_STATE_VERSIONS:
        return Rejected(Reason.UNSUPPORTED_VERSION)
    if batch_version is not None and version != batch_version:
        return Rejected(Reason.MALFORMED)
    topic, subscription, region, acks = (payload.get(k) for k in ("topic", "subscription", "region", "acks"))
    if not (is_text(topic) and is_text(subscription) and region == sender and isinstance(acks, dict)):
        return Rejected(Reason.MALFORMED)
    partials = payload.get("partials", {}) if version >= ACK_STATE_PARTIALS_VERSION else {}
    if not (isinstance(partials, dict) and all(map(is_text, acks)) and all(map(is_text, partials))):
        return Rejected(Reason.MALFORMED)
    if version >= ACK_STATE_PARTIALS_VERSION and "partials" not in payload:
        return Rejected(Reason.MALFORMED)
    generation = payload.get("generation", 0)
    if not is_count(generation) or ("generation" in payload and generation == 0):
        return Rejected(Reason.MALFORMED)
    key_shared = "key_shared" in payload
    if key_shared and payload["key_shared"] is not True:
        return Rejected(Reason.MALFORMED)
    try:
        decoded = OriginAcks.decoded(
            {origin: [_span(pair) for pair in spans] for origin, spans in acks.items()},
            {origin: _partials(items) for origin, items in partials.items()},
        )
    except (ValueError, TypeError):
        return Rejected(Reason.MALFORMED)
    return AckStateMessage(str(topic), str(subscription), sender, decoded, generation, key_shared)


def _span(pair: Any) -> Span:
    (ledger, first), (other_ledger, last) = pair
    # ``_counts`` of the four and Span's own checks, spelled out: a receiver decodes every span it is sent.
    if not (
        type(ledger) is int
        and type(first) is int
        and type(other_ledger) is int
        and type(last) is int
        and ledger == other_ledger
        and 0 <= ledger < INT_LIMIT
        and 0 <= first <= last < INT_LIMIT
    ):
        raise ValueError(f"not a span: {pair!r}")
    span = object.__new__(Span)
    object.__setattr__(span, "ledger", ledger)
    object.__setattr__(span, "first", first)
    object.__setattr__(span, "last", last)
    return span


def _partials(items: Any) -> list[tuple[Position, BatchAcks]]:
    """One origin region's partials as written (``OriginAcks.decoded`` refuses them unless exactly as a
    canonical value has them)."""
    if not isinstance(items, list):
        raise ValueError(f"not a list of partials: {items!r}")
    out: list[tuple[Position, BatchAcks]] = []
    for item in items:
        ledger, entry, size, bits = item
        if not (_counts(ledger, entry, size) and isinstance(bits, str)):
            raise ValueError(f"not a partial: {item!r}")
        if not 1 <= size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch size out of range: {size}")
        out.append((Position(ledger, entry), BatchAcks.from_hex(size, bits)))
    return out


def _counts(*values: object) -> bool:
    """``is_count`` of each (spelled out: a state's spans and partials are most of the numbers checked)."""
    return all(type(value) is int and 0 <= value < INT_LIMIT for value in values)
