"""Region incarnations: a region wiped and rebuilt under its old name is not the region it was.

Origin coordinates name a message by its region and its position there, and positions are ledger ids, which
a region's metadata store hands out from a counter. A region whose data is wiped and rebuilt under the same
name starts that counter again, so its new messages get the names of old ones: a claim "subscription S
acknowledged a/17:0..40" made before the rebuild would acknowledge, in every region, new messages nobody
consumed. An incarnation tells the two apart.

Each region's agent keeps its region's incarnation in the region's own ZooKeeper (created once, the first
time an agent of the region starts; wiped with the region), and every control envelope it sends carries its
own incarnation and those it knows of the other regions. When a receiver learns a newer incarnation of a
region, it renames the region in every claim it holds and in every index entry it has of the region's origins
to the old incarnation's retired name (``retired``): the same in every region, so claims about the old
messages go on reaching them (a failover of them stays exact) and never reach the new ones. Claims a sender
makes about an incarnation older than the newest known are taken as claims about that one's retired name;
claims about a region from a sender that speaks of incarnations but knows none of that region's are dropped
(nobody can tell which life they speak of). A region speaks only for itself: its incarnation is learned from
its own envelopes, never from a peer's word about it, and claims a peer makes about a life of a region that
the region has not announced here yet wait until it has.

Incarnations are ordered by creation time (wall clock, milliseconds), then id: a region is rebuilt after it
was first built, so the newer one is the greater one. Two incarnations created in the same millisecond are
told apart by their random ids (any order between them is as good).

Invariants:

* ``Incarnation.from_wire(i.to_wire()) == i``; ``from_wire`` answers ``None`` for anything but
  ``[created_ms, id]`` with ``0 <= created_ms < 2**63`` (an integer, not a boolean) and an id of 1 to 64
  characters ``[0-9a-z-]``;
* ``Known.learn`` only ever moves a region's incarnation forward; it answers the incarnation it replaced
  (``None`` when the region was not known yet or nothing changed);
* ``Known.stale(region, tag)`` is true exactly when the region is known and ``tag`` is an older incarnation
  of it, or ``tag`` is missing while the sender speaks of incarnations at all (a sender that knows none of
  a region's incarnations holds claims made before it heard from that region);
* ``Known.waits(region, tag)`` is true exactly when the sender speaks of incarnations and names one of the
  region that is not known here, or newer than the one known: only the region itself says which of its lives
  is current (its own signed envelopes), so claims that depend on one it has not yet announced here wait;
* ``retired(region, i)`` is never a region name Pulsar accepts (it holds ``#``), so it never names a live
  region's messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_ID = re.compile(r"[0-9a-z-]{1,64}")
_LIMIT = 2**63
RETIRED_MARK = "#"


@dataclass(frozen=True, order=True, slots=True)
class Incarnation:
    """One life of a region: when it was first built (wall-clock ms) and a random id."""

    created_ms: int
    id: str

    def __post_init__(self) -> None:
        if not 0 <= self.created_ms < _LIMIT or not _ID.fullmatch(self.id):
            raise ValueError(f"not an incarnation: {self.created_ms!r} {self.id!r}")

    def to_wire(self) -> list[int | str]:
        return [self.created_ms, self.id]

    @classmethod
    def from_wire(cls, value: Any) -> Incarnation | None:
        if not (isinstance(value, list) and len(value) == 2):
            return None
        created, ident = value
        if isinstance(created, bool) or not isinstance(created, int) or not isinstance(ident, str):
            return None
        try:
            return cls(created, ident)
        except ValueError:
            return None

    def __str__(self) -> str:
        return f"{self.id} (created {self.created_ms})"


def retired(region: str, incarnation: Incarnation | None) -> str:
    """The name index entries of ``region``'s old incarnation go by once it was rebuilt: no claim names it."""
    return f"{region}{RETIRED_MARK}{incarnation.id if incarnation else 'unknown'}"


def is_retired(region: str) -> bool:
    return RETIRED_MARK in region


@dataclass(frozen=True, slots=True)
class Known:
    """The newest incarnation known of each region."""

    by_region: Mapping[str, Incarnation] = field(default_factory=dict)

    def get(self, region: str) -> Incarnation | None:
        return self.by_region.get(region)

    def learn(self, region: str, incarnation: Incarnation) -> tuple[Known, Incarnation | None]:
        """This knowledge with ``incarnation`` of ``region`` if it is newer, and the one it replaced."""
        old = self.by_region.get(region)
        if old is not None and incarnation <= old:
            return self, None
        return Known({**self.by_region, region: incarnation}), old

    def stale(self, region: str, tag: Incarnation | None, *, tagged: bool) -> bool:
        """Whether claims about ``region``'s origins, sent by a peer that believes ``tag`` (``tagged``: the
        peer sends incarnations at all; agents from before them do not), speak of an older life of it."""
        known = self.by_region.get(region)
        if known is None or not tagged:
            return False
        return tag is None or tag < known

    def waits(self, region: str, tag: Incarnation | None, *, tagged: bool) -> bool:
        """Whether claims about ``region``'s origins, sent by a peer that believes ``tag``, must wait until
        the region itself has announced that life here (it is newer than the one known, or none is known)."""
        if not tagged or tag is None:
            return False
        known = self.by_region.get(region)
        return known is None or tag > known

    def to_wire(self) -> dict[str, list[int | str]]:
        return {region: i.to_wire() for region, i in sorted(self.by_region.items())}

    @classmethod
    def from_wire(cls, value: Any) -> Known | None:
        """What ``to_wire`` wrote; ``None`` for anything else."""
        if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
            return None
        decoded = {region: Incarnation.from_wire(v) for region, v in value.items()}
        if any(i is None for i in decoded.values()):
            return None
        return cls({r: i for r, i in decoded.items() if i is not None})
