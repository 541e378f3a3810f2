"""What the agent asks to be done, and what came of it, as values: its effects and their outcomes.

The agent decides; the shell's ``Effector`` carries these out through the ports and answers with outcome
values, which the agent folds back into its state. Neither side holds the other's objects: an effect names
what to change by key and position, an outcome says what the broker answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geosync_agent.core.subscriptions import SubKey
from geosync_core import pluginapi
from geosync_core.batches import BatchAcks
from geosync_core.capabilities import Capability
from geosync_core.positions import Position

SHADOW_PREFIX = "geosync-shadow-"
"""Names the idle consumer that acknowledges holes through the admin API (the region's name follows)."""

# -- effects ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginAck:
    """One subscription's change through the broker plugin's cursor writes."""

    key: SubKey
    mark_delete: Position | None
    positions: tuple[Position, ...]
    batches: tuple[tuple[Position, BatchAcks], ...] = ()
    """Batch indexes to acknowledge in entries the change leaves partly acknowledged."""
    planned_from: Position | None = None
    """The cursor's mark-delete the change was planned from, for a plugin that checks it (its feed's
    ``write_version`` 2): it applies nothing on a cursor moved below it since (a reset-cursor)."""


@dataclass(frozen=True, slots=True)
class AdminMove:
    """One subscription's change through the admin API: mark-delete with ``expireMessages`` (when ``move``
    is set), then holes with ``skipByMessageIds`` (``skip_by_ids``) or a shadow consumer, only while no
    application consumer is connected."""

    key: SubKey
    partition: int
    move: Position | None
    holes: tuple[Position, ...]
    skip_by_ids: bool
    consumers: int
    shadow_name: str
    create_first: bool = False
    """Create the subscription (at the earliest message) before moving it (snapshot-mode updates)."""
    counter: str = "mark_delete_moves"
    """The counter a successful move adds to."""


@dataclass(frozen=True, slots=True)
class CreateSubscription:
    key: SubKey


@dataclass(frozen=True, slots=True)
class ResetCursor:
    """Rewind a subscription to mark-delete ``mark_delete`` (None: before the earliest message), clearing
    its individual acknowledgements: a newer generation of claims acknowledges less than the cursor here."""

    key: SubKey
    mark_delete: Position | None


@dataclass(frozen=True, slots=True)
class Publish:
    """Send ``data`` on ``topic`` (a control topic or, for markers, a data topic)."""

    topic: str
    data: bytes
    counter: str
    properties: dict[str, str] = field(default_factory=dict)
    replicate_to: list[str] | None = None


@dataclass(frozen=True, slots=True)
class UnloadTopic:
    """Unload ``topic`` here, so that its broker replicators start anew (one stuck while connected:
    ``geosync_core.replicators.Unsticking``)."""

    topic: str


AdminChange = AdminMove | CreateSubscription | ResetCursor | UnloadTopic
"""The effects carried out through the admin API, in parallel (``ParallelChange``), one admin client per
worker."""
Effect = PluginAck | Publish | AdminChange


# -- outcomes --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CursorWritten:
    """The plugin applied a change; ``cursor`` is the cursor's state afterwards."""

    key: SubKey
    cursor: pluginapi.CursorReport
    moved: bool
    holes: int
    batch_indexes: int = 0
    stale: bool = False
    """Nothing applied: the cursor was below the mark-delete the change was planned from (``cursor`` is it
    as it is: a reset the agent had not seen)."""


PLANNED_FROM_REFUSED = "refused: planned_from"
"""``NotWritten.reason`` of a write whose ``planned_from`` the broker's plugin did not know (older than the
one whose feed said it would)."""


@dataclass(frozen=True, slots=True)
class NotWritten:
    """The plugin could not take it (topic on another broker, plugin absent, writes off): use the admin
    API (``fallback``), or plan again next round."""

    key: SubKey
    fallback: bool
    reason: str


@dataclass(frozen=True, slots=True)
class AdminMoved:
    key: SubKey
    counter: str
    moved_to: Position | None
    busy: bool
    holes_acked: int
    held_back: int
    consumers: int
    error: str = ""
    gone: bool = False
    """The subscription no longer exists here (checked by the effector right before a consumer would have
    re-created it): nothing was applied; it is taken as deleted here, not retried."""


@dataclass(frozen=True, slots=True)
class Created:
    key: SubKey
    created: bool
    topic_missing: bool


@dataclass(frozen=True, slots=True)
class CursorReset:
    key: SubKey
    mark_delete: Position | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class Learned:
    capability: Capability
    value: bool


@dataclass(frozen=True, slots=True)
class Unloaded:
    topic: str
    error: str = ""


Outcome = CursorWritten | NotWritten | AdminMoved | Created | CursorReset | Learned | Unloaded
