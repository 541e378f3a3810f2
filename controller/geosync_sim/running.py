"""Runs a schedule: the world, the applications, the checker and one real ``Agent`` per region, on virtual
time.

Why here and not in the agent's shell: the shell reads clocks and starts threads (``supervising``); this loop
does what the shell does, deterministically (the agents themselves are built by ``harness``): it runs a
discovery pass every ``DISCOVER_S`` (or when the agent asks for one), a round every ``ROUND_S`` with ``Now``
set from virtual time (without meters: no work costs CPU or time, so no plan or publish is ever heavy; the
agent's parts read no clock of their own), delivers readers' messages between rounds, performs effects inline
(the ``Effector`` tells sends' outcomes at virtual time), and takes the agent's checkpoint every
``CHECKPOINT_S`` as its checkpoint task would. An agent crash drops the agent (no graceful close) and closes
its readers; the restart builds a new one, restored from the last checkpoint or not. Every agent has its
region's incarnation, as one configured with the region's ZooKeeper has (``geosync_agent.incarnating``):
created when the region's life began, a new one after a rebuild, whose agent starts with no checkpoint (it was
kept in the wiped region).
"""

from __future__ import annotations

import hashlib
import math
import random
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from geosync_agent import checkpointing
from geosync_agent.runtime import ROUND_ERRORS, Now
from geosync_core.incarnations import Incarnation
from geosync_sim import enacting, harness
from geosync_sim.apps import Apps
from geosync_sim.checking import LIMITS, Checker, Violation
from geosync_sim.harness import MONO0, NAMESPACE, AgentHook, Life, keys_for
from geosync_sim.logs import Cursor
from geosync_sim.schedules import Schedule, Step, partitions_of
from geosync_sim.world import WALL0, Ident, Msg, World

TICK_S = 0.05
ROUND_S = 0.25
APP_S = 0.2
DISCOVER_S = 5.0
CHECKPOINT_S = 10.0
TAIL_S = 20.0
"""Quiet seconds after the schedule's end: traffic stops, consumers keep consuming, agents keep syncing."""


@dataclass
class Result:
    schedule: Schedule
    violations: list[Violation]
    duplicates: dict[str, int]
    failovers: int
    acks: int
    deliveries: int
    rounds: int
    cpu_s: float
    wall_s: float
    trace: list[str] = field(default_factory=list)
    digest: str = ""

    @property
    def failed(self) -> bool:
        """A violation other than a mode's documented limit (``checking.LIMITS``)."""
        return any(v.kind not in LIMITS for v in self.violations)

    def limits(self) -> dict[str, int]:
        """How often each documented limit was reached."""
        return dict(Counter(v.kind for v in self.violations if v.kind in LIMITS))

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}


class Simulation:
    def __init__(self, schedule: Schedule, *, trace: bool = False, hook: AgentHook | None = None) -> None:
        self.schedule = schedule
        self.tracing = trace
        self.hook = hook
        self.lines: list[str] = []
        self.digest = hashlib.sha256()
        self.rng = random.Random(schedule.seed)
        self.world = World(self.rng, list(schedule.regions), namespace=NAMESPACE)
        self.world.trace = self.trace
        self.checker = Checker(
            settle_s=schedule.settle_s, cursor_has=self._cursor_has, index_only=self._index_only
        )
        self.world.on_acked = self._on_acked
        self.world.on_rewind = self.checker.rewind
        self.world.on_created = self.checker.created
        self.world.on_topic_deleted = self._topic_deleted
        self.apps = Apps(
            self.world, random.Random(schedule.seed * 7919 + 1), on_delivered=self.checker.delivered
        )
        self.parts = [
            partitions_of(f"persistent://{NAMESPACE}/t{i}", schedule, i) for i in range(schedule.topics)
        ]
        """Each topic's partitions (``...-partition-N``, as the brokers list them), or the topic alone."""
        self.topics = [names[0] for names in self.parts]
        refusing = schedule.refusing or ("",) * len(schedule.regions)
        for region, has, refused in zip(schedule.regions, schedule.plugin, refusing, strict=True):
            self.world.regions[region].plugin, self.world.regions[region].refusing = has, refused
            if not has or refused:  # cursor writes through the admin API (and polls, if it refuses all)
                self.checker.no_plugin.add(region)
            if not has or refused == "all":  # cursors polled through the admin API: no batch indexes
                self.checker.polled.add(region)
            if not has or refused == "all" or schedule.claims_from != "acknowledgements":
                self.checker.cursor_claims.add(region)  # no acknowledgement feed read there
        for i, names in enumerate(self.parts):
            start = schedule.start[i] if schedule.start else schedule.regions[0]
            for topic in names:  # a partitioned topic's consumer has a consumer per partition
                self.world.add_topic(topic)
                self.apps.add(topic, "sub", schedule.kinds[i], start)
        self.keys = keys_for(schedule.regions)
        self.lives: dict[str, Life | None] = {}
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.journals: dict[str, checkpointing.Journal] = {}
        """Each region's agent's journal of acknowledgements since its checkpoint: on its disk, beside it."""
        self.restarts: list[tuple[float, str, bool]] = []
        self.rebuilds: list[tuple[float, str, list[str]]] = []
        """(when, region, topics whose consumers were connected there): wiped regions coming back."""
        self.takeovers: list[tuple[float, str, list[str]]] = []
        """(when, region, topics whose consumers were connected there): killed brokers' topics taken over."""
        self.producers_at: dict[str, float] = {}
        """When a rebuilt region's producers start again."""
        self.dup_until = 0.0
        self.failovers = 0
        self.rounds = 0
        self.seq = 0
        for n, region in enumerate(schedule.regions):
            self.lives[region] = self.start(
                region, 0.0, restore=False, phase=n * ROUND_S / len(schedule.regions)
            )

    # -- helpers ------------------------------------------------------------------------------------

    def trace(self, line: str) -> None:
        text = f"{self.world.now:8.2f}s {line}"
        self.digest.update(text.encode())
        if self.tracing:
            self.lines.append(text)

    def _cursor_has(self, region: str, topic: str, sub: str, ident: Ident) -> bool:
        found = self._entry_of(region, topic, sub, ident)
        return found is not None and found[0].has(found[1], ident[3])

    def _index_only(self, region: str, topic: str, sub: str, ident: Ident) -> bool:
        """Whether the region's cursor holds ``ident`` as an index of a batch it holds only in part."""
        found = self._entry_of(region, topic, sub, ident)
        if found is None:
            return False
        cursor, eid = found
        return not cursor.entry_done(eid) and ident[3] in cursor.partial.get(eid, ())

    def _entry_of(self, region: str, topic: str, sub: str, ident: Ident) -> tuple[Cursor, int] | None:
        """The region's cursor of the subscription and the id of ``ident``'s entry in its log, if both
        exist."""
        r = self.world.regions[region]
        s = r.subs.get((topic, sub))
        t = r.topics.get(topic)
        if s is None or t is None:
            return None
        for e in t.entries:  # small topics: a scan is cheap enough for a check
            if e.ident(0)[:3] == ident[:3]:
                return s.cursor, e.eid
        return None

    def _topic_deleted(self, region: str, topic: str, pending: dict[str, list[Ident]]) -> None:
        """What consumers acknowledged since the region's agent last read its plugin's feed goes with the
        topic's cursor: the checker knows why those messages are delivered again. Not where the agent polls
        (no feed there: what is pending is never read, and when it last polled is not recorded)."""
        if region in self.checker.polled:
            return
        for sub, idents in pending.items():
            self.checker.deleted_unread(region, topic, sub, idents)

    def _on_acked(
        self, at: float, region: str, topic: str, sub: str, *, idents: list[Ident], cause: str
    ) -> None:
        if cause != "consumer":
            self.trace(f"{region}: {topic.rsplit('/', 1)[-1]}/{sub} +{len(idents)} by {cause}")
        self.checker.acked(at, region, topic, sub, idents=idents, cause=cause)

    def now(self, t: float) -> Now:
        return Now(MONO0 + t, WALL0 + t)

    def _step(self, step: Step) -> None:
        """Carry out ``step`` (``enacting``; a subclass adds steps of its own: ``policies``)."""
        enacting.enact(self, step)

    def start(self, region: str, t: float, *, restore: bool, phase: float) -> Life:
        """A new agent for ``region`` at virtual time ``t`` (``harness.start``), restored from its last
        checkpoint if ``restore`` and there is one."""
        now = self.now(t)
        restored = restore and region in self.checkpoints
        if not restored:
            self.journals[region] = checkpointing.Journal()  # a lost checkpoint: its journal went with it
        life = harness.start(
            self.world,
            region,
            now,
            claims_from=self.schedule.claims_from,
            keys=self.keys[region],
            journal=self.journals[region],
            first_seq=int(now.wall * 1_000_000) + self.seq,
            rng=random.Random(self.rng.random()),
            incarnation=self.incarnation(region),
            checkpoint=self.checkpoints[region] if restored else None,
            at=t,
            phase=phase,
        )
        self.seq += 1
        if self.hook is not None:
            self.hook(life)
        return life

    def incarnation(self, region: str) -> Incarnation:
        """The region's incarnation as its ZooKeeper holds it: created when its current life began."""
        r = self.world.regions[region]
        return Incarnation(int((WALL0 + r.born) * 1000), f"sim-{region}-{r.life}")

    def _discover(self, life: Life, t: float) -> None:
        if harness.discover(life, MONO0 + t):
            life.next_discovery = t + DISCOVER_S

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> Result:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        self.pending_connects: list[tuple[float, Any, str]] = []
        steps = list(self.schedule.steps)
        k = 0
        end = self.schedule.duration + TAIL_S
        t = 0.0
        next_app = 0.0
        original_publish = self.world.publish

        def publish(
            region: str, topic: str, msgs: tuple[Msg, ...], *, batched: bool, data: bytes = b""
        ) -> Any:
            entry = original_publish(region, topic, msgs, batched=batched, data=data)
            if entry is not None and data and self.world.now < self.dup_until:
                for dst in self.world.regions:
                    if dst != region:
                        self.world._replicate(region, dst, topic, entry, extra=0.5)
            return entry

        self.world.publish = publish  # type: ignore[method-assign]
        while t <= end:
            self.world.advance(t)
            while k < len(steps) and steps[k].at <= t:
                self._step(steps[k])
                k += 1
            due_now = [c for c in self.pending_connects if c[0] <= t and not self.world.regions[c[2]].down(t)]
            for due, app, to in due_now:
                self.pending_connects.remove((due, app, to))
                self.apps.connect(app, to)
                self.failovers += 1
                self.checker.failover(t, app.topic, app.sub)
                self.trace(f"{to}: {app.topic.rsplit('/', 1)[-1]} consumers connected")
            for due, region, topics in [x for x in self.rebuilds if x[0] <= t]:
                self.rebuilds.remove((due, region, topics))
                enacting.rebuilt(self, region, t, topics)
            for due, region, topics in [x for x in self.takeovers if x[0] <= t]:
                self.takeovers.remove((due, region, topics))
                enacting.take_over(self, region, t, topics)
            for due, region, checkpointed in [x for x in self.restarts if x[0] <= t]:
                self.restarts.remove((due, region, checkpointed))
                n = list(self.schedule.regions).index(region)
                self.lives[region] = self.start(region, t, restore=checkpointed, phase=n * 0.01)
                self.trace(f"{region}: agent restarted {'from its checkpoint' if checkpointed else 'empty'}")
            self.world.pump_readers()
            if t >= next_app:
                for app in self.apps.apps.values():
                    self.apps.tick(app, receive=8 if t < self.schedule.duration else 50, ack_p=0.35)
                next_app = t + APP_S
            for region, life in self.lives.items():
                if life is None:
                    continue
                if t >= life.next_discovery or life.agent.rediscover.is_set():
                    self._discover(life, t)
                if t >= life.next_round:
                    self._round(region, life, t)
            t = round(t + TICK_S, 6)
        self.checker.finish()
        return Result(
            schedule=self.schedule,
            violations=list(self.checker.violations),
            duplicates=dict(self.checker.duplicates),
            failovers=self.failovers,
            acks=self.apps.acks,
            deliveries=self.checker.deliveries,
            rounds=self.rounds,
            cpu_s=time.process_time() - cpu0,
            wall_s=time.perf_counter() - wall0,
            trace=self.lines,
            digest=self.digest.hexdigest()[:16],
        )

    def _round(self, region: str, life: Life, t: float) -> None:
        life.next_round = t + ROUND_S
        self.rounds += 1
        try:
            life.agent.round(self.now(t))
        except ROUND_ERRORS as e:
            self.trace(f"{region}: round failed: {e}")
        except Exception as e:  # the agent raised what a real round would crash on: a finding in itself
            self.checker.error(t, region, f"{type(e).__name__}: {e}")
            self.trace(f"{region}: agent error {traceback.format_exc(limit=3)}")
        asked = life.agent.checkpoint_at <= MONO0 + t
        if asked or int(t / CHECKPOINT_S) != int((t - ROUND_S) / CHECKPOINT_S):
            self.checkpoints[region] = life.agent.checkpoint()
            life.agent.checkpoint_at = math.inf


def run(schedule: Schedule, *, trace: bool = False, hook: AgentHook | None = None) -> Result:
    return Simulation(schedule, trace=trace, hook=hook).run()


__all__ = ["AgentHook", "Life", "Result", "Simulation", "partitions_of", "run"]
