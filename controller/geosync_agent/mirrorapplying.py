"""The policy mirror's effects carried out: a term's reads, writes, publishes and checkpoints, each answer fed
back to it.

The term (``geosync_agent.core.mirroring``) decides everything: which events it takes, what a remote record
does to the store, when a held deletion may go, what it publishes. ``ApplyingMirror.feed`` gives it one event
and carries out the effects it returns, in order, through the region's ZooKeeper (``zk.Store``, every write
fenced by the leadership), its brokers (``mirrorholds``: what the region holds under a path) and the event
topic's producer and reader; the answer of each is the next event fed. A failure that ends the term (a publish
or a checkpoint write that fails, ``StepDown``) raises, and ``mirroring`` starts the next term.

One of the mirror's parts (see ``mirrorlocal``): the time comes from the shell's ``wall_ms``, and the event
reader's thread is the shell's (``mirroring``), which hands each message over with when it was read.
"""

from __future__ import annotations

import logging
from typing import Any

import pulsar

from geosync_adapters import zookeeper as zk
from geosync_agent import mirrorholds, watching
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core import mirroring as machine
from geosync_agent.core.mirror import EVENT_KIND
from geosync_agent.mirrorlocal import LocalMirror, SessionLost, node_of
from geosync_core import envelopes, policies
from geosync_core.errors import TemporaryError

log = logging.getLogger("geosync.mirror")

_FAILURES = (
    (zk.ZkFenced, ev.Failure.FENCED),
    (zk.ZkStale, ev.Failure.STALE),
    (zk.ZkNoParent, ev.Failure.NO_PARENT),
    (zk.ZkNotEmpty, ev.Failure.NOT_EMPTY),
    (zk.ZkError, ev.Failure.OTHER),
)


class ApplyingMirror(LocalMirror):
    """A policy mirror whose term's effects are carried out here."""

    def _begin(self, data: bytes | None) -> None:
        """Start a term from the checkpoint's bytes and carry out its first effects (up to ``Lead``)."""
        with self._lock:
            self.term, effects = machine.begin(self.settings, data, self.wall_ms(), counters=self.counters)
        self._pump(self._carry_out(effects))

    def feed(self, event: ev.Event) -> None:
        """Give the term ``event``, then each answer of the effects it asks for, until it asks for none (the
        loop's one way in: ZooKeeper's watches and session changes, the ``Tick`` after each item)."""
        self._pump([event])

    def _pump(self, pending: list[ev.Event]) -> None:
        while pending:
            with self._lock:
                _, effects = machine.step(self.term, pending.pop(0), self.wall_ms())
            pending += self._carry_out(effects)

    def _carry_out(self, effects: list[ev.Effect]) -> list[ev.Event]:
        answers = []
        for effect in effects:
            try:
                answer = self._perform(effect)
            except BaseException:
                # The term is ahead of what was carried out (a publish it counts as made): the next term
                # starts from the last checkpoint it saved, not from this one's state.
                self._interrupted = True
                raise
            self.progress()
            if answer is not None:
                answers.append(answer)
        return answers

    def _perform(self, effect: ev.Effect) -> ev.Event | None:
        store = self._need_store()
        if isinstance(effect, ev.ReadNode):
            return ev.NodeRead(effect.path, node_of(store.read(effect.path, watch=True)))
        if isinstance(effect, ev.ListChildren):
            return ev.ChildrenListed(effect.path, tuple(store.children(effect.path, watch=True)))
        if isinstance(effect, ev.WriteNode):
            return self._write(effect)
        if isinstance(effect, ev.ListContents):
            return self._contents(effect.path)
        if isinstance(effect, ev.Walk):
            return ev.Walked(self._walk(effect.scope))
        if isinstance(effect, ev.ReadClusters):
            return ev.ClustersRead(self._clusters())
        if isinstance(effect, ev.Publish):
            self._publish(effect)
        elif isinstance(effect, ev.SaveCheckpoint):
            self._save_checkpoint(effect.data)
        elif isinstance(effect, ev.Drain):
            self._drain()
            return ev.CaughtUp()
        elif isinstance(effect, ev.OpenReader):
            self._open_reader(effect.position)
        elif isinstance(effect, ev.Lead):
            self._lead()
        elif isinstance(effect, ev.StepDown):
            raise SessionLost(effect.reason)
        elif isinstance(effect, ev.Note):
            log.log(
                logging.WARNING if effect.level == "warning" else logging.INFO,
                "policy mirror %s: %s",
                self.region,
                effect.text,
            )
        return None

    def _open_reader(self, position: bytes | None) -> None:
        """The term's event reader (``mirroring`` makes it; tests on a fake store have none)."""

    def _lead(self) -> None:
        """Caught up: ``mirroring`` starts reading the topic."""

    def _write(self, effect: ev.WriteNode) -> ev.Event:
        expected = (
            None if effect.expected is None else zk.Node(effect.expected.value, effect.expected.version, 0)
        )
        try:
            self._need_store().write(
                effect.path, effect.value, expected=expected, fence=self._fence, public=True
            )
        except zk.ZkError as e:
            failure = next(f for kind, f in _FAILURES if isinstance(e, kind))
            if failure is ev.Failure.STALE:
                self._count("cas_conflicts_seen")
            return ev.WriteFailed(effect.path, failure, str(e))
        return ev.Wrote(effect.path)

    def _contents(self, path: str) -> ev.Event:
        """What the region holds under ``path``, by its store and its brokers (``mirrorholds``)."""
        try:
            if self.brokers is None:  # each call that ends is progress for the liveness watchdog
                self.brokers = watching.beating(self.config.admin_client(timeout=10.0), self._beat)
            contents = mirrorholds.read_contents(self._need_store(), self.brokers, path, own=self._own_topics)
        except mirrorholds.Held as e:
            return ev.ContentsListed(path, None, e.reason)
        except zk.ZkError as e:
            return ev.ContentsListed(path, None, f"not applied yet: {e}")
        return ev.ContentsListed(path, contents)

    def _beat(self) -> None:
        self.progress()  # the one set now (the composition root sets it after construction)

    def _own_topics(self, namespace: str) -> frozenset[str]:
        """GeoSync's own topics in ``tenant/namespace``, which never hold a deletion."""
        events = self.config.mirror_events_topic.split("://", 1)[-1]
        own = {self.config.control_topic}
        if events.rsplit("/", 1)[0] == namespace:
            own.add(events.rsplit("/", 1)[-1])
        return frozenset(own)

    def _publish(self, effect: ev.Publish) -> None:
        envelope = envelopes.Envelope(
            kind=EVENT_KIND,
            region=self.region,
            seq=effect.seq,
            sent_at_ms=effect.sent_at_ms,
            payload=policies.event_to_payload(effect.record),
        )
        if self._producer is None:
            raise TemporaryError("no producer for the policy event topic")
        self._producer.send(envelopes.seal(self.keys.signer, envelope))

    # -- the event topic -------------------------------------------------------------------------------

    def _drain(self) -> None:
        """No checkpoint: every event the topic holds, fed before the store is walked."""
        reader = self._reader
        while reader is not None and reader.has_message_available():
            try:
                msg = reader.read_next(timeout_millis=5000)
            except pulsar.Timeout:
                break
            self.receive(msg)

    def receive(self, msg: Any, *, read_ms: int | None = None) -> None:
        """One message of the event topic (``data()``, ``message_id()``) fed to the term; ``read_ms``: when
        the reader thread got it (for the timings)."""
        opened = envelopes.open_envelope(self.keys.keyring, msg.data())
        taken_ms = self.wall_ms()
        applied = self.counters["applied"]
        self.feed(ev.Received(opened, msg.message_id().serialize()))
        if (
            self.counters["applied"] > applied
            and isinstance(opened, envelopes.Envelope)
            and opened.sent_at_ms >= self._started_ms
            and opened.region != self.region
        ):
            read_ms = taken_ms if read_ms is None else read_ms
            self.timings["transit_ms"].add(read_ms - opened.sent_at_ms)
            self.timings["queued_ms"].add(taken_ms - read_ms)
            self.timings["apply_ms"].add(self.wall_ms() - taken_ms)
