"""The wire shapes of the broker plugin's cursor feed, as typed values, and what its two endpoints share.

Why: the agent reads the interceptor's acknowledgement feed (``GET /admin/v2/geosync/cursors?since=N``) and
writes cursors through it (``POST /admin/v2/geosync/acks``, whose items and results are
``geosync_core.pluginwrites``). The Java side builds and parses these shapes in ``PluginApi``
(``interceptors/geosync-plugin-common``); both are checked against the shared vectors in
``testdata/plugin-api/vectors.json``, so a change on one side that the other does not know fails a test.
A cursor report (``CursorReport``), the per-item ``Status`` and the errors are what both endpoints answer.

Shapes (version 1):

* feed: ``{"epoch", "seq", "cursors": [report]}``, plus ``"write_version": 2`` from a plugin that takes
  write items with ``planned_from`` (``pluginwrites``);
* report: ``{"topic", "subscription", "status": "ok", "mark_delete": "L:E", "individually_deleted":
  "[(L:E..L:E]]", "batches": [{"position": "L:E", "unacked": [i, ...]}]}``, plus ``"batches_truncated":
  true`` when the cursor has more partly acknowledged entries than one answer carries (1,000): the next
  page is ``GET /admin/v2/geosync/cursor?topic=T&subscription=S&after=L:E`` (the last entry given), one
  report with the partly acknowledged entries above it, or a refusal ``{"status", ...}``;
* what consumers acknowledged (``acked_version`` 1, beside ``cursors`` in the feed; absent from plugins
  that do not record it): ``"acked": [{"topic", "subscription", "ranges": "[(L:E..L:E]]", "cumulative":
  "L:E" | null, "batches": [{"position": "L:E", "unacked": [i, ...]}], "overflowed": bool}]`` and
  ``"acked_lost": n``. Each block is what consumers acknowledged on the subscription since what the reader
  confirmed (its ``since``, the ``seq`` of an answer it received, with ``epoch``), handed over again in
  each answer until confirmed: entries acknowledged whole (``ranges``), batch indexes (a batch's
  ``unacked`` are the indexes not acknowledged, every other index below the batch's size was), and
  everything at or below ``cumulative``. Never a cursor move no consumer made (creation, expiry,
  clear-backlog, skip, reset). ``overflowed``: the plugin kept only part of it (a subset, never more);
  ``acked_lost`` grows when the plugin dropped whole blocks it had not handed over (docs: decision 0015).

Invariants (each a test in ``tests/core/test_pluginapi.py`` or ``tests/core/test_pluginapi_acked.py``):

* ``X.from_wire(x.to_wire()) == x`` for every value, and the vectors' answers re-encode to themselves;
* an entry at or below a report's ``mark_delete`` or inside its ``individually_deleted`` is fully
  acknowledged whatever ``batches`` says (the broker reads batches first, so they may be a little stale
  but never claim more than was acknowledged); ``batches`` lists only entries above ``mark_delete``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from geosync_core.errors import PermanentError
from geosync_core.positions import Position
from geosync_core.rangesets import RangeSet

VERSION = 1
ACKED_VERSION = 1
"""The version of the feed's ``acked`` blocks this reader knows (another: read without them)."""
MAX_BATCH_SIZE = 1 << 20
"""The largest batch an item may describe (Pulsar clients default to 1000 messages per batch)."""


class Status(enum.Enum):
    """Per-item outcome of a cursor read or write."""

    OK = "ok"
    NOT_LOADED = "not_loaded"
    """The topic is not loaded on this broker: use the admin API, which finds its owner."""
    NO_SUBSCRIPTION = "no_subscription"
    BAD_REQUEST = "bad_request"
    BATCH_ACKS_OFF = "batch_acks_off"
    """The broker runs without batch-index acknowledgements: send whole entries only."""


class PluginApiError(PermanentError):
    """An answer of the plugin is not the documented shape."""


def int_or_none(value: Any) -> int | None:
    """``value`` if it is an integer (not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise PluginApiError(f"{key!r} must be a string, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class BatchState:
    """A partly acknowledged entry above the mark-delete, and the indexes still unacknowledged in it."""

    position: Position
    unacked: tuple[int, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"position": str(self.position), "unacked": list(self.unacked)}

    @classmethod
    def from_wire(cls, obj: Any) -> BatchState:
        if not isinstance(obj, dict) or not isinstance(obj.get("unacked"), list):
            raise PluginApiError(f"a batch state must be {{'position', 'unacked'}}, not {obj!r}")
        indexes = [int_or_none(i) for i in obj["unacked"]]
        if any(i is None or i < 0 for i in indexes):
            raise PluginApiError(f"unacked indexes must be non-negative integers, not {obj['unacked']!r}")
        try:
            position = Position.parse(_str(obj, "position"))
        except ValueError as e:
            raise PluginApiError(str(e)) from e
        return cls(position, tuple(i for i in indexes if i is not None))


@dataclass(frozen=True, slots=True)
class CursorReport:
    """One cursor's state, as the feed reports it and as a write leaves it."""

    topic: str
    subscription: str
    mark_delete: Position
    individually_deleted: str
    batches: tuple[BatchState, ...] = ()
    batches_truncated: bool = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "subscription": self.subscription,
            "status": Status.OK.value,
            "mark_delete": str(self.mark_delete),
            "individually_deleted": self.individually_deleted,
            "batches": [b.to_wire() for b in self.batches],
        }
        if self.batches_truncated:
            out["batches_truncated"] = True
        return out

    def followed_by(self, page: CursorReport) -> CursorReport:
        """This report with the partly acknowledged entries of its next page (``GET
        /admin/v2/geosync/cursor?...&after=``, those above this report's last one), truncated as the page is.

        The page is read later: its batches can only show more indexes acknowledged (ack bits are only
        cleared), and this report's mark-delete and ranges, read before, still win over them, so the whole
        never claims more than was acknowledged when the page was read."""
        last = self.batches[-1].position if self.batches else self.mark_delete
        floor = max(last, self.mark_delete)
        more = tuple(b for b in page.batches if b.position > floor)
        return replace(self, batches=self.batches + more, batches_truncated=page.batches_truncated)

    @classmethod
    def from_wire(cls, obj: Any) -> CursorReport:
        if not isinstance(obj, dict):
            raise PluginApiError(f"a cursor report must be an object, not {obj!r}")
        if obj.get("status", Status.OK.value) != Status.OK.value:
            raise PluginApiError(f"not a cursor state: status {obj.get('status')!r}")
        batches = obj.get("batches") or []  # brokers with an older plugin send no batches
        if not isinstance(batches, list):
            raise PluginApiError(f"'batches' must be a list, not {batches!r}")
        try:
            mark_delete = Position.parse(_str(obj, "mark_delete"))
        except ValueError as e:
            raise PluginApiError(str(e)) from e
        return cls(
            topic=_str(obj, "topic"),
            subscription=_str(obj, "subscription"),
            mark_delete=mark_delete,
            individually_deleted=_str(obj, "individually_deleted"),
            batches=tuple(BatchState.from_wire(b) for b in batches),
            batches_truncated=obj.get("batches_truncated") is True,
        )


@dataclass(frozen=True, slots=True)
class AckedSet:
    """What consumers acknowledged on one subscription, as the feed hands it over (``acked``)."""

    topic: str
    subscription: str
    ranges: RangeSet = field(default_factory=RangeSet)
    """Entries acknowledged whole."""
    cumulative: Position | None = None
    """Every entry at or below it was acknowledged cumulatively."""
    batches: tuple[BatchState, ...] = ()
    """Batch entries with some indexes acknowledged: those not in ``unacked`` (below the batch's size)."""
    overflowed: bool = False
    """The plugin kept only part of what was acknowledged: a subset, never more."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "subscription": self.subscription,
            "ranges": str(self.ranges),
            "cumulative": None if self.cumulative is None else str(self.cumulative),
            "batches": [b.to_wire() for b in self.batches],
            "overflowed": self.overflowed,
        }

    @classmethod
    def from_wire(cls, obj: Any) -> AckedSet:
        if not isinstance(obj, dict):
            raise PluginApiError(f"an acked block must be an object, not {obj!r}")
        topic, subscription = _name(obj, "topic"), _name(obj, "subscription")
        ranges = obj.get("ranges")
        if not isinstance(ranges, str):
            raise PluginApiError(f"'ranges' must be a string of ranges, not {ranges!r}")
        try:
            parsed = RangeSet.parse(ranges)
        except ValueError as e:
            raise PluginApiError(f"'ranges' is not a range set: {e}") from e
        cumulative = obj.get("cumulative")
        at = None if cumulative is None else _cumulative(cumulative)
        overflowed = obj.get("overflowed")
        if not isinstance(overflowed, bool):
            raise PluginApiError(f"'overflowed' must be true or false, not {overflowed!r}")
        batches = obj.get("batches")
        if not isinstance(batches, list):
            raise PluginApiError(f"'batches' must be a list, not {batches!r}")
        states = tuple(_acked_batch(b) for b in batches)
        if len({b.position for b in states}) != len(states):
            raise PluginApiError("an acked block lists a batch entry twice")
        return cls(
            topic, subscription, parsed, at, tuple(sorted(states, key=lambda b: b.position)), overflowed
        )


def _name(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise PluginApiError(f"an acked block's {key!r} must be a non-empty string, not {value!r}")
    return value


def _cumulative(text: Any) -> Position:
    """A cumulative position ``L:E`` with ``L >= 0`` (``E == -1``: before the ledger's first entry)."""
    try:
        at = Position.parse(text) if isinstance(text, str) else None
    except ValueError:
        at = None
    if at is None or at.ledger < 0:
        raise PluginApiError(f"'cumulative' must be a position L:E or null, not {text!r}")
    return at


def _acked_batch(obj: Any) -> BatchState:
    """A batch of an acked block: at an entry (``L, E >= 0``), with at least one index not acknowledged
    (an entry with none is acknowledged whole, in ``ranges``), indexes ascending, below ``MAX_BATCH_SIZE``."""
    state = BatchState.from_wire(obj)
    if state.position.ledger < 0 or state.position.entry < 0:
        raise PluginApiError(f"a batch's position must be an entry L:E with L, E >= 0, not {state.position}")
    if not state.unacked:
        raise PluginApiError(
            f"batch {state.position}: 'unacked' is empty (an entry acknowledged whole is a range)"
        )
    if any(isinstance(i, bool) for i in obj["unacked"]):
        raise PluginApiError(f"batch {state.position}: 'unacked' indexes must be integers, not booleans")
    if list(state.unacked) != sorted(set(state.unacked)) or state.unacked[-1] >= MAX_BATCH_SIZE:
        raise PluginApiError(
            f"batch {state.position}: 'unacked' must be ascending distinct indexes below {MAX_BATCH_SIZE}"
        )
    return state


@dataclass(frozen=True, slots=True)
class Feed:
    """An answer of the acknowledgement feed: ``epoch`` changes at each broker start.

    ``acked`` is what consumers acknowledged, per subscription, or None where the plugin does not record it
    (an older plugin, or an ``acked_version`` this reader does not know): then nothing in the answer tells
    a consumer's acknowledgement from any other cursor move. ``acked_lost`` counts the blocks the plugin
    dropped before handing them over, since it started: when it grows, any subscription's acknowledgements
    since the previous read may be missing (a subset: re-delivery, never loss)."""

    epoch: str
    seq: int
    cursors: tuple[CursorReport, ...] = ()
    acked: tuple[AckedSet, ...] | None = None
    acked_lost: int = 0
    acked_wire: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)
    write_version: int = 1
    """The write items the plugin takes: 2, they may carry ``planned_from``; 1 (absent), they may not."""
    """``acked`` as the answer gave it (decoded JSON, each block checked by ``AckedSet.from_wire``), for the
    agent's journal to write as it came: encoding the blocks again was about two thirds of the journal's
    CPU per block. None for a feed built otherwise (then ``acked_wire_or_encoded`` encodes them)."""

    def acked_wire_or_encoded(self) -> list[Any]:
        """The ``acked`` blocks in their wire form (empty for none)."""
        if self.acked_wire is not None:
            return list(self.acked_wire)
        return [a.to_wire() for a in self.acked or ()]

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "epoch": self.epoch,
            "seq": self.seq,
            "cursors": [c.to_wire() for c in self.cursors],
        }
        if self.acked is not None:
            out["acked_version"] = ACKED_VERSION
            out["acked"] = [a.to_wire() for a in self.acked]
            out["acked_lost"] = self.acked_lost
        if self.write_version != 1:
            out["write_version"] = self.write_version
        return out

    @classmethod
    def from_wire(cls, obj: Any, *, acked: bool = True) -> Feed:
        """The answer ``obj``; with ``acked`` false its ``acked`` blocks are neither checked nor read
        (``acked`` None): a reader that claims from cursors, the default, has no use for them, and they are
        one block per subscription acknowledged on, as many as the cursors."""
        if not isinstance(obj, dict) or not isinstance(obj.get("cursors", []), list):
            raise PluginApiError(f"a feed answer must be {{'epoch', 'seq', 'cursors'}}, not {obj!r}")
        seq = int_or_none(obj.get("seq", 0))
        if seq is None:
            raise PluginApiError(f"'seq' must be an integer, not {obj.get('seq')!r}")
        read: tuple[AckedSet, ...] | None = None
        wire: tuple[Any, ...] | None = None
        lost = 0
        version = obj.get("acked_version")
        if version is not None and int_or_none(version) is None:
            raise PluginApiError(f"'acked_version' must be an integer, not {version!r}")
        if version == ACKED_VERSION and acked:
            blocks = obj.get("acked")
            if not isinstance(blocks, list):
                raise PluginApiError(f"'acked' must be a list, not {blocks!r}")
            read, wire = tuple(AckedSet.from_wire(b) for b in blocks), tuple(blocks)
            if len({(a.topic, a.subscription) for a in read}) != len(read):
                raise PluginApiError("'acked' lists a subscription twice")
            given = int_or_none(obj.get("acked_lost"))
            if given is None or given < 0:
                raise PluginApiError(
                    f"'acked_lost' must be a non-negative integer, not {obj.get('acked_lost')!r}"
                )
            lost = given
        writes = obj.get("write_version", 1)
        if int_or_none(writes) is None or writes < 1:
            raise PluginApiError(f"'write_version' must be a positive integer, not {writes!r}")
        return cls(
            epoch=str(obj.get("epoch", "")),
            seq=seq,
            cursors=tuple(CursorReport.from_wire(c) for c in obj.get("cursors", [])),
            acked=read,
            acked_lost=lost,
            acked_wire=wire,
            write_version=writes,
        )
