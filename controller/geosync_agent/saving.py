"""Checkpoints taken and restored: what the agent keeps across restarts (``checkpointing`` is the file).

The state is taken on the loop's thread (the only one that reads it), cheaply fingerprinted to skip
unchanged ones, and encoded and written by the checkpoint writer; ``restore`` takes one up before the first
round. The wire forms of its parts are ``core.checkpoint``'s.

Functions over the agent's state, not a part in its chain of classes: they read and set its attributes and
call nothing of the parts but ``Tracking.resync_period``. ``runtime.Agent`` names them as its methods
(``save_checkpoint``, ``checkpoint`` for ``take_checkpoint``, ``restore``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from geosync_agent import checkpointing
from geosync_agent.agentstate import Now, TopicState
from geosync_agent.core import checkpoint, tuning
from geosync_agent.core.subscriptions import (
    SubKey,
    Subscription,
    SubsTable,
)
from geosync_agent.discovering import partition_of
from geosync_agent.tailing import Tail
from geosync_agent.tracking import Tracking
from geosync_core import ackstates, pacing, pluginapi
from geosync_core.incarnations import Incarnation, Known
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position

log = logging.getLogger("geosync.agent")


def save_checkpoint(agent: Tracking, now: Now, *, background: bool = False) -> None:
    """Write the checkpoint now (a failure is logged and counted; the next one tries again). The state
    is taken on the loop's thread (the only one that reads it); with ``background`` it is encoded,
    compressed and written by the checkpoint writer (``checkpointing.Writer``; a second or more at 10,000
    subscriptions on a busy machine, which the rounds no longer wait for), and skipped while the previous
    one is still waiting or being written (the next interval writes a newer one). Without, it waits for
    that one and writes now. A periodic one (``background``) is skipped while the state looks unchanged,
    for at most tuning.CHECKPOINT_UNCHANGED_MAX_AGE_S. How long it took is measured on ``now``'s clock."""
    if agent.checkpoint_path is None:
        return
    writer = agent.checkpoint_writer
    if writer.busy():
        if background:
            agent.stats.inc("checkpoints_skipped")
            return
        writer.wait()
    started, at = now.since(), now.mono
    fingerprint, held = checkpoint_fingerprint(agent)
    seen = agent.checkpoint_seen
    if (
        background
        and seen is not None
        and seen[0] == fingerprint
        and at - seen[2] < tuning.CHECKPOINT_UNCHANGED_MAX_AGE_S
    ):
        agent.stats.inc("checkpoints_unchanged")
        return
    agent.checkpoint_seen = (fingerprint, held, at)
    try:
        state = checkpoint_later(agent)
    except ValueError as e:
        agent.stats.inc("checkpoint_errors")
        log.warning("cannot take the checkpoint: %s", e)
        return
    taken = agent.checkpoint_taken_s = now.since() - started
    segment = agent.journal.rotate()  # what is acknowledged from now on is not in this checkpoint
    if background:
        writer.offer(
            lambda: _write_checkpoint(agent, state, now, started=started, taken=taken, segment=segment)
        )  # not busy: checked above
    else:
        _write_checkpoint(agent, state, now, started=started, taken=taken, segment=segment)


def _acks_wire(agent: Tracking, acks: OriginAcks) -> dict[str, Any]:
    """``acks`` as the checkpoint writes them, encoded once for as long as they do not change (claims are
    immutable values: most of 10,000 subscriptions' claims are the same objects as at the last one)."""
    hit = agent.acks_wire.get(id(acks))
    wire = hit[1] if hit is not None and hit[0] is acks else ackstates.acks_to_json(acks)
    agent.acks_wire_next[id(acks)] = (acks, wire)
    return wire


def _write_checkpoint(
    agent: Tracking,
    state: Callable[[], dict[str, Any]],
    now: Now,
    *,
    started: float,
    taken: float,
    segment: int,
) -> None:
    """Encode and write ``state`` (by the checkpoint writer or on the loop's thread: it only counts and
    assigns), taken ``started`` seconds after ``now``."""
    assert agent.checkpoint_path is not None
    try:
        size = checkpointing.save(agent.checkpoint_path, region=agent.config.region, state=state())
    except (OSError, ValueError) as e:
        agent.stats.inc("checkpoint_errors")
        agent.checkpoint_seen = None  # not written: the next one is, changed or not
        log.warning("cannot write the checkpoint %s: %s", agent.checkpoint_path, e)
        return
    agent.stats.inc("checkpoints_written")
    agent.journal.drop_before(segment)  # the checkpoint written holds what the older segments held
    cost = agent.checkpoint_cost_s = now.since() - started
    agent.timeline.add("checkpoint", now.mono + started, cost, in_loop_s=round(taken, 3))
    # The largest temporary buffers (the state's JSON and its compressed copy) were just freed.
    agent.allocator.trim()
    agent.checkpoint_info = {
        "bytes": size,
        "seconds": round(cost, 4),
        "taken_in_loop_seconds": round(taken, 4),
        "at": now.wall + started + cost,
    }


def checkpoint_fingerprint(agent: Tracking) -> tuple[Any, list[object]]:
    """What a checkpoint would hold, told cheaply (the tails by identity, sizes, last positions and
    versions; the claims, immutable values, mostly the same objects as at the last one), and the objects
    it names by identity."""
    held: list[object] = []
    topics = []
    for topic, ts in agent.topics.items():
        tail = ts.tail
        held.append(tail)
        topics.append(
            (
                topic,
                id(tail),
                tail.stale,
                tail.version,
                tail.rewrites,
                tail.last,
                tail.budget_floor,
                len(tail.index),
                tail.index.floor,
                len(tail.index.retirements()),
                len(tail.details),
                tail.details.changes,
                tail.details.lowest(),
                len(tail.unresolved),
                len(tail.pending),
            )
        )
    subs = []
    for s in agent.subs.values():
        subs.append(
            (
                s.topic,
                s.name,
                s.exists,
                s.deleted_here,
                s.announced,
                s.kind,
                s.key_shared,
                s.generation,
                s.follow,
                s.active,
                s.acked,
                s.received,  # compared as values where not the same object (a resync makes equal ones)
                s.published,
            )
        )
    rest = (
        agent.incarnation,
        agent.incarnations.to_wire(),
        {t: tail.last for t, tail in agent.controls.items()},
        {t: checkpoint.guard_to_wire(g) for t, g in agent.guards.items()},
        {t: checkpoint.guard_to_wire(g) for t, g in agent.snapshots.guards.items()},
    )
    return (tuple(topics), tuple(subs), rest), held


def take_checkpoint(agent: Tracking) -> dict[str, Any]:
    """What a restarted agent needs to resume without re-reading history, as JSON values, taken as
    written: the journal keeps only what is acknowledged after it (a caller that keeps the value where a
    crash does not reach it, as the simulator does)."""
    segment = agent.journal.rotate()
    state = checkpoint_later(agent)()
    agent.journal.drop_before(segment)
    return state


def checkpoint_later(agent: Tracking) -> Callable[[], dict[str, Any]]:
    """``take_checkpoint``'s value as it is now, its largest parts (the topics' origin indexes and entry
    details, the subscriptions' claims) encoded when called: taken on the loop's thread, the only one
    that reads the state, and called on the checkpoint's thread."""
    topics = {
        t: checkpoint.view_to_wire_later(ts.tail) for t, ts in agent.topics.items() if not ts.tail.stale
    }
    rest = {
        "incarnation": None if agent.incarnation is None else agent.incarnation.to_wire(),
        "incarnations": agent.incarnations.to_wire(),
        "controls": {t: tail.last.to_wire() for t, tail in agent.controls.items() if tail.last},
        "guards": {t: checkpoint.guard_to_wire(g) for t, g in agent.guards.items()},
        "marker_guards": {t: checkpoint.guard_to_wire(g) for t, g in agent.snapshots.guards.items()},
    }
    # Their claims are encoded when called, on the checkpoint's thread (at 10,000 subscriptions
    # acknowledged all the time, encoding the claims that changed was 6-8 % of the loop's time).
    subs = [
        (
            checkpoint.subscription_fields(s),
            s.received,
            s.published,
            s.cursor,
        )
        for s in agent.subs.values()
    ]

    def encode() -> dict[str, Any]:
        listed = [
            {
                **fields,
                "received": _acks_wire(agent, received),
                "published": None if published is None else _acks_wire(agent, published),
                "cursor": None if cursor is None else checkpoint.cursor_to_wire(cursor),
            }
            for fields, received, published, cursor in subs
        ]
        agent.acks_wire, agent.acks_wire_next = agent.acks_wire_next, {}
        return {
            "topics": {t: encode_topic() for t, encode_topic in topics.items()},
            **rest,
            "subscriptions": listed,
        }

    return encode


def restore(agent: Tracking, state: dict[str, Any], now: Now) -> None:
    """Take up a checkpoint before the first round: tails resume at their last entry (their readers open
    in the first round), subscriptions keep the claims received and published, control topics their read
    position and replay guard. ``ValueError`` (nothing restored) for a state this agent cannot use."""
    own = Incarnation.from_wire(state.get("incarnation"))
    if own is not None and agent.incarnation is not None and own != agent.incarnation:
        raise ValueError(
            f"the checkpoint was written by an agent of incarnation {own} of "
            f"{agent.config.region}; the region is incarnation {agent.incarnation} now (it was rebuilt)"
        )
    try:
        known = Known.from_wire(state.get("incarnations", {}))
        if known is None:
            raise ValueError("incarnations not readable")
        controls: dict[str, Tail] = {}
        for topic, last in dict(state["controls"]).items():
            tail = controls[topic] = Tail(topic, -1, wake=agent.wake)
            tail.last = tail.resume_at = Position.from_wire(last)
        guards = {topic: checkpoint.guard_from_wire(g) for topic, g in dict(state["guards"]).items()}
        # Absent in checkpoints of agents before markers had a replay guard.
        marker_guards = {
            topic: checkpoint.guard_from_wire(g) for topic, g in dict(state.get("marker_guards", {})).items()
        }
        subs: dict[SubKey, Subscription] = {}
        for item in list(state["subscriptions"]):
            sub = checkpoint.subscription_from_wire(item)
            subs[sub.key] = sub
        # The first resyncs spread over the period of the subscriptions restored (``resync_period`` of
        # the agent's still empty table gave ``resync_interval_s``: at 10,000 subscriptions every topic
        # was republished whole within 30 s of a restart instead of 100 s, while the agent caught up).
        period = agent.resync_period(len(subs))
        # A topic whose cursors all came back is first polled within RESTORED_POLL_SPREAD_S, spread: the
        # first round plans and writes from the checkpoint's cursors (a plugin write answers the cursor
        # as it is, and a cursor that moved on since only has some acknowledgements written again),
        # instead of waiting for a poll of every topic (at 10,000 subscriptions 1.2 s of that round).
        read = {s.topic for s in subs.values() if s.exists and s.cursor is None}
        spread = tuning.RESTORED_POLL_SPREAD_S
        topics = {
            topic: TopicState(
                checkpoint.view_from_wire(Tail, topic, partition_of(topic), value),
                resync_at=pacing.first_resync(now.mono, period_s=period, phase=agent.rng.random()),
                poll=pacing.PollState(
                    next_at=0.0 if topic in read else now.mono + spread * agent.rng.random()
                ),
            )
            for topic, value in dict(state["topics"]).items()
        }
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ValueError(f"checkpoint content not usable: {type(e).__name__}: {e}") from e
    agent.topics, agent.controls, agent.guards, agent.subs = topics, controls, guards, SubsTable(subs)
    agent.snapshots.guards = marker_guards
    for region, incarnation in known.by_region.items():
        if region != agent.config.region:
            agent.incarnations = agent.incarnations.learn(region, incarnation)[0]
    agent.stats.inc("checkpoint_restored")
    agent.feed.replay = _journalled(agent)
    log.info(
        "resuming from the checkpoint: %d topics (%d index runs), %d subscriptions, %d control topics, "
        "%d acknowledged blocks journalled since",
        len(topics),
        sum(len(ts.tail.index) for ts in topics.values()),
        len(subs),
        len(controls),
        len(agent.feed.replay),
    )


def _journalled(agent: Tracking) -> tuple[pluginapi.AckedSet, ...]:
    """The ``acked`` blocks the journal kept since the checkpoint (``checkpointing.Journal``): what
    consumers acknowledged after it, which the broker forgot once the agent's next read confirmed it.
    A block that does not read back is skipped and counted (``journal_skipped``)."""
    out: list[pluginapi.AckedSet] = []
    torn = agent.journal.torn
    for record in agent.journal.records():
        for wire in record.get("acked") or ():
            try:
                out.append(pluginapi.AckedSet.from_wire(wire))
            except pluginapi.PluginApiError:
                agent.stats.inc("journal_skipped")
    if agent.journal.torn > torn:
        agent.stats.inc("journal_skipped", agent.journal.torn - torn)
    return tuple(out)
