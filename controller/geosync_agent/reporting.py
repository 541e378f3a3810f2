"""The agent's state as /state shows it: what an operator reads to tell what the agent is doing and why.

Kept apart from the agent so that the sync state and the decisions made from it say nothing about how they
are shown. Read from the HTTP thread while the loop runs: it copies what it iterates (a list of a dict the
loop may change meanwhile) and holds no lock the loop waits on. Part of the shell (decision 0001): it reads
the clock for what it shows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from geosync_agent.core.subscriptions import claim_size

if TYPE_CHECKING:
    from geosync_agent.runtime import Agent


def status(agent: Agent) -> dict[str, Any]:
    """What /state shows of ``agent`` (see the module docstring for the thread it runs on)."""
    topics = list(agent.topics.values())
    rounds = list(agent.round_seconds)
    return {
        "region": agent.config.region,
        "ready": agent.ready,
        "incarnation": None if agent.incarnation is None else agent.incarnation.to_wire(),
        "incarnations": agent.incarnations.to_wire(),
        "namespaces": sorted(agent.namespaces),
        "topics": len(topics),
        "tracked_topics": sorted(t.tail.topic for t in topics),
        "ownership": None if agent.ownership is None else agent.ownership.status(time.monotonic()),
        "subscriptions": len(agent.subs),
        "capabilities": agent.caps.as_dict(),
        "claims": claims_status(agent),
        "index_runs": sum(len(t.tail.index) for t in topics),
        "entry_details": sum(len(t.tail.details) for t in topics),
        "claim_spans": sum(
            claim_size(s.published) + claim_size(s.received) for s in list(agent.subs.values())
        ),
        "unresolved": {t.tail.topic: len(t.tail.unresolved) for t in topics if t.tail.unresolved},
        "retrying": sum(len(t.tail.pending) for t in topics),
        "bytes_read": sum(t.tail.bytes_read for t in topics),
        "inbox": sum(t.tail.inbox.qsize() for t in topics),
        "messages_read": sum(t.tail.messages_read for t in topics),
        "counters": dict(agent.stats.counters),
        "round_seconds_p50": sorted(rounds)[len(rounds) // 2] if rounds else 0,
        "round_seconds_max": max(rounds, default=0),
        "round_seconds_p99": sorted(rounds)[len(rounds) * 99 // 100] if rounds else 0,
        # since the last round ended (with the pause after it): a round still running shows here, and
        # nowhere else until it ends
        "since_round_ended_s": None
        if agent.round_done_at is None or not rounds
        else round(max(0.0, time.monotonic() - agent.round_done_at - rounds[-1]), 3),
        "round_phases": agent.phase_seconds.report(),
        "broker_calls": agent.broker_calls.report(),
        "discovery_seconds_max": round(max(agent.discovery_seconds, default=0.0), 3),
        "timeline": agent.timeline.report(),
        "control_transit_ms": agent.transit_ms.percentiles(),
        # [when taken (monotonic s), ms] of the last 1,000: did transit grow over a span, not only its tail
        "control_transit_recent": agent.transit_ms.timed(),
        # of that transit, the time in the inbox until the loop took them (every message read, ours too)
        "control_queued_ms": agent.queued_ms.percentiles(),
        "control_queued_recent": agent.queued_ms.timed(),
        "guard": {t: dict(g.highest) for t, g in list(agent.guards.items())},
        "deleted_here": [f"{s.topic} / {s.name}" for s in list(agent.subs.values()) if s.deleted_here],
        "parked": [f"{s.topic} / {s.name}" for s in list(agent.subs.values()) if s.parked],
        "replicators_stalled": [
            {
                "topic": stall.topic,
                "to": stall.remote,
                "backlog": stall.backlog,
                "connected": stall.connected,
                "stalled_for_s": round(seconds, 1),
            }
            for stall, seconds in list(agent.stalled)
        ],
        "replicator_unloads": dict(agent.unsticking.tries),
        "namespaces_without_retention": list(agent.unretained),
        "checkpoint": dict(agent.checkpoint_info),
        "allocator": agent.allocator.report(),
        "gc": None if agent.collections is None else agent.collections.status(),
        "snapshots": agent.snapshots.status(),
        "synced": [
            {
                "topic": s.topic,
                "subscription": s.name,
                "mark_delete": None if s.cursor is None else str(s.cursor.mark_delete),
                "pending_holes": s.pending_holes,
                "unapplied_batches": s.unapplied_batches,
                "unapplied_batch_messages": s.unapplied_batch_messages,
                "behind_since": s.behind_since,
                "last_applied_at": s.last_applied_at or None,
                "received_from": dict(s.received_from),
                "consumers": s.consumers,
                "generation": s.generation,
                "active": s.active,
                "waiting": s.waiting or None,
                "key_shared": s.key_shared,
                "claim_spans": {
                    "published": claim_size(s.published),
                    "received": claim_size(s.received),
                },
            }
            for s in list(agent.subs.values())
            # A sidecar shows the subscriptions it syncs, not those whose claims it keeps for a takeover.
            if s.exists and (agent.ownership is None or s.topic in agent.topics)
        ],
    }


def claims_status(agent: Agent) -> dict[str, Any]:
    """What this region's claims are made of (decision 0015): ``exact`` when only what consumers
    acknowledged travels, so a cursor jump no consumer made (skip, clear-backlog, expiry, a subscription
    created at Latest) stays here."""
    exact = agent.claims_acknowledgements()
    if exact:
        why = "what consumers acknowledged (the broker plugin's feed)"
    elif agent.config.claims_from == "acknowledgements":
        why = "the cursor: the broker plugin's feed reports no acknowledgements (no plugin, or an older one)"
    else:
        why = "the cursor (claims_from: cursor): a jump no consumer made is claimed too"
    return {"setting": agent.config.claims_from, "exact": exact, "from": why}
