"""What peers and brokers report, read as the core's values: cursors from the plugin (and which of its feed's
reports wait, or repeat one already read), claims from peers, the ledger a topic writes to from its internal
stats.

Two readings that must be exact, because a claim can never be taken back. A cursor the broker plugin
reports lists the batch indexes still unacknowledged; the batch's size is needed to know which ones were
acknowledged. Claims a peer sends speak of the incarnations of regions it knows; claims about a region it
does not know to be in its newest life speak of that region's older one.

Invariants (tests in ``tests/agent/test_core_reports.py``): a cursor read from a report never claims more
acknowledged batch indexes than the batch has (a size not known yet is taken as small as the report allows);
claims about a region the sender knows in an older life are renamed to that life's retired name, and those
about a region whose life the sender cannot tell are dropped; claims already about the newest lives are the
very message they came in; a topic counts as reloaded only when two readable polls name different ledgers;
the feed's reports waiting are at most ``cap``, one per subscription (its newest), the oldest dropped first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from geosync_core import ackstates, incarnations, pluginapi
from geosync_core.batches import BatchAcks
from geosync_core.incarnations import Incarnation, Known
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


class Sizes(Protocol):
    """Where the number of messages of a local entry is known (the topic's tail)."""

    def size_of(self, position: Position) -> int | None: ...


def cursor_of(report: pluginapi.CursorReport, sizes: Sizes | None) -> AckState:
    """A cursor as the plugin reported it, with its partly acknowledged batches. The report lists the
    indexes still unacknowledged; the batch's size comes from ``sizes`` (or, for an entry not read yet,
    the highest unacknowledged index + 1: claiming fewer acknowledged indexes than there are, never
    more)."""
    batches: list[tuple[Position, BatchAcks]] = []
    for batch in report.batches:
        if not batch.unacked or batch.position <= report.mark_delete:
            continue
        size = max(sizes.size_of(batch.position) or 1 if sizes else 1, max(batch.unacked) + 1)
        acks = BatchAcks.from_unacked(size, batch.unacked)
        if acks.acked:
            batches.append((batch.position, acks))
    return AckState.parse(str(report.mark_delete), report.individually_deleted, batches)


def of_known_incarnations(
    message: ackstates.AckStateMessage, tags: dict[str, Incarnation] | None, known: Known
) -> ackstates.AckStateMessage:
    """``message`` with its claims about regions whose incarnation its sender (who sent ``tags``; None: an
    agent from before incarnations) does not know to be the newest made about the incarnation it knows (the
    retired name), or dropped if it knows none (made before it heard from that region: of an incarnation
    nobody can tell). The very ``message`` when nothing changed."""
    acks = message.acks
    for r in sorted(message.acks.origin_regions):
        tag = None if tags is None else tags.get(r)
        if known.stale(r, tag, tagged=tags is not None):
            acks = acks.without([r]) if tag is None else acks.renamed(r, incarnations.retired(r, tag))
    return message if acks is message.acks else replace(message, acks=acks)


def waiting_on_incarnations(
    message: ackstates.AckStateMessage, tags: dict[str, Incarnation] | None, known: Known
) -> tuple[ackstates.AckStateMessage, dict[tuple[str, Incarnation], ackstates.AckStateMessage]]:
    """``message`` without its claims about regions whose life its sender names but the region has not
    announced here yet (``Known.waits``), and those claims, one message per (region, life) they wait for."""
    waiting: dict[tuple[str, Incarnation], ackstates.AckStateMessage] = {}
    if tags is None:
        return message, waiting
    regions = message.acks.origin_regions
    for r in sorted(regions):
        tag = tags.get(r)
        if tag is not None and known.waits(r, tag, tagged=True):
            waiting[(r, tag)] = replace(message, acks=message.acks.without(regions - {r}))
    if not waiting:
        return message, waiting
    return replace(message, acks=message.acks.without(r for r, _ in waiting)), waiting


def last_ledger(internal: dict[str, Any]) -> int | None:
    """The ledger a topic writes to, from its ``internalStats`` (None: it lists none, or not readably)."""
    ledgers = internal.get("ledgers") or []
    try:
        return int(ledgers[-1]["ledgerId"]) if ledgers else None
    except (KeyError, TypeError, ValueError):
        return None


def first_ledger(internal: dict[str, Any]) -> int | None:
    """The oldest ledger a topic still holds, from its ``internalStats`` (None: it lists none, or not
    readably)."""
    ledgers = internal.get("ledgers") or []
    try:
        return int(ledgers[0]["ledgerId"]) if ledgers else None
    except (KeyError, TypeError, ValueError):
        return None


def read_gone(last_read: Position | None, internal: dict[str, Any]) -> bool:
    """Whether the topic no longer holds the ledger of the entry a tail read last (``last_read``): every
    ledger it holds is newer. The topic was deleted and created again (or all the tail read was trimmed): a
    cursor there starts at its new ledger, above every entry the tail read, and must not be read over them."""
    first = first_ledger(internal)
    return last_read is not None and first is not None and last_read.ledger < first


def log_end(internal: dict[str, Any]) -> Position | None:
    """The last entry a topic holds, from its ``internalStats`` (``lastConfirmedEntry``; ``L:-1`` for an empty
    ledger); None where it is absent or not a position."""
    text = internal.get("lastConfirmedEntry")
    if not isinstance(text, str):
        return None
    try:
        return Position.parse(text)
    except ValueError:
        return None


def reloaded(before: int | None, ledger: int | None) -> bool:
    """Whether a topic that wrote to ledger ``before`` at the last poll and to ``ledger`` now was loaded
    again (a bundle moved, a broker restarted) or rolled over; an unknown ledger on either side says no."""
    return before is not None and ledger is not None and ledger != before


SubKey = tuple[str, str]


def hold(
    waiting: dict[SubKey, pluginapi.CursorReport],
    reports: Iterable[pluginapi.CursorReport],
    *,
    in_scope: Callable[[str, str], bool],
    cap: int,
) -> int:
    """Add the feed's ``reports`` of subscriptions ``in_scope`` (topic, name) to those ``waiting`` for their
    topic and subscription to be tracked and read: one per subscription, its newest, kept last (the dict's
    order is oldest first); over ``cap`` the oldest are dropped. How many were dropped."""
    for report in reports:
        key = (report.topic, report.subscription)
        if in_scope(*key):
            waiting.pop(key, None)
            waiting[key] = report
    dropped = 0
    while len(waiting) > cap:
        del waiting[next(iter(waiting))]
        dropped += 1
    return dropped


def as_read(report: pluginapi.CursorReport, sizes: Sizes | None) -> tuple[object, ...]:
    """What ``report`` says, with the sizes of the batches it names as known now (``sizes`` None: a tail
    opened now, which knows none): the same again, while no write or poll set another cursor since, is the
    plugin's repeat within its settle time (read unchanged)."""
    read: tuple[object, ...] = (
        report.mark_delete,
        report.individually_deleted,
        report.batches,
        report.batches_truncated,
    )
    if report.batches:
        read += tuple(None if sizes is None else sizes.size_of(b.position) for b in report.batches)
    return read
