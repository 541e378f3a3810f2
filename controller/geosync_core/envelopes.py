"""Control messages: the signed, versioned envelope agents exchange on control topics.

Control topics are replicated like data topics, so anyone able to publish on them could move cursors in
every region. Each message is therefore a signed envelope carrying its sender region and a per-sender
sequence number, so that forged, altered, replayed or unreadable messages change nothing.

Envelopes are signed with the sender region's own key, named by ``key_id`` (version 2, ``KEYED_VERSION``).
Verifiers hold a ``Keyring``: per region, the key ids that may sign for it (several at once, so keys rotate
without downtime). A key id the keyring does not list is refused (``UNKNOWN_KEY``), and a genuine signature
by a key of another region than the declared sender is refused too (``FOREIGN_KEY``): a region's key speaks
for that region only. The signature scheme is the ``Signer``'s and ``Verifier``'s business (the agent uses
Ed25519 from ``geosync_adapters.signing``: a verifier then holds public keys only); the core needs none.

Version 1 (``LEGACY_VERSION``) was signed with one HMAC key shared by every region, without a key id:
whoever held it could sign for any region. It is refused, whatever it holds, as ``UNKNOWN_KEY`` (counted
like any other refused message). ``testdata/envelopes/vectors.json`` still pins down its bytes, which share
the canonical encoding below with version 2 (the Java plugins' codec reads and writes them).

Wire form: a UTF-8 JSON object with the keys ``version``, ``kind``, ``region``, ``seq``, ``sent_at_ms``,
``payload``, ``key_id`` and ``sig``. ``sig`` is the signature of the canonical encoding of the other
fields, in lowercase hex. The canonical encoding:
object keys sorted by Unicode code point (not UTF-16 unit), no whitespace (``","`` and ``":"``
separators), everything outside the escapes written raw as UTF-8 (including non-ASCII and U+007F), escapes
only for ``"``, ``\\``, ``\\b \\f \\n \\r \\t`` and the other U+0000..U+001F as ``\\u00xx`` in
lowercase hex; integers only, in plain decimal (no floats, NaN or infinities); ``seq``, ``sent_at_ms`` and
``version`` in ``0 <= n < 2**63``. Any JSON spelling of a correctly signed object is accepted on input:
bytes in the form ``seal`` writes (canonical, ``sig`` just before ``version``) are verified as they came,
without the signature, and only those bytes are parsed; any other spelling is parsed, encoded canonically
again and verified.

Invariants:

* with a region's signer ``s`` whose key the keyring lists for that region, ``open_envelope(keyring,
  seal(s, e))`` is ``e`` with ``key_id=s.key_id``, and the bytes are canonical;
* ``open_envelope`` never raises: any input yields an ``Envelope`` or ``Rejected(reason)``;
* a message is accepted only if its signature verifies, over exactly the fields it carries, under a key
  the keyring accepts for the region it declares; unknown versions are refused before interpretation, and
  version 1 (the shared key) always;
* ``ReplayGuard.admit`` never accepts a sender's ``seq`` twice, nor one ``REPLAY_WINDOW`` or more below the
  highest accepted from that sender; below the highest but within the window it accepts a ``seq`` not seen
  yet (two agents of one region at once, during a rolling update, send interleaved wall-clock sequence
  numbers); a refused message leaves the guard unchanged.
"""

from __future__ import annotations

import bisect
import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

LEGACY_VERSION = 1
"""Envelopes signed with a deployment-wide shared HMAC key, without a key id: refused."""
KEYED_VERSION = 2
"""Envelopes signed with the sender region's own key, named by ``key_id``."""

_KEYED_FIELDS = frozenset({"version", "kind", "region", "seq", "sent_at_ms", "payload", "key_id"})
INT_LIMIT = 2**63
"""Integers on the wire (sequence numbers, times, versions, positions) lie in ``0 <= n < INT_LIMIT``."""

JsonObject = dict[str, Any]


class Reason(enum.Enum):
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad-signature"
    MALFORMED = "malformed"
    UNSUPPORTED_VERSION = "unsupported-version"
    REPLAYED = "replayed"
    MISPLACED = "misplaced"
    """Genuine, but not for where it was found (another kind of message, or states of another namespace
    on a namespace's control topic)."""
    UNKNOWN_KEY = "unknown-key"
    """Signed with a key the keyring does not hold: a key id no region lists (never distributed, or
    dropped after a rotation), or the shared key of version 1 envelopes (never accepted)."""
    FOREIGN_KEY = "foreign-key"
    """Genuinely signed, but by a key of another region than the sender the envelope declares."""


class Signer(Protocol):
    """Signs for one region, with the key its keyrings list as ``key_id``."""

    @property
    def key_id(self) -> str: ...

    def sign(self, message: bytes) -> str:
        """The lowercase hex signature of ``message``."""
        ...


class Verifier(Protocol):
    def verify(self, message: bytes, sig: str) -> bool:
        """Whether ``sig`` signs ``message``; never raises (a malformed ``sig`` is simply false)."""
        ...


@dataclass(frozen=True, slots=True)
class Keyring:
    """What a verifier accepts: per region, the key ids that may sign for it (``regions[region][key_id]``).
    A key id belongs to one region only (``of`` refuses it under two)."""

    regions: Mapping[str, Mapping[str, Verifier]] = field(default_factory=dict)

    @staticmethod
    def of(regions: Mapping[str, Mapping[str, Verifier]]) -> Keyring:
        owners: dict[str, str] = {}
        for region, keys in regions.items():
            for key_id in keys:
                if owners.setdefault(key_id, region) != region:
                    raise ValueError(f"key id {key_id!r} is listed under both {owners[key_id]} and {region}")
        return Keyring({r: dict(k) for r, k in regions.items()})

    def find(self, key_id: str) -> tuple[str, Verifier] | None:
        """The region ``key_id`` belongs to, and its verifier."""
        for region, keys in self.regions.items():
            if key_id in keys:
                return region, keys[key_id]
        return None

    def key_ids(self) -> dict[str, list[str]]:
        """The accepted key ids per region (no key material: safe to show)."""
        return {region: sorted(keys) for region, keys in sorted(self.regions.items())}


@dataclass(frozen=True, slots=True)
class Keys:
    """An agent's signing key and keyring."""

    signer: Signer
    keyring: Keyring


@dataclass(frozen=True, slots=True)
class Rejected:
    """A control message that must change nothing; the runtime counts it by reason."""

    reason: Reason


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    kind: str
    region: str
    seq: int
    sent_at_ms: int
    payload: JsonObject
    version: int = KEYED_VERSION
    key_id: str | None = None
    """The key that signed it (as opened; ``seal`` sets it from its signer)."""

    def __post_init__(self) -> None:
        if not (is_text(self.kind) and is_text(self.region)):
            raise ValueError("kind and region must be non-empty strings")
        if self.key_id is not None and not is_text(self.key_id):
            raise ValueError("key_id must be a non-empty string or None")
        if not all(is_count(n) for n in (self.seq, self.sent_at_ms, self.version)):
            raise ValueError("seq, sent_at_ms and version must be integers in [0, 2**63)")
        # A payload parsed by open_envelope is JSON by construction (floats and constants refused by the
        # parser), and so is one ackstates.encode_ack_states built: only other payloads built in Python are
        # walked, which matters for large batched payloads.
        if not isinstance(self.payload, dict) or not (
            isinstance(self.payload, JsonOnly) or _is_json(self.payload)
        ):
            raise ValueError("payload must be a JSON object without floats")

    def fields(self) -> JsonObject:
        fields: JsonObject = {
            "version": self.version,
            "kind": self.kind,
            "region": self.region,
            "seq": self.seq,
            "sent_at_ms": self.sent_at_ms,
            "payload": self.payload,
        }
        if self.key_id is not None:
            fields["key_id"] = self.key_id
        return fields


def canonical(value: JsonObject) -> bytes:
    """The canonical encoding (raises ``ValueError`` for what cannot be encoded, e.g. lone surrogates)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def seal(signer: Signer, envelope: Envelope) -> bytes:
    """The signed wire bytes of ``envelope``, under the signer's key id."""
    fields = envelope.fields() | {"version": KEYED_VERSION, "key_id": signer.key_id}
    body = canonical(fields)
    return _with_sig(body, fields["version"], signer.sign(body))


def _with_sig(body: bytes, version: object, sig: str) -> bytes:
    """``canonical({**fields, "sig": sig})`` from ``body = canonical(fields)``, without encoding the fields
    again: ``version`` is the last key of the canonical order and ``sig`` the one before it (no other field
    sorts between them), so the signature goes in just before ``,"version":n}``."""
    tail = b',"version":%d}' % version if isinstance(version, int) else b""
    if not tail or not body.endswith(tail):
        raise ValueError("not the canonical encoding of an envelope's fields")
    return b'%s,"sig":%s%s' % (body[: -len(tail)], json.dumps(sig, ensure_ascii=False).encode(), tail)


_SIGNED_TAIL = re.compile(rb',"sig":"([0-9a-f]{1,1024})"(,"version":[0-9]{1,19}\})\Z')
"""What ``seal`` ends its bytes with: the signature, then the version (the last two keys, canonically)."""
_SIGNED_TAIL_MAX = 1_100
"""The longest such tail (looked for in the last this many bytes only)."""


_OPENED: dict[bytes, tuple[Keyring, Envelope | Rejected]] = {}
"""Wire bytes -> (the keyring they were opened with, what ``open_envelope`` made of them): a pure function of
both, so any of it is right. Where several agents share a process and a keyring (the simulator's three
regions, each reading every envelope), a message is parsed and verified once, not once per reader; the value
is immutable but for its payload, which nothing changes. The same bytes opened with another keyring are
opened again."""
_DERIVED: dict[int, tuple[Envelope, dict[str, Any]]] = {}
"""``id(envelope)`` of each envelope ``_OPENED`` holds -> (the envelope, values derived from it: ``derived``).
Emptied with ``_OPENED``, and an entry goes when its envelope leaves it: an id in it names that envelope."""
_opened_bytes = 0
OPENED_MAX = 256
"""Messages remembered at most: a message is read by every region within a replication delay, a second or
so. The memo is emptied when full."""
OPENED_BYTES_MAX = 256 * 1024
"""Wire bytes remembered at most (it is emptied when a message would pass them), and no message larger than
a sixteenth of them is remembered: an agent reading alone gains nothing from the memo, and keeps little."""


def open_envelope(keyring: Keyring, data: bytes) -> Envelope | Rejected:
    """Verify and decode wire bytes; never raises."""
    memo = type(data) is bytes and len(data) <= OPENED_BYTES_MAX // 16
    if memo:
        found = _OPENED.get(data)
        if found is not None and found[0] is keyring:
            return found[1]
    opened = _open_as_sealed(keyring, data)
    if opened is None:
        opened = _open_any_spelling(keyring, data)
    if memo:
        _remember(keyring, data, opened)
    return opened


def _remember(keyring: Keyring, data: bytes, opened: Envelope | Rejected) -> None:
    global _opened_bytes
    if len(_OPENED) >= OPENED_MAX or _opened_bytes + len(data) > OPENED_BYTES_MAX:
        _OPENED.clear()
        _DERIVED.clear()
        _opened_bytes = 0
    replaced = _OPENED.get(data)
    if replaced is None:
        _opened_bytes += len(data)
    elif isinstance(replaced[1], Envelope):
        _DERIVED.pop(id(replaced[1]), None)
    _OPENED[data] = (keyring, opened)
    if isinstance(opened, Envelope):
        _DERIVED[id(opened)] = (opened, {})


def derived(envelope: Envelope) -> dict[str, Any] | None:
    """Where values derived from ``envelope`` may be kept while ``open_envelope`` remembers it (its states as
    ``ackstates`` decodes them): every reader of the same bytes then finds them. None for an envelope it does
    not remember (built here, or forgotten): derive them again."""
    found = _DERIVED.get(id(envelope))
    return found[1] if found is not None and found[0] is envelope else None


def _open_as_sealed(keyring: Keyring, data: bytes) -> Envelope | Rejected | None:
    """``open_envelope`` for the bytes ``seal`` writes (canonical, the signature just before the version):
    the signature is checked against the bytes without it, as they came, and only those bytes are parsed
    (what the signer signed, so nothing is encoded again). None: not in that form, or its signature does
    not verify in it; ``_open_any_spelling`` then decides (any JSON spelling of a signed object is
    accepted, as before: this only saves the work for what agents send)."""
    found = _SIGNED_TAIL.search(data, max(0, len(data) - _SIGNED_TAIL_MAX))
    if found is None:
        return None
    body = data[: found.start()] + found.group(2)
    message = _parse_object(body)
    if message is None or "sig" in message:
        return None
    if message.get("version") != KEYED_VERSION or not is_count(message.get("version")):
        return None
    signer = _verifier(keyring, message.get("key_id"))
    if isinstance(signer, Rejected) or not signer[1].verify(body, found.group(1).decode()):
        return None
    return _envelope_of(message, signer[0])


def _open_any_spelling(keyring: Keyring, data: bytes) -> Envelope | Rejected:
    """``open_envelope`` for any JSON spelling: the fields are encoded canonically again to be verified."""
    message = _parse_object(data)
    if message is None:
        return Rejected(Reason.MALFORMED)
    sig = message.pop("sig", None)
    if sig is None:
        return Rejected(Reason.UNSIGNED)
    version = message.get("version")
    if not is_count(version):
        return Rejected(Reason.MALFORMED)
    if version == LEGACY_VERSION:
        return Rejected(Reason.UNKNOWN_KEY)
    if version != KEYED_VERSION:
        return Rejected(Reason.UNSUPPORTED_VERSION)
    signer = _verifier(keyring, message.get("key_id"))
    if isinstance(signer, Rejected):
        return signer
    owner, verifier = signer
    try:
        body = canonical(message)
    except ValueError:
        return Rejected(Reason.MALFORMED)
    if not isinstance(sig, str) or not verifier.verify(body, sig):
        return Rejected(Reason.BAD_SIGNATURE)
    return _envelope_of(message, owner)


def _parse_object(data: bytes) -> JsonObject | None:
    """``data`` as a JSON object, strictly (UTF-8, no repeated keys, no floats); None if it is not one."""
    try:
        message = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_float=_no_float,
            parse_constant=_no_float,
        )
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def _envelope_of(message: JsonObject, owner: str) -> Envelope | Rejected:
    """The envelope of a verified ``message`` (its fields but the signature) signed for ``owner``."""
    if message.keys() != _KEYED_FIELDS:
        return Rejected(Reason.MALFORMED)
    try:
        envelope = Envelope(**message)
    except (ValueError, TypeError):
        return Rejected(Reason.MALFORMED)
    if owner != envelope.region:
        return Rejected(Reason.FOREIGN_KEY)
    return envelope


def _verifier(keyring: Keyring, key_id: object) -> tuple[str, Verifier] | Rejected:
    """Who may have signed: the region ``key_id`` belongs to and its verifier, or why nobody."""
    if not is_text(key_id):
        return Rejected(Reason.MALFORMED)
    found = keyring.find(str(key_id))
    return Rejected(Reason.UNKNOWN_KEY) if found is None else found


REPLAY_WINDOW = 60_000_000
"""How far below a sender's highest sequence number a message not seen yet is still accepted: 60 s of the
wall-clock microseconds agents and the mirror number their messages with (two instances of one region's agent
interleave; a message older than that is a replay)."""


@dataclass(frozen=True, slots=True)
class ReplayGuard:
    """The highest ``seq`` accepted from each sender region (keep it across restarts), and the ``seq``s
    accepted within ``REPLAY_WINDOW`` below it (bounded by the window: senders number their messages with
    wall-clock microseconds, ``max(previous + 1, now)``)."""

    highest: tuple[tuple[str, int], ...] = ()
    recent: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def admit(self, envelope: Envelope) -> tuple[ReplayGuard, Envelope | Rejected]:
        region, seq = envelope.region, envelope.seq
        seen, recent = dict(self.highest), dict(self.recent)
        top, window = seen.get(region), recent.get(region, ())
        if top is not None and seq <= top and (seq <= top - REPLAY_WINDOW or seq in window):
            return self, Rejected(Reason.REPLAYED)
        seen[region] = top = seq if top is None else max(top, seq)
        # What stays in the window, then ``seq`` sorted in: filtered and sorted in C, not by a generator
        # (a window holds a minute of a sender's envelopes, and every envelope read is admitted).
        kept = sorted(filter((top - REPLAY_WINDOW).__lt__, window))
        if seq > top - REPLAY_WINDOW:
            bisect.insort(kept, seq)
        recent[region] = tuple(kept)
        return ReplayGuard(tuple(sorted(seen.items())), tuple(sorted(recent.items()))), envelope


def is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < INT_LIMIT


def _is_json(value: object) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, list):
        return all(map(_is_json, value))
    return isinstance(value, dict) and all(isinstance(k, str) and _is_json(v) for k, v in value.items())


class JsonOnly(dict[str, Any]):
    """A JSON object known to hold JSON values only, as ``open_envelope``'s parser or an encoder that builds
    nothing else (``ackstates.encode_ack_states``) made it: ``Envelope`` does not walk it again."""

    __slots__ = ()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> JsonObject:
    result = JsonOnly(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key")
    return result


def _no_float(text: str) -> Any:
    raise ValueError(f"not an integer: {text}")
