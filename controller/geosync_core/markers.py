"""Snapshot markers: PIP-33's request / response / snapshot / update records as ordinary messages.

Pulsar's own markers carry ``marker_type`` in the message metadata, which no client can set. In snapshot
mode agents therefore publish *ordinary* messages into the data topics; a message property tells them
apart, and the broker plugins' entry filter uses exactly that property (never the payload) to hide them
from every subscription except the agents' own. Like every control message they are signed: a forged
response could make an agent map positions wrongly and acknowledge what nobody consumed. A Java
implementation (``interceptors/geosync-plugin-common``) reads and writes the same bytes;
``testdata/markers/vectors.json`` pins them down for both.

Wire form of one marker message:

* property ``__geosync_marker`` = the kind (``snapshot-request``, ``snapshot-response``, ``snapshot``,
  ``update``). The property alone proves nothing: it is application data, and any producer can set it.
  A message is a marker only if it is *genuine* (``is_genuine``): its payload is a version 2 envelope of
  that kind, signed by a key the keyring lists for the region it names. The entry filter hides genuine
  markers only (it holds the regions' public keys, ``geosync.keyringFile``) and delivers every other
  message carrying the property, so no producer can make a message vanish while the broker counts it as
  acknowledged (issue 45, case 4). Markers must be published unbatched and uncompressed (the filter reads
  the entry's own metadata and payload).
* payload = a sealed envelope (``geosync_core.envelopes``) whose ``kind`` equals the property
  and whose ``region`` is the sender; its payload is the marker body, a JSON object with ``version``
  (``MARKER_VERSION``, 2), ``topic`` (the topic partition the marker was written into, so a genuine marker
  copied into another topic is refused as misplaced) and, per kind (positions are ``[ledger, entry]`` in
  the named region's log)::

    snapshot-request   {snapshot_id, source_region, round}                 sender: source_region
    snapshot-response  {snapshot_id, source_region, region, position}     sender: region (responder)
    snapshot           {snapshot_id, region, local_position, positions}   sender: region
    update             {subscription, region, positions}                  sender: region

  ``positions`` is an object ``{region: [ledger, entry]}``; ``round`` is 1 or 2 (two rounds with three or
  more regions, as PIP-33 does). Version 1 bodies had no ``topic``; they are refused (unsupported-version):
  a marker that names no topic could be replayed into any topic.

Invariants:

* ``decode_marker(key, *encode_marker(key, m, topic=t, ...), topic=t) == m`` for every marker;
* ``decode_marker`` never raises: any input yields a marker or ``Rejected(reason)``;
* a marker is accepted only if its envelope verifies, its envelope kind equals its property, its body
  version is known, its body's sender region is the envelope's region (a region speaks for itself), and
  its body's topic is the topic it was read from (else ``misplaced``);
* replays are the reader's to refuse (``open_marker`` hands back the envelope for a ``ReplayGuard``).
* ``is_marker`` looks at the properties only: a candidate, never proof;
* ``is_genuine(keyring, properties, data)`` is what the entry filter decides: true only for a payload
  sealed by a region's listed key whose envelope kind equals the property; every application message
  carrying the property, whatever its value or payload, is not genuine (``testdata/marker-keys`` pins it
  down for the Java filter too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from geosync_core.envelopes import Envelope, Keyring, Reason, Rejected, Signer, open_envelope, seal
from geosync_core.positions import Position

PROPERTY = "__geosync_marker"
MARKER_VERSION = 2

SNAPSHOT_REQUEST = "snapshot-request"
SNAPSHOT_RESPONSE = "snapshot-response"
SNAPSHOT = "snapshot"
UPDATE = "update"
KINDS = (SNAPSHOT_REQUEST, SNAPSHOT_RESPONSE, SNAPSHOT, UPDATE)

_LIMIT = 2**63


def _check_text(*values: object) -> None:
    if not all(isinstance(v, str) and v for v in values):
        raise ValueError("ids, subscriptions and regions must be non-empty strings")


def _check_entry(position: Position) -> None:
    if not (
        isinstance(position, Position) and all(0 <= n < _LIMIT for n in (position.ledger, position.entry))
    ):
        raise ValueError(f"marker positions must be entries (ledger and entry >= 0): {position}")


def _positions(
    values: Mapping[str, Position] | tuple[tuple[str, Position], ...],
) -> tuple[tuple[str, Position], ...]:
    pairs = list(values.items()) if isinstance(values, Mapping) else list(values)
    items = tuple(sorted(dict(pairs).items()))
    if len(items) != len(pairs):
        raise ValueError("one position per region")
    for region, position in items:
        _check_text(region)
        _check_entry(position)
    return items


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRequest:
    """Round ``round`` of snapshot ``snapshot_id``, started by ``source_region`` in its own log."""

    snapshot_id: str
    source_region: str
    round: int = 1

    def __post_init__(self) -> None:
        _check_text(self.snapshot_id, self.source_region)
        if self.round not in (1, 2) or isinstance(self.round, bool):
            raise ValueError("round must be 1 or 2")

    @property
    def sender(self) -> str:
        return self.source_region


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotResponse:
    """``region`` saw the request at ``position`` of its own log; sent back to ``source_region``."""

    snapshot_id: str
    source_region: str
    region: str
    position: Position

    def __post_init__(self) -> None:
        _check_text(self.snapshot_id, self.source_region, self.region)
        _check_entry(self.position)

    @property
    def sender(self) -> str:
        return self.region


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """A complete snapshot: ``local_position`` in ``region``'s log matches ``positions`` in the others."""

    snapshot_id: str
    region: str
    local_position: Position
    positions: tuple[tuple[str, Position], ...]

    def __post_init__(self) -> None:
        _check_text(self.snapshot_id, self.region)
        _check_entry(self.local_position)
        object.__setattr__(self, "positions", _positions(self.positions))

    @property
    def sender(self) -> str:
        return self.region


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """``region``'s subscription passed a snapshot: move it to ``positions`` in the other regions."""

    subscription: str
    region: str
    positions: tuple[tuple[str, Position], ...]

    def __post_init__(self) -> None:
        _check_text(self.subscription, self.region)
        object.__setattr__(self, "positions", _positions(self.positions))

    @property
    def sender(self) -> str:
        return self.region


Marker = SnapshotRequest | SnapshotResponse | Snapshot | Update


def kind_of(marker: Marker) -> str:
    if isinstance(marker, SnapshotRequest):
        return SNAPSHOT_REQUEST
    if isinstance(marker, SnapshotResponse):
        return SNAPSHOT_RESPONSE
    if isinstance(marker, Snapshot):
        return SNAPSHOT
    return UPDATE


def is_marker(properties: Mapping[str, str]) -> bool:
    """Whether the message claims to be a marker (the property's presence): a candidate, never proof."""
    return PROPERTY in properties


def is_genuine(key: Keyring, properties: Mapping[str, str], data: bytes) -> bool:
    """Whether a message is a marker an agent wrote, as the entry filter decides before hiding it: the
    payload is an envelope signed by a key ``key`` lists for the region it names, of the property's kind.
    Topic and body are not looked at: a genuine marker read elsewhere is still GeoSync's, never an
    application's message (the reader refuses it as misplaced)."""
    kind = properties.get(PROPERTY)
    if kind is None:
        return False
    opened = open_envelope(key, data)
    return not isinstance(opened, Rejected) and opened.kind == kind


def encode_body(marker: Marker, *, topic: str) -> dict[str, Any]:
    """The marker body (the envelope's payload) of ``marker`` written into ``topic``."""
    _check_text(topic)
    body: dict[str, Any] = {"version": MARKER_VERSION, "topic": topic}
    if isinstance(marker, SnapshotRequest):
        body.update(snapshot_id=marker.snapshot_id, source_region=marker.source_region, round=marker.round)
    elif isinstance(marker, SnapshotResponse):
        body.update(
            snapshot_id=marker.snapshot_id,
            source_region=marker.source_region,
            region=marker.region,
            position=_pair(marker.position),
        )
    elif isinstance(marker, Snapshot):
        body.update(
            snapshot_id=marker.snapshot_id,
            region=marker.region,
            local_position=_pair(marker.local_position),
            positions={r: _pair(p) for r, p in marker.positions},
        )
    else:
        body.update(
            subscription=marker.subscription,
            region=marker.region,
            positions={r: _pair(p) for r, p in marker.positions},
        )
    return body


def encode_marker(
    key: Signer, marker: Marker, *, topic: str, seq: int, sent_at_ms: int
) -> tuple[dict[str, str], bytes]:
    """The properties and payload of the message that carries ``marker`` into ``topic`` (publish it
    unbatched, into that topic partition only)."""
    kind = kind_of(marker)
    envelope = Envelope(
        kind=kind,
        region=marker.sender,
        seq=seq,
        sent_at_ms=sent_at_ms,
        payload=encode_body(marker, topic=topic),
    )
    return {PROPERTY: kind}, seal(key, envelope)


def decode_marker(
    key: Keyring, properties: Mapping[str, str], data: bytes, *, topic: str
) -> Marker | Rejected:
    """Verify and decode a marker message read from ``topic``; never raises."""
    opened = open_marker(key, properties, data, topic=topic)
    return opened if isinstance(opened, Rejected) else opened[1]


def open_marker(
    key: Keyring, properties: Mapping[str, str], data: bytes, *, topic: str
) -> tuple[Envelope, Marker] | Rejected:
    """``decode_marker`` with the envelope too (its sender and ``seq``, for the reader's replay guard)."""
    kind = properties.get(PROPERTY)
    if kind is None:
        return Rejected(Reason.MALFORMED)
    opened = open_envelope(key, data)
    if isinstance(opened, Rejected):
        return opened
    if opened.kind != kind:
        return Rejected(Reason.MALFORMED)
    marker = decode_body(opened, topic=topic)
    return marker if isinstance(marker, Rejected) else (opened, marker)


def decode_body(envelope: Envelope, *, topic: str) -> Marker | Rejected:
    """The marker in an opened envelope read from ``topic``; never raises."""
    body = envelope.payload
    version = body.get("version")
    if not (isinstance(version, int) and not isinstance(version, bool) and 0 <= version < _LIMIT):
        return Rejected(Reason.MALFORMED)
    if version != MARKER_VERSION:
        return Rejected(Reason.UNSUPPORTED_VERSION)
    fields = {k: v for k, v in body.items() if k not in ("version", "topic")}
    try:
        marker = _build(envelope.kind, fields)
    except (ValueError, TypeError, KeyError):
        return Rejected(Reason.MALFORMED)
    if marker is None or marker.sender != envelope.region or not _is_text(body.get("topic")):
        return Rejected(Reason.MALFORMED)
    if body["topic"] != topic:
        return Rejected(Reason.MISPLACED)
    return marker


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


_FIELDS = {
    SNAPSHOT_REQUEST: {"snapshot_id", "source_region", "round"},
    SNAPSHOT_RESPONSE: {"snapshot_id", "source_region", "region", "position"},
    SNAPSHOT: {"snapshot_id", "region", "local_position", "positions"},
    UPDATE: {"subscription", "region", "positions"},
}


def _build(kind: str, fields: dict[str, Any]) -> Marker | None:
    if kind not in _FIELDS or fields.keys() != _FIELDS[kind]:
        return None
    if kind == SNAPSHOT_REQUEST:
        return SnapshotRequest(**fields)
    if kind == SNAPSHOT_RESPONSE:
        return SnapshotResponse(**{**fields, "position": _position(fields["position"])})
    positions = fields["positions"]
    if not isinstance(positions, dict):
        raise ValueError("positions must be an object")
    decoded = tuple((region, _position(p)) for region, p in positions.items())
    if kind == SNAPSHOT:
        local = _position(fields["local_position"])
        return Snapshot(**{**fields, "local_position": local, "positions": decoded})
    return Update(**{**fields, "positions": decoded})


def _pair(position: Position) -> list[int]:
    return [position.ledger, position.entry]


def _position(pair: Any) -> Position:
    if not (isinstance(pair, list) and len(pair) == 2):
        raise ValueError(f"not a position: {pair!r}")
    ledger, entry = pair
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < _LIMIT for n in (ledger, entry)):
        raise ValueError(f"not a position: {pair!r}")
    return Position(ledger, entry)
