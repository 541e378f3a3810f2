"""The control topics: claims received from the other regions, and this region's states sent.

Round step 2 (``runtime``): verify and de-duplicate control messages (``geosync_core.envelopes``), learn the
regions' incarnations (a region rebuilt under its name: the logs' ends read, the tails renamed or read
again), and hand each envelope's states to the core (``core.stepping.step`` with ``ClaimsReceived``: held
while they name a life not announced yet, else merged into the subscription's claims). Out: the states the
observe step queued, sealed into envelopes per namespace (``core.sealing``), and the incarnations announced.
"""

from __future__ import annotations

import logging
import queue
from dataclasses import replace

from geosync_adapters import adminhttp
from geosync_agent import (
    calls,
    discovering,
)
from geosync_agent import effects as fx
from geosync_agent.agentstate import Now
from geosync_agent.core import generations, looking, reports, sealing, stepping, tuning
from geosync_agent.core.publishing import namespace_of
from geosync_agent.core.subscriptions import Subscription
from geosync_agent.discovering import synced
from geosync_agent.indexing import Indexing
from geosync_core import ackstates, incarnations
from geosync_core.capabilities import Capability
from geosync_core.incarnations import Incarnation
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")


class Controlling(Indexing):
    """Control messages in (claims, incarnations) and out (sealed states, announcements)."""

    # -- 3. receive --------------------------------------------------------------------------------

    def receive(self, now: Now) -> None:
        """Take the control messages that had arrived when the step began, not those arriving as it works:
        they wait for the step's next turn (this round's ``receive again``, or the next round's), a round
        later at most. Drained until empty, a step that took messages more slowly than they came (a machine
        that leaves the loop a fifth of a core, 64 states a message) never ended, and the round's apply step
        never came: region b's agent received 253 claims a second and planned 2 (issue 46.4's lab run,
        record 240). A step that has used its budget (``over_budget``) leaves the rest for its next turn,
        which begins in the control topic it stopped in; it takes at least one message."""
        controls = list(self.controls.items())
        start = next((i for i, (t, _) in enumerate(controls) if t == self.receive_from), 0)
        self.receive_from = None
        count = 0
        for topic, tail in controls[start:] + controls[:start]:
            if self.receive_from is not None:
                break
            for _ in range(tail.inbox.qsize()):
                if count and self.over_budget(now):
                    self.receive_from = topic
                    self.stats.inc("receive_turns_cut")
                    break
                try:
                    message = tail.inbox.get_nowait()
                except queue.Empty:
                    break
                count += 1
                if tail.resume_at is not None:
                    if message.position < tail.resume_at:
                        tail.last = None  # the topic is not the one checkpointed: take everything in it
                    tail.resume_at = None
                if tail.last is not None and message.position <= tail.last:
                    continue  # read before the restart (the reader resumes at the last entry read)
                tail.last = message.position
                if message.read_at:
                    taken = now.mono + now.since()
                    self.queued_ms.add(round((taken - message.read_at) * 1000), at=taken)
                self.handle_control(message.data, topic=topic, now=now)
        self._track_claimed(now)

    def _track_claimed(self, now: Now) -> None:
        """Start tracking the topics other regions claimed on that discovery has not found here yet: each
        looked up alone (one admin call, not a discovery pass) and tracked with its subscriptions if it
        exists here; one that does not (replication has not created it yet) is looked up again every
        REDISCOVER_FOR_FEED_S for CLAIMED_LOOKUP_S (the claims' periodic resync brings it back later)."""
        for topic, (next_at, give_up_at) in list(self.claimed_untracked.items()):
            if topic in self.topics or now.mono >= give_up_at or not self.owns(topic):
                del self.claimed_untracked[topic]
                continue
            if now.mono < next_at or namespace_of(topic) not in self.namespaces:
                continue
            self.stats.inc("claimed_lookups")  # an admin call in the round, between control messages
            try:
                stats = self.effector.call(calls.TopicStats(topic))
            except (
                adminhttp.AdminError
            ):  # not there yet (404), or the admin API failing: the next round asks again
                self.claimed_untracked[topic] = (now.mono + tuning.REDISCOVER_FOR_FEED_S, give_up_at)
                continue
            del self.claimed_untracked[topic]
            self._track_topic(topic, now)
            self._track_subscriptions(
                topic, discovering.subscriptions_of(self.config, topic, stats), at=now.mono
            )
            self.stats.inc("tracked_from_claims")

    def handle_control(self, data: bytes, *, topic: str, now: Now) -> None:
        """Have the core open an entry read from the control topic ``topic`` (``stepping.EnvelopeRead``), then
        learn the incarnations it names and hand its states to the core, all in one ``ClaimsReceived``."""
        opened = stepping.step(self, stepping.EnvelopeRead(data, topic, self.keys.keyring), now)
        if opened.sent_at_ms is not None:
            # Until now, not the round's start: a message may be taken late in the round (``receive again``).
            taken = now.since()
            self.transit_ms.add(int((now.wall + taken) * 1000) - opened.sent_at_ms, at=now.mono + taken)
        if opened.rejected is not None:
            self._reject(opened.rejected)
            return
        if opened.tags is not None:
            # Sent before this agent started: history re-read from the control topic (see _region_rebuilt).
            self._learn_incarnations(opened.sender, opened.tags, now, history=opened.history)
        if opened.states:
            self._claims_received(opened.states, opened.tags, now)

    def _learn_incarnations(
        self, sender: str, tags: dict[str, Incarnation], now: Now, *, history: bool = False
    ) -> None:
        """Take up the incarnation ``sender`` announces of itself if it is newer than the one known here, and
        the claims that waited for it. A region speaks only for itself: what a peer says of a third region's
        incarnation (or of this one's, which this region's ZooKeeper says) is never taken up."""
        incarnation = tags.get(sender)
        if incarnation is None or sender == self.config.region:
            return
        known = self.incarnations.get(sender)
        # Asked before anything is learned: if a broker cannot answer, the round fails and the region's next
        # envelope brings the news again.
        ends = self._log_ends() if known is not None and incarnation > known else {}
        self.incarnations, replaced = self.incarnations.learn(sender, incarnation)
        if replaced is not None:
            self._region_rebuilt(sender, replaced, incarnation, now, ends, history=history)
        if known is None:
            self._resend_untagged(sender, now)
        for key in [k for k in self.waiting if k[0] == sender]:
            if not self.incarnations.waits(*key, tagged=True):
                messages = self.waiting.pop(key)
                self.waiting_count -= len(messages)
                self._claims_received(list(messages), {sender: key[1]}, now, waited=True)

    def _resend_untagged(self, region: str, now: Now) -> None:
        """Claims about ``region``'s messages published before this agent knew its incarnation went out
        without it, and a peer that knows it refuses them (``reports.of_known_incarnations``: of a life
        nobody can tell): the topics that hold such claims are resynced now, so they go out again with it,
        not a resync period later (a consumer failing over meanwhile was given those messages again:
        simulator seed 200245, takeovers profile: c claimed b's first message 0.3 s after it started, before
        b's first envelope reached it, and a refused the claim)."""
        topics = {
            s.topic
            for s in self.subs.values()
            if s.published is not None and region in s.published.origin_regions
        }
        for topic in topics:
            ts = self.topics.get(topic)
            if ts is not None:
                ts.resync_at = min(ts.resync_at, now.mono)
        if topics:
            self.stats.inc("resyncs_for_incarnations", len(topics))

    def _log_ends(self) -> dict[str, Position | None]:
        """The last entry each tracked topic holds now (``internalStats``, asked in parallel as the polls
        are; None: not known). A rebuild is rare; then one call per topic, once."""

        def end(topic: str) -> Position | None:
            try:
                return reports.log_end(self.effector.call(calls.InternalStats(topic)))
            except adminhttp.AdminNotFound:
                return None

        topics = list(self.topics)
        ends = dict(zip(topics, self.effector.map(end, topics), strict=True))
        unknown = sum(1 for e in ends.values() if e is None)
        if unknown:
            self.stats.inc("rebuilt_log_end_unknown", unknown)
        return ends

    def _region_rebuilt(
        self,
        region: str,
        old: Incarnation,
        new: Incarnation,
        now: Now,
        ends: dict[str, Position | None],
        *,
        history: bool = False,
    ) -> None:
        """``region`` was wiped and rebuilt under its name: its new messages reuse the origin coordinates of
        its old ones. Every claim held about its origins speaks of the old ones, and every entry of its
        origins in this region's logs up to their ends now (``ends``) is an old one, read or not: the old life
        replicated nothing after it was wiped, before the new one announced itself. Both are renamed to the
        old incarnation's retired name, so the old claims go on reaching the old messages (every region
        renames alike) and never the new ones. Renaming only what the tails had read let the entries a
        stalled or restarted reader had not reached yet go by the region's plain name: claims about the new
        life's messages then acknowledged them, and this region's claims about them reached the new life's
        messages elsewhere (issue 45, case 2; ``tests/sim/test_issue45_rebuilt.py``).

        Learned from the control topic's ``history`` (the news was sent before this agent started: it starts
        with no checkpoint, or one older than the news), the logs may hold the new life's messages as well,
        below their ends and read already: every tail is read again from its earliest message, and an entry
        at or below its log's end is of the old life only if it was published before the new incarnation was
        created (``OriginIndex.retire(before_ms=)``; a replicated copy keeps its origin's publish time).
        Retiring up to the ends alone named the new life's messages with the old ones, and the old claims
        acknowledged one a consumer held (``loss``; the rebuilds profile's seed 17)."""
        self.stats.inc("incarnations_changed")
        retired = incarnations.retired(region, old)
        runs = 0
        for topic, ts in self.topics.items():
            runs += ts.tail.index.retire(region, retired, upto=ends.get(topic), before_ms=new.created_ms)
            ts.tail.version += 1
            ts.tail.rewrites += 1
            if history:
                ts.tail.stale_reason = (
                    f"region {region} was rebuilt, and this agent learned it from the control topic's "
                    "history: its old and new messages are told apart by publish time"
                )
                self._rebuild(ts, now)
        for state in self.subs.values():
            if not any(
                acks is not None and region in acks.origin_regions
                for acks in (state.received, state.published)
            ):
                continue
            state.received = state.received.renamed(region, retired)
            if state.published is not None:
                state.published = state.published.renamed(region, retired)
            state.translated = state.planned = None
        # States queued before this round learned it are sealed with the incarnations known when they are
        # sent: what they say of the region is about its old life.
        self.outgoing = {
            namespace: [
                replace(m, acks=m.acks.renamed(region, retired)) if region in m.acks.origin_regions else m
                for m in states
            ]
            for namespace, states in self.outgoing.items()
        }
        # A checkpoint at this round's end: an agent restored from an older one would learn of the rebuild
        # again, when its logs may hold the new life's messages too (their ends have moved on).
        self.checkpoint_at = min(self.checkpoint_at, now.mono)
        log.warning(
            "region %s was rebuilt (incarnation %s, was %s): its old messages (%d index runs here) and the "
            "claims about them now go by %s, apart from its new ones",
            region,
            new,
            old,
            runs,
            retired,
        )

    def _claims_received(
        self,
        messages: list[ackstates.AckStateMessage],
        tags: dict[str, Incarnation] | None,
        now: Now,
        *,
        waited: bool = False,
    ) -> None:
        """Hand an envelope's states to the core (``stepping.ClaimsReceived``), with what this region's
        configuration, ownership and capabilities say of their topics now, and carry out what it says."""
        writes, config = Capability.PLUGIN_CURSOR_WRITES, self.config
        event = stepping.ClaimsReceived(
            messages,
            tags,
            waited=waited,
            synced=lambda topic, subscription: synced(config, topic, subscription),
            synced_topic=lambda topic: discovering.synced_topic(config, topic),
            owned=self.owns,
            sidecar=self.ownership is not None,
            plugin_writes=self.caps.get(writes) is not False and self.caps.usable(writes, now=now.mono),
            acknowledgements=self.claims_acknowledgements(),
            claims_known=self.claims_known(),
        )
        self._carry_out(stepping.step(self, event, now), now)

    def _took_rewind(
        self, state: Subscription, rewind: generations.Rewound, cursor: AckState, now: Now
    ) -> bool:
        """``cursor`` went back (``core.generations.rewound`` said how): whether that started a new
        generation of ``state``'s claims (``core.looking.took_rewind``, its counters and notice carried
        out)."""
        out = stepping.Stepped()
        took = looking.took_rewind(
            self, state, rewind, cursor, out, acknowledgements=self.claims_acknowledgements()
        )
        self._carry_out(out, now)
        return took

    def _flush_states(self, now: Now, *, announce: bool = True) -> None:
        """Send the states published since the last flush: per namespace, one signed envelope for up to
        STATES_PER_ENVELOPE; with ``announce``, the incarnations on control topics silent for a while."""
        outgoing, self.outgoing = self.outgoing, {}
        sends: list[fx.Effect] = []
        for namespace, all_states in outgoing.items():
            for batch in sealing.chunks(all_states):
                for data in self._sealed(batch, now):
                    sends.append(fx.Publish(self._control_topic(namespace), data, "envelopes_published"))
                self.stats.inc("states_published", len(batch))
            self.announce_at[namespace] = now.mono + self.config.resync_interval_s
        if announce:
            sends.extend(self._announce(now))
        self._perform(sends, now)

    def _announce(self, now: Now) -> list[fx.Effect]:
        """An envelope without states, for its incarnations alone, on each control topic no states went out on
        for a resync interval (and at once after a start): a rebuilt region makes itself known before it has
        anything to claim, so that its peers drop their claims about its old life before its new messages
        reach them (agents before incarnations read it as an empty batch)."""
        if self.incarnation is None:
            return []
        sends: list[fx.Effect] = []
        for namespace in self.namespaces:
            if now.mono < self.announce_at.get(namespace, 0.0):
                continue
            self.announce_at[namespace] = now.mono + self.config.resync_interval_s
            for data in self._sealed([], now):
                sends.append(fx.Publish(self._control_topic(namespace), data, "incarnation_announcements"))
        return sends

    def _sealed(self, states: list[ackstates.AckStateMessage], now: Now) -> list[bytes]:
        """``states`` as signed control messages (``core.sealing``), numbered after the last ones sent."""
        sealed = sealing.seal(
            states,
            signer=self.keys.signer,
            region=self.config.region,
            seq=self.seq,
            now_ms=now.wall_ms,
            incarnations=self._incarnation_tags(),
        )
        self.seq = sealed.seq
        if sealed.splits:
            self.stats.inc("states_split", sealed.splits)
        return sealed.messages

    def _incarnation_tags(self) -> dict[str, Incarnation] | None:
        """The incarnations to send with states: this region's own and every one known here, so that a peer
        learns of a rebuilt region from whichever region hears of it first (None without an own one: an agent
        without a guard sends none, as before)."""
        if self.incarnation is None:
            return None
        return dict(self.incarnations.by_region)

    def on_sent(self, ok: bool, at: float) -> None:
        """A control message went out (``ok``) or was lost, at monotonic time ``at`` (the ``Effector`` tells,
        on the client's thread: only count and note the time, single assignments). A lost state goes out
        again at the next change, or at the resync that follows once sends work again (``poll``)."""
        if ok:
            self.publish_failing_since = None
        else:
            self.stats.inc("publish_errors")
            self.sends_lost = True
            if self.publish_failing_since is None:
                self.publish_failing_since = at
