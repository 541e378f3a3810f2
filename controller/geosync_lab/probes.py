"""Reading what a region's cursor acknowledged, message by message, for benchmarks and drills.

Batched replicated copies carry no stamp a client can see, so a copy is found through the region's GeoSync
interceptor (its origin index records each replicated entry's source position), and a cursor is read through
the interceptor's cursor endpoint (an empty write answers the cursor's state, batch indexes included).
"""

from __future__ import annotations

import random
from typing import Any

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_core.pluginapi import PluginApiError
from geosync_core.pluginwrites import AckItem
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

Message = tuple[Position, int]
"""(entry, batch index; -1 for an entry that is not a batch)"""


def copies(admin: AdminClient, topic: str, *, origin: str) -> dict[Position, Position]:
    """Entries of ``origin`` -> their copies in the region ``admin`` talks to ({} if it cannot tell)."""
    out: dict[Position, Position] = {}
    try:
        runs = admin.plugin_origins(topic)
    except AdminError:
        return out
    for run in runs:
        if run.origin == origin and run.source is not None:
            for e in range(run.first, run.first + run.count):
                source = run.origin_at(e)
                if source is not None:
                    out[source] = Position(run.ledger, e)
    return out


def acknowledged(admin: AdminClient, topic: str, sub: str, messages: list[Message]) -> set[Message]:
    """Which of ``messages`` the subscription's cursor acknowledged (set() if it cannot be read)."""
    try:
        (result,) = admin.plugin_write([AckItem(topic, sub)])
    except (AdminError, PluginApiError, ValueError):
        return set()
    report = result.cursor
    if report is None:
        return set()
    whole = AckState.parse(str(report.mark_delete), report.individually_deleted)
    unacked = {b.position: set(b.unacked) for b in report.batches}
    return {(p, i) for p, i in messages if p in whole or (i >= 0 and p in unacked and i not in unacked[p])}


def receive_and_acknowledge(
    consumer: Any, count: int, *, share: float, rng: random.Random
) -> tuple[list[Message], set[Message]]:
    """Receive ``count`` messages and acknowledge each with probability ``share`` (holes at random); the
    messages received and those acknowledged, by id."""
    received: list[Message] = []
    acked: set[Message] = set()
    for _ in range(count):
        msg = consumer.receive(timeout_millis=30000)
        mid = msg.message_id()
        key = (Position(mid.ledger_id(), mid.entry_id()), mid.batch_index())
        received.append(key)
        if rng.random() < share:
            consumer.acknowledge(msg)
            acked.add(key)
    return received, acked


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
