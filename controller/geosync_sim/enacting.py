"""Enacting: a schedule's steps carried out in the simulated world.

Each ``schedules.Step`` the run reaches is enacted here (``enact``): traffic (produce, failovers, holes),
operators' admin operations, control-topic faults, agent crashes, reader stalls, brokers killed and their
topics taken over by another broker's sidecar, regions wiped and rebuilt, hostile producers, topics deleted.
What a step leaves for later (a restart, a takeover, a rebuilt region coming back, consumers connecting) is
queued on the ``Simulation``, whose loop (``running``) carries it out when its time comes, with
``take_over`` and ``rebuilt`` from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geosync_core import markers
from geosync_sim import harness
from geosync_sim.apps import App
from geosync_sim.schedules import Step
from geosync_sim.world import STAMP, WALL0, Msg

if TYPE_CHECKING:
    from geosync_sim.running import Simulation

GARBAGE_PROPS: dict[str, list[tuple[str, str]]] = {
    "not-a-position": [(STAMP, "garbage")],
    "negative": [(STAMP, "-1:-1")],
    "three-parts": [(STAMP, "1:2:3")],
    "huge": [(STAMP, f"{2**64}:1")],
    "empty": [(STAMP, "")],
    "junk-keys": [("\x00", "\xff" * 3), ("", ""), ("__geosync", "{"), ("x" * 300, "y" * 3000)],
}
"""What a ``garbage`` hostile step's message carries (``schedules.GARBAGE``)."""


def enact(sim: Simulation, step: Step) -> None:
    """Carry out ``step`` in the simulation's world (traced)."""
    w, a = sim.world, step.args
    sim.trace(str(step).split("s ", 1)[1])
    if step.kind == "produce":
        region, i, n, batched = a
        r = w.regions[str(region)]
        if r.down(w.now) or w.now < sim.producers_at.get(str(region), 0.0):
            return  # its producers have no broker to send to, or are not started yet
        msgs = []
        for _ in range(int(n)):  # type: ignore[call-overload]
            r.produced += 1
            msgs.append(Msg(f"k{r.produced % 7}", f"{region}-0-{i}", r.produced))
        names = sim.parts[int(i)]  # type: ignore[call-overload]
        # Routed by the first message's key (Pulsar's default routing hashes a message's key)
        topic = names[int(msgs[0].key[1:]) % len(names)]
        w.publish(str(region), topic, tuple(msgs), batched=bool(batched))
    elif step.kind == "failover":
        i, to, gap = a
        for topic in sim.parts[int(i)]:  # type: ignore[call-overload]
            app = sim.apps.apps[(topic, "sub")]
            sim.apps.disconnect(app)
            sim.pending_connects.append((w.now + float(gap), app, str(to)))  # type: ignore[arg-type]
    elif step.kind == "hole":
        i, seconds = a
        for topic in sim.parts[int(i)]:  # type: ignore[call-overload]
            sim.apps.apps[(topic, "sub")].hold_next = float(seconds)  # type: ignore[arg-type]
    elif step.kind == "admin":
        admin(sim, *a)
    elif step.kind == "control":
        fault, region = a
        if fault == "dup":
            sim.dup_until = w.now + 5.0
        elif fault == "replay":
            w.replay_control(str(region), sim.rng)
        else:
            w.spike_until = w.now + 5.0
            sim.checker.disturbance(w.now, w.now + 8.0, "control-fault")
    elif step.kind == "crash":
        region, checkpointed, down = a
        life = sim.lives.get(str(region))
        if life is not None:
            life.messaging.close()
            sim.lives[str(region)] = None
            sim.restarts.append((w.now + float(down), str(region), bool(checkpointed)))  # type: ignore[arg-type]
            sim.checker.disturbance(w.now, w.now + float(down) + 10.0, "agent-down")  # type: ignore[arg-type]
    elif step.kind == "stall":
        region, seconds = a
        w.stall_readers(str(region), float(seconds))  # type: ignore[arg-type]
    elif step.kind == "rebuild":
        region, down, producers = a
        wipe(sim, str(region), float(down), float(producers))  # type: ignore[arg-type]
    elif step.kind == "kill":
        region, seconds = a
        kill(sim, str(region), float(seconds))  # type: ignore[arg-type]
    elif step.kind == "hostile":
        hostile(sim, a)
    elif step.kind == "drop":
        where, i, back = a
        for region in sim.schedule.regions if where == "*" else (str(where),):
            for topic in sim.parts[int(i)]:  # type: ignore[call-overload]
                w.delete_topic(region, topic, back_in=float(back))  # type: ignore[arg-type]


def hostile(sim: Simulation, args: tuple[object, ...]) -> None:
    """A hostile application in ``region`` publishes one unbatched message on topic ``i`` (the partition
    its key routes to), as ``schedules.HOSTILE`` lists. Brokers keep whatever properties an
    application sets; what they add themselves follows (the replicator's stamp after them, ``ports``)."""
    region, i, variant, arg, ahead, borrow = args
    w, r = sim.world, sim.world.regions[str(region)]
    if r.down(w.now) or w.now < sim.producers_at.get(str(region), 0.0):
        return
    r.produced += 1
    key = f"k{r.produced % 7}"
    names = sim.parts[int(i)]  # type: ignore[call-overload]
    topic = names[int(key[1:]) % len(names)]
    t = r.topics.get(topic)
    if t is None:
        return
    producer, props, data, what = f"app-{region}", [], b"", ""
    if variant in ("forge-other", "forge-own"):
        victim = w.regions[str(arg)].topics.get(topic)
        if victim is None:
            return
        # The position of a later message there: ``ahead`` entries on, past this one in its own region.
        predicted = victim.position(len(victim.entries) + int(ahead) - (variant == "forge-other"))  # type: ignore[call-overload]
        props = [(STAMP, str(predicted))]
        if borrow or variant == "forge-own":  # a producer name the agents verified for that region
            producer = f"{arg}-0-{i}"
        what = f"stamped {arg}@{predicted}"
    elif variant == "marker":
        update = markers.Update(subscription="sub", region=str(region), positions=())
        signer = harness.HashSigner(f"{region}-test" if arg == "foreign" else "hostile", b"not-a-key")
        kind_props, payload = markers.encode_marker(
            signer, update, topic=topic, seq=r.produced, sent_at_ms=int((WALL0 + w.now) * 1000)
        )
        if arg == "garbage":
            props, data = [(markers.PROPERTY, "snapshot\x00?")], b"\xff\x00 not an envelope"
        elif arg == "unsigned":
            props, data = list(kind_props.items()), payload.replace(b'"sig":"', b'"sig":"00')
        else:
            props, data = list(kind_props.items()), payload
        what = f"marker property ({arg})"
    else:
        props = GARBAGE_PROPS[str(arg)]
        what = f"garbage properties ({arg})"
    msg = Msg(key, producer, r.produced, tuple(props), data)
    entry = w.publish(str(region), topic, (msg,), batched=False)
    if entry is not None:
        sim.checker.hostile(topic, entry.ident(0), str(variant))
        sim.trace(f"{region}: {topic.rsplit('/', 1)[-1]} {variant} at {entry.source} by {producer}: {what}")


def kill(sim: Simulation, region: str, seconds: float) -> None:
    """The broker owning the region's topics dies with its sidecar agent; ``seconds`` later (its session
    expired, the bundle looked up) another broker loads them and its sidecar takes over: an agent with no
    checkpoint of them (it read the control topic all along: a fresh agent reads it again from the
    earliest). Consumers connected there reconnect to the new owner."""
    w = sim.world
    if w.regions[region].down(w.now) or any(r == region for _, r, _ in sim.takeovers):
        return
    here = drop_agent(sim, region)
    sim.takeovers.append((w.now + seconds, region, [app.topic for app in here]))
    sim.checker.disturbance(w.now, w.now + seconds + 10.0, "agent-down")


def drop_agent(sim: Simulation, region: str) -> list[App]:
    """The region's agent goes with no goodbye (no restart pending) and the consumers connected there lose
    their broker; those consumers."""
    life = sim.lives.get(region)
    if life is not None:
        life.messaging.close()
    sim.lives[region] = None
    sim.restarts = [x for x in sim.restarts if x[1] != region]
    here = [app for app in sim.apps.apps.values() if app.region == region]
    for app in here:
        sim.apps.disconnect(app)
    return here


def take_over(sim: Simulation, region: str, t: float, topics: list[str]) -> None:
    sim.world.reload(region)
    fresh_agent(sim, region, t, topics)
    sim.trace(f"{region}: another broker's sidecar took the topics over")


def fresh_agent(sim: Simulation, region: str, t: float, topics: list[str]) -> None:
    """An agent with no checkpoint starts in ``region``, and the consumers of ``topics`` that lost their
    broker there (and are not moving elsewhere) reconnect to it."""
    n = list(sim.schedule.regions).index(region)
    sim.lives[region] = sim.start(region, t, restore=False, phase=n * 0.01)
    moving = {id(app) for _, app, _ in sim.pending_connects}
    for app in sim.apps.apps.values():
        if app.topic in topics and app.region is None and id(app) not in moving:
            sim.apps.connect(app, region)


def wipe(sim: Simulation, region: str, down: float, producers: float) -> None:
    """The region is wiped with its agent and the agent's checkpoint; its consumers lose their broker and
    come back to it with the region, ``down`` seconds later; its producers ``producers`` seconds after its
    agent started (docs/limits.md: messages a rebuilt region publishes before its agent's first envelope
    reached a peer are matched there by old claims)."""
    w = sim.world
    if w.regions[region].down(w.now) or any(r == region for _, r, _ in sim.rebuilds):
        return
    sim.checkpoints.pop(region, None)
    here = drop_agent(sim, region)
    w.wipe(region, down)
    sim.rebuilds.append((w.now + down, region, [app.topic for app in here]))
    sim.producers_at[region] = w.now + down + producers
    sim.checker.disturbance(w.now, w.now + down + 10.0, "rebuilt")


def rebuilt(sim: Simulation, region: str, t: float, topics: list[str]) -> None:
    """The region's new life: the operator provisions its subscriptions again (at Earliest, as at
    setup), its agent starts with a new incarnation and no checkpoint, its consumers reconnect."""
    w = sim.world
    w.rebuilt(region)
    for app in sim.apps.apps.values():
        w.create_subscription(region, app.topic, app.sub, app.kind, latest=False, cause="setup")
    fresh_agent(sim, region, t, topics)


def admin(sim: Simulation, region: object, i: object, op: object, arg: object) -> None:
    # An operation on a partitioned topic is made on each of its partitions.
    for topic in sim.parts[int(i)]:  # type: ignore[call-overload]
        _admin_on(sim, topic, region=region, i=i, op=op, arg=arg)


def _admin_on(sim: Simulation, topic: str, *, region: object, i: object, op: object, arg: object) -> None:
    w = sim.world
    r, kind = str(region), sim.schedule.kinds[int(i)]  # type: ignore[call-overload]
    s = w.regions[r].subs.get((topic, "sub"))
    if op == "delete":
        if s is not None and s.consumers == 0:  # Pulsar refuses to delete a subscription with consumers
            w.delete_subscription(r, topic, "sub")
    elif op in ("create-latest", "create-earliest"):
        w.create_subscription(r, topic, "sub", kind, latest=op == "create-latest", cause="admin:" + str(op))
    elif op == "clear-backlog":
        w.clear_backlog(r, topic, "sub")
    elif op == "skip":
        w.skip(r, topic, "sub", int(arg))  # type: ignore[call-overload]
    elif op == "ttl":
        w.expire_ttl(r, topic, "sub", float(arg))  # type: ignore[arg-type]
    elif op == "reset":
        w.reset_cursor(r, topic, "sub", -1, "admin:reset")
