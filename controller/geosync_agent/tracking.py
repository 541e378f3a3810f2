"""What the agent tracks: topics, subscriptions and control topics, from discovery and ownership.

Round step 0 (``runtime``): in sidecar mode (``shard_by_ownership``) refresh what this broker owns,
hand off the topics it lost and take over the ones it gained (``owning``; which ones is the core's:
``stepping.OwnershipMoved``, ``core.handing``); adopt the newest discovery pass
(readers for new topics and control topics, replicators watched and unstuck). What the pass's listing means
for what is tracked is the core's (``stepping.Discovered``, ``core.adopting``: topics and claims no longer
listed forgotten, subscriptions confirmed or taken as deleted here); this part tracks the topics found,
steps the listing and untracks what comes back gone.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_adapters import adminhttp
from geosync_agent import (
    calls,
    owning,
)
from geosync_agent import effects as fx
from geosync_agent.agentstate import AgentState, Now, TopicState
from geosync_agent.core import adopting, stepping
from geosync_agent.core.subscriptions import Subscription
from geosync_agent.discovering import partition_of
from geosync_agent.tailing import Tail
from geosync_core import (
    pacing,
    replicators,
)

log = logging.getLogger("geosync.agent")


class Tracking(AgentState):
    """Ownership, adoption and tracking of topics and subscriptions (round step 0)."""

    # -- 0. sharding by ownership (sidecar mode) ----------------------------------------------------

    def owns(self, topic: str) -> bool:
        """Whether this agent syncs ``topic``: always, unless it shards by ownership and its broker does not
        own the topic's bundle."""
        return self.ownership is None or self.ownership.owns(topic)

    def own(self, now: Now) -> None:
        """Sidecar mode: refresh the broker's bundles when due; the core says which topics to hand off (it
        no longer owns them) and which claimed topics to take over (``stepping.OwnershipMoved``,
        ``core.handing``); discovery is asked for a pass for the rest."""
        if self.ownership is None:
            return
        try:
            change = self.effector.call(calls.RefreshOwnership(self.ownership, now.mono))
            if self.lookups:
                self.effector.call(calls.RefreshRegionOwnership(self.ownership, now.mono))
                self._look_up_claimed(now)
        except (adminhttp.AdminError, owning.OwnershipUnknown) as e:
            self.part_outcome("ownership", e, now.mono)
            self.stats.inc("ownership_errors")
            log.warning("cannot tell what this agent's broker owns (keeping the last answer): %s", e)
            return
        if change is None:
            return
        self.part_outcome("ownership", None, now.mono)
        before, after = change
        if before == after:
            return
        handed = stepping.step(self, stepping.OwnershipMoved(before, after), now)
        for topic in handed.gone:
            # Moved to another broker: its reader, index and cursor state go (the claims received stay).
            self._untrack(topic)
            log.info("%s moved to another broker: handed off to its agent", topic)
        if handed.gone:
            self.snapshots.retain(self.topics)
        for name, n in handed.counts.items():
            self.stats.inc(name, n)
        log.info(
            "broker %s now owns %d bundles: %d topics handed off, %d claimed topics taken over",
            self.ownership.me,
            after.count(),
            len(handed.gone),
            len(handed.taken_over),
        )
        self.rediscover.set()

    def _look_up_claimed(self, now: Now) -> None:
        """Look up the claimed topics this broker does not own (queued by claims received, ``core.receiving``)
        that no broker owns: the look-up has some broker take the bundle, whose agent applies the claims; one
        taken by this broker is picked up by a refresh now."""
        assert self.ownership is not None
        queued, self.lookups = self.lookups, set()
        for topic in queued:
            if not self.ownership.should_look_up(topic, now.mono):
                continue
            try:
                answer = self.effector.call(calls.LookupTopic(topic))
            except adminhttp.AdminNotFound:
                continue  # not in this region yet: replication creates it
            self.stats.inc("ownership_lookups")
            if self.ownership.is_me(answer):
                self.ownership.refresh_now()

    # -- 1. adopt discovery ------------------------------------------------------------------------

    def adopt(self, now: Now) -> None:
        found = self.discovered.take()
        if found is None:
            return
        self.discovery_seconds.append(found.took_s)
        del self.discovery_seconds[:-20]
        if found.scanned_at is not None:
            self.timeline.add("discovery", found.scanned_at, found.took_s)
        if set(found.namespaces) - set(self.namespaces):
            # Reports about a namespace not in scope yet were dropped, and the feed names each acknowledgement
            # once: read it again from the start (it names every subscription with its cursor as it is now;
            # repeats change nothing). Batch indexes acknowledged there meanwhile are known to no poll.
            self.feed.seq = 0
        self.namespaces = found.namespaces
        for ns in self.namespaces:
            control = self._control_topic(ns)
            if control not in self.controls:
                tail = Tail(control, -1, wake=self.wake)
                self.readers.open(tail, now.mono, control=True)
                self.controls[control] = tail
        for topic in found.topics:
            if self.owns(topic):  # the pass may predate a hand-off
                self._track_topic(topic, now, open_now=False)  # opened together, by the next step
        listed = found.topics if found.listed is None else found.listed
        adopted = stepping.step(self, stepping.Discovered(listed, found.subscriptions, found.scanned_at), now)
        self._carry_out_adopted(adopted)
        if found.scanned_at is not None:
            self.snapshots.retain(self.topics)  # snapshot mode's caches of topics gone go too
            wanted_controls = {self._control_topic(ns) for ns in self.namespaces}
            for control in [c for c in self.controls if c not in wanted_controls]:
                self.controls.pop(control).close()
        for topic, links in found.replicators.items():
            if topic in self.topics or topic in self.controls:
                self.replicators.observe(topic, links, at=found.scanned_at or now.mono)
        self.replicators.retain([*self.topics, *self.controls])
        for ns in sorted(set(found.unretained) - set(self.unretained)):
            log.warning(
                "namespace %s retains no acknowledged message in %s: messages replicated here before their "
                "subscription is created here are held by no cursor, and a ledger rollover, bundle unload or "
                "broker restart deletes them (a failover here then loses them). Set a retention longer than "
                "a discovery pass or two, e.g. pulsar-admin namespaces set-retention %s --time 1h --size 1G",
                ns,
                self.config.region,
                ns,
            )
        self.unretained = found.unretained
        stalled = self.replicators.stalled(now.mono, self.config.replicator_stall_s)
        self._report_stalls(stalled, now)
        self._unstick(stalled, now)

    def _report_stalls(self, stalled: list[replicators.Stall], now: Now) -> None:
        """Log the replicators that stalled since the last pass and those that moved again."""
        before = {(s.topic, s.remote) for s, _ in self.stalled}
        after = {(s.topic, s.remote) for s in stalled}
        for stall in stalled:
            if (stall.topic, stall.remote) not in before:
                self.stats.inc("replicators_stalled")
                log.warning(
                    "Pulsar's replicator of %s to %s holds %d entries and sent nothing for %.0f s "
                    "(connected: %s): %s is missing those messages until it moves (check the brokers: "
                    "topics stats)",
                    stall.topic,
                    stall.remote,
                    stall.backlog,
                    now.mono - stall.since,
                    "yes" if stall.connected else "no",
                    stall.remote,
                )
        for topic, remote in sorted(before - after):
            log.info("Pulsar's replicator of %s to %s is no longer stalled", topic, remote)
        self.stalled = [(s, now.mono - s.since) for s in stalled]

    def _unstick(self, stalled: list[replicators.Stall], now: Now) -> None:
        """Unload the topics (owned here) whose replicator is stuck while connected, when due (opt-in:
        ``replicator_unload_after_s``)."""
        self.unsticking.settle(self.replicators)
        due = self.unsticking.due([s for s in stalled if self.owns(s.topic)], now.mono)
        for stall in due:
            log.warning(
                "unloading %s here: its replicator to %s is connected, holds %d entries and sent nothing for "
                "%.0f s (Pulsar starts a new one; unload %d of this topic since it last drained)",
                stall.topic,
                stall.remote,
                stall.backlog,
                now.mono - stall.since,
                self.unsticking.tries[stall.topic],
            )
        self._perform([fx.UnloadTopic(s.topic) for s in due], now)

    def _carry_out_adopted(self, adopted: adopting.Adopted) -> None:
        """Do what adopting a pass (or an absence) asked: topics untracked, polls brought forward, counters
        added, notices logged."""
        for topic in adopted.gone:
            self._untrack(topic)
        for topic in adopted.poll_soon:
            self._poll_soon(topic)
        for name, n in adopted.counts.items():
            self.stats.inc(name, n)
        for notice in adopted.notices:
            if isinstance(notice, adopting.TopicForgotten):
                log.info(
                    "%s is gone (deleted, or its namespace is no longer synced): stopped tracking it",
                    notice.topic,
                )
            elif isinstance(notice, adopting.ClaimsForgotten):
                log.info(
                    "forgot the claims of %d subscription(s) on topics no region has spoken of for %.0f s "
                    "and this region does not list (e.g. %s on %s)",
                    len(notice.keys),
                    notice.quiet_s,
                    notice.keys[0][1],
                    notice.keys[0][0],
                )
            else:
                log.info(
                    "subscription %s on %s was deleted here: not created again from other regions' claims "
                    "(it is synced again once it exists here)",
                    notice.state.name,
                    notice.state.topic,
                )

    def _absent(self, state: Subscription, scanned_at: float | None) -> None:
        """A discovery pass started at ``scanned_at`` did not find ``state`` here (``adopting.absent``)."""
        adopted = adopting.Adopted()
        adopting.absent(state, scanned_at, adopted)
        self._carry_out_adopted(adopted)

    def _untrack(self, topic: str) -> None:
        """Stop reading ``topic``: its reader closes; its tail, waiting feed reports and what the
        interceptor's index answered for it go (its subscriptions are the caller's to keep or drop)."""
        ts = self.topics.pop(topic, None)
        if ts is not None:
            ts.tail.close()
        for key in [k for k in self.unobserved if k[0] == topic]:
            del self.unobserved[key]
        self.origin_lookups.forget(topic)

    def _track_topic(self, topic: str, now: Now, *, open_now: bool = True) -> TopicState:
        """Start tailing ``topic`` (from its earliest entry) unless it is tracked already; without
        ``open_now`` its reader is opened by the round's ``reopen`` step, with the others due."""
        ts = self.topics.get(topic)
        if ts is None:
            tail = Tail(topic, partition_of(topic))
            if open_now:
                self.readers.open(tail, now.mono)
            phase = self.rng.random()
            resync_at = pacing.first_resync(now.mono, period_s=self.resync_period(), phase=phase)
            ts = self.topics[topic] = TopicState(tail, resync_at=resync_at, tracked_at=now.mono)
        return ts

    def _tails(self) -> list[Tail]:
        """Every reader's tail: the control topics' and the tracked topics'."""
        return [*self.controls.values(), *(ts.tail for ts in self.topics.values())]

    def _reopen(self, now: Now) -> None:
        """Open the readers not open yet (``reading.Readers.reopen``)."""
        self.readers.reopen(self._tails(), self.controls, now.mono)

    def _revive(self, now: Now) -> None:
        """Open again the readers whose broker went away once their topic's owner answers
        (``reading.Readers.revive``)."""
        self.readers.revive(self._tails(), self.controls, now.mono)

    def _subscription(self, topic: str, name: str, *, exists: bool = True) -> Subscription:
        """The state of ``topic``'s subscription ``name`` (``SubsTable.made``)."""
        return self.subs.made(topic, name, exists=exists)

    def _track_subscriptions(self, topic: str, present: dict[str, tuple[int, str]], *, at: float) -> None:
        """Record ``topic``'s subscriptions as a topic's stats list them (name -> (consumers, type)) at
        monotonic time ``at``."""
        for polled in adopting.track_subscriptions(self, topic, present, at=at):
            self._poll_soon(polled)

    def _poll_soon(self, topic: str) -> None:
        """Read ``topic``'s cursors at the next round: a subscription found here whose cursor was never read
        (created when traffic starts, or another region's claims arrived first) has nothing else to make its
        topic polled before the resync (the feed names a cursor only when consumers here acknowledge)."""
        ts = self.topics.get(topic)
        if ts is not None:
            ts.poll = replace(ts.poll, next_at=0.0)

    def resync_period(self, subscriptions: int | None = None) -> float:
        """Seconds between a topic's full republishes: ``resync_interval_s``, stretched so that resyncs send
        at most RESYNC_STATES_PER_S states a second on average (over ``subscriptions``, by default those
        tracked)."""
        n = len(self.subs) if subscriptions is None else subscriptions
        return adopting.resync_period(self.config.resync_interval_s, n)

    def _control_topic(self, namespace: str) -> str:
        return f"persistent://{namespace}/{self.config.control_topic}"
