"""Hybrid logical clocks as pure values, so policy edits from isolated regions can be ordered.

Regions' wall clocks disagree and can jump backwards, and PIP-136's own rule compares a source broker's
clock with the local ZooKeeper's mtime. A hybrid logical clock (Kulkarni et al.) stays close to wall time
but never runs backwards and always orders a write after every write it has seen. The clock is a value:
the runtime keeps the latest one, passes in the wall time it read, and stores what comes back.

An ``Hlc`` is both the clock state of a region and a timestamp issued by it: the region field names the
issuer, so a timestamp is unique per region and two regions' timestamps never compare equal.

Invariants (each is a test in ``tests/core/test_clocks.py``):

1. Total order by ``(wall_ms, logical, region)``; equal fields and equal order agree.
2. ``tick`` is strictly monotone for its region, whatever wall times it is given, and never below the
   wall time it was given.
3. ``receive`` keeps the local region, never lowers the clock, and leaves it above the received
   timestamp in ``(wall_ms, logical)``, so the next local tick is above every received timestamp, whichever
   region issued it.
4. ``decode(encode(t)) == t``; ``decode`` returns ``None`` for anything that is not a canonical encoding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MAX = 2**63 - 1  # stays a Java long, for the plugins and any JVM reader of the wire form
REGION_PATTERN = re.compile(r"[-=:.\w]+", re.ASCII)  # Pulsar's NamedEntity rule for cluster names
_ENCODED = re.compile(r"(0|[1-9][0-9]{0,18})\.(0|[1-9][0-9]{0,18})\.([-=:.\w]+)", re.ASCII)


@dataclass(frozen=True, order=True)
class Hlc:
    """A hybrid logical timestamp issued by ``region``; also that region's clock state."""

    wall_ms: int
    logical: int
    region: str

    def __post_init__(self) -> None:
        if not (0 <= self.wall_ms <= _MAX and 0 <= self.logical <= _MAX):
            raise ValueError(f"clock fields out of range: {self.wall_ms}, {self.logical}")
        if not REGION_PATTERN.fullmatch(self.region):
            raise ValueError(f"not a region name: {self.region!r}")


def start(region: str) -> Hlc:
    """The clock of a region that has neither issued nor seen any timestamp."""
    return Hlc(0, 0, region)


def tick(clock: Hlc, *, now_ms: int) -> tuple[Hlc, Hlc]:
    """Advance ``clock`` for a local event at wall time ``now_ms``; return (new clock, event timestamp)."""
    if now_ms > clock.wall_ms:
        stamp = Hlc(now_ms, 0, clock.region)
    else:
        stamp = Hlc(clock.wall_ms, clock.logical + 1, clock.region)
    return stamp, stamp


def receive(clock: Hlc, remote: Hlc, *, now_ms: int) -> Hlc:
    """Fold a timestamp seen from any region (ours included) into ``clock`` at wall time ``now_ms``."""
    wall = max(clock.wall_ms, remote.wall_ms, now_ms)
    candidates = [-1]
    if wall == clock.wall_ms:
        candidates.append(clock.logical)
    if wall == remote.wall_ms:
        candidates.append(remote.logical)
    return Hlc(wall, max(candidates) + 1, clock.region)


def encode(stamp: Hlc) -> str:
    """``"<wall_ms>.<logical>.<region>"`` in decimal, e.g. ``"1732230000000.0.eu-west"``."""
    return f"{stamp.wall_ms}.{stamp.logical}.{stamp.region}"


def decode(text: str) -> Hlc | None:
    """The timestamp ``text`` encodes, or ``None`` if it is not exactly what ``encode`` produces."""
    match = _ENCODED.fullmatch(text)
    if match is None or int(match[1]) > _MAX or int(match[2]) > _MAX:
        return None
    return Hlc(int(match[1]), int(match[2]), match[3])
