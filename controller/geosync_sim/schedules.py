"""Schedules: what happens in a simulated run, drawn from a seed, or scripted.

Why a list of steps and not a generator run alongside: a failing run is shrunk by dropping steps and running
again with the same seed, and a scripted case is the same value written by hand.

Step kinds (``args``):

* ``produce`` (region, topic index, messages, batched): an application publishes one entry;
* ``hole`` (topic index, seconds): the topic's consumers hold the next message they are given unacknowledged
  for that long (acknowledging others meanwhile: a hole);
* ``failover`` (topic index, region, gap seconds): the topic's consumers leave their region and, ``gap``
  later, connect in ``region``;
* ``admin`` (region, topic index, operation, argument): ``delete``, ``create-latest``, ``create-earliest``,
  ``clear-backlog``, ``skip`` (n), ``ttl`` (seconds), ``reset`` (to the earliest);
* ``control`` (fault, region): ``dup`` (every control envelope for the next 5 s replicated twice), ``replay``
  (an old envelope delivered again to ``region``), ``spike`` (replication delays up to 3 s more for 5 s);
* ``crash`` (region, with checkpoint, seconds down): the agent dies and restarts;
* ``rebuild`` (region, seconds down, seconds): the region is wiped (topics, cursors, its agent and the agent's
  checkpoint) and rebuilt under its name, its new ledger ids colliding with the old ones; its producers start
  again that many seconds after its agent;
* ``stall`` (region, seconds): the region's readers of data topics are dispatched nothing for that long;
* ``kill`` (region, seconds): the broker owning the region's topics dies with its sidecar agent; that much
  later another broker loads them (batch indexes of partly acknowledged entries forgotten) and its sidecar
  takes over;
* ``drop`` (region or ``*`` for every region, topic index, seconds): an operator deletes the topic by force;
  that much later it exists again, empty, with a new ledger, and its subscriptions are created again at
  Earliest;
* ``hostile`` (region, topic index, variant, argument, ahead, borrow): a hostile application publishes one
  unbatched message (variants in ``HOSTILE``; ``enacting.hostile`` says what each carries).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

KINDS = ("Shared", "Key_Shared", "Failover", "Exclusive")
PROFILES = ("clean", "faults", "jumps", "rebuilds", "takeovers", "drops", "refusals", "partitions", "hostile")
"""``clean``: traffic and failovers; ``faults``: and control faults and agent crashes; ``jumps``: and cursor
jumps no consumer made (admin operations, TTL expiry); ``rebuilds``: the faults, a region wiped and rebuilt,
and a peer's readers stalled around it (a seed draws the same faults as in ``faults``); ``takeovers``: the
faults and brokers killed, their topics taken over by another broker's sidecar; ``drops``: the faults and
topics deleted and created again, in one region or in every one; ``refusals``: the faults, and the plugin
of each region that has one answering 403 to its agent's cursor writes or to every call, or to none;
``partitions``: the faults, on topics of 1 to 3 partitions; ``hostile``: the faults, the plugin refusing as in
``refusals``, and hostile producers (``HOSTILE``)."""

HOSTILE = ("forge-other", "forge-own", "marker", "garbage")
"""A hostile producer's messages: ``forge-other`` stamped with the predicted position of another region's
later message (under that region's producer name or its own), ``forge-own`` with the predicted position of
its own region's later message, ``marker`` carrying the GeoSync marker property (``argument``: ``garbage``,
an ``unsigned`` envelope of the marker's kind, or ``foreign``: one signed by a key no keyring lists, under a
region's key id), ``garbage`` with properties no broker would write (``argument``: which)."""
GARBAGE = ("not-a-position", "negative", "three-parts", "huge", "empty", "junk-keys")


@dataclass(frozen=True)
class Step:
    at: float
    kind: str
    args: tuple[object, ...]

    def __str__(self) -> str:
        return f"{self.at:7.2f}s {self.kind} {' '.join(str(a) for a in self.args)}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    regions: tuple[str, ...]
    topics: int
    kinds: tuple[str, ...]
    """Each topic's subscription type."""
    plugin: tuple[bool, ...]
    """Per region: the GeoSync plugin is loaded."""
    duration: float
    steps: tuple[Step, ...]
    start: tuple[str, ...] = ()
    """Per topic, the region its consumers start in (default: the first)."""
    settle_s: float = 10.0
    claims_from: str = "acknowledgements"
    """The agents' ``claims_from`` (``cursor`` or ``acknowledgements``: decision 0015)."""
    partitions: tuple[int, ...] = ()
    """Per topic, its number of partitions (2 or more: a partitioned topic; default: none is)."""
    refusing: tuple[str, ...] = ()
    """Per region where the plugin is loaded, what it answers 403 to: "" nothing, "writes" cursor writes,
    "all" every endpoint (default: nothing anywhere)."""

    def without(self, drop: set[int]) -> Schedule:
        return replace(self, steps=tuple(s for i, s in enumerate(self.steps) if i not in drop))


def draw(
    seed: int,
    *,
    regions: int = 3,
    topics: int = 4,
    duration: float = 60.0,
    profile: str = "faults",
    rate: float = 1.0,
) -> Schedule:
    """A random schedule: ``rate`` entries per second per topic, spread over the regions."""
    rng = random.Random(seed)
    names = tuple("abcdefgh"[:regions])
    kinds = tuple(rng.choice(KINDS) for _ in range(topics))
    plugin = tuple(rng.random() < 0.8 for _ in names)
    start = tuple(rng.choice(names) for _ in range(topics))
    steps: list[Step] = []
    where = list(start)
    quiet = 15.0  # nothing but traffic in the last seconds, so every failover's duplicates are judged
    for i in range(topics):
        t = rng.random()
        while t < duration:
            origin = rng.choice(names)
            batched = rng.random() < 0.4
            steps.append(
                Step(round(t, 2), "produce", (origin, i, rng.randint(2, 5) if batched else 1, batched))
            )
            t += rng.expovariate(rate)
        t = rng.uniform(1, 10)
        while t < duration - quiet:
            steps.append(Step(round(t, 2), "hole", (i, round(rng.uniform(1.0, 30.0), 1))))
            t += rng.uniform(3, 15)
        t = rng.uniform(5, 20)
        while t < duration - quiet:
            to = rng.choice([n for n in names if n != where[i]])
            steps.append(Step(round(t, 2), "failover", (i, to, round(rng.uniform(0.0, 2.0), 2))))
            where[i] = to
            t += rng.uniform(8, 25)
    if profile in ("faults", "jumps", "rebuilds", "takeovers", "drops", "refusals", "partitions", "hostile"):
        for _ in range(rng.randint(1, 4)):
            fault = rng.choice(("dup", "replay", "spike"))
            steps.append(
                Step(round(rng.uniform(2, duration - quiet), 2), "control", (fault, rng.choice(names)))
            )
        for _ in range(rng.randint(0, 2)):
            steps.append(
                Step(
                    round(rng.uniform(5, duration - quiet), 2),
                    "crash",
                    (rng.choice(names), rng.random() < 0.6, round(rng.uniform(0.5, 5.0), 2)),
                )
            )
    if profile == "jumps":
        ops = ("delete", "create-latest", "create-earliest", "clear-backlog", "skip", "ttl", "reset")
        for _ in range(rng.randint(1, 3)):
            op = rng.choice(ops)
            arg = rng.randint(1, 5) if op == "skip" else round(rng.uniform(5, 30), 1) if op == "ttl" else 0
            steps.append(
                Step(
                    round(rng.uniform(3, duration - quiet), 2),
                    "admin",
                    (rng.choice(names), rng.randrange(topics), op, arg),
                )
            )
    if profile == "rebuilds":
        wiped = rng.choice(names)
        at = round(rng.uniform(8, duration - quiet - 10), 2)
        # Producers 5 s after the agent: its incarnation has reached the peers by then (docs/limits.md).
        steps.append(Step(at, "rebuild", (wiped, round(rng.uniform(1.0, 6.0), 2), 5.0)))
        if rng.random() < 0.7:
            peer = rng.choice([n for n in names if n != wiped])
            before = round(max(0.5, at - rng.uniform(0.0, 8.0)), 2)
            steps.append(Step(before, "stall", (peer, round(rng.uniform(5.0, 20.0), 1))))
    if profile == "takeovers":
        for _ in range(rng.randint(1, 3)):
            at = round(rng.uniform(5, duration - quiet), 2)
            steps.append(Step(at, "kill", (rng.choice(names), round(rng.uniform(1.0, 8.0), 2))))
    if profile == "drops":
        for _ in range(rng.randint(1, 3)):
            scope = rng.choice((*names, "*"))
            at = round(rng.uniform(3, duration - quiet), 2)
            steps.append(Step(at, "drop", (scope, rng.randrange(topics), round(rng.uniform(0.5, 5.0), 2))))
    if profile == "hostile":
        for _ in range(rng.randint(3, 8)):
            region, i = rng.choice(names), rng.randrange(topics)
            variant = rng.choice(HOSTILE)
            other = rng.choice([n for n in names if n != region])
            what: object = (
                other
                if variant == "forge-other"
                else region
                if variant == "forge-own"
                else rng.choice(("garbage", "unsigned", "foreign"))
                if variant == "marker"
                else rng.choice(GARBAGE)
            )
            at = round(rng.uniform(2, duration - 5), 2)
            steps.append(
                Step(at, "hostile", (region, i, variant, what, rng.randint(1, 3), rng.random() < 0.5))
            )
    refusing: tuple[str, ...] = ()
    if profile in ("refusals", "hostile"):
        # Each region with the plugin refuses its cursor writes, every call, or nothing (a third each).
        refusing = tuple(rng.choice(("", "writes", "all")) if has else "" for has in plugin)
    partitions = tuple(rng.randint(1, 3) for _ in range(topics)) if profile == "partitions" else ()
    steps.sort(key=lambda s: (s.at, s.kind))
    return Schedule(
        seed,
        names,
        topics,
        kinds,
        plugin,
        duration,
        tuple(steps),
        start,
        refusing=refusing,
        partitions=partitions,
    )


def partitions_of(topic: str, schedule: Schedule, i: int) -> list[str]:
    """Topic ``i``'s partitions as the brokers list them (``PartitionedTopicMetadata``: N partitions are N
    topics ``{topic}-partition-{n}``), or the topic itself when it is not partitioned."""
    n = schedule.partitions[i] if schedule.partitions else 0
    return [f"{topic}-partition-{p}" for p in range(n)] if n > 1 else [topic]
