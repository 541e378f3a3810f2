"""The control topics: claims received from the other regions, and this region's states sent.

Round step 2 (``runtime``): verify and de-duplicate control messages (``geosync_core.envelopes``), have the
core learn the regions' incarnations (``IncarnationsNamed``; a region rebuilt under its name: the logs' ends
read here, then ``RegionRebuilt``, and the tails it names read again), and hand each envelope's states to
the core (``core.stepping.step`` with ``ClaimsReceived``: held
while they name a life not announced yet, else merged into the subscription's claims). Out: the states the
observe step queued, sealed into envelopes per namespace (``core.sealing``), and the incarnations announced.
"""

from __future__ import annotations

import logging
import queue

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
from geosync_core import ackstates
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
            # Sent before this agent started: history re-read from the control topic (``core.incarnating``).
            self._learn_incarnations(opened.sender, opened.tags, now, history=opened.history)
        if opened.states:
            self._claims_received(opened.states, opened.tags, now)

    def _learn_incarnations(
        self, sender: str, tags: dict[str, Incarnation], now: Now, *, history: bool = False
    ) -> None:
        """Have the core learn the life ``sender`` names of itself (``stepping.IncarnationsNamed``); for a
        rebuilt region, read where the logs end first and hand them over (``stepping.RegionRebuilt``). Then
        carry out what it says: counters, the tails to read again, the claims that waited for that life."""
        learned = stepping.step(self, stepping.IncarnationsNamed(sender, tags, history), now)
        if learned.read_ends:
            # Asked before anything is learned: if a broker cannot answer, the round fails and the region's
            # next envelope brings the news again.
            event = stepping.RegionRebuilt(sender, tags[sender], self._log_ends(), history)
            learned = stepping.step(self, event, now)
        self._carry_out(learned.out, now)
        for topic in learned.reread:
            self._rebuild(self.topics[topic], now)
        rebuilt = learned.rebuilt
        if rebuilt is not None:
            log.warning(
                "region %s was rebuilt (incarnation %s, was %s): its old messages (%d index runs here) and "
                "the claims about them now go by %s, apart from its new ones",
                rebuilt.region,
                rebuilt.new,
                rebuilt.old,
                rebuilt.runs,
                rebuilt.retired,
            )
        for waited_tags, messages in learned.released:
            self._claims_received(messages, waited_tags, now, waited=True)

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
