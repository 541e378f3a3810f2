"""The checkpoint's wire forms of the agent's own values: cursors, replay guards, subscriptions and the
tails' views (``core.logview``).

A restarted agent resumes from its checkpoint instead of re-reading history (``geosync_agent.checkpointing``
writes the file; a view's origin index and entry details encode themselves, in ``geosync_core``). What is
written here is read back here, so the two directions stay side by side.

Invariants (tests in ``tests/agent/test_core.py``, the views' in ``tests/agent/test_core_logview.py``): every
value written reads back equal (``cursor_from_wire(cursor_to_wire(c)) == c``, likewise guards and a
subscription's checkpointed fields; a view read back gives the same answers);
anything else read raises ``ValueError``, ``TypeError`` or ``KeyError`` (the caller then restores nothing);
fields absent from older agents' checkpoints read as those agents meant them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from geosync_agent.core import tuning
from geosync_agent.core.logview import LogView, Pending
from geosync_agent.core.subscriptions import Subscription
from geosync_core import ackstates, envelopes, resolving
from geosync_core.batches import BatchAcks
from geosync_core.details import EntryDetails
from geosync_core.indexing import OriginIndex
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range


def cursor_to_wire(cursor: AckState) -> list[Any]:
    """A cursor as the checkpoint keeps it: ``[mark-delete, [[lower, upper], ...], [[position, size, bits],
    ...]]`` (``cursor_from_wire`` reads it back)."""
    return [
        cursor.mark_delete.to_wire(),
        [[r.lower.to_wire(), r.upper.to_wire()] for r in cursor.ranges],
        [[p.to_wire(), acks.size, acks.hex()] for p, acks in cursor.batches],
    ]


def cursor_from_wire(value: Any) -> AckState:
    """The cursor ``cursor_to_wire`` wrote; ``ValueError`` (or ``TypeError``) for anything else."""
    mark_delete, ranges, batches = value
    return AckState.of(
        Position.from_wire(mark_delete),
        [Range(Position.from_wire(lower), Position.from_wire(upper)) for lower, upper in ranges],
        [(Position.from_wire(p), BatchAcks.from_hex(int(size), str(bits))) for p, size, bits in batches],
    )


def guard_to_wire(guard: envelopes.ReplayGuard) -> dict[str, Any]:
    """A control topic's replay guard as the checkpoint keeps it."""
    return {"highest": [list(h) for h in guard.highest], "recent": [[r, list(s)] for r, s in guard.recent]}


def guard_from_wire(value: Any) -> envelopes.ReplayGuard:
    """The guard ``guard_to_wire`` wrote."""
    return envelopes.ReplayGuard(
        tuple((str(r), int(s)) for r, s in value["highest"]),
        tuple((str(r), tuple(int(x) for x in seqs)) for r, seqs in value["recent"]),
    )


def subscription_fields(s: Subscription) -> dict[str, Any]:
    """A subscription's checkpointed fields but its claims and cursor (encoded apart: see the agent's
    ``checkpoint_later``)."""
    return {
        "topic": s.topic,
        "name": s.name,
        "exists": s.exists,
        "deleted_here": s.deleted_here,
        "announced": s.announced,
        "kind": s.kind,
        "key_shared": s.key_shared,
        "generation": s.generation,
        "follow": s.follow,
        "active": s.active,
        "acked": None if s.acked is None else cursor_to_wire(s.acked),
    }


def subscription_from_wire(item: Any) -> Subscription:
    """The subscription a checkpoint holds (``subscription_fields`` with ``received``, ``published`` and
    ``cursor``). One that existed is taken as confirmed before any discovery pass: a pass not finding it
    means it was deleted meanwhile."""
    sub = Subscription(str(item["topic"]), str(item["name"]), exists=bool(item["exists"]))
    sub.deleted_here = bool(item["deleted_here"])
    sub.announced = bool(item["announced"])
    sub.kind, sub.key_shared = str(item["kind"]), bool(item["key_shared"])
    sub.received = ackstates.acks_from_json(item["received"])
    if item["published"] is not None:
        sub.published = ackstates.acks_from_json(item["published"])
    # Absent in checkpoints of agents before generations: 0, the generation of their claims.
    sub.generation, sub.follow = int(item.get("generation", 0)), bool(item.get("follow", False))
    sub.active = bool(item.get("active", False))
    # What consumers were seen acknowledging (claims_from: acknowledgements); absent in checkpoints of
    # agents before it: nothing seen, so nothing claimed but what consumers acknowledge from now on.
    if item.get("acked") is not None:
        sub.acked = cursor_from_wire(item["acked"])
    # Absent in checkpoints of agents before cursors were kept: read by the first round's polls.
    if sub.exists and item.get("cursor") is not None:
        sub.cursor = cursor_from_wire(item["cursor"])
    if sub.exists:
        sub.confirmed_at = tuning.CHECKPOINT_CONFIRMED
    return sub


View = TypeVar("View", bound=LogView)


def view_to_wire(view: LogView) -> dict[str, Any]:
    """What a checkpoint keeps of a tail's view (its origin index, entry details, unresolved and pending
    entries; ``view_from_wire`` reads it back)."""
    return view_to_wire_later(view)()


def view_to_wire_later(view: LogView) -> Callable[[], dict[str, Any]]:
    """``view_to_wire``'s value as it is now, encoded when called: the index and the entry details are copied
    now (fast: lists of references and arrays) and turned into JSON values later, on the checkpoint's
    thread, where 500,000 runs took 8 s of the loop's time."""
    index, details, last, budget_floor = (
        view.index.copy(),
        view.details.copy(),
        view.last,
        view.budget_floor,
    )
    unresolved = [[p.ledger, p.entry] for p in view.unresolved]
    pending = [
        [
            p.ledger,
            p.entry,
            item.properties.get(resolving.REPL_SOURCE_POSITION),
            item.producer,
            item.batched,
            *([] if item.published_ms is None else [item.published_ms]),
        ]
        for p, item in view.pending.items()
    ]

    def encode() -> dict[str, Any]:
        return {
            "index": index.to_wire(),
            "last": None if last is None else last.to_wire(),
            # Without it a restarted agent took a subscription parked below the entries forgotten over the
            # budget for one below entries every subscription had acknowledged, and read the topic again
            # from its earliest message (25 topics at once in a soak, rounds of 44 s).
            "budget_floor": None if budget_floor is None else budget_floor.to_wire(),
            "details": details.to_columns(),
            "unresolved": unresolved,
            "pending": pending,
        }

    return encode


def view_from_wire(make: type[View], topic: str, partition: int, value: Any) -> View:
    """A view (``make``: ``LogView`` or the shell's ``Tail``) restored from ``view_to_wire``'s values, to
    resume reading at its last entry; ``ValueError`` for anything else."""
    if not isinstance(value, dict):
        raise ValueError("not a tail")
    view = make(topic, partition, index=OriginIndex.from_wire(value.get("index")))
    view.last = None if value.get("last") is None else Position.from_wire(value["last"])
    view.resume_at = view.last
    # Absent in checkpoints of agents before it was kept.
    floor = value.get("budget_floor")
    view.budget_floor = None if floor is None else Position.from_wire(floor)
    if "details" in value:
        view.details = EntryDetails.from_columns(value["details"])
    else:  # written by an agent before the columns (one value per entry)
        message_keys = value.get("message_keys", [])
        view.details = EntryDetails.from_items(
            [(Position(int(lg), int(e)), str(k)) for lg, e, k in value.get("keys", [])],
            [(Position(int(lg), int(e)), int(n)) for lg, e, n in value.get("sizes", [])],
            {(Position(int(lg), int(e)), int(i)): str(k) for lg, e, i, k in message_keys},
        )
    view.unresolved = [Position(int(lg), int(e)) for lg, e in value.get("unresolved", [])]
    for lg, e, stamp, producer, batched, *published in value.get("pending", []):
        properties = {} if stamp is None else {resolving.REPL_SOURCE_POSITION: str(stamp)}
        at = int(published[0]) if published else None  # absent: before publish times were kept
        view.pending[Position(int(lg), int(e))] = Pending(
            properties, str(producer), bool(batched), published_ms=at
        )
    return view
