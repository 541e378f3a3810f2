"""What the agent remembers of each local entry it read besides its origin: key and batch size, compactly.

Key_Shared order rules need every message's key and batch-index plans need every batched entry's size, for
the entries above the slowest subscription's mark-delete. Kept as one dictionary entry per entry, that cost
about 250 bytes each: a subscription nobody consumes keeps a week of entries above its mark-delete. Here a
local ledger's entries are columns (a list of keys, an array of sizes) from the ledger's first entry read,
about 12 bytes per entry plus each distinct key string once per run of equal keys.

Invariants:

* ``record(p, key, size)`` in increasing ``p`` (a reader's order); positions skipped in between answer
  ``None`` for key and size (never read: a marker, or a gap);
* ``key(p)`` is the key recorded for ``p`` (``""`` for a message without one), ``None`` if ``p`` was not
  recorded or was forgotten; ``size(p)`` the size recorded (a batch's size, grown by ``grow``), ``None``
  for an entry recorded without one (not batched), not recorded or forgotten;
* ``key_of_message(p, i)`` is the key set for message ``i`` by ``set_message_key``, else ``key(p)``;
* ``forget_up_to(f)`` forgets exactly the entries at or below ``f``; ``forget_oldest(n)`` at least the ``n``
  oldest entries held (whole ledgers' columns may go at once) and returns the highest position forgotten;
* ``len(details)`` counts the entries held (recorded or skipped between two recorded ones);
* ``EntryDetails.from_items(*details.items())`` answers every question as ``details`` does.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from geosync_core.positions import Position


@dataclass(slots=True)
class _Column:
    first: int
    keys: list[str | None] = field(default_factory=list)
    sizes: array[int] = field(default_factory=lambda: array("I"))
    message_keys: dict[int, list[str]] = field(default_factory=dict)
    """Per entry whose messages do not all share the entry's key: every message's key, by batch index."""

    def slot(self, entry: int) -> int | None:
        i = entry - self.first
        return i if 0 <= i < len(self.keys) else None


class EntryDetails:
    """Keys and batch sizes of the local entries read, by ledger, in columns."""

    def __init__(self) -> None:
        self._columns: dict[int, _Column] = {}
        self._count = 0
        self.changes = 0
        """How many times an entry already held changed (a size grew, a message's own key): what the count
        of entries does not show (the agent's checkpoint fingerprint)."""

    def __len__(self) -> int:
        return self._count

    def record(self, p: Position, key: str, size: int | None) -> None:
        column = self._columns.get(p.ledger)
        if column is None:
            if self._columns and p.ledger < next(reversed(self._columns)):
                raise ValueError(f"ledger {p.ledger} recorded after a later one")
            column = self._columns[p.ledger] = _Column(p.entry)
        skipped = p.entry - column.first - len(column.keys)
        if skipped < 0:
            raise ValueError(f"{p} recorded out of order")
        column.keys.extend([None] * skipped)
        column.sizes.extend([0] * skipped)
        previous = column.keys[-1] if column.keys else None
        column.keys.append(previous if previous == key else key)  # a run of equal keys shares one string
        column.sizes.append(size or 0)
        self._count += skipped + 1

    def grow(self, p: Position, size: int) -> bool:
        """Record that entry ``p`` holds at least ``size`` messages; whether its size grew."""
        column = self._columns.get(p.ledger)
        i = None if column is None else column.slot(p.entry)
        if column is None or i is None or column.keys[i] is None or size <= max(column.sizes[i], 1):
            return False
        column.sizes[i] = size
        self.changes += 1
        return True

    def set_message_key(self, p: Position, index: int, key: str) -> None:
        """Record message ``index``'s key of entry ``p`` (kept only if some message's key differs from the
        entry's)."""
        own = self.key(p)
        column = self._columns.get(p.ledger)
        if own is None or column is None:
            return
        keys = column.message_keys.get(p.entry)
        if keys is None:
            if key == own:
                return
            keys = column.message_keys[p.entry] = [own] * index
        keys.extend([own] * (index + 1 - len(keys)))
        keys[index] = key
        self.changes += 1

    def key(self, p: Position) -> str | None:
        column = self._columns.get(p.ledger)
        i = None if column is None else column.slot(p.entry)
        return None if column is None or i is None else column.keys[i]

    def size(self, p: Position) -> int | None:
        column = self._columns.get(p.ledger)
        i = None if column is None else column.slot(p.entry)
        if column is None or i is None or column.keys[i] is None:
            return None
        return column.sizes[i] or None

    def key_of_message(self, p: Position, index: int) -> str | None:
        column = self._columns.get(p.ledger)
        keys = None if column is None else column.message_keys.get(p.entry)
        if keys is not None and index < len(keys):
            return keys[index]
        return self.key(p)

    def lowest(self) -> Position | None:
        """The first entry held (recorded or skipped), None when empty."""
        for ledger, column in self._columns.items():
            if column.keys:
                return Position(ledger, column.first)
        return None

    def forget_up_to(self, floor: Position) -> None:
        for ledger in [lg for lg in self._columns if lg < floor.ledger]:
            self._count -= len(self._columns.pop(ledger).keys)
        column = self._columns.get(floor.ledger)
        if column is not None and column.first <= floor.entry:
            drop = min(len(column.keys), floor.entry - column.first + 1)
            del column.keys[:drop]
            del column.sizes[:drop]
            column.first += drop
            self._count -= drop
            if column.message_keys:
                column.message_keys = {e: k for e, k in column.message_keys.items() if e >= column.first}
            if not column.keys:
                del self._columns[floor.ledger]

    def forget_oldest(self, n: int) -> Position | None:
        """Forget at least the ``n`` oldest entries; the highest position forgotten (None: nothing held)."""
        highest: Position | None = None
        for ledger, column in list(self._columns.items()):
            if n <= 0:
                break
            if not column.keys:
                continue
            take = min(n, len(column.keys))
            highest = Position(ledger, column.first + take - 1)
            n -= take
            self.forget_up_to(highest)
        return highest

    def copy(self) -> EntryDetails:
        """An independent copy: a checkpoint encodes it on another thread while this one keeps changing."""
        other = EntryDetails()
        other._columns = {
            ledger: _Column(
                column.first,
                list(column.keys),
                array("I", column.sizes),
                {entry: list(keys) for entry, keys in column.message_keys.items()},
            )
            for ledger, column in self._columns.items()
        }
        other._count = self._count
        return other

    def items(
        self,
    ) -> tuple[list[tuple[Position, str]], list[tuple[Position, int]], dict[tuple[Position, int], str]]:
        """Every recorded key, every recorded size, and the messages' keys that differ from their entry's
        (for a checkpoint)."""
        keys: list[tuple[Position, str]] = []
        sizes: list[tuple[Position, int]] = []
        message_keys: dict[tuple[Position, int], str] = {}
        for ledger, column in self._columns.items():
            for i, key in enumerate(column.keys):
                if key is not None:
                    p = Position(ledger, column.first + i)
                    keys.append((p, key))
                    if column.sizes[i]:
                        sizes.append((p, column.sizes[i]))
            for entry, batch_keys in column.message_keys.items():
                own = column.keys[entry - column.first]
                for index, key in enumerate(batch_keys):
                    if key != own:
                        message_keys[(Position(ledger, entry), index)] = key
        return keys, sizes, message_keys

    def to_columns(self) -> dict[str, list[list[object]]]:
        """Everything held, as JSON values in its own layout (for a checkpoint): per ledger ``[ledger, first
        entry, keys, sizes]`` (a key ``None`` for an entry skipped, a size 0 for none), and ``[ledger, entry,
        keys]`` per entry whose messages' keys differ. No value per entry is built: at 500,000 entries the
        per-entry form (``items``) cost most of a checkpoint's encoding, seconds of the GIL each time."""
        return {
            "columns": [
                [ledger, column.first, column.keys, column.sizes.tolist()]
                for ledger, column in self._columns.items()
                if column.keys
            ],
            "message_keys": [
                [ledger, entry, keys]
                for ledger, column in self._columns.items()
                for entry, keys in column.message_keys.items()
            ],
        }

    @classmethod
    def from_columns(cls, value: object) -> EntryDetails:
        """``to_columns``'s values read back; ``ValueError`` for anything else."""
        if not isinstance(value, dict):
            raise ValueError("entry details: not an object")
        details = cls()
        try:
            for ledger, first, keys, sizes in value.get("columns", []):
                if not (isinstance(ledger, int) and isinstance(first, int) and first >= 0):
                    raise ValueError(f"bad column {ledger}:{first}")
                if len(keys) != len(sizes) or not all(k is None or isinstance(k, str) for k in keys):
                    raise ValueError(f"column {ledger} is not string keys and sizes of one length")
                if details._columns and ledger <= next(reversed(details._columns)):
                    raise ValueError(f"ledger {ledger} out of order")
                details._columns[ledger] = _Column(first, list(keys), array("I", sizes))
                details._count += len(keys)
            for ledger, entry, keys in value.get("message_keys", []):
                column = details._columns.get(ledger)
                if column is None or column.slot(entry) is None or not all(isinstance(k, str) for k in keys):
                    raise ValueError(f"message keys for {ledger}:{entry}, which is not held")
                column.message_keys[entry] = list(keys)
        except (TypeError, OverflowError, ValueError) as e:
            raise ValueError(f"entry details: {e}") from e
        return details

    @classmethod
    def from_items(
        cls,
        keys: Iterable[tuple[Position, str]],
        sizes: Iterable[tuple[Position, int]],
        message_keys: dict[tuple[Position, int], str],
    ) -> EntryDetails:
        details = cls()
        size_of = dict(sizes)
        for p, key in sorted(keys):
            details.record(p, key, size_of.get(p))
        for (p, index), key in sorted(message_keys.items()):
            details.set_message_key(p, index, key)
        return details
