"""What one region's brokers can do for the agent, learned once and kept as one value.

Each capability is unknown until the agent first needs it and tries; the answer is then kept, so the agent
does not ask again every round. A refusal is not final: brokers restart with other plugins or settings, so a
``False`` learned more than ``REPROBE_S`` ago counts as unknown again and the next use tries once more. A
transient failure (a timeout, a 5xx) teaches nothing and leaves the value as it was.

* ``entry_filter``: the GeoSync entry filter hides snapshot markers from applications (snapshot mode);
* ``plugin_index``: the interceptor serves origins of replicated entries (``/admin/v2/geosync/origins``);
* ``plugin_feed``: the interceptor's acknowledgement feed (``/admin/v2/geosync/cursors``);
* ``plugin_cursor_writes``: cursor writes through the interceptor (``/admin/v2/geosync/acks``);
* ``skip_by_ids``: the admin API's ``skipByMessageIds`` (PIP-423; not in 4.0.x);
* ``batch_acks``: the brokers track acknowledgements per message inside a batch
  (``acknowledgmentAtBatchIndexLevelEnabled``, the default from Pulsar 4.1): cursor writes may carry batch
  indexes (a broker without it answers ``batch_acks_off`` and gets whole entries only).

Invariants: a value is immutable; ``learned`` changes exactly one capability; ``usable`` is never True for
a capability that was refused less than ``REPROBE_S`` before ``now``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

REPROBE_S = 300.0
"""A refused capability is tried again after this long (brokers may have been reconfigured)."""


class Capability(enum.Enum):
    ENTRY_FILTER = "entry_filter"
    PLUGIN_INDEX = "plugin_index"
    PLUGIN_FEED = "plugin_feed"
    PLUGIN_CURSOR_WRITES = "plugin_cursor_writes"
    SKIP_BY_IDS = "skip_by_ids"
    BATCH_ACKS = "batch_acks"


@dataclass(frozen=True, slots=True)
class Known:
    value: bool
    at: float
    """Monotonic seconds when it was learned."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Per capability, what was learned and when (absent: never tried)."""

    known: tuple[tuple[Capability, Known], ...] = ()
    disabled: frozenset[Capability] = field(default_factory=frozenset)
    """Turned off by configuration: never used, never tried."""

    def get(self, capability: Capability) -> bool | None:
        """True or False as learned, None if never tried (disabled ones are False)."""
        if capability in self.disabled:
            return False
        for c, k in self.known:
            if c is capability:
                return k.value
        return None

    def usable(self, capability: Capability, *, now: float) -> bool:
        """Worth trying now: known to work, never tried, or refused long enough ago to try again."""
        if capability in self.disabled:
            return False
        for c, k in self.known:
            if c is capability:
                return k.value or now - k.at >= REPROBE_S
        return True

    def learned(self, capability: Capability, value: bool, *, now: float) -> Capabilities:
        """This value with ``capability`` learned to be ``value`` at ``now`` (unchanged if it already was)."""
        if capability in self.disabled or self.get(capability) is value:
            return self
        rest = tuple((c, k) for c, k in self.known if c is not capability)
        known = tuple(sorted((*rest, (capability, Known(value, now))), key=lambda item: item[0].value))
        return replace(self, known=known)

    def as_dict(self) -> dict[str, bool | None]:
        """For /state: every capability with True, False or None (never tried)."""
        return {c.value: self.get(c) for c in Capability}
