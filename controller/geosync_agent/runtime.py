"""The agent's sync loop: one region, one thread, rounds of observe, decide, apply.

A round runs every ``poll_interval_s`` (``feed_interval_s`` while the broker plugin's feed reports
acknowledgements, and at once when a control message arrives):

0. sidecar mode (``shard_by_ownership``): refresh what this broker owns; hand off the topics it lost and
   take over the ones it gained (``owning``);
1. adopt the newest discovery pass (handed over by the discovery task): readers for new topics and control
   topics, subscriptions tracked;
2. index: drain every partition's reader queue into its origin index (``tailing``);
3. receive: verify and de-duplicate control messages, merge each subscription's claims;
4. observe: cursors from the plugin's feed (only subscriptions consumers just acknowledged on) and from
   ``internalStats`` polls paced by ``geosync_core.pacing``; decide each subscription's claim
   (``geosync_core.claiming``) and publish what changed, one signed envelope per namespace and
   ``tuning.STATES_PER_ENVELOPE`` states;
5. apply: plan each subscription's cursor change (``geosync_core.syncing.plan_apply``), gate admin-API
   mark-delete moves (``pacing.may_move``), hand the effects to the ``Effector`` and fold its outcomes back;
6. snapshot mode for its namespaces (``snapshotting``).

Only the loop's thread reads or writes the agent's state. Reader listeners only put into queues, the
discovery task only fills a mailbox, the effector's pool only calls ports and returns values (and opens
readers, each worker a tail of its own while the loop waits: see ``reading``), and the HTTP endpoint only
reads ``status()``. Time is read once per round (``Now``) and passed down.

The agent is being split into a pure core and this shell (``docs/decisions/0001-sans-io-agent.md``): the
decisions that need no I/O are in ``geosync_agent.core`` (subscription state, generations of claims,
sealing, applying, pauses, readiness, tuning), every outside call goes through the ``Effector`` as a value
of ``calls``, readers are opened by ``reading``, origins looked up by ``lookups``, /state rendered by
``reporting``. What is still decided here is listed in that decision record.

Invariants (the core proves the planning; tests against the lab prove the whole): a cursor only moves
forward; only entries whose origin some region acknowledged are acknowledged; applying again changes
nothing; unsigned, altered, replayed or malformed control messages change nothing and are counted.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from geosync_adapters import admin as adm
from geosync_adapters import messaging as msg
from geosync_agent import (
    calls,
    checkpointing,
    discovering,
    lookups,
    owning,
    reading,
    reporting,
    snapshotting,
    tailing,
)
from geosync_agent import effects as fx
from geosync_agent.allocator import Allocator
from geosync_agent.collector import Collections
from geosync_agent.config import AgentConfig
from geosync_agent.core import applying, checkpoint, generations, readiness, reports, sealing, tuning
from geosync_agent.core.applying import (
    appended_above,
    claimed_to,
    claims_name_appended,
    moved_on_from_nothing,
    names_any,
    only_unclaimed_appended,
    plan_end,
)
from geosync_agent.core.pauses import note_heavy, plan_wait, publish_pause
from geosync_agent.core.subscriptions import (
    BEFORE_ALL,
    Feed,
    SubKey,
    Subscription,
    SubsTable,
    claim_size,
    forgettable_floor,
)
from geosync_agent.discovering import Discovered, Latest, namespace_of, partition_of, synced
from geosync_agent.ports import Messaging
from geosync_agent.recent import CallTimes, PhaseTimes, Recent, Timeline
from geosync_agent.tailing import Tail
from geosync_core import (
    claiming,
    envelopes,
    incarnations,
    ownership,
    pacing,
    pluginapi,
    replicators,
    resolving,
    syncing,
)
from geosync_core.capabilities import Capabilities, Capability
from geosync_core.incarnations import Incarnation, Known
from geosync_core.origins import Origin, OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")
ROUND_ERRORS = (adm.AdminError, msg.MessagingUnavailable)
"""Failures a round survives: it is counted, and the next round tries again."""


@dataclass(frozen=True, slots=True)
class Now:
    """The time a round read once: monotonic seconds for intervals, wall seconds for what people see and
    for what travels between regions."""

    mono: float
    wall: float

    @property
    def wall_ms(self) -> int:
        return int(self.wall * 1000)

    @classmethod
    def read(cls) -> Now:
        return cls(time.monotonic(), time.time())


@dataclass
class TopicState:
    """One topic partition: its tail (origin index) and when its cursors are polled and resynced."""

    tail: Tail
    resync_at: float
    poll: pacing.PollState = field(default_factory=pacing.PollState)
    tracked_at: float = 0.0
    """Monotonic time tracking started: a discovery pass begun before it may not list the topic yet."""
    ledger: int | None = None
    """The ledger the topic wrote to at the last poll: another one means it was loaded again (or rolled
    over), and Pulsar 4.0.8 forgets the batch indexes of partly acknowledged entries on a reload."""


@dataclass
class Stats:
    """Counters the metrics endpoint and the benchmarks read (incremented from the client's threads too)."""

    counters: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counters[name] += n


class Agent:
    """The sync state of one region and the round that advances it (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        keys: envelopes.Keys,
        effector: fx.Effector,
        messaging: Messaging,
        discovered: Latest[Discovered],
        rediscover: threading.Event,
        wake: threading.Event,
        first_seq: int,
        rng: random.Random | None = None,
        allocator: Allocator | None = None,
        collections: Collections | None = None,
        incarnation: Incarnation | None = None,
        broker_calls: CallTimes | None = None,
    ) -> None:
        self.config = config
        self.incarnation = incarnation
        """This region's incarnation (``geosync_core.incarnations``; None: no ZooKeeper, no guard)."""
        self.incarnations = Known({config.region: incarnation} if incarnation else {})
        """The newest incarnation known of each region (this one's own included), each from its own region."""
        self.waiting: dict[tuple[str, Incarnation], deque[envelopes.AckStateMessage]] = {}
        """Claims about a life of a region the region has not announced here yet (``_learn_incarnations``)."""
        self.waiting_count = 0
        self.announce_at: dict[str, float] = {}
        """Per namespace, when (monotonic) its control topic is next told this region's incarnation if no
        states went out meanwhile (``_announce``)."""
        self.allocator = allocator or Allocator()
        """The C allocator's settings; trimmed after each checkpoint (``geosync_agent.allocator``)."""
        self.collections = collections
        """The garbage collector's settings and collections (``geosync_agent.collector``; None: not tuned)."""
        self.keys = keys
        self.effector = effector
        self.messaging = messaging
        self.discovered = discovered
        self.rediscover = rediscover
        self.wake = wake
        self.rng = rng or random.Random()
        self.seq = first_seq
        """Strictly increasing across restarts (the composition root starts it at the wall clock in µs)."""
        self.stats = Stats()
        self.caps = Capabilities(
            disabled=frozenset()
            if config.plugin_cursors
            else frozenset({Capability.PLUGIN_FEED, Capability.PLUGIN_CURSOR_WRITES})
        )
        self.readers = reading.Readers(effector, count=self.stats.inc)
        """Opens the tails' readers, and again when they lost their broker."""
        self.origin_lookups = lookups.OriginLookups(
            config, effector, count=self.stats.inc, caps=lambda: self.caps, learn=self._learn
        )
        """What the brokers recorded of entries' origins (for the resolver)."""
        found = self.origin_lookups
        self.resolver = resolving.OriginResolver(
            local=config.region, lookup=found.lookup_origin, source=found.source_of, recorded=found.recorded
        )
        self.topics: dict[str, TopicState] = {}
        self.controls: dict[str, Tail] = {}
        self.subs: SubsTable = SubsTable()
        self.heavy_plans: dict[SubKey, Subscription] = {}
        self.heavy_publishes_by: dict[SubKey, Subscription] = {}
        """The subscriptions whose last plan (publish) took HEAVY_PLAN_S or more, kept as their times are set:
        counting them over every subscription at each round was as costly as the round's real work."""
        self.namespaces: dict[str, frozenset[str]] = {}
        # One guard per control topic: a sender's sequence numbers are shared by all its control topics,
        # and each topic only preserves the order of its own messages.
        self.guards: dict[str, envelopes.ReplayGuard] = {}
        self.snapshots = snapshotting.Snapshotting(
            region=config.region,
            keys=keys,
            namespaces=config.snapshot_namespaces,
            interval_s=config.snapshot_interval_s,
            timeout_s=config.snapshot_timeout_s,
            first_seq=first_seq,
        )
        self.feed = Feed()
        self.rediscover_at = 0.0
        """Monotonic time before which no further discovery pass is asked for (see _rediscover_soon)."""
        self.unobserved: dict[SubKey, pluginapi.CursorReport] = {}
        """Feed reports waiting until their topic and subscription are tracked and the topic's tail has read
        the batches they name (a topic created with its traffic is acknowledged on before discovery sees
        it, and the feed reports each acknowledgement once)."""
        self.created: set[SubKey] = set()
        """Subscriptions this round created: confirmed again at the next round's start (see ``round``)."""
        self._appended: applying.Appended = {}
        """This round's appended origins per (topic, end), shared by the topic's subscriptions."""
        self.replicators = replicators.Watch()  # Pulsar's replicators out of this region (discovery's stats)
        self.stalled: list[tuple[replicators.Stall, float]] = []  # and how long each was stalled, last pass
        self.unsticking = replicators.Unsticking(after_s=config.replicator_unload_after_s)
        self.unretained: tuple[str, ...] = ()  # synced namespaces without retention (discovering.retains)
        self.claimed_untracked: dict[str, tuple[float, float]] = {}
        """Topics claims named that are not tracked here yet -> (next lookup, give up after), monotonic."""
        self.outgoing: dict[str, list[envelopes.AckStateMessage]] = {}
        """States to publish at the end of the observe step, per namespace."""
        self.ready = False
        self.round_done_at: float | None = None
        """Monotonic time the last round completed (None before the first)."""
        self.failing_since: float | None = None
        """Monotonic time of the first of the rounds failing since the last good one (None: the last was
        good). Failures: admin API or brokers unavailable, credentials refused."""
        self.last_error = ""
        self.publish_failing_since: float | None = None
        """Monotonic time since which every control-message send failed (None: the last one went out)."""
        self.sends_lost = False
        """A control-message send failed since the last lost-sends resync (set on the client's thread)."""
        self.writes_in_flight: (
            tuple[
                Callable[[], list[fx.Outcome]],
                dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]],
            ]
            | None
        ) = None
        """The cursor writes the last apply step sent, and their plans: folded by ``land_writes``."""
        self.parts_failing: dict[str, tuple[float, str]] = {}
        """Parts the rounds go on without (discovery, the acknowledgement feed) that have failed since their
        last success: when the first failure was (monotonic) and the last error."""
        self.round_seconds: list[float] = []
        self.broker_calls = broker_calls or CallTimes()
        """Seconds each kind of broker call took (the admin clients add to it), for /state."""
        self.heavy_publishes = 0
        """Subscriptions whose last publish took tuning.HEAVY_PLAN_S or more, counted at each observe step."""
        self.phase_seconds = PhaseTimes()
        """The last rounds' time per step, for /state: which step a long round spent its time in."""
        self.discovery_seconds: list[float] = []
        """The last discovery passes' time (the discovery task's admin calls and parsing)."""
        self.timeline = Timeline()
        """The last long rounds (with their steps), discovery passes, checkpoints and collections, for /state:
        what a slow acknowledgement's sync overlapped."""
        if collections is not None:
            collections.timeline = self.timeline
        self.started_ms = int(time.time() * 1000)
        self.checkpoint_path = checkpointing.path_in(config.state_dir) if config.state_dir else None
        self.checkpoint_at = 0.0
        self.checkpoint_info: dict[str, Any] = {}
        self.checkpoint_writer: threading.Thread | None = None
        """The thread writing the last checkpoint a round took (None before the first)."""
        self.checkpoint_taken_s = 0.0
        """Seconds the last checkpoint took the loop (taking the state; the writing is the thread's)."""
        self.checkpoint_seen: tuple[Any, list[object], float] | None = None
        """The last checkpoint written: its fingerprint, the objects whose identities it holds (kept alive, so
        that no new object takes one of their ids) and when it was taken (monotonic)."""
        self.checkpoint_cost_s = 0.0
        """Seconds the last checkpoint written took in all, taking, encoding and writing: the encoding holds
        the interpreter's lock, so the loop waits on it as on its own work."""
        self.acks_wire: dict[int, tuple[OriginAcks, dict[str, Any]]] = {}
        """Claims encoded for the last checkpoint, by identity (``_acks_wire``); ``acks_wire_next``: the
        next one's."""
        self.acks_wire_next: dict[int, tuple[OriginAcks, dict[str, Any]]] = {}
        self.cpu_budget = pacing.CpuBudget()
        """The pause after each round (``pacing.CpuBudget``)."""
        self.transit_ms = Recent()
        """Recent control messages' time from sending (by the peer) to receipt here, for /state."""
        self.ownership = (
            owning.Ownership(
                config.region,
                config.admin_url,
                configured=config.broker_id or os.environ.get("GEOSYNC_BROKER_ID", ""),
                refresh_s=config.ownership_refresh_s,
            )
            if config.shard_by_ownership
            else None
        )
        """Sidecar mode: what this agent's broker owns (None: the agent syncs its whole region)."""
        self.lookups: set[str] = set()
        """Sidecar mode: claimed topics this broker does not own, to look up (a bundle nobody owns)."""

    # -- the loop ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event, progress: Callable[[], None] = lambda: None) -> None:
        """Rounds until ``stop`` is set (the sync-loop task's body); ``progress`` is told each time a round
        ends, failed or not (the watchdog's heartbeat: ``geosync_agent.watching``)."""
        log.info("agent for region %s starting (admin %s)", self.config.region, self.config.admin_url)
        while not stop.is_set():
            now = Now.read()
            cpu_before = time.thread_time()
            try:
                self.round(now)
                self.failing_since = None
            except ROUND_ERRORS as e:
                self.stats.inc("loop_errors")
                if self.failing_since is None:
                    self.failing_since = now.mono
                self.last_error = str(e)[:200]
                log.warning("round failed, retrying: %s", e)
                stop.wait(1.0)
            progress()
            elapsed = time.monotonic() - now.mono
            self.round_seconds.append(elapsed)
            del self.round_seconds[:-200]
            busy = self.caps.get(Capability.PLUGIN_FEED) is True and time.monotonic() < self.feed.busy_until
            gap = self.cpu_budget.gap(
                cpu_s=time.thread_time() - cpu_before, started=now.mono, ended=now.mono + elapsed
            )
            if self.collections is not None:
                # What the round left alive is frozen (a full collection of it now and then): see
                # ``geosync_agent.collector``. Not in the round's CPU, so not in the pause either.
                self.collections.after_round(time.monotonic())
            stop.wait(gap)
            # A control message ends the wait: remote acknowledgements are applied as they arrive.
            self.wake.wait(
                pacing.round_wait(
                    elapsed=elapsed,
                    busy=busy,
                    feed_interval_s=self.config.feed_interval_s,
                    poll_interval_s=self.config.poll_interval_s,
                    gap=gap,
                )
            )
            self.wake.clear()

    def round(self, now: Now) -> None:
        lap = started = time.monotonic()  # the machine's clock, whatever ``now`` says (a test's)
        cpu = cpu_started = time.thread_time()
        process_started = time.process_time()
        # What the last round created existed by the time this one began: a discovery pass begun after the
        # last round's start but before the creation (the discovery thread runs beside the rounds) does not
        # list it, and must not be taken for a user's deletion.
        for key in self.created:
            created = self.subs.get(key)
            if created is not None and created.exists:
                created.confirmed_at = max(created.confirmed_at, now.mono)
        self.created.clear()
        # step -> (seconds, of which this thread's CPU): a step far above its CPU waited (on brokers, on the
        # interpreter's lock held by another thread, for one of the machine's CPUs)
        steps: dict[str, tuple[float, float]] = {}
        for name, phase in (
            ("own", self.own),
            ("adopt", self.adopt),
            ("reopen", self._reopen),
            ("revive", self._revive),
            ("index", self.index),
            ("receive", self.receive),
            ("writes", self.land_writes),
            ("feed", self.observe_feed),
            ("polls", self.poll),
            # Claims that came while the polls waited on brokers are applied now, not a round later.
            ("receive again", self.receive),
            ("apply", self.apply),
            ("bound", lambda _now: self.bound_entries()),
            ("snapshots", self.snapshot_round),
        ):
            phase(now)
            began, lap = lap, self.phase_seconds.lap(name, lap)
            cpu_began, cpu = cpu, time.thread_time()
            steps[name] = (round(lap - began, 3), round(cpu - cpu_began, 3))
        self.timeline.add(
            "round",
            now.mono,
            lap - started,
            cpu_s=round(cpu - cpu_started, 3),
            # every thread's CPU meanwhile: near the round's seconds, the loop waited on the agent's other
            # threads (the interpreter's lock); far below them, on brokers or for the machine's CPUs
            process_cpu_s=round(time.process_time() - process_started, 3),
            steps={k: v for k, v in steps.items() if v[0] >= 0.05},
        )
        self.ready = True
        self.round_done_at = now.mono
        if self.checkpoint_path is not None and now.mono >= self.checkpoint_at:
            self.save_checkpoint(background=True, at=now.mono)
            # Taking the state is the loop's, and encoding it holds the interpreter's lock: together they
            # get at most CHECKPOINT_SHARE of the time. (At 500,000 entries a soak's checkpoints took 19-28 s
            # each, one after the other, and the loop's rounds waited 20-50 s.)
            self.checkpoint_at = now.mono + max(
                self.config.checkpoint_interval_s,
                self.checkpoint_taken_s / tuning.CHECKPOINT_SHARE,
                self.checkpoint_cost_s / tuning.CHECKPOINT_SHARE,
            )

    def bound_entries(self) -> None:
        """Keep the entries held (origins, keys, batch sizes) within ``max_tracked_entries`` over all topics:
        the largest tails give up their oldest first (a subscription far behind holds their floor back; it is
        parked until it catches up)."""
        budget = self.config.max_tracked_entries
        total = sum(len(ts.tail.details) for ts in self.topics.values())
        if total <= budget:
            return
        excess = total - budget * 9 // 10
        for ts in sorted(self.topics.values(), key=lambda t: len(t.tail.details), reverse=True):
            if excess <= 0:
                break
            held = len(ts.tail.details)
            forgotten = ts.tail.forget_oldest(min(excess, held // 2 + 1))
            dropped = held - len(ts.tail.details)
            excess -= dropped
            self.stats.inc("entries_over_budget", dropped)
            log.warning(
                "%s: over the budget of %d tracked entries: forgot up to %s (%d entries); a subscription "
                "below them is parked until it catches up (a failover of it may deliver some messages again)",
                ts.tail.topic,
                budget,
                forgotten,
                dropped,
            )

    # -- checkpoint (see geosync_agent.checkpointing) ----------------------------------------------

    def save_checkpoint(self, *, background: bool = False, at: float | None = None) -> None:
        """Write the checkpoint now (a failure is logged and counted; the next one tries again). The state
        is taken on the loop's thread (the only one that reads it); with ``background`` it is encoded,
        compressed and written on a thread of its own (a second or more at 10,000 subscriptions on a busy
        machine, which the rounds no longer wait for), and skipped while the previous one is still being
        written (the next interval writes a newer one). Without, it waits for that one and writes now. A
        periodic one (``background``; ``at`` the round's monotonic time) is skipped while the state looks
        unchanged, for at most tuning.CHECKPOINT_UNCHANGED_MAX_AGE_S."""
        if self.checkpoint_path is None:
            return
        writer = self.checkpoint_writer
        if writer is not None and writer.is_alive():
            if background:
                self.stats.inc("checkpoints_skipped")
                return
            writer.join()
        started = time.monotonic()
        at = started if at is None else at
        fingerprint, held = self.checkpoint_fingerprint()
        seen = self.checkpoint_seen
        if (
            background
            and seen is not None
            and seen[0] == fingerprint
            and at - seen[2] < tuning.CHECKPOINT_UNCHANGED_MAX_AGE_S
        ):
            self.stats.inc("checkpoints_unchanged")
            return
        self.checkpoint_seen = (fingerprint, held, at)
        try:
            state = self.checkpoint_later()
        except ValueError as e:
            self.stats.inc("checkpoint_errors")
            log.warning("cannot take the checkpoint: %s", e)
            return
        taken = self.checkpoint_taken_s = time.monotonic() - started
        if background:
            self.checkpoint_writer = threading.Thread(
                target=self._write_checkpoint, args=(state, started, taken), name="checkpoint", daemon=True
            )
            self.checkpoint_writer.start()
        else:
            self._write_checkpoint(state, started, taken)

    def _acks_wire(self, acks: OriginAcks) -> dict[str, Any]:
        """``acks`` as the checkpoint writes them, encoded once for as long as they do not change (claims are
        immutable values: most of 10,000 subscriptions' claims are the same objects as at the last one)."""
        hit = self.acks_wire.get(id(acks))
        wire = hit[1] if hit is not None and hit[0] is acks else envelopes.acks_to_json(acks)
        self.acks_wire_next[id(acks)] = (acks, wire)
        return wire

    def _write_checkpoint(self, state: Callable[[], dict[str, Any]], started: float, taken: float) -> None:
        """Encode and write ``state`` (on the checkpoint thread or the loop's: it only counts and assigns)."""
        assert self.checkpoint_path is not None
        try:
            size = checkpointing.save(self.checkpoint_path, region=self.config.region, state=state())
        except (OSError, ValueError) as e:
            self.stats.inc("checkpoint_errors")
            self.checkpoint_seen = None  # not written: the next one is, changed or not
            log.warning("cannot write the checkpoint %s: %s", self.checkpoint_path, e)
            return
        self.stats.inc("checkpoints_written")
        self.checkpoint_cost_s = time.monotonic() - started
        self.timeline.add("checkpoint", started, self.checkpoint_cost_s, in_loop_s=round(taken, 3))
        # The largest temporary buffers (the state's JSON and its compressed copy) were just freed.
        self.allocator.trim()
        self.checkpoint_info = {
            "bytes": size,
            "seconds": round(time.monotonic() - started, 4),
            "taken_in_loop_seconds": round(taken, 4),
            "at": time.time(),
        }

    def checkpoint_fingerprint(self) -> tuple[Any, list[object]]:
        """What a checkpoint would hold, told cheaply (the tails by identity, sizes, last positions and
        versions; the claims, immutable values, mostly the same objects as at the last one), and the objects
        it names by identity."""
        held: list[object] = []
        topics = []
        for topic, ts in self.topics.items():
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
        for s in self.subs.values():
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
                    s.received,  # compared as values where not the same object (a resync makes equal ones)
                    s.published,
                )
            )
        rest = (
            self.incarnation,
            self.incarnations.to_wire(),
            {t: tail.last for t, tail in self.controls.items()},
            {t: checkpoint.guard_to_wire(g) for t, g in self.guards.items()},
            {t: checkpoint.guard_to_wire(g) for t, g in self.snapshots.guards.items()},
        )
        return (tuple(topics), tuple(subs), rest), held

    def checkpoint(self) -> dict[str, Any]:
        """What a restarted agent needs to resume without re-reading history, as JSON values."""
        return self.checkpoint_later()()

    def checkpoint_later(self) -> Callable[[], dict[str, Any]]:
        """``checkpoint``'s value as it is now, its largest parts (the topics' origin indexes and entry
        details, the subscriptions' claims) encoded when called: taken on the loop's thread, the only one
        that reads the state, and called on the checkpoint's thread."""
        topics = {t: ts.tail.to_wire_later() for t, ts in self.topics.items() if not ts.tail.stale}
        rest = {
            "incarnation": None if self.incarnation is None else self.incarnation.to_wire(),
            "incarnations": self.incarnations.to_wire(),
            "controls": {t: tail.last.to_wire() for t, tail in self.controls.items() if tail.last},
            "guards": {t: checkpoint.guard_to_wire(g) for t, g in self.guards.items()},
            "marker_guards": {t: checkpoint.guard_to_wire(g) for t, g in self.snapshots.guards.items()},
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
            for s in self.subs.values()
        ]

        def encode() -> dict[str, Any]:
            listed = [
                {
                    **fields,
                    "received": self._acks_wire(received),
                    "published": None if published is None else self._acks_wire(published),
                    "cursor": None if cursor is None else checkpoint.cursor_to_wire(cursor),
                }
                for fields, received, published, cursor in subs
            ]
            self.acks_wire, self.acks_wire_next = self.acks_wire_next, {}
            return {
                "topics": {t: encode_topic() for t, encode_topic in topics.items()},
                **rest,
                "subscriptions": listed,
            }

        return encode

    def restore(self, state: dict[str, Any], now: Now) -> None:
        """Take up a checkpoint before the first round: tails resume at their last entry (their readers open
        in the first round), subscriptions keep the claims received and published, control topics their read
        position and replay guard. ``ValueError`` (nothing restored) for a state this agent cannot use."""
        own = Incarnation.from_wire(state.get("incarnation"))
        if own is not None and self.incarnation is not None and own != self.incarnation:
            raise ValueError(
                f"the checkpoint was written by an agent of incarnation {own} of "
                f"{self.config.region}; the region is incarnation {self.incarnation} now (it was rebuilt)"
            )
        try:
            known = Known.from_wire(state.get("incarnations", {}))
            if known is None:
                raise ValueError("incarnations not readable")
            controls: dict[str, Tail] = {}
            for topic, last in dict(state["controls"]).items():
                tail = controls[topic] = Tail(topic, -1, wake=self.wake)
                tail.last = tail.resume_at = Position.from_wire(last)
            guards = {topic: checkpoint.guard_from_wire(g) for topic, g in dict(state["guards"]).items()}
            # Absent in checkpoints of agents before markers had a replay guard.
            marker_guards = {
                topic: checkpoint.guard_from_wire(g)
                for topic, g in dict(state.get("marker_guards", {})).items()
            }
            subs: dict[SubKey, Subscription] = {}
            for item in list(state["subscriptions"]):
                sub = checkpoint.subscription_from_wire(item)
                subs[sub.key] = sub
            # The first resyncs spread over the period of the subscriptions restored (``resync_period`` of
            # the agent's still empty table gave ``resync_interval_s``: at 10,000 subscriptions every topic
            # was republished whole within 30 s of a restart instead of 100 s, while the agent caught up).
            period = self.resync_period(len(subs))
            # A topic whose cursors all came back is first polled within RESTORED_POLL_SPREAD_S, spread: the
            # first round plans and writes from the checkpoint's cursors (a plugin write answers the cursor
            # as it is, and a cursor that moved on since only has some acknowledgements written again),
            # instead of waiting for a poll of every topic (at 10,000 subscriptions 1.2 s of that round).
            read = {s.topic for s in subs.values() if s.exists and s.cursor is None}
            spread = tuning.RESTORED_POLL_SPREAD_S
            topics = {
                topic: TopicState(
                    Tail.from_wire(topic, partition_of(topic), value),
                    resync_at=pacing.first_resync(now.mono, period_s=period, phase=self.rng.random()),
                    poll=pacing.PollState(
                        next_at=0.0 if topic in read else now.mono + spread * self.rng.random()
                    ),
                )
                for topic, value in dict(state["topics"]).items()
            }
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"checkpoint content not usable: {type(e).__name__}: {e}") from e
        self.topics, self.controls, self.guards, self.subs = topics, controls, guards, SubsTable(subs)
        self.snapshots.guards = marker_guards
        for region, incarnation in known.by_region.items():
            if region != self.config.region:
                self.incarnations = self.incarnations.learn(region, incarnation)[0]
        self.stats.inc("checkpoint_restored")
        log.info(
            "resuming from the checkpoint: %d topics (%d index runs), %d subscriptions, %d control topics",
            len(topics),
            sum(len(ts.tail.index) for ts in topics.values()),
            len(subs),
            len(controls),
        )

    def _learn(self, capability: Capability, value: bool, now_mono: float) -> None:
        """``capability`` was found (not) to be there at ``now_mono``."""
        self.caps = self.caps.learned(capability, value, now=now_mono)

    def part_outcome(self, part: str, error: object | None, now_mono: float) -> None:
        """Record a success (``error`` None) or failure of ``part`` for the readiness probe."""
        if error is None:
            self.parts_failing.pop(part, None)
        else:
            since = self.parts_failing.get(part, (now_mono, ""))[0]
            self.parts_failing[part] = (since, str(error)[:200])

    def readiness(self, now_mono: float) -> tuple[bool, str]:
        """Whether the agent is doing its work, and why not (``core.readiness``), for /readyz: Kubernetes
        then stops counting on this pod."""
        return readiness.readiness(
            now_mono,
            round_done_at=self.round_done_at if self.ready else None,
            failing_since=self.failing_since,
            last_error=self.last_error,
            publish_failing_since=self.publish_failing_since,
            parts_failing=self.parts_failing,
        )

    def close(self) -> None:
        """Write a last checkpoint and close readers (producers and the client belong to the effector and
        the composition root)."""
        try:
            self.land_writes(Now.read())
        except Exception as e:  # the checkpoint is written all the same: those writes are planned again
            log.warning("the last cursor writes' outcomes were not read: %s", e)
        self.save_checkpoint()
        for ts in self.topics.values():
            ts.tail.close()
        for tail in self.controls.values():
            tail.close()

    # -- 0. sharding by ownership (sidecar mode) ----------------------------------------------------

    def owns(self, topic: str) -> bool:
        """Whether this agent syncs ``topic``: always, unless it shards by ownership and its broker does not
        own the topic's bundle."""
        return self.ownership is None or self.ownership.owns(topic)

    def own(self, now: Now) -> None:
        """Sidecar mode: refresh the broker's bundles when due; hand off the topics it no longer owns, and
        take over claimed topics it now owns (discovery is asked for a pass for the rest)."""
        if self.ownership is None:
            return
        try:
            change = self.effector.call(calls.RefreshOwnership(self.ownership, now.mono))
            if self.lookups:
                self.effector.call(calls.RefreshRegionOwnership(self.ownership, now.mono))
                self._look_up_claimed(now)
        except (adm.AdminError, owning.OwnershipUnknown) as e:
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
        lost, _ = ownership.moved(before, after, list(self.topics))
        for topic in lost:
            self._hand_off(topic)
        claimed = {k[0] for k, state in self.subs.items() if state.announced and k[0] not in self.topics}
        _, gained = ownership.moved(before, after, claimed)
        for topic in gained:
            self.claimed_untracked[topic] = (now.mono, now.mono + tuning.CLAIMED_LOOKUP_S)
        self.stats.inc("ownership_changes")
        log.info(
            "broker %s now owns %d bundles: %d topics handed off, %d claimed topics taken over",
            self.ownership.me,
            after.count(),
            len(lost),
            len(gained),
        )
        self.rediscover.set()

    def _hand_off(self, topic: str) -> None:
        """``topic`` moved to another broker: stop syncing it here (its reader, index and cursor state go;
        the claims received stay, see ``Subscription.hand_off``)."""
        self._untrack(topic)
        for state in self.subs.values():
            if state.topic == topic:
                state.hand_off()
        self.snapshots.retain(self.topics)
        self.stats.inc("topics_handed_off")
        log.info("%s moved to another broker: handed off to its agent", topic)

    def _look_up_claimed(self, now: Now) -> None:
        """Look up the claimed topics this broker does not own (queued by ``_take_claims``) that no broker
        owns: the look-up has some broker take the bundle, whose agent applies the claims; one taken by this
        broker is picked up by a refresh now."""
        assert self.ownership is not None
        queued, self.lookups = self.lookups, set()
        for topic in queued:
            if not self.ownership.should_look_up(topic, now.mono):
                continue
            try:
                answer = self.effector.call(calls.LookupTopic(topic))
            except adm.AdminNotFound:
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
        if found.scanned_at is not None:
            self._forget_gone(found.topics if found.listed is None else found.listed, found.scanned_at, now)
        by_topic = self.subs.by_topic(existing_only=False)
        for topic, present in found.subscriptions.items():
            if topic not in self.topics:
                continue
            self._track_subscriptions(topic, present, at=found.scanned_at or now.mono)
            for state in by_topic.get(topic, ()):
                if state.name not in present:
                    self._absent(state, found.scanned_at)
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

    def _absent(self, state: Subscription, scanned_at: float | None) -> None:
        """A discovery pass started at ``scanned_at`` did not find ``state`` here."""
        if scanned_at is not None and scanned_at <= state.confirmed_at:
            return  # seen (or created) since the pass began: the pass is older news
        if state.exists and state.confirmed_at > 0 and scanned_at is not None:
            state.deleted_here = True
            self.stats.inc("subscriptions_deleted_here")
            log.info(
                "subscription %s on %s was deleted here: not created again from other regions' claims "
                "(it is synced again once it exists here)",
                state.name,
                state.topic,
            )
        state.exists = False

    def _forget_gone(self, listed: tuple[str, ...], scanned_at: float, now: Now) -> None:
        """Stop tracking the topics (and control topics) a discovery pass no longer lists: deleted, or out
        of the synced namespaces. Their readers close and their state and metric series go; a topic tracked
        after the pass began is kept (the pass may predate it)."""
        keep = set(listed)
        for topic, ts in list(self.topics.items()):
            if topic in keep or ts.tracked_at >= scanned_at:
                continue
            self._untrack(topic)
            for key in [k for k in self.subs if k[0] == topic]:
                del self.subs[key]
            self.claimed_untracked.pop(topic, None)
            self.stats.inc("topics_forgotten")
            log.info("%s is gone (deleted, or its namespace is no longer synced): stopped tracking it", topic)
        self._forget_unlisted_claims(keep, now)
        self.snapshots.retain(self.topics)  # snapshot mode's caches of topics gone go too
        wanted_controls = {self._control_topic(ns) for ns in self.namespaces}
        for control in [c for c in self.controls if c not in wanted_controls]:
            self.controls.pop(control).close()

    def _forget_unlisted_claims(self, listed: set[str], now: Now) -> None:
        """Drop the claims about topics neither listed here nor tracked that no region sent any of for
        tuning.UNLISTED_CLAIMS_RESYNCS resync intervals (see there)."""
        horizon = now.wall - tuning.UNLISTED_CLAIMS_RESYNCS * self.resync_period()
        gone = [
            key
            for key, state in self.subs.items()
            if key[0] not in self.topics
            and key[0] not in listed
            and max(state.received_from.values(), default=0.0) < horizon
        ]
        for key in gone:
            del self.subs[key]
            self.claimed_untracked.pop(key[0], None)
            self.lookups.discard(key[0])
        if gone:
            self.stats.inc("claims_forgotten", len(gone))
            log.info(
                "forgot the claims of %d subscription(s) on topics no region has spoken of for %.0f s and "
                "this region does not list (e.g. %s on %s)",
                len(gone),
                tuning.UNLISTED_CLAIMS_RESYNCS * self.resync_period(),
                gone[0][1],
                gone[0][0],
            )

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
        """The state of ``topic``'s subscription ``name``, made (with ``exists``) if there is none yet, and
        not made to be thrown away when there is one (a claim received for each acknowledgement at 10,000
        subscriptions built a whole new state each time: 4 % of both agents' work)."""
        state = self.subs.get((topic, name))
        if state is None:
            state = self.subs[(topic, name)] = Subscription(topic, name, exists=exists)
        return state

    def _track_subscriptions(self, topic: str, present: dict[str, tuple[int, str]], *, at: float) -> None:
        """Record ``topic``'s subscriptions as a topic's stats list them (name -> (consumers, type)) at
        monotonic time ``at``."""
        for name, (consumers, kind) in present.items():
            state = self._subscription(topic, name)
            # One deleted here and created again: ``confirm`` forgets its old cursor, to be read anew.
            unread = state.deleted_here or (
                state.cursor is None and (not state.exists or state.confirmed_at == 0)
            )
            state.confirm(at)
            if state.recreated:
                self.unobserved.pop(state.key, None)  # a report waiting since before is about the old one
            state.consumers = consumers
            state.learn_kind(kind)
            if unread:
                self._poll_soon(topic)

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
        return max(self.config.resync_interval_s, n / tuning.RESYNC_STATES_PER_S)

    def _control_topic(self, namespace: str) -> str:
        return f"persistent://{namespace}/{self.config.control_topic}"

    # -- 2. index ----------------------------------------------------------------------------------

    def index(self, now: Now) -> None:
        # Untried counts as there: a restarted agent's first round reads the feed only once discovery named
        # the namespaces, and new messages made every topic due a poll meanwhile (the poll the checkpoint's
        # cursors spare). Found absent, every topic is polled at once (``_read_feed``).
        feed = self.caps.usable(Capability.PLUGIN_FEED, now=now.mono)
        grown: list[str] = []
        self.origin_lookups.prefetch(ts.tail for ts in self.topics.values())
        for topic, ts in self.topics.items():
            malformed, spoofed = ts.tail.malformed, self.resolver.spoofed
            drained = ts.tail.drain(self.resolver, now=now.mono)
            if ts.tail.stale:
                self._rebuild(ts, now)
                continue
            filled = ts.tail.retry(self.resolver, now=now.mono) if ts.tail.pending else 0
            if filled:
                self.stats.inc("origins_resolved_late", filled)
                log.info("%s: named the origin of %d entries on a retry", topic, filled)
                for state in self.subs.values():
                    if state.topic == topic and state.cursor is not None:
                        state.incomplete_at = -1  # its cursor may have acknowledged them: translate again
            if drained or filled:
                grown.append(topic)
                if not feed:
                    ts.poll = pacing.after_new_messages(
                        ts.poll, now=now.mono, base_s=self.config.poll_interval_s
                    )
            if ts.tail.malformed > malformed:
                self.stats.inc("malformed_stamps", ts.tail.malformed - malformed)
                log.warning("%s: skipped entries with a malformed source-position stamp", topic)
            if self.resolver.spoofed > spoofed:
                self.stats.inc("spoofed_stamps", self.resolver.spoofed - spoofed)
                log.warning(
                    "%s: entries published here carry a source-position stamp (set by an application): "
                    "indexed as local",
                    topic,
                )
            if ts.tail.markers:
                found, ts.tail.markers = ts.tail.markers, []
                for position, properties, data in found:
                    self._on_marker(ts, position, properties, data, now)
        if grown:
            self._translate_again(frozenset(grown), now)

    def _behind_forgotten(self, ts: TopicState, state: Subscription, cursor: AckState) -> bool:
        """Whether ``state``'s cursor lies below entries the tail already forgot (a subscription created at
        the earliest message after the others moved on, or rewound): nothing is planned or claimed for it,
        and the tail is read again from the earliest message (next round)."""
        forgotten = ts.tail.forgot_above(cursor.mark_delete)
        if forgotten is None:
            state.parked = False
            return False
        budget_floor = ts.tail.budget_floor
        if budget_floor is not None and cursor.mark_delete < budget_floor:
            if not state.parked:
                state.parked = True
                self.stats.inc("subscriptions_parked")
                log.warning(
                    "%s / %s: parked: its mark-delete %s lies below the entries forgotten over the budget "
                    "(up to %s); not synced until it catches up",
                    state.topic,
                    state.name,
                    cursor.mark_delete,
                    budget_floor,
                )
            return True
        if not ts.tail.stale:
            ts.tail.stale = True
            ts.tail.stale_reason = (
                f"subscription {state.name!r} is at {cursor.mark_delete}, below the entries forgotten up to "
                f"{forgotten} once every subscription known then had acknowledged them"
            )
        return True

    def _rebuild(self, ts: TopicState, now: Now) -> None:
        """The tail cannot answer for the topic any more: the checkpoint does not match it (its reader
        started below where the checkpoint stopped: deleted and re-created, region rebuilt), or a
        subscription lies below the entries it forgot. Read the topic again from its earliest message."""
        stale = ts.tail
        stale.close()
        if stale.stale_reason:
            self.stats.inc("topics_reread")
            log.warning(
                "%s: %s: reading the topic again from the earliest message", stale.topic, stale.stale_reason
            )
        else:
            self.stats.inc("checkpoint_topics_rebuilt")
            log.error(
                "%s: the checkpoint does not match the topic (it holds entries below %s, where the "
                "checkpoint stopped): rebuilding its origin index from the earliest message",
                stale.topic,
                stale.resume_at,
            )
        ts.tail = Tail(stale.topic, stale.partition)
        ts.tail.index.keep_retirements(stale.index.retirements())  # read again, old messages stay retired
        self.readers.open(ts.tail, now.mono)
        for state in self.subs.values():
            if state.topic == stale.topic:
                state.incomplete_at = -1
                state.planned = None  # plans are made from the new tail (its versions start again)

    def _translate_again(self, topics: frozenset[str], now: Now) -> None:
        """Claim what a translation left out once the tail has read as far as the cursor acknowledged
        (published with this round's states): a cursor that acknowledged a burst before the tail got to it
        waits for nothing else. Not at every step of the tail: under steady load cursors run just ahead of
        it all the time, and their next feed report translates them anyway."""
        for state in self.subs.values():
            if (
                state.incomplete_at is None
                or not state.exists
                or state.topic not in topics
                or state.cursor is None
            ):
                continue
            last = self.topics[state.topic].tail.last
            if last is not None and last >= state.cursor.reach:
                self._publish(state, force=False, now=now)

    # -- snapshot mode (the work itself is snapshotting's) ------------------------------------------

    def _markers_allowed(self, now: Now) -> bool:
        """Markers may be injected only where the entry filter hides them from applications."""
        if self.caps.get(Capability.ENTRY_FILTER) is not True and self.caps.usable(
            Capability.ENTRY_FILTER, now=now.mono
        ):
            try:
                snapshotting.check_entry_filter(self.effector.call(calls.RuntimeConfiguration()))
                self.caps = self.caps.learned(Capability.ENTRY_FILTER, True, now=now.mono)
            except snapshotting.FilterMissing as e:
                self.caps = self.caps.learned(Capability.ENTRY_FILTER, False, now=now.mono)
                self.stats.inc("snapshot_mode_refused")
                log.error("refusing snapshot mode for %s: %s", ", ".join(self.config.snapshot_namespaces), e)
        return self.caps.get(Capability.ENTRY_FILTER) is True

    def _on_marker(
        self, ts: TopicState, position: Position, properties: dict[str, str], data: bytes, now: Now
    ) -> None:
        topic = ts.tail.topic
        if not self.snapshots.covers(topic):
            self.stats.inc("markers_ignored")
            return

        def subscription_state(name: str) -> tuple[bool, AckState | None]:
            state = self.subs.get((topic, name))
            return (False, None) if state is None or not state.exists else (True, state.cursor)

        work = self.snapshots.on_read(
            topic,
            ts.tail.partition,
            position,
            properties,
            data,
            markers_allowed=self._markers_allowed(now),
            subscription_state=subscription_state,
            now_ms=now.wall_ms,
        )
        if work.rejected is not None:
            self._reject(work.rejected)
            return
        if work.update_for is not None:
            tracked = self._subscription(topic, work.update_for, exists=False)
            tracked.confirm(now.mono)
        self._perform(list(work.effects), now)

    def snapshot_round(self, now: Now) -> None:
        if not self.config.snapshot_namespaces:
            return
        covered = [(t, ts.tail.version) for t, ts in self.topics.items() if self.snapshots.covers(t)]
        if covered and self._markers_allowed(now):
            self._perform(
                list(self.snapshots.round(covered, self.namespaces, now_s=now.wall, now_ms=now.wall_ms)), now
            )

    # -- 3. receive --------------------------------------------------------------------------------

    def receive(self, now: Now) -> None:
        for topic, tail in self.controls.items():
            while True:
                try:
                    message = tail.inbox.get_nowait()
                except queue.Empty:
                    break
                if tail.resume_at is not None:
                    if message.position < tail.resume_at:
                        tail.last = None  # the topic is not the one checkpointed: take everything in it
                    tail.resume_at = None
                if tail.last is not None and message.position <= tail.last:
                    continue  # read before the restart (the reader resumes at the last entry read)
                tail.last = message.position
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
            try:
                stats = self.effector.call(calls.TopicStats(topic))
            except adm.AdminError:  # not there yet (404), or the admin API failing: the next round asks again
                self.claimed_untracked[topic] = (now.mono + tuning.REDISCOVER_FOR_FEED_S, give_up_at)
                continue
            del self.claimed_untracked[topic]
            self._track_topic(topic, now)
            self._track_subscriptions(
                topic, discovering.subscriptions_of(self.config, topic, stats), at=now.mono
            )
            self.stats.inc("tracked_from_claims")

    def handle_control(self, data: bytes, *, topic: str, now: Now) -> None:
        opened = envelopes.open_envelope(self.keys.keyring, data)
        if isinstance(opened, envelopes.Rejected):
            self._reject(opened)
            return
        if opened.region == self.config.region:
            return  # our own message, replicated back to us through the local log
        # Validated whole before the replay guard moves: a genuine envelope of another kind (a policy
        # event) or of another namespace copied here by someone with produce permission only must neither
        # act nor push the guard past the sender's next sequence number (its claims would be refused).
        decoded = envelopes.decode_ack_states(opened)
        if isinstance(decoded, envelopes.Rejected):
            self._reject(decoded)
            return
        tags = envelopes.incarnations_of(opened)
        if isinstance(tags, envelopes.Rejected):
            self._reject(tags)
            return
        if any(namespace_of(m.topic) != namespace_of(topic) for m in decoded):
            self._reject(envelopes.Rejected(envelopes.Reason.MISPLACED))
            return
        if opened.sent_at_ms >= self.started_ms:  # not history re-read from the control topic
            # Until now, not the round's start: a message may be taken late in the round (``receive again``).
            self.transit_ms.add(int(time.time() * 1000) - opened.sent_at_ms)
        self.guards[topic], admitted = self.guards.get(topic, envelopes.ReplayGuard()).admit(opened)
        if isinstance(admitted, envelopes.Rejected):
            self._reject(admitted)
            return
        if tags is not None:
            self._learn_incarnations(opened.region, tags, now)
        for received in decoded:
            message, waiting = reports.waiting_on_incarnations(received, tags, self.incarnations)
            self._wait_for_incarnations(waiting)
            self._take_claims(self._of_known_incarnations(message, tags), now)

    def _learn_incarnations(self, sender: str, tags: dict[str, Incarnation], now: Now) -> None:
        """Take up the incarnation ``sender`` announces of itself if it is newer than the one known here, and
        the claims that waited for it. A region speaks only for itself: what a peer says of a third region's
        incarnation (or of this one's, which this region's ZooKeeper says) is never taken up."""
        incarnation = tags.get(sender)
        if incarnation is None or sender == self.config.region:
            return
        self.incarnations, replaced = self.incarnations.learn(sender, incarnation)
        if replaced is not None:
            self._region_rebuilt(sender, replaced, incarnation, now)
        for key in [k for k in self.waiting if k[0] == sender]:
            if not self.incarnations.waits(*key, tagged=True):
                messages = self.waiting.pop(key)
                self.waiting_count -= len(messages)
                for message in messages:
                    self._take_claims(self._of_known_incarnations(message, {sender: key[1]}), now)

    def _wait_for_incarnations(
        self, waiting: dict[tuple[str, Incarnation], envelopes.AckStateMessage]
    ) -> None:
        """Keep claims about a life of a region that the region has not announced here yet, until it has;
        at most ``tuning.MAX_WAITING_CLAIMS`` (the oldest go first: their sender's next resync says them
        again)."""
        for key, message in waiting.items():
            self.stats.inc("claims_waiting_incarnation")
            self.waiting.setdefault(key, deque()).append(message)
            self.waiting_count += 1
        while self.waiting_count > tuning.MAX_WAITING_CLAIMS:
            key = next(iter(self.waiting))
            self.waiting[key].popleft()
            self.waiting_count -= 1
            self.stats.inc("claims_waiting_dropped")
            if not self.waiting[key]:
                del self.waiting[key]

    def _region_rebuilt(self, region: str, old: Incarnation, new: Incarnation, now: Now) -> None:
        """``region`` was wiped and rebuilt under its name: its new messages reuse the origin coordinates of
        its old ones. Every claim held about its origins speaks of the old ones, and every entry indexed so
        far with an origin there is an old one: both are renamed to the old incarnation's retired name, so
        the old claims go on reaching the old messages (every region renames alike) and never the new ones."""
        self.stats.inc("incarnations_changed")
        retired = incarnations.retired(region, old)
        runs = 0
        for ts in self.topics.values():
            runs += ts.tail.index.retire(region, retired)
            ts.tail.version += 1
            ts.tail.rewrites += 1
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
        log.warning(
            "region %s was rebuilt (incarnation %s, was %s): its old messages (%d index runs here) and the "
            "claims about them now go by %s, apart from its new ones",
            region,
            new,
            old,
            runs,
            retired,
        )

    def _of_known_incarnations(
        self, message: envelopes.AckStateMessage, tags: dict[str, Incarnation] | None
    ) -> envelopes.AckStateMessage:
        """``message`` with its claims made about the incarnations known here (``core.reports``), counted
        when that changed them."""
        known = reports.of_known_incarnations(message, tags, self.incarnations)
        if known is not message:
            self.stats.inc("claims_stale_incarnation")
        return known

    def _take_claims(self, message: envelopes.AckStateMessage, now: Now) -> None:
        # The sender's rules may differ (another version or configuration): what is not synced here, a
        # broker's own subscription among them, is never written from claims.
        if not synced(self.config, message.topic, message.subscription):
            return
        state = self._subscription(message.topic, message.subscription, exists=False)
        ts = self.topics.get(message.topic)
        generation = state.generation
        taken = generations.take_claims(
            state, message, index=None if ts is None else ts.tail.index, now_wall=now.wall
        )
        if taken is generations.Taken.SUPERSEDED:
            self.stats.inc("claims_superseded")  # from before a rewind: they would undo it
            return
        if state.generation != generation:
            self.stats.inc("rewinds_followed")
            log.info("%s on %s was rewound in another region: following it", state.name, state.topic)
        if message.topic not in self.topics and not self.owns(message.topic):
            # Sidecar mode: another broker's agent applies them (the claims are kept for a takeover).
            if self.ownership is not None and len(self.lookups) < tuning.MAX_UNOBSERVED:
                self.lookups.add(message.topic)
        elif message.topic not in self.topics:
            if (
                discovering.synced_topic(self.config, message.topic)
                and len(self.claimed_untracked) < tuning.MAX_UNOBSERVED
            ):
                self.claimed_untracked.setdefault(
                    message.topic, (now.mono, now.mono + tuning.CLAIMED_LOOKUP_S)
                )
            self._rediscover_soon(now, "rediscover_for_claims")
        if taken is generations.Taken.CHANGED:
            self.stats.inc("claims_received")
            writes = Capability.PLUGIN_CURSOR_WRITES
            if ts is not None and (
                self.caps.get(writes) is False or not self.caps.usable(writes, now=now.mono)
            ):
                # Plugin writes answer the cursor's state; admin calls need a fresh read to plan from. (Not
                # while the plugin's writes are untried: a restarted agent's first claims then made every
                # topic due a poll for two rounds, until its first writes were answered.)
                ts.poll = replace(ts.poll, next_at=0.0)

    def _took_rewind(self, state: Subscription, rewind: generations.Rewound, cursor: AckState) -> bool:
        """``cursor`` went back (``core.generations.rewound`` said how): whether that started a new
        generation of ``state``'s claims; if so, a tail that forgot entries it acknowledges is read again."""
        if rewind.kind is generations.Rewind.OWN:
            return False
        if rewind.kind is generations.Rewind.PASSIVE:
            self.stats.inc("rewinds_passive")  # a passive copy: the active region's claims undo it
            return False
        self.stats.inc("rewinds")
        ts = self.topics.get(state.topic)
        if ts is not None and ts.tail.index.floor is not None and not ts.tail.stale:
            # The new claims are this cursor's whole translation, but the tail forgot entries it acknowledges
            # (every subscription had acknowledged them): read the topic again before claiming anything.
            ts.tail.stale = True
            ts.tail.stale_reason = (
                f"subscription {state.name!r} was rewound and its claims start again, from entries forgotten "
                f"up to {ts.tail.index.floor}"
            )
        log.info(
            "%s on %s was %s here: its claims start again from this cursor (generation %d)",
            state.name,
            state.topic,
            "created again"
            if rewind.recreated
            else f"rewound from {rewind.seen and rewind.seen.mark_delete} to {cursor.mark_delete}",
            state.generation,
        )
        return True

    def _reject(self, rejected: envelopes.Rejected) -> None:
        self.stats.inc(f"control_rejected_{rejected.reason.value}")
        log.warning("control message rejected: %s", rejected.reason.value)

    # -- 4. observe and publish ------------------------------------------------------------------

    def observe_feed(self, now: Now) -> None:
        """Take the cursors the plugin's feed reported, and send what moved at once: not after the polls (at
        10,000 subscriptions a saturated machine's polls took up to 2.9 s of a round). Before them: a poll
        cannot see batch indexes, and keeps those the feed reported (``_observe``)."""
        self.heavy_publishes = self.subs.still_held(self.heavy_publishes_by)
        fed = self._read_feed(now)  # first: it starts tracking what it names that discovery has not found yet
        if fed:
            by_topic = self.subs.by_topic(existing_only=True, topics=fed)
            for topic, cursors in fed.items():
                self._observe(topic, by_topic[topic], cursors, force=False, now=now, polled=False)
        self._flush_states(now, announce=False)  # the polls' flush announces, where there is nothing to send

    def poll(self, now: Now) -> None:
        """Read the cursors due a poll (every one at its topic's resync, to publish them whole) through the
        admin API, and send what they changed."""
        resync = set()
        period = self.resync_period()
        if self.sends_lost and self.publish_failing_since is None:
            # Sends failed and sending works again: what they carried goes out again soon, not a period on.
            self.sends_lost = False
            self.stats.inc("resyncs_after_lost_sends")
            for ts in self.topics.values():
                ts.resync_at = min(ts.resync_at, now.mono + self.rng.random() * tuning.RESYNC_AFTER_LOSS_S)
        # Only the topics due: sorting out the subscriptions that exist, for every topic, was most of an idle
        # round's polls at 10,000 subscriptions.
        tracked = self.topics
        by_topic = self.subs.by_topic(
            existing_only=True,
            topics=[
                t
                for t in self.subs.by_topic(existing_only=False)
                if (seen := tracked.get(t)) is not None and now.mono >= min(seen.resync_at, seen.poll.next_at)
            ],
        )
        for topic in by_topic:
            ts = self.topics[topic]
            if now.mono >= ts.resync_at:
                resync.add(topic)
                ts.resync_at = now.mono + period
        if resync:
            self.stats.inc("cursor_polls_for_resyncs", len(resync))
        due = list(by_topic)  # each at its resync or its poll's time
        unreachable: list[str] = []
        for topic, internal in zip(due, self.effector.map(self._internal_stats, due), strict=True):
            if isinstance(internal, adm.OwnerUnreachable):
                # Its owner died: this topic waits (the others' polls, claims and writes go on).
                unreachable.append(topic)
                ts = self.topics[topic]
                ts.poll = replace(ts.poll, next_at=now.mono + tuning.STALLED_S)
                if topic in resync:
                    ts.resync_at = now.mono + tuning.STALLED_S
                continue
            if internal is None:
                continue
            self.stats.inc("cursor_polls")
            if self.caps.get(Capability.PLUGIN_FEED) is not True:
                self.stats.inc("cursor_polls_without_feed")
            reloaded = self._reloaded(self.topics[topic], internal)
            cursors = {
                name: AckState.parse(
                    str(raw["markDeletePosition"]), str(raw.get("individuallyDeletedMessages") or "[]")
                )
                for name, raw in (internal.get("cursors") or {}).items()
            }
            states, force = by_topic[topic], topic in resync
            self._observe(topic, states, cursors, force=force, now=now, polled=True, reloaded=reloaded)
        if unreachable:
            self.stats.inc("polls_owner_unreachable", len(unreachable))
            log.warning(
                "the owners of %d topic(s) do not answer (%s...): their cursors are read again in %.0f s",
                len(unreachable),
                unreachable[0],
                tuning.STALLED_S,
            )
        self._flush_states(now)

    def _reloaded(self, ts: TopicState, internal: dict[str, Any]) -> bool:
        """Whether the topic writes to another ledger than at the last poll: it was unloaded and loaded again
        (a bundle moved, a broker restarted) or rolled over. Either way the batch indexes its cursors showed
        are not trusted any more: Pulsar 4.0.8 forgets those of partly acknowledged entries on a reload, and a
        poll cannot see them (a roll-over only costs writing them again)."""
        ledgers = internal.get("ledgers") or []
        try:
            ledger = int(ledgers[-1]["ledgerId"]) if ledgers else None
        except (KeyError, TypeError, ValueError):
            return False
        reloaded = ts.ledger is not None and ledger is not None and ledger != ts.ledger
        ts.ledger = ledger if ledger is not None else ts.ledger
        if reloaded:
            self.stats.inc("topics_reloaded")
        return reloaded

    def _internal_stats(self, topic: str) -> dict[str, Any] | adm.OwnerUnreachable | None:
        try:
            return self.effector.call(calls.InternalStats(topic))
        except adm.AdminNotFound:
            return None
        except adm.OwnerUnreachable as e:
            return e

    def _read_feed(self, now: Now) -> dict[str, dict[str, AckState]]:
        """Cursor states of the subscriptions consumers acknowledged on since the last read, from the broker
        plugin's feed, with partly acknowledged batches (empty where the plugin is absent: polling then does
        all the work). A report naming a topic or subscription discovery has not found yet starts its
        tracking at once (a subscription created with its traffic); discovery is asked for a pass too, for
        what the feed does not tell (consumers, type)."""
        if not self.caps.usable(Capability.PLUGIN_FEED, now=now.mono):
            return {}
        if not self.namespaces:
            # Before discovery's first pass every report would be dropped as out of scope, and the feed
            # names each acknowledgement once: batch indexes acknowledged while the agent was down would
            # then be known to no poll (a poll cannot see them) and never claimed.
            return {}
        try:
            feed = self.effector.call(calls.PluginFeed(self.feed.seq))
        except (adm.AdminNotFound, adm.AdminForbidden) as e:
            if self.caps.get(Capability.PLUGIN_FEED) is not False:
                for ts in self.topics.values():
                    ts.poll = replace(ts.poll, next_at=0.0)  # their polls were paced for a feed
            self.caps = self.caps.learned(Capability.PLUGIN_FEED, False, now=now.mono)
            log.info("no acknowledgement feed from the broker plugin (%s); polling cursors instead", e)
            return {}
        except (adm.AdminError, pluginapi.PluginApiError) as e:
            self.stats.inc("feed_errors")
            self.part_outcome("acknowledgement feed", e, now.mono)
            log.warning("acknowledgement feed failed, polling meanwhile: %s", e)
            return {}
        self.part_outcome("acknowledgement feed", None, now.mono)
        if feed.epoch != self.feed.epoch:
            # The broker (re)started: what was acknowledged before it is only known to a poll, and a
            # cursor that lost its last acknowledgements in a crash moved back without a rewind. Not at the
            # agent's own first read: every topic is polled at its first round already (a second poll of
            # them all, a round later, was most of a restarted agent's rounds at 10,000 subscriptions).
            if self.feed.epoch:
                for ts in self.topics.values():
                    ts.poll = replace(ts.poll, next_at=0.0)
            self.feed.epoch = feed.epoch
            for sub in self.subs.values():
                sub.seen_feed = sub.seen_any = sub.fed = None
        self.caps = self.caps.learned(Capability.PLUGIN_FEED, True, now=now.mono)
        self.feed.seq = feed.seq
        self.stats.inc("feed_reads")
        if feed.cursors:
            self.feed.busy_until = now.mono + pacing.ACTIVE_FEED_S
        for report in feed.cursors:
            if namespace_of(report.topic) in self.namespaces and synced(
                self.config, report.topic, report.subscription
            ):
                self.unobserved.pop((report.topic, report.subscription), None)  # newest last (LRU order)
                self.unobserved[(report.topic, report.subscription)] = report
        while len(self.unobserved) > tuning.MAX_UNOBSERVED:
            del self.unobserved[next(iter(self.unobserved))]
            self.stats.inc("feed_reports_dropped")
        out: dict[str, dict[str, AckState]] = {}
        unknown = False
        for key, report in list(self.unobserved.items()):
            topic, name = key
            if not self.owns(topic):
                del self.unobserved[key]  # moved off this broker: its new owner's agent reads the cursor
                continue
            state = self.subs.get(key)
            if topic not in self.topics or state is None or not state.exists:
                unknown = True
                self.stats.inc("tracked_from_feed")
                state = self._subscription(topic, name)
                state.confirm(now.mono)
            tracked = self._track_topic(topic, now)
            if now.mono < state.publish_after:
                # Its claims are large and their publish is paused: the report (the newest, replacing the one
                # before) waits here until the pause ends, instead of being read, checked for a rewind and
                # translated at every round for a publish that cannot go out yet (what a's agent spent its
                # time on while b was cut off, with tens of thousands of holes kept for good).
                self.stats.inc("feed_reports_deferred")
                continue
            if report.batches and not tracked.tail.has_read(max(b.position for b in report.batches)):
                continue  # the batch sizes are not known yet: the report waits for the tail
            del self.unobserved[key]
            fed: tuple[object, ...] = (
                report.mark_delete,
                report.individually_deleted,
                report.batches,
                report.batches_truncated,
            )
            if report.batches:
                fed += tuple(tracked.tail.size_of(b.position) for b in report.batches)
            if state.fed is not None and state.fed[0] == fed and state.cursor == state.fed[1]:
                # The plugin's repeat within its settle time (at 10,000 subscriptions more than half of what
                # the feed reported): the same cursor read the same way again, and its topic looked at again.
                # Not once a write or a poll has set another cursor since: the report is news against that.
                self.stats.inc("feed_repeats_skipped")
                continue
            if report.batches_truncated:
                self.stats.inc("feed_batches_truncated")
            cursor = reports.cursor_of(report, tracked.tail)  # batch sizes from the tail
            state.fed = (fed, cursor)
            out.setdefault(topic, {})[name] = cursor
        if unknown:
            self._rediscover_soon(now, "rediscover_for_feed")
        return out

    def _rediscover_soon(self, now: Now, counter: str) -> None:
        """Ask the discovery task for a pass now (a topic or subscription appeared with its traffic), at most
        every tuning.REDISCOVER_FOR_FEED_S: what asks may name something discovery never tracks."""
        if now.mono >= self.rediscover_at:
            self.rediscover_at = now.mono + tuning.REDISCOVER_FOR_FEED_S
            self.stats.inc(counter)
            self.rediscover.set()

    def _observe(
        self,
        topic: str,
        states: list[Subscription],
        cursors: dict[str, AckState],
        *,
        force: bool,
        now: Now,
        polled: bool,
        reloaded: bool = False,
    ) -> None:
        """Take ``topic``'s cursors (name -> state) and publish what changed; after a poll, schedule the
        next one. A poll cannot see batch indexes: it keeps the partly acknowledged batches the feed or a
        write last reported above the polled mark-delete (acknowledgements are never taken back), unless the
        topic was ``reloaded`` since: then none are taken as acknowledged, and the claims write them again."""
        changed = False
        moved: list[Subscription] = []
        for state in states:
            cursor = cursors.get(state.name)
            if cursor is None:
                continue
            rewind = (
                None
                if self.snapshots.covers(topic)
                else generations.rewound(
                    state, cursor, source="poll" if polled else "feed", now_mono=now.mono, now_wall=now.wall
                )
            )
            rewound = rewind is not None and self._took_rewind(state, rewind, cursor)
            if (
                polled
                and not rewound  # a rewind cleared the batch indexes acknowledged before it
                and not reloaded  # Pulsar may have forgotten them
                and state.cursor is not None
                and state.cursor.batches
                and cursor.mark_delete >= state.cursor.mark_delete  # not reset backwards by someone
            ):
                cursor = cursor.ack_batches(state.cursor.batches)
            if reloaded:
                state.planned = None  # planned from what the broker may have forgotten: write it again
            if cursor != state.cursor:
                changed = True
                moved.append(state)
                state.cursor = cursor
            # else the same value read again keeps its object: the apply step and the checkpoint tell an
            # unchanged subscription by identity (a poll parses all its topic's cursors anew)
        if any(not s.kind for s in moved):
            # Claims can never be taken back, so learn the subscription type (Key_Shared claims keep
            # per-key order) before the first claim, while the consumer that acknowledged is still there.
            self._learn_kinds(topic, states)
        # A poll publishes every state it read (a resync forces it); the feed the states it moved, and those
        # a write here moved since they were last translated (their claims, and what the tail may forget,
        # follow).
        claims = not self.snapshots.covers(topic)
        moved_ids = {id(s) for s in moved}
        for state in states:
            if (
                polled
                or id(state) in moved_ids
                or (claims and state.cursor is not state.translated and state.cursor != state.translated)
            ):
                self._publish(state, force=force, now=now)
        ts = self.topics[topic]
        floor = forgettable_floor(states, claims=claims)
        if floor is not None:
            ts.tail.forget_up_to(floor)
        if polled:
            ts.poll = pacing.after_poll(
                ts.poll,
                now=now.mono,
                base_s=self.config.poll_interval_s,
                feed=self.caps.get(Capability.PLUGIN_FEED) is True,
                changed=changed,
                pending_move=any(s.pending_move for s in states),
                consumers=any(s.consumers for s in states),
                spread=self.rng.random(),
            )
            paused = [
                s.publish_after for s in states if s.publish_after > now.mono and s.cursor != s.translated
            ]
            if paused:
                # The new schedule replaced the one ``_publish`` set for states acknowledged during a publish
                # pause: the poll that ends the earliest pause publishes them.
                ts.poll = replace(ts.poll, next_at=min(ts.poll.next_at, *paused))

    def _learn_kinds(self, topic: str, states: list[Subscription]) -> None:
        try:
            subs = self.effector.call(calls.TopicStats(topic)).get("subscriptions") or {}
        except (adm.AdminNotFound, adm.OwnerUnreachable):
            return  # learned at a later look
        for state in states:
            state.learn_kind(str((subs.get(state.name) or {}).get("type") or ""))

    def _publish(self, state: Subscription, *, force: bool, now: Now) -> None:
        ts = self.topics.get(state.topic)
        if ts is None or state.cursor is None or state.follow:
            return  # following a rewind: this cursor may acknowledge what the newer claims do not
        tail, cursor = ts.tail, state.cursor
        if tail.stale or self._behind_forgotten(ts, state, cursor):
            return  # the tail is read again first (next round): claims made now could leave entries out
        if not force and now.mono < state.publish_after:
            # Claims too large to translate and send at every acknowledgement: the next due poll brings this
            # cursor back (it still differs from ``translated``), and with it everything acknowledged since.
            ts.poll = replace(ts.poll, next_at=min(ts.poll.next_at, state.publish_after))
            self.stats.inc("publishes_paused")
            return
        if self.snapshots.covers(state.topic):
            update = self.snapshots.on_subscription(
                state.topic, state.name, cursor, tail.positions_above(cursor.mark_delete), tail.last
            )
            if update is not None and self._markers_allowed(now):
                sends = self.snapshots.publishing(state.topic, [(update, None)], now_ms=now.wall_ms)
                self._perform(list(sends), now)
            return
        key_order = None
        if state.key_shared:
            key_order = claiming.KeyOrder(
                tail.positions_above(cursor.mark_delete),
                tail.key_of,
                size_of=tail.size_of,
                key_of_message=tail.key_of_message,
            )
        # The cost is the loop thread's CPU, not the wall time: on a saturated machine a GIL switch alone
        # (5 ms) made any publish or plan look heavy, and the pauses grew with every one counted so.
        started = time.thread_time()
        claim = claiming.decide(
            tail.index,
            cursor,
            received=state.received,
            published=state.published,
            last_translated=state.translated,
            force=force,
            key_order=key_order,
            index_grew=state.incomplete_at is not None and state.incomplete_at != tail.version,
            local=self.config.region,
            claimed_to=state.claimed_to,
        )
        if claim is None:
            return
        if not state.active and claim.news:
            state.active = True  # acknowledged here first (messages, not forms): consumed here
        state.translated = cursor
        state.incomplete_at = None if claim.complete else tail.version
        if not claim.send:
            # Nothing beyond what others told us (typically: our cursor just caught up with their claims).
            state.published, state.claimed_to = claim.claims, claimed_to(cursor, tail)
            return
        namespace = namespace_of(state.topic)
        if namespace not in self.namespaces:
            return
        size = claim_size(claim.claims)
        sent = claim.claims
        if not force and size > tuning.NEWS_FROM_SPANS and state.published is not None:
            # Receivers merge claims and hold the published ones: large claims travel as their news between
            # resyncs (each resync sends them whole, for a receiver that missed some). Sent whole each time,
            # 4 subscriptions of ~30,000 spans wrote 845 MB an hour to a control topic, in entries of ~190 KB
            # that Pulsar 4.0.8's replicator then failed to read 1,000 at a time, for good.
            sent = claim.claims.news_since(state.published)
            self.stats.inc("states_sent_as_news")
        state.publish_took = took = time.thread_time() - started
        note_heavy(self.heavy_publishes_by, state, took)
        state.publish_after = now.mono + publish_pause(size, took=took, heavy=self.heavy_publishes)
        self.outgoing.setdefault(namespace, []).append(
            envelopes.AckStateMessage(state.topic, state.name, self.config.region, sent, state.generation)
        )
        state.published, state.claimed_to = claim.claims, claimed_to(cursor, tail)

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

    def _sealed(self, states: list[envelopes.AckStateMessage], now: Now) -> list[bytes]:
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

    def on_sent(self, ok: bool) -> None:
        # On the client's thread: only count and note the time (single assignments). A lost state goes out
        # again at the next change, or at the resync that follows once sends work again (``observe``).
        if ok:
            self.publish_failing_since = None
        else:
            self.stats.inc("publish_errors")
            self.sends_lost = True
            if self.publish_failing_since is None:
                self.publish_failing_since = time.monotonic()

    # -- 5. apply ----------------------------------------------------------------------------------

    def apply(self, now: Now) -> None:
        self._appended = {}
        plugin_writes = self.caps.usable(Capability.PLUGIN_CURSOR_WRITES, now=now.mono)
        batch_writes = plugin_writes and self.caps.usable(Capability.BATCH_ACKS, now=now.mono)
        work: dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]] = {}
        creates: list[fx.Effect] = []
        heavy = self.subs.still_held(self.heavy_plans)
        for topic, group in list(self.subs.by_topic(existing_only=False).items()):
            # Per topic: whether snapshot mode covers it, and its state (None: not tracked).
            ts = None if self.snapshots.covers(topic) else self.topics.get(topic)
            if ts is not None:
                self._apply_topic(ts, group, work, creates, now, heavy=heavy, batch_writes=batch_writes)
        self._perform(creates, now)
        if work and plugin_writes:
            # plan_apply puts every individual ack above the new mark-delete (a core invariant, tested).
            writes = [
                fx.PluginAck(key, plan.new_mark_delete, plan.individual_acks, plan.batch_acks)
                for key, (_, _, plan) in work.items()
            ]
            # Their outcomes are folded before the next round's observe step (``land_writes``): the loop
            # reads its tails and control topics meanwhile instead of waiting on the broker (at 10,000
            # subscriptions that wait was about a sixth of the applying region's rounds).
            self.writes_in_flight = (self.effector.start_plugin_writes(writes), work)
            return
        self._admin_moves(work, now)

    def _apply_topic(
        self,
        ts: TopicState,
        group: list[Subscription],
        work: dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]],
        creates: list[fx.Effect],
        now: Now,
        *,
        heavy: int,
        batch_writes: bool,
    ) -> None:
        """The apply step for one tracked topic's subscriptions: what to create, and the plans to carry out
        (into ``work``)."""
        tail = ts.tail
        skipped = 0
        # the origins appended above the last end looked at (subscriptions planned together share it)
        seen_end: Position | None = None
        seen_origins: list[Origin] | None = None
        for state in group:
            if not state.announced:
                continue
            # At 10,000 subscriptions most are looked at every round for nothing (every topic grows all the
            # time): first the cheapest test that says so, the claims and the cursor planned from being the
            # very objects held now (what ``applying.only_unclaimed_appended`` finds for these, without
            # building anything). Spelled out here on purpose: calling ``claims_and_log_as_planned`` instead
            # made the walk a third slower (``bench/agent_cpu.py``'s last lines, a: 11.1 -> 15.1 ms).
            planned, cursor, received = state.planned, state.cursor, state.received
            if (
                planned is not None
                and cursor is not None
                and planned[0] is cursor
                and planned[2] is received
                and state.pending_move is None
                and state.exists
            ):
                if planned[1] == tail.version:
                    continue
                end = state.planned_end
                if end is not None and state.planned_rewrites == tail.rewrites:
                    if end is not seen_end:
                        seen_end, seen_origins = end, appended_above(self._appended, tail, end)
                    if seen_origins is not None and not names_any(received, seen_origins):
                        state.planned = (cursor, tail.version, received)
                        state.planned_end = plan_end(tail)
                        skipped += 1
                        continue
            if not state.exists:
                if not state.deleted_here:
                    creates.append(fx.CreateSubscription(state.key))
                continue
            if state.cursor is None:
                state.waiting = "its cursor has not been read here yet"
                continue
            # First: nothing else is looked at for the thousands of subscriptions where nothing changed (the
            # comparison is by identity first: ``_observe`` keeps an unchanged cursor's object).
            basis = (state.cursor, ts.tail.version, state.received)
            if state.planned is not None and state.pending_move is None:
                if basis == state.planned:
                    continue
                if only_unclaimed_appended(state, ts.tail, self._appended):
                    # The same plan again (every topic grows all the time: planning each of its
                    # subscriptions again at every new entry was most of the apply step at 10,000 of them).
                    state.planned = basis
                    state.planned_end = plan_end(ts.tail)
                    self.stats.inc("plans_skipped_for_unclaimed_entries")
                    continue
                if state.planned_nothing and moved_on_from_nothing(state, ts.tail, self._appended):
                    # Consumers here acknowledged, and what others claim was all acknowledged here before:
                    # in the consuming region, every acknowledgement moved a cursor that was planned again.
                    state.planned = basis
                    state.planned_end = plan_end(ts.tail)
                    self.stats.inc("plans_skipped_for_moves_on")
                    continue
            if self._behind_forgotten(ts, state, state.cursor):
                state.waiting = "parked" if state.parked else "the topic is being read again"
                continue
            if state.follow:
                reset = self._follow_rewind(state, ts, now)
                if reset is not None:
                    creates.append(reset)
                if reset is not None or state.follow:
                    state.waiting = "following a rewind made in another region"
                    continue
            if (
                state.planned is not None
                and state.planned[2] is state.received
                and state.pending_move is None
                and now.mono < state.plan_after
                # A copy read after the claim that names it is news as the claim was: planned at once.
                and not claims_name_appended(state, ts.tail, self._appended)
            ):
                continue  # only the log or the cursor moved since a plan that took long: see PLAN_WAIT_FACTOR
            state.planned = basis
            state.planned_end = plan_end(ts.tail)
            state.planned_rewrites = ts.tail.rewrites
            state.waiting = ""
            if not state.received.by_region and not state.received.partials:
                # Nobody claimed anything: nothing to apply, and no need to walk the log (a subscription
                # nobody consumes anywhere would otherwise be planned over its whole backlog every round).
                plan = syncing.ApplyPlan(None, ())
            else:
                started = time.thread_time()  # its CPU, as for publishes (``_publish``)
                plan = syncing.plan_apply(
                    ts.tail.index,
                    state.cursor,
                    remote=state.received,
                    log=ts.tail.stretches_above(state.cursor.mark_delete),
                    size_of=ts.tail.size_of,
                    budget=tailing.LOG_WINDOW,
                )
                self.stats.inc("plans_made")
                state.plan_took = took = time.thread_time() - started
                note_heavy(self.heavy_plans, state, took)
                state.plan_after = now.mono + plan_wait(took, heavy=heavy)
            state.planned_nothing = plan.is_empty and plan.complete and plan.blocked_by is None
            state.unapplied_batches = state.unapplied_batch_messages = 0
            if plan.batch_acks and not batch_writes:
                # Batch indexes cannot be written here (admin API only, or brokers without batch-index
                # acknowledgements): those messages stay unacknowledged, counted (a failover here delivers
                # them again), not retried every round.
                state.unapplied_batches = len(plan.batch_acks)
                state.unapplied_batch_messages = sum(
                    len(acks.indexes()) - len(state.cursor.acked_indexes(p, acks.size).indexes())
                    for p, acks in plan.batch_acks
                )
                plan = replace(plan, batch_acks=())
            if plan.is_empty:
                state.pending_holes = 0
                state.pending_move = None
                state.behind_since = None
                continue
            if state.behind_since is None:
                state.behind_since = now.wall
            work[state.key] = (state, ts, plan)
        if skipped:
            self.stats.inc("plans_skipped_for_unclaimed_entries", skipped)

    def land_writes(self, now: Now) -> None:
        """Fold the outcomes of the cursor writes the last apply step sent (waiting for them if need be), and
        move through the admin API the subscriptions the plugin could not write. Before ``observe``: a cursor
        a write answered must not be taken after a newer one the feed reported."""
        if self.writes_in_flight is None:
            return
        outcomes_of, work = self.writes_in_flight
        self.writes_in_flight = None
        try:
            outcomes = outcomes_of()
        except BaseException:
            for state, _, _ in work.values():
                state.planned = None  # not known written: planned again
            raise
        tried = self.caps.get(Capability.PLUGIN_CURSOR_WRITES) is not None
        for outcome in outcomes:
            self._fold(outcome, now)
            if isinstance(outcome, fx.CursorWritten) and outcome.key in work:
                state, _, plan = work[outcome.key]
                if applying.settle_plan(state, plan):
                    self.stats.inc("plans_settled_by_writes")
        handled = {
            o.key
            for o in outcomes
            if isinstance(o, fx.CursorWritten) or (isinstance(o, fx.NotWritten) and not o.fallback)
        }
        handled |= self._moved_away(outcomes, now)
        rest = {k: v for k, v in work.items() if k not in handled}
        if rest and not tried and self.caps.get(Capability.PLUGIN_CURSOR_WRITES) is False:
            # The plugin's first writes found no plugin: they were planned from cursors claims did not
            # have read again (``_take_claims``: plugin writes answer the cursor), so they are read now,
            # in this round's polls, and planned again for the admin API.
            for state, ts, _ in rest.values():
                state.planned = None
                ts.poll = replace(ts.poll, next_at=0.0)
            return
        self._admin_moves(rest, now)

    def _admin_moves(
        self, work: dict[SubKey, tuple[Subscription, TopicState, syncing.ApplyPlan]], now: Now
    ) -> None:
        moves: list[fx.Effect] = []
        skip_by_ids = self.caps.usable(Capability.SKIP_BY_IDS, now=now.mono)
        for state, ts, plan in work.values():
            move = applying.admin_move(
                state,
                plan,
                partition=ts.tail.partition,
                region=self.config.region,
                now=now.mono,
                min_interval_s=self.config.min_apply_interval_s,
                skip_by_ids=skip_by_ids,
            )
            if move is not None:
                moves.append(move)
        self._perform(moves, now)

    def _moved_away(self, outcomes: list[fx.Outcome], now: Now) -> set[SubKey]:
        """Sidecar mode: the writes the broker refused as ``not_loaded`` whose topic it no longer owns (asked
        again at once; those topics are handed off). The others fall back to the admin API, which loads an
        idle topic on its owner, this broker."""
        if self.ownership is None:
            return set()
        refused = {
            o.key
            for o in outcomes
            if isinstance(o, fx.NotWritten) and o.fallback and o.reason == pluginapi.Status.NOT_LOADED.value
        }
        if not refused:
            return set()
        self.ownership.refresh_now()
        self.own(now)
        return {key for key in refused if key[0] not in self.topics}

    def _follow_rewind(self, state: Subscription, ts: TopicState, now: Now) -> fx.ResetCursor | None:
        """The rewind that makes ``state``'s cursor acknowledge no more than its newer claims: back to the end
        of the longest prefix of the log they acknowledge (the claims' holes above it are applied after, as
        always). None when no rewind is needed (``follow`` cleared) or the tail has not read as far as the
        cursor acknowledged yet (``follow`` kept)."""
        assert state.cursor is not None
        if self._behind_forgotten(ts, state, AckState.of(BEFORE_ALL)):
            return None  # the new claims may unacknowledge entries the tail forgot: it reads them again first
        tail = ts.tail
        if tail.last is None or tail.last < state.cursor.reach:
            return None
        state.follow = False
        own = syncing.to_origin_acks(tail.index, state.cursor)
        if not isinstance(own, syncing.Translation) or own.acks.merge(state.received) == state.received:
            return None
        plan = syncing.plan_apply(
            tail.index,
            AckState.of(BEFORE_ALL),
            remote=state.received,
            log=tail.positions_above(BEFORE_ALL),
            size_of=tail.size_of,
        )
        return fx.ResetCursor(state.key, plan.new_mark_delete)

    # -- effects: carried out by the effector, folded back here ---------------------------------------

    def _perform(self, effects: list[fx.Effect], now: Now) -> list[fx.Outcome]:
        if not effects:
            return []
        for effect in effects:
            if isinstance(effect, fx.Publish):
                self.stats.inc(effect.counter)
        outcomes = self.effector.perform(effects)
        for outcome in outcomes:
            self._fold(outcome, now)
        return outcomes

    def _fold(self, outcome: fx.Outcome, now: Now) -> None:
        if isinstance(outcome, fx.Learned):
            self.caps = self.caps.learned(outcome.capability, outcome.value, now=now.mono)
            return
        if isinstance(outcome, fx.Unloaded):
            if outcome.error:
                self.stats.inc("replicator_unload_errors")
                log.warning("could not unload %s (tried again later): %s", outcome.topic, outcome.error)
            else:
                self.stats.inc("replicator_unloads")
            return
        state = self.subs.get(outcome.key)
        if state is None:
            return
        if isinstance(outcome, fx.CursorWritten):
            report = outcome.cursor
            if report.batches_truncated:
                self.stats.inc("feed_batches_truncated")
            ts = self.topics.get(report.topic)
            cursor = state.cursor = reports.cursor_of(report, None if ts is None else ts.tail)
            if not self.snapshots.covers(state.topic):
                # A write never moves the mark-delete back: below what was seen, someone rewound it.
                rewind = generations.rewound(
                    state, cursor, source="write", now_mono=now.mono, now_wall=now.wall
                )
                if rewind is not None:
                    self._took_rewind(state, rewind, cursor)
            state.pending_move = None
            state.pending_holes = 0
            state.last_applied_at = now.wall
            self.stats.inc("plugin_acks")
            self.stats.inc("mark_delete_moves", int(outcome.moved))
            self.stats.inc("holes_acked", outcome.holes)
            self.stats.inc("batch_indexes_acked", outcome.batch_indexes)
        elif isinstance(outcome, fx.NotWritten):
            if not outcome.fallback:
                self.stats.inc("apply_errors")
                state.planned = None  # plan again next round
        elif isinstance(outcome, fx.Created):
            if outcome.created:
                self.stats.inc("subscriptions_created")
                log.info("created subscription %s on %s at the earliest message", state.name, state.topic)
                state.cursor = None
            if not outcome.topic_missing:  # else the topic does not exist here yet; replication creates it
                state.confirm(now.mono)
                self.created.add(state.key)
                self.rediscover.set()
                self._poll_soon(state.topic)
        elif isinstance(outcome, fx.AdminMoved):
            self._fold_admin_move(state, outcome, now)
        elif isinstance(outcome, fx.CursorReset):
            self._fold_reset(state, outcome, now)

    def _fold_reset(self, state: Subscription, outcome: fx.CursorReset, now: Now) -> None:
        if outcome.error:
            self.stats.inc("apply_errors")
            state.follow = True  # try again next round
            return
        self.stats.inc("cursors_rewound")
        log.info(
            "rewound %s on %s to %s, as another region did", state.name, state.topic, outcome.mark_delete
        )
        state.reset_to = (outcome.mark_delete, now.mono + tuning.REWIND_SETTLE_S)
        state.cursor = state.seen_feed = state.seen_any = None  # read it again before planning
        # A feed report still waiting for the tail shows the cursor from before: taken later, it would have
        # this region claim again, under the new generation, what the rewind took back.
        self.unobserved.pop(state.key, None)
        state.planned = state.pending_move = None
        state.last_applied_at = now.wall
        ts = self.topics.get(state.topic)
        if ts is not None:
            ts.poll = replace(ts.poll, next_at=0.0)

    def _fold_admin_move(self, state: Subscription, outcome: fx.AdminMoved, now: Now) -> None:
        if outcome.error:
            self.stats.inc("apply_errors")
            log.warning("applying failed, will retry: %s", outcome.error)
            state.planned = None
            return
        state.consumers = outcome.consumers
        if outcome.busy:
            self.stats.inc("expire_busy")
        if outcome.moved_to is not None:
            self.stats.inc(outcome.counter)
            state.last_applied_at = now.wall
            if not self.snapshots.covers(state.topic):
                state.pending_move = pacing.PendingMove(outcome.moved_to, now.mono)
        state.pending_holes = outcome.held_back
        if outcome.holes_acked:
            self.stats.inc("holes_acked", outcome.holes_acked)
            state.last_applied_at = now.wall

    # -- introspection -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What /state shows (``reporting.status``)."""
        return reporting.status(self)
