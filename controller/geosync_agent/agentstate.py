"""The agent's state, shared by its parts: what one region's agent knows between rounds.

``AgentState`` declares every attribute the parts read and write (with what each holds), a tracked topic
partition (``TopicState``) and the counters (``Stats``); the time a round read (``Now``) is the core's value
(``core.now``), named here too. The parts, one module each, extend it in a chain, each calling only the ones
below it:

    AgentState <- tracking.Tracking <- indexing.Indexing <- controlling.Controlling <- feeding.Feeding
               <- observing.Observing <- folding.Folding <- runtime.Agent

Checkpoints are taken and restored by functions over the state (``saving``), not by a part of the chain.

Three seams go the other way and are declared here: ``_perform`` (carry out effects and fold their outcomes,
``folding``), ``_carry_out`` (do what a step of the core asked, ``folding``) and ``_publish`` (have a
subscription's claim decided, ``observing``).

Only the loop's thread reads or writes this state (see ``runtime``). The decisions that need no I/O are in
``geosync_agent.core``; moving the rest there is the plan of ``docs/decisions/0001-sans-io-agent.md``.

This module and the parts read no clock, draw no random number and start no thread (an import-linter
contract and ``tests/agent/test_shell_only.py`` keep them so): the time comes with each round's ``Now``, the
cost of work from its meters, the random draws from ``rng``, all given by the shell (``runtime.read_now``,
``supervising``), so the simulator runs them as they are (``docs/simulation.md``).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from geosync_agent import (
    checkpointing,
    lookups,
    owning,
    reading,
    snapshotting,
)
from geosync_agent import effects as fx
from geosync_agent.allocator import Allocator
from geosync_agent.collector import Collections
from geosync_agent.config import AgentConfig
from geosync_agent.core import acknowledged, naming, planning, quiet, stepping, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import (
    Feed,
    SubKey,
    Subscription,
    SubsTable,
)
from geosync_agent.discovering import Discovered, Latest
from geosync_agent.ports import Messaging
from geosync_agent.recent import CallTimes, PhaseTimes, Recent, Timeline
from geosync_agent.tailing import Tail
from geosync_core import ackstates, envelopes, pacing, pluginapi, replicators
from geosync_core.capabilities import Capabilities, Capability
from geosync_core.incarnations import Incarnation, Known
from geosync_core.origins import OriginAcks
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")
__all__ = ["AgentState", "Draws", "Now", "Stats", "TopicState"]


class Draws(Protocol):
    """The random draws the agent makes (pacing phases, snapshot ids): ``random.Random`` from the composition
    root, a seeded one in the simulator."""

    def random(self) -> float: ...

    def getrandbits(self, k: int, /) -> int: ...


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
    walked: quiet.Walked | None = None
    """The apply step's last look at its subscriptions (``core.quiet``; None: look at every one)."""
    unpublished: dict[str, None] = field(default_factory=dict)
    """Subscriptions whose cursor the observe step's last look found not decided and could not decide yet
    (their tail read again, a publish pause, a rewind followed): looked at again at the next look."""
    floor_at: float = 0.0
    """Monotonic time from which the feed's next look asks again up to where the tail may forget
    (``tuning.FLOOR_EVERY_S``)."""


@dataclass
class Stats:
    """Counters the metrics endpoint and the benchmarks read (incremented from the client's threads too)."""

    counters: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counters[name] += n


class AgentState:
    """The state of one region's agent, shared by its parts (see the module docstring)."""

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
        rng: Draws,
        started_ms: int = 0,
        allocator: Allocator | None = None,
        collections: Collections | None = None,
        incarnation: Incarnation | None = None,
        broker_calls: CallTimes | None = None,
        checkpoint_writer: checkpointing.Writer | None = None,
        journal: checkpointing.Journal | None = None,
    ) -> None:
        self.config = config
        self.incarnation = incarnation
        """This region's incarnation (``geosync_core.incarnations``; None: no ZooKeeper, no guard)."""
        self.incarnations = Known({config.region: incarnation} if incarnation else {})
        """The newest incarnation known of each region (this one's own included), each from its own region."""
        self.waiting: dict[tuple[str, Incarnation], deque[ackstates.AckStateMessage]] = {}
        """Claims about a life of a region the region has not announced here yet (``core.incarnating``)."""
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
        self.rng = rng
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
        """What the brokers recorded of entries' origins: the lookups the index step makes for the core."""
        self.naming = naming.Namer(config.region)
        """The resolver the index step names entries with (``core.naming``), and what it was told."""
        self.resolver = self.naming.resolver
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
            new_id=lambda: f"{self.rng.getrandbits(128):032x}",
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
        self.replicators = replicators.Watch()  # Pulsar's replicators out of this region (discovery's stats)
        self.stalled: list[tuple[replicators.Stall, float]] = []  # and how long each was stalled, last pass
        self.unsticking = replicators.Unsticking(after_s=config.replicator_unload_after_s)
        self.unretained: tuple[str, ...] = ()  # synced namespaces without retention (discovering.retains)
        self.claimed_untracked: dict[str, tuple[float, float]] = {}
        """Topics claims named that are not tracked here yet -> (next lookup, give up after), monotonic."""
        self.outgoing: dict[str, list[ackstates.AckStateMessage]] = {}
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
                planning.Work,
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
        self.started_ms = started_ms
        """Wall milliseconds the agent started at (the composition root's clock; 0: any time): control
        messages sent before are history read again, and their transit times are not counted."""
        self.checkpoint_path = checkpointing.path_in(config.state_dir) if config.state_dir else None
        self.checkpoint_at = 0.0
        self.checkpoint_info: dict[str, Any] = {}
        self.checkpoint_writer = checkpoint_writer or checkpointing.Writer()
        if journal is None:
            path = self.checkpoint_path
            journal = checkpointing.Journal(path.parent) if path else checkpointing.Journal(keep=False)
        self.journal = journal
        """What consumers acknowledged since the last checkpoint (``checkpointing.Journal``): appended before
        the next feed read confirms it, taken up by ``restore``."""
        """Writes the checkpoints rounds take: the composition root's ``checkpoint-writer`` task runs it;
        where none does (the unit tests' harness), ``drain`` does the waiting write."""
        self.checkpoint_taken_s = 0.0
        """Seconds the last checkpoint took the loop (taking the state; the writing is the writer's)."""
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
        self.queued_ms = Recent()
        """Recent control messages' time from the reader's hand-over to the loop taking them (of their
        transit, what waited on the loop: a long round), for /state."""
        self.step_until = math.inf
        """Until when (seconds into the round, ``Now.since``) the step running may work (``over_budget``):
        set by the loop for each step (``tuning.STEP_BUDGET_S``), no limit outside its steps."""
        self.index_from: str | None = None
        """The topic the index step begins at: the first one its last turn did not reach (None: the first)."""
        self.receive_from: str | None = None
        """The control topic the receive step begins at: the one its last turn stopped in (None: the
        first)."""
        self.feed_left: dict[str, dict[str, tuple[AckState, AckState | None, bool]]] = {}
        """What the feed step read and did not get to look at within its budget, per topic and subscription:
        the cursor reported (or held, for acknowledgements alone), the subscription's cursor when it was read
        (a write setting another since makes the report old news), and whether it is a held look
        (``Feed.held_looks``). Looked at first by the next feed step; those topics' polls wait for it."""
        self.polls_left: list[str] = []
        """Topics due a poll that the last poll step did not get to within its budget: polled first next."""
        self.ownership = (
            owning.Ownership(
                config.region,
                config.admin_url,
                configured=config.broker_id,
                refresh_s=config.ownership_refresh_s,
            )
            if config.shard_by_ownership
            else None
        )
        """Sidecar mode: what this agent's broker owns (None: the agent syncs its whole region)."""
        self.lookups: set[str] = set()
        """Sidecar mode: claimed topics this broker does not own, to look up (a bundle nobody owns)."""

    def _learn(self, capability: Capability, value: bool, now_mono: float) -> None:
        """``capability`` was found (not) to be there at ``now_mono``."""
        self.caps = self.caps.learned(capability, value, now=now_mono)

    def over_budget(self, now: Now) -> bool:
        """Whether the step running has used its time (``step_until``): it then leaves the rest for its next
        turn, resumed where it stopped. Never where the round's time stands still (``Now`` without a clock:
        the unit tests' default, the simulator), so there every step does all its work."""
        return now.since() >= self.step_until

    def part_outcome(self, part: str, error: object | None, now_mono: float) -> None:
        """Record a success (``error`` None) or failure of ``part`` for the readiness probe."""
        if error is None:
            self.parts_failing.pop(part, None)
        else:
            since = self.parts_failing.get(part, (now_mono, ""))[0]
            self.parts_failing[part] = (since, str(error)[:200])

    def _reject(self, rejected: envelopes.Rejected) -> None:
        self.stats.inc(f"control_rejected_{rejected.reason.value}")
        log.warning("control message rejected: %s", rejected.reason.value)

    def _rediscover_soon(self, now: Now, counter: str) -> None:
        """Ask the discovery task for a pass now (a topic or subscription appeared with its traffic), at most
        every tuning.REDISCOVER_FOR_FEED_S: what asks may name something discovery never tracks."""
        if now.mono >= self.rediscover_at:
            self.rediscover_at = now.mono + tuning.REDISCOVER_FOR_FEED_S
            self.stats.inc(counter)
            self.rediscover.set()

    def judges_rewinds(self, source: str, now: Now) -> bool:
        """Whether a cursor seen going back by ``source`` ("feed", "poll", "write") may be judged a rewind
        now (``core.generations.rewound``). A broker that restarts before it persisted a cursor shows it
        without its last acknowledgements: that is no rewind, and the feed's new epoch says so. So where the
        feed is read, a poll or write is judged only in a round whose feed read answered (before the polls,
        telling a restart first); the feed's own reports always are. Without the feed (the admin-API path),
        always: nothing tells a restart apart there (docs/limits.md)."""
        if source == "feed" or not self.caps.usable(Capability.PLUGIN_FEED, now=now.mono):
            return True
        return self.feed.read_at == now.mono

    def claims_acknowledgements(self) -> bool:
        """Whether claims are made of what consumers acknowledged (``claims_from: acknowledgements`` and a
        feed that reports it, decision 0015) rather than of the cursor."""
        return self.feed.acked and self.config.claims_from == acknowledged.ACKNOWLEDGEMENTS

    def claims_known(self) -> bool:
        """Whether it is known what this region's claims are made of: the setting says the cursor, or the
        feed answered (with ``acked`` or without: an older plugin), or the plugin is known absent. Before that
        (an agent's first rounds, a broker that does not answer) a newer generation's rewind is not carried
        out here: with claims made of what consumers acknowledged it never is (decision 0015), and an
        agent back from a restart that took one in its first second had rewound its cursor (lab chaos seed
        93910)."""
        return (
            self.config.claims_from != acknowledged.ACKNOWLEDGEMENTS
            or self.feed.acked
            or self.feed.read_at >= 0
            or self.caps.get(Capability.PLUGIN_FEED) is False
        )

    # -- seams: defined by a later part, called by earlier ones ------------------------------------

    def _perform(self, effects: list[fx.Effect], now: Now) -> list[fx.Outcome]:
        """Carry out ``effects`` and fold their outcomes back (``folding.Folding``)."""
        raise NotImplementedError

    def _carry_out(self, stepped: stepping.Stepped, now: Now) -> None:
        """Do what a step of the core asked (``folding.Folding``)."""
        raise NotImplementedError

    def _publish(self, state: Subscription, *, force: bool, now: Now) -> bool:
        """Decide ``state``'s claim and queue it if it changed; False: not yet (``observing.Observing``)."""
        raise NotImplementedError
