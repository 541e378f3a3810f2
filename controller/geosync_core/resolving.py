"""Naming the origin of an entry read in one region: the one rule the agent, geoctl and the audit share.

A message published here is its own origin. A replicated copy carries its origin *position* in the property
``__MSG_PROP_REPL_SOURCE_POSITION`` but not the origin *region*, and ledger ids of different regions
collide, so the region is named by rules, cheapest first: a producer name this resolver already verified
names its region; otherwise the caller's ``lookup`` (the entry's ``X-Pulsar-replicated-from`` header from
the admin API) answers, and a broker-generated producer
name (``<cluster>-<n>-<n>``) that agrees with the header is remembered, so each replicator costs one lookup.

A *batched* replicated copy shows clients no stamp at all: the broker keeps it in the entry's metadata and
each message's own properties replace it. A batched entry without a visible stamp is therefore named by
its producer (a broker-generated name of this region: published here) or else by the caller's ``source``
(the broker's record of the entry's origin region and position: the plugin's origin index, or the entry's
headers from the admin API); when neither can tell, it is ``Unresolved``, never guessed local. Trusting
a producer name that claims this region is safe: a copy from elsewhere named like a local producer is
indexed as a local entry, which no other region holds, so no claim about it acknowledges anything
elsewhere (it costs exactness for that producer, never a message).

Where the broker keeps a record of every entry's origin (the GeoSync interceptor's origin index, the
caller's ``recorded``), a stamp is checked against it before any rule: an application can set the stamp
property on a message it publishes (brokers keep it), and with two regions the stamp alone would name the
other region's entry at that position, so acknowledging the application's message would acknowledge an
unrelated message elsewhere. An entry the broker recorded as published here is local whatever it carries
(counted as ``spoofed``); a replicated one takes the broker's region (and source position, when recorded).

Without that record (no interceptor, its capability unknown, or its index refused: the 403 a remote agent
gets), a stamp is still never trusted alone (issue 45, case 3). Two forgeries defeat the stamp plus a
producer name: an application publishing here under a producer name the resolver verified for another
region (``a-0-5``), with a stamp naming another producer's later message there; and an application in
the other region stamping its own message, whose copy then carries two stamps, of which clients keep the
application's (the first). So where the caller gives ``source`` (the broker's own view of the entry: the
admin API's headers, whose entry properties keep the broker's stamp, the last), a stamped entry takes
the origin ``source`` names, and is ``Unresolved`` when it cannot tell; a stamp that disagrees with it is
counted as ``spoofed``. Only callers without ``source`` still trust the stamp and the rules below.

Message properties are untrusted input (anyone with produce permission sets them): a stamp that is not a
position is a value, never an exception. The entry is named as the broker's record or view names it (as a
forged well-formed stamp is), and where neither can, it is ``Malformed`` and left unindexed (so no cursor
moves past it on a guess).

Invariants:

* ``origin_of`` never raises on any property value; a well-formed stamp yields ``Origin`` or
  ``Unresolved``, a malformed one the broker's record or view of the entry (``spoofed``) or else
  ``Malformed``, no stamp the entry itself;
* the lookup is called at most once per entry and, for a verified broker-generated producer, never again;
* a producer name is remembered only when its broker-generated name claims the region the lookup named;
* a batched entry without a visible stamp is local only if its producer name claims this region or
  ``source`` says so, and replicated only with the origin position ``source`` gave;
* UNTRUSTED STAMPS: with ``source`` and without a broker record, a stamped entry is named exactly as
  ``source`` names it (or ``Unresolved``): no stamp or producer name makes it another message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from geosync_core import drift
from geosync_core.origins import Origin
from geosync_core.positions import Position

_LONG = 2**63
REPL_SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION"
"""The property brokers stamp on a replicated copy (3.0.11 / 3.3.6 / 4.0.4 and later)."""

Lookup = Callable[[str, Position], "str | None"]
"""(topic partition, local position) -> the origin region the broker recorded, None if it cannot tell."""

Recorded = Callable[[str, Position], "tuple[str, Position | None] | None"]
"""(topic partition, local position) -> (origin region, source position or None) as the broker recorded the
entry when it was written, without a per-entry call; None where there is no such record."""

Source = Callable[[str, Position], "Origin | None"]
"""(topic partition, local position) -> the entry's origin as the broker recorded it (this region and the
position itself for an entry published here), None if it cannot tell."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """The entry carries a source-position stamp that is not a position (not from a broker)."""

    stamp: str


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A replicated copy whose origin region no rule and no lookup could name (yet)."""

    position: Position


def stamp_of(properties: Mapping[str, str]) -> Position | Malformed | None:
    """The origin position a replicated copy was stamped with; None for a message published here."""
    raw = properties.get(REPL_SOURCE_POSITION)
    if raw is None:
        return None
    try:
        position = Position.parse(str(raw))
    except ValueError:
        return Malformed(str(raw)[:64])
    if not (0 <= position.ledger < _LONG and 0 <= position.entry < _LONG):
        return Malformed(str(raw)[:64])  # brokers write Java longs: a checkpoint refuses anything else
    return position


class OriginResolver:
    """Names origins of the entries one region holds (see the module docstring); keeps what it verified."""

    def __init__(
        self, *, local: str, lookup: Lookup, source: Source | None = None, recorded: Recorded | None = None
    ) -> None:
        self.local = local
        self.lookup = lookup
        self.source = source
        self.recorded = recorded
        self.spoofed = 0
        """Stamped entries the broker recorded as published here (an application set the property)."""
        self.verified: dict[str, str] = {}
        self.lookups = 0
        self.source_lookups = 0

    def region_of(self, topic: str, local: Position, *, producer: str) -> str | None:
        """The origin region of the replicated copy at ``local``, or None when nothing can name it. Never
        from the namespace's cluster list (see ``drift.origin_without_lookup``)."""
        named = drift.origin_without_lookup(producer, self.verified)
        if named is not None:
            return named
        region = self.lookup(topic, local)
        self.lookups += 1  # once answered: a lookup may stop to be asked by the shell (``core.naming``)
        if region is not None and drift.producer_cluster(producer) == region:
            self.verified[producer] = region
        return region

    def origin_of(
        self,
        topic: str,
        local: Position,
        *,
        properties: Mapping[str, str],
        producer: str,
        batched: bool = False,
    ) -> Origin | Unresolved | Malformed:
        """The origin of the entry at ``local`` given its (first message's) properties and producer name;
        ``batched`` when the entry is a batch (its message ids carry a batch index)."""
        stamp = stamp_of(properties)
        if stamp is None:
            if batched:
                return self._batched(topic, local, producer)
            return Origin(self.local, local)
        if isinstance(stamp, Malformed):
            return self._malformed(topic, local, stamp)
        record = self.recorded(topic, local) if self.recorded is not None else None
        if record is not None:
            region_recorded, source = record
            if region_recorded == self.local:
                self.spoofed += 1
                return Origin(self.local, local)
            return Origin(region_recorded, source if source is not None else stamp)
        if self.source is not None:
            return self._untrusted_stamp(topic, local, stamp)
        region = self.region_of(topic, local, producer=producer)
        if region is None:
            return Unresolved(local)
        return Origin(region, stamp)

    def _malformed(self, topic: str, local: Position, stamp: Malformed) -> Origin | Malformed:
        """A stamp that is no position (brokers write positions: an application set it), named by the
        broker's record or view of the entry where there is one (counted as ``spoofed``), else ``Malformed``.
        Left unindexed where the broker names it, no region would ever apply its acknowledgement (issue 45,
        ``tests/sim/test_hostile.py``)."""
        record = self.recorded(topic, local) if self.recorded is not None else None
        found: Origin | None = None
        if record is not None:
            region, source = record
            found = Origin(self.local, local) if region == self.local else None
            if region != self.local and source is not None:
                found = Origin(region, source)
        elif self.source is not None:
            found = self.source(topic, local)
            self.source_lookups += 1
        if found is None:
            return stamp
        self.spoofed += 1
        return found

    def _untrusted_stamp(self, topic: str, local: Position, stamp: Position) -> Origin | Unresolved:
        """A stamped entry without the broker's record: named by ``source`` (the broker's own view of the
        entry), never by the stamp and producer name alone, which an application chooses."""
        found = self.source(topic, local) if self.source is not None else None
        self.source_lookups += 1
        if found is None:
            return Unresolved(local)
        if found.region == self.local or found.position != stamp:
            self.spoofed += 1
        return found

    def _batched(self, topic: str, local: Position, producer: str) -> Origin | Unresolved:
        if drift.producer_cluster(producer) == self.local:
            return Origin(self.local, local)
        if self.source is not None:
            found = self.source(topic, local)
            self.source_lookups += 1
            if found is not None:
                return found
        return Unresolved(local)
