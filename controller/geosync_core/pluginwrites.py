"""The wire shapes of the broker plugin's cursor writes (``POST /admin/v2/geosync/acks``), as typed values.

Why: the agent writes cursors through the interceptor where it can (batch indexes, which the admin API
cannot write). The Java side parses these items and builds their results in ``PluginApi``
(``interceptors/geosync-plugin-common``); both are checked against the shared vectors in
``testdata/plugin-api/vectors.json``. The cursor report a result carries, the statuses and the errors are
``geosync_core.pluginapi``'s, shared with the feed.

Shapes (version 1):

* request: ``{"acks": [item]}``;
* write item: ``{"topic", "subscription", "mark_delete": "L:E" | null, "positions": ["L:E"], "batches":
  [{"position": "L:E", "size": n, "acked": [i, ...]}]}``, plus ``"planned_from": "L:E"`` (``E`` may be -1)
  for a plugin whose feed says ``"write_version": 2``: the mark-delete the write was planned from. The
  plugin applies nothing of the item when the cursor's mark-delete is now below it (an operator reset the
  cursor since the writer last saw it: moving it forward from there would acknowledge again what the reset
  took back) and answers the cursor as it is, with ``"acknowledged": 0`` and ``"stale": true``. Plugins
  without ``write_version`` refuse the field (unknown fields are ``bad_request``): it is sent only to a
  plugin that advertises it;
* write result: a report plus ``"acknowledged"`` (count) and ``"stale": true`` where ``planned_from`` was
  above the cursor, or ``{"status", "error"?}`` with topic and subscription when known.

Invariants (each a test in ``tests/core/test_pluginapi.py``):

* ``X.from_wire(x.to_wire()) == x`` for every value;
* an ack set has bit ``i`` set while message ``i`` of the batch is NOT acknowledged (Pulsar's convention),
  in signed 64-bit words; ``unacked(ack_set(n, acked)) == [0, n) - acked``;
* a batch whose every index is acknowledged is ``whole``: the broker acknowledges the entry itself;
* an item that is not exactly the documented shape is refused with ``BadRequest`` naming what is wrong,
  as the broker refuses it with status ``bad_request``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from geosync_core.pluginapi import MAX_BATCH_SIZE, CursorReport, PluginApiError, Status, int_or_none
from geosync_core.positions import Position

WRITE_VERSION = 2
"""The version of write items that may carry ``planned_from`` (a feed without ``write_version``: 1)."""

_ITEM_KEYS = ("topic", "subscription", "mark_delete", "positions", "batches", "planned_from")
_WORD = 1 << 64


class BadRequest(PluginApiError):
    """A write item is not the documented shape (the broker answers it ``bad_request``)."""


def ack_set(size: int, acked: frozenset[int] | set[int] | list[int]) -> tuple[int, ...]:
    """Pulsar's ack set for a batch of ``size``: bits ``0..size-1`` set except the acknowledged ones, as
    signed 64-bit words (at least one)."""
    bits = (1 << size) - 1
    for i in acked:
        bits &= ~(1 << i)
    words = []
    for w in range(max(1, (size + 63) // 64)):
        word = (bits >> (64 * w)) & (_WORD - 1)
        words.append(word - _WORD if word >= 1 << 63 else word)
    return tuple(words)


def unacked(words: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The indexes an ack set leaves unacknowledged (its set bits), ascending."""
    out: list[int] = []
    for w, word in enumerate(words):
        unsigned = word % _WORD
        out.extend(64 * w + i for i in range(64) if unsigned >> i & 1)
    return tuple(out)


def _position(text: Any, *, floor: bool = False) -> Position:
    """A request position ``"L:E"`` with ``L, E >= 0`` (``floor``: also ``E == -1``, as a mark-delete)."""
    if isinstance(text, str):
        try:
            p = Position.parse(text)
        except ValueError:
            pass
        else:
            if p.ledger >= 0 and (p.entry >= 0 or floor):
                return p
    raise BadRequest(f"a position must be a string L:E with L, E >= 0, not {text!r}")


@dataclass(frozen=True, slots=True)
class BatchAck:
    """Acknowledge indexes ``acked`` of the batched entry at ``position``, which holds ``size`` messages.

    ``size`` must be the entry's real batch size: the broker checks it and refuses the item otherwise."""

    position: Position
    size: int
    acked: frozenset[int]

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_BATCH_SIZE:
            raise BadRequest(f"batch {self.position}: 'size' must be an integer in 1..{MAX_BATCH_SIZE}")
        if any(not 0 <= i < self.size for i in self.acked):
            raise BadRequest(
                f"batch {self.position}: an acked index must be an integer in 0..{self.size - 1}, "
                f"not {sorted(self.acked)!r}"
            )

    @property
    def whole(self) -> bool:
        """Every message acknowledged: the broker acknowledges the entry whole."""
        return len(self.acked) == self.size

    def ack_set(self) -> tuple[int, ...]:
        return ack_set(self.size, self.acked)

    def to_wire(self) -> dict[str, Any]:
        return {"position": str(self.position), "size": self.size, "acked": sorted(self.acked)}

    @classmethod
    def from_wire(cls, obj: Any) -> BatchAck:
        if not isinstance(obj, dict) or set(obj) != {"position", "size", "acked"}:
            raise BadRequest(
                'each batch must be an object {"position": "L:E", "size": n, "acked": [indexes]}'
            )
        position = _position(obj["position"])
        size = int_or_none(obj["size"])
        if size is None or not 1 <= size <= MAX_BATCH_SIZE:
            raise BadRequest(f"batch {position}: 'size' must be an integer in 1..{MAX_BATCH_SIZE}")
        if not isinstance(obj["acked"], list):
            raise BadRequest(f"batch {position}: 'acked' must be a list of indexes")
        acked: set[int] = set()
        for given in obj["acked"]:
            i = int_or_none(given)
            if i is None or not 0 <= i < size:
                raise BadRequest(
                    f"batch {position}: an acked index must be an integer in 0..{size - 1}, not {given!r}"
                )
            if i in acked:
                raise BadRequest(f"batch {position}: index {i} is listed twice")
            acked.add(i)
        return cls(position, size, frozenset(acked))


@dataclass(frozen=True, slots=True)
class AckItem:
    """One cursor write: move the mark-delete (forward only), acknowledge entries and batch indexes.

    ``planned_from``: the cursor's mark-delete the write was planned from (``write_version`` 2 only, None:
    not sent); the plugin applies nothing when the cursor's mark-delete is now below it."""

    topic: str
    subscription: str
    mark_delete: Position | None = None
    positions: tuple[Position, ...] = ()
    batches: tuple[BatchAck, ...] = ()
    planned_from: Position | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "subscription": self.subscription,
            "mark_delete": None if self.mark_delete is None else str(self.mark_delete),
            "positions": [str(p) for p in self.positions],
            "batches": [b.to_wire() for b in self.batches],
        }
        if self.planned_from is not None:
            out["planned_from"] = str(self.planned_from)
        return out

    @classmethod
    def from_wire(cls, obj: Any) -> AckItem:
        """Parse an item as the broker does; raise ``BadRequest`` with the broker's reason."""
        if not isinstance(obj, dict):
            raise BadRequest("each item must be an object")
        topic, subscription = obj.get("topic"), obj.get("subscription")
        if not isinstance(topic, str) or not isinstance(subscription, str) or not topic or not subscription:
            raise BadRequest("each item needs non-empty string fields 'topic' and 'subscription'")
        for key in obj:
            if key not in _ITEM_KEYS:
                raise BadRequest(f"unknown field '{key}' (known: {', '.join(_ITEM_KEYS)})")
        mark, basis = obj.get("mark_delete"), obj.get("planned_from")
        return cls(
            topic=topic,
            subscription=subscription,
            mark_delete=None if mark is None else _position(mark),
            positions=tuple(_position(p) for p in _list(obj, "positions")),
            batches=tuple(BatchAck.from_wire(b) for b in _list(obj, "batches")),
            planned_from=None if basis is None else _position(basis, floor=True),
        )

    def stale_on(self, mark_delete: Position) -> bool:
        """Whether a cursor whose mark-delete is ``mark_delete`` is below what this write was planned from:
        then nothing of it is applied (the plugin's ``PluginApi.stale``)."""
        return self.planned_from is not None and mark_delete < self.planned_from


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"'{key}' must be a list")
    return value


def decode_ack_request(body: bytes) -> list[Any]:
    """The raw items of a request body ``{"acks": [...]}``; ``BadRequest`` where the broker answers 400."""
    try:
        parsed = json.loads(body, parse_float=_refuse_float)
    except ValueError as e:
        raise BadRequest(f'the body must be JSON {{"acks": [...]}}: {e}') from e
    if not isinstance(parsed, dict) or not isinstance(parsed.get("acks"), list):
        raise BadRequest("the body must be a JSON object with a list 'acks'")
    return list(parsed["acks"])


def _refuse_float(text: str) -> Any:
    raise ValueError(f"floats are not part of the format: {text}")


def encode_ack_request(items: list[AckItem]) -> dict[str, Any]:
    return {"acks": [i.to_wire() for i in items]}


@dataclass(frozen=True, slots=True)
class AckResult:
    """The answer to one write item: ``cursor`` (the state afterwards) and ``acknowledged`` when ``OK``,
    else ``error`` where the broker gave a reason. ``stale``: the item's ``planned_from`` was above the
    cursor's mark-delete, nothing was applied, and ``cursor`` is the cursor as it is."""

    status: Status
    topic: str | None = None
    subscription: str | None = None
    cursor: CursorReport | None = None
    acknowledged: int = 0
    error: str | None = field(default=None)
    stale: bool = False

    def to_wire(self) -> dict[str, Any]:
        if self.cursor is not None:
            written: dict[str, Any] = {**self.cursor.to_wire(), "acknowledged": self.acknowledged}
            if self.stale:
                written["stale"] = True
            return written
        out: dict[str, Any] = {"status": self.status.value}
        for key, value in (("topic", self.topic), ("subscription", self.subscription), ("error", self.error)):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_wire(cls, obj: Any) -> AckResult:
        if not isinstance(obj, dict):
            raise PluginApiError(f"a write result must be an object, not {obj!r}")
        try:
            status = Status(obj.get("status"))
        except ValueError as e:
            raise PluginApiError(f"unknown status {obj.get('status')!r}") from e
        topic, subscription, error = obj.get("topic"), obj.get("subscription"), obj.get("error")
        if status is Status.OK:
            cursor = CursorReport.from_wire(obj)
            acknowledged = int_or_none(obj.get("acknowledged", 0))
            if acknowledged is None:
                raise PluginApiError(f"'acknowledged' must be an integer, not {obj.get('acknowledged')!r}")
            stale = obj.get("stale", False)
            if not isinstance(stale, bool) or (stale and acknowledged):
                raise PluginApiError(f"'stale' must be true (nothing acknowledged) or absent, not {stale!r}")
            return cls(status, cursor.topic, cursor.subscription, cursor, acknowledged, stale=stale)
        return cls(
            status,
            topic if isinstance(topic, str) else None,
            subscription if isinstance(subscription, str) else None,
            error=error if isinstance(error, str) else None,
        )
