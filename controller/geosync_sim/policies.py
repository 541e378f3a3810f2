"""The policy mirror in the simulation: each region's real mirror term (``geosync_agent.core.mirroring``) run
over that region's simulated metadata store and event topic (``geosync_sim.policystores``), on virtual time.

Why the term and not ``geosync_agent.mirroring.Mirror``: the mirror's shell is a ZooKeeper session, a Pulsar
client and a thread; everything it decides is in the term, which takes events and returns effects. ``Shell``
here does what ``mirrorapplying`` does in production, deterministically: each effect carried out on the
region's store (compare-and-set, watches told), its topic copy (publish, read, drain) or its topics
(``ListContents``), each answer fed back at once; watches and envelopes are fed every ``TICK``, a ``Tick``
after them. A ``mirror-down`` step ends the region's term with no goodbye (what it did not checkpoint is lost)
and starts a new one from the last checkpoint later.

Step kinds (``policy`` steps of a schedule, ``args`` = (operation, region, namespace, argument)):

* ``tenant``: the tenant is created in the region (every region allowed);
* ``create``: a namespace, its clusters the argument (replication, allowed), if the region has the tenant;
  allowed clusters keep every region whose store still holds the namespace naming itself (as ``geoctl``
  checks every region first: a document re-creating a namespace without a region that still holds it is
  taken away there: the mirror holds it like the deletion, until the region has drained);
* ``recreate``: the same, through one region's admin API only (no check of the others);
* ``edit``: its ``message_ttl_in_seconds`` set to the argument;
* ``clusters``: its replication and allowed clusters set (the argument); an operator leaves a region out only
  in that region (elsewhere PIP-321's ``allowed_clusters`` change that removes a region is refused by the
  mirror, by design: ``allowedclusters.reject_event_regions``), so others keep it;
* ``delete``: the namespace deleted, refused while the region holds topics in it;
* ``topic+`` / ``topic-``: a topic (the argument) created in, or deleted from, the namespace;
* ``mirror-down``: the region's mirror dies for the argument's seconds.

At the schedule's end the users of a region delete its topics in every namespace that some region deleted or
whose document leaves the region out somewhere (a hold ends once the region has drained: ``mirrorholds``);
after the quiet period every region's policies must
be equal (``policystores``' ``policies-diverge``).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from typing import cast

from geosync_agent.core import mirror as core
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core import mirroring as machine
from geosync_core import deletions, envelopes, policies
from geosync_sim import harness, running, schedules
from geosync_sim.policystores import ROOT, PolicyStores, Stored, clusters_of
from geosync_sim.schedules import Schedule, Step
from geosync_sim.world import WALL0

TENANT = f"{ROOT}/shop"
NAMESPACES = tuple(f"{TENANT}/n{i}" for i in range(4))
RECHECK_MS = 2_000
TOMBSTONE_TTL_MS = 5_000
"""Seconds, not the production week, so a run collects tombstones: what makes collecting one safe is that
every peer is past it (``policies.collect_tombstones``), not its age."""
TICK = 0.25


def _node(stored: Stored | None) -> ev.Node | None:
    return None if stored is None else ev.Node(stored.value, stored.version, stored.mtime_ms)


class Shell:
    """One region's policy mirror: its term, and the effects it asks for carried out on the world."""

    def __init__(self, world: PolicyStores, region: str, keys: envelopes.Keys, registered: list[str]) -> None:
        self.world = world
        self.region = region
        self.keys = keys
        self.settings = ev.Settings(region, recheck_ms=RECHECK_MS, tombstone_ttl_ms=TOMBSTONE_TTL_MS)
        self.registered = {r: frozenset[str]() for r in registered}
        self.counters: Counter[str] = Counter()
        self.term: machine.Term | None = None
        self.saved: bytes | None = None
        self.down_until = 0.0
        self.pos = 0
        self.leading = False
        self.fired: list[ev.Event] = []
        world.regions[region].watch = self._watched

    def _watched(self, path: str, children: bool) -> None:
        if self.term is not None:
            self.fired.append(ev.Fired(path, children))

    def now_ms(self) -> int:
        return self.world.now_ms(self.region, WALL0)

    def down(self, seconds: float) -> None:
        self.term, self.leading, self.fired = None, False, []
        self.down_until = self.world.now + seconds

    def advance(self) -> None:
        if self.term is None:
            if self.world.now < self.down_until:
                return
            self.term, effects = machine.begin(
                self.settings, self.saved, self.now_ms(), counters=self.counters
            )
            self._pump(self._carry_out(effects))
            return
        copy = self.world.regions[self.region].copy
        while self.leading and self.term is not None and self.pos < len(copy):
            self._receive()
        fired, self.fired = self.fired, []
        for event in fired:
            self._feed(event)
        self._feed(ev.Tick())

    def _receive(self) -> None:
        data = self.world.regions[self.region].copy[self.pos]
        self._feed(ev.Received(envelopes.open_envelope(self.keys.keyring, data), str(self.pos).encode()))
        self.pos += 1

    def _feed(self, event: ev.Event) -> None:
        self._pump([event])

    def _pump(self, pending: list[ev.Event]) -> None:
        while pending and self.term is not None:
            _, effects = machine.step(self.term, pending.pop(0), self.now_ms())
            pending += self._carry_out(effects)

    def _carry_out(self, effects: list[ev.Effect]) -> list[ev.Event]:
        answers = []
        for effect in effects:
            if self.term is None:
                break
            answer = self._perform(effect)
            if answer is not None:
                answers.append(answer)
        return answers

    def _perform(self, effect: ev.Effect) -> ev.Event | None:
        r = self.world.regions[self.region]
        if isinstance(effect, ev.ReadNode):
            return ev.NodeRead(effect.path, _node(r.nodes.get(effect.path)))
        if isinstance(effect, ev.ListChildren):
            return ev.ChildrenListed(effect.path, tuple(r.children(effect.path)))
        if isinstance(effect, ev.WriteNode):
            e = effect.expected
            expected = None if e is None else Stored(e.value, e.version, e.mtime_ms)
            failed = self.world.write(
                self.region,
                effect.path,
                effect.value,
                expected=expected,
                writer="mirror",
                now_ms=self.now_ms(),
            )
            if failed is None:
                return ev.Wrote(effect.path)
            return ev.WriteFailed(effect.path, ev.Failure(failed), f"{effect.path}: {failed}")
        if isinstance(effect, ev.ListContents):
            if effect.path.count("/") == 4:
                return ev.ContentsListed(effect.path, deletions.Contents(topics=tuple(r.holds(effect.path))))
            return ev.ContentsListed(effect.path, deletions.Contents(namespaces=tuple(r.holds(effect.path))))
        if isinstance(effect, ev.Walk):
            found = {p: n for p, s in r.nodes.items() if effect.scope(p) and (n := _node(s)) is not None}
            return ev.Walked(found)
        if isinstance(effect, ev.ReadClusters):
            return ev.ClustersRead(self.registered)
        if isinstance(effect, ev.Publish):
            envelope = envelopes.Envelope(
                kind=core.EVENT_KIND,
                region=self.region,
                seq=effect.seq,
                sent_at_ms=effect.sent_at_ms,
                payload=policies.event_to_payload(effect.record),
            )
            self.world.publish(self.region, envelopes.seal(self.keys.signer, envelope))
        elif isinstance(effect, ev.SaveCheckpoint):
            self.saved = effect.data
        elif isinstance(effect, ev.OpenReader):
            self.pos = 0 if effect.position is None else int(effect.position) + 1
        elif isinstance(effect, ev.Drain):
            while self.term is not None and self.pos < len(r.copy):
                self._receive()
            return ev.CaughtUp()
        elif isinstance(effect, ev.Lead):
            self.leading = True
        elif isinstance(effect, ev.StepDown):
            self.world.trace(f"{self.region}: mirror steps down: {effect.reason}")
            self.down(1.0)
        elif isinstance(effect, ev.Note) and effect.level == "warning":
            self.world.trace(f"{self.region}: mirror: {effect.text}")
        return None


def _doc(replication: list[str], allowed: list[str], ttl: int = 0) -> bytes:
    doc = {"replication_clusters": sorted(replication), "allowed_clusters": sorted(allowed)}
    if ttl:
        doc["message_ttl_in_seconds"] = ttl  # type: ignore[assignment]
    return json.dumps(doc, separators=(",", ":")).encode()


class Operators:
    """What people do to each region's policies and topics, through its brokers (the rules they enforce)."""

    def __init__(self, world: PolicyStores, regions: list[str]) -> None:
        self.world = world
        self.regions = regions

    def do(self, op: str, region: str, path: str, arg: object) -> None:
        w = self.world
        r = w.regions[region]
        held = r.nodes.get(path)
        now_ms = w.now_ms(region, WALL0)
        short = path[len(ROOT) + 1 :]
        if op == "tenant" and held is None:
            tenant = json.dumps({"allowedClusters": sorted(self.regions)}).encode()
            w.write(region, path, tenant, expected=None, writer="operator", now_ms=now_ms)
        elif op in ("create", "recreate") and held is None and TENANT not in r.nodes:
            w.trace(f"{region}: create {short} refused: no tenant here yet")
        elif op in ("create", "recreate") and held is None:
            rep, allow = cast(tuple[tuple[str, ...], tuple[str, ...]], arg)
            # geoctl checks every region first: one that still holds the namespace stays in it (see above)
            holding = [n for n, o in w.regions.items() if n in (clusters_of(_value(o.nodes.get(path))) or ())]
            if op == "recreate":  # through one region's admin API, which knows only its own store
                holding = []
            created = _doc(list(rep), sorted({*allow, *holding}))
            w.write(region, path, created, expected=None, writer="operator", now_ms=now_ms)
        elif op in ("edit", "clusters") and held is not None and not _deleted(held.value):
            doc = json.loads(held.value)
            if op == "edit":
                doc["message_ttl_in_seconds"] = arg
            else:
                rep, allow = cast(tuple[tuple[str, ...], tuple[str, ...]], arg)
                replication, allowed = set(rep), set(allow)
                kept = (set(doc["replication_clusters"]) | set(doc["allowed_clusters"])) - {region}
                doc["replication_clusters"] = sorted(replication)
                doc["allowed_clusters"] = sorted(allowed | replication | kept)
            value = json.dumps(doc, separators=(",", ":")).encode()
            w.write(region, path, value, expected=held, writer="operator", now_ms=now_ms)
        elif op == "delete" and held is not None:
            if r.topics.get(path):
                w.trace(f"{region}: delete {short} refused: it holds topics")
                return
            w.write(region, path, None, expected=held, writer="operator", now_ms=now_ms)
        elif op == "topic+":
            if not w.create_topic(region, path, str(arg)):
                w.trace(f"{region}: topic {arg} refused in {short}")
        elif op == "topic-":
            r.topics.get(path, set()).discard(str(arg))

    def drain(self) -> None:
        """The schedule's end: a region's topics in a namespace some region deleted, or whose document leaves
        the region out somewhere, are deleted by their users."""
        for path in NAMESPACES:
            docs = [clusters_of(_value(r.nodes.get(path))) for r in self.world.regions.values()]
            for name, r in self.world.regions.items():
                if r.topics.get(path) and any(names is None or name not in names for names in docs):
                    self.world.trace(f"{name}: users delete the topics of {path[len(ROOT) + 1 :]}")
                    r.topics[path] = set()


def _value(stored: Stored | None) -> bytes | None:
    return None if stored is None else stored.value


def _deleted(doc: bytes) -> bool:
    return deletions.is_marked_deleted(doc)


def draw_steps(rng: random.Random, regions: tuple[str, ...], duration: float, quiet: float) -> list[Step]:
    """Random policy steps: the tenant first, then namespaces created, edited, re-clustered and deleted,
    topics made and deleted, mirrors downed."""
    steps = [Step(round(rng.uniform(0.1, 1.0), 2), "policy", ("tenant", rng.choice(regions), TENANT, 0))]
    t = 1.0
    while t < duration - quiet:
        region, ns = rng.choice(regions), rng.choice(NAMESPACES)
        op = rng.choices(
            ("create", "recreate", "edit", "clusters", "delete", "topic+", "topic-", "mirror-down"),
            (5, 1, 4, 2, 3, 7, 2, 1),
        )[0]
        arg: object = 0
        if op in ("create", "recreate", "clusters"):
            some = rng.sample(regions, rng.randint(0, len(regions) - 1))
            replication = sorted({region, *(regions if rng.random() < 0.5 else some)})
            allowed = sorted(set(replication) | set(rng.sample(regions, rng.randint(0, len(regions)))))
            if op == "clusters" and rng.random() < 0.3:  # the region leaves the namespace
                replication = [x for x in replication if x != region] or [r for r in regions if r != region][
                    :1
                ]
                allowed = [x for x in allowed if x != region] or replication
            arg = (tuple(replication), tuple(allowed))
        elif op == "edit":
            arg = rng.randint(1, 3600)
        elif op in ("topic+", "topic-"):
            arg = f"t{rng.randint(0, 2)}"
        elif op == "mirror-down":
            arg = round(rng.uniform(0.5, 8.0), 2)
        steps.append(Step(round(t, 2), "policy", (op, region, ns, arg)))
        t += rng.expovariate(1.0)
    return steps


class Simulation(running.Simulation):
    """A schedule whose ``policy`` steps run the regions' policy mirrors beside their agents."""

    def __init__(
        self, schedule: Schedule, *, trace: bool = False, hook: running.AgentHook | None = None
    ) -> None:
        super().__init__(schedule, trace=trace, hook=hook)
        regions = list(schedule.regions)
        rng = random.Random(schedule.seed * 104_729 + 3)
        self.stores = PolicyStores(regions, delay=lambda: rng.uniform(0.05, 0.6))
        self.stores.trace = self.trace
        for r in self.stores.regions.values():
            r.skew_ms = rng.randint(-300, 300)
        keys = harness.keys_for(schedule.regions)
        self.mirrors = {r: Shell(self.stores, r, keys[r], regions) for r in regions}
        self.operators = Operators(self.stores, regions)
        self.drained = False
        self.next_mirrors = 0.0
        advance = self.world.advance

        def advance_both(until: float) -> None:
            advance(until)
            self._policies(until)

        self.world.advance = advance_both  # type: ignore[method-assign]

    def _policies(self, t: float) -> None:
        self.stores.advance(t)
        if not self.drained and t >= self.schedule.duration:
            self.drained = True
            self.operators.drain()
        if t >= self.next_mirrors:
            self.next_mirrors = t + TICK
            for shell in self.mirrors.values():
                shell.advance()

    def _step(self, step: Step) -> None:
        if step.kind != "policy":
            super()._step(step)
            return
        op, region, path, arg = step.args
        self.trace(str(step).split("s ", 1)[1])
        if op == "mirror-down":
            self.mirrors[str(region)].down(float(arg))  # type: ignore[arg-type]
        else:
            self.operators.do(str(op), str(region), str(path), arg)

    def run(self) -> running.Result:
        result = super().run()
        self.stores.check_converged()
        result.violations += self.stores.violations
        return result


def draw(seed: int, *, regions: int = 3, topics: int = 4, duration: float = 60.0) -> Schedule:
    """The ``faults`` schedule of ``seed`` with policy steps drawn beside it (``bench/sim.py --profile
    policies``)."""
    base = schedules.draw(seed, regions=regions, topics=topics, duration=duration, profile="faults")
    extra = draw_steps(random.Random(seed * 7_919 + 17), base.regions, duration, quiet=15.0)
    steps = sorted([*base.steps, *extra], key=lambda s: (s.at, s.kind))
    return dataclasses.replace(base, steps=tuple(steps))


def run(schedule: Schedule, *, trace: bool = False) -> running.Result:
    return Simulation(schedule, trace=trace).run()
