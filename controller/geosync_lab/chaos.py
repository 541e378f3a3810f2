"""A seeded chaos run on a lab: a generator, a nemesis and a history, for ``chaos_checker`` to judge.

``plan`` turns a seed into a schedule (pure: the same seed, duration, regions and fault kinds give the
same schedule): failovers of each subscription between regions, quiescent or not, at random moments, and
one fault after another, every available kind at least once before any repeats. ``run`` plays it on a
running lab:

- **generator**: in every region of the namespace a batched and an unbatched producer write keyed
  messages to one topic; four subscriptions (Shared, Key_Shared, Exclusive, Failover) each have one
  consumer, in one region at a time, that acknowledges most of what it receives and leaves holes;
  failovers close it and open it in another region, quiescent (after ``settle`` judged the move, e.g.
  ``geoctl failover check --wait``) or not (at once);
- **nemesis**: agent kill -9 and restart, broker kill -9 and restart, region freeze (SIGSTOP) and thaw,
  partition and latency between a pair (Toxiproxy, only in a lab booted with ``--wan``), ZooKeeper
  session expiry of an agent (its process stopped longer than its session timeout, so ZooKeeper expires
  the session and the agent meets an expired one when it resumes), garbage, tampered and replayed control
  messages (written with produce permission only, no key), and concurrent policy edits in several
  regions; each fault restores what it broke before the next one starts;
- **history**: JSON lines, one event per send, receive, acknowledgement, hole, failover, fault and policy
  read, with its time in seconds since the start.

The run ends by restoring every region and agent, stopping the producers, waiting for replication, one
last quiescent failover of every subscription and a drain that acknowledges everything, and a read of
the edited policies in every region.
"""

from __future__ import annotations

import contextlib
import functools
import json
import pathlib
import queue
import random
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pulsar

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient, AdminError
from geosync_core import topology as topo
from geosync_lab import labs, regions, wan

NAMESPACE = "geo/abc"
POLICY_NAMESPACE = "geo/chaos-policies"
"""Concurrent policy edits go to a namespace of their own, without data, so no edit can drop messages."""
SUBSCRIPTIONS = {
    "shared": "Shared",
    "key-shared": "Key_Shared",
    "exclusive": "Exclusive",
    "failover": "Failover",
}
KINDS = (
    "agent-kill",
    "broker-kill",
    "freeze",
    "partition",
    "latency",
    "zk-expiry",
    "control",
    "policy-edit",
)
WAN_KINDS = frozenset({"partition", "latency"})
KEYS = 8
HOLE_RATIO = 0.1
ZK_SESSION_TIMEOUT_S = 10.0
"""The agent's ZooKeeper session timeout (``geosync_adapters.zookeeper.Store``'s default)."""


def _retention(minutes: int) -> Any:
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": 64}


def _plain(value: int) -> Any:
    return value


POLICY_FIELDS: dict[str, Callable[[int], Any]] = {
    "retention": _retention,
    "maxConsumersPerTopic": _plain,
    "maxProducersPerTopic": _plain,
    "messageTTL": _plain,
}
Report = Callable[[str], None]
Settle = Callable[[str, str, str, float], tuple[str, dict[str, Any]]]
"""(source, target, subscription, timeout_s) -> (verdict, details): ``safe`` when the move was judged
exact; the details (what it waited for, duplicates predicted) go into the history."""


def _silent(_: str) -> None:
    pass


def _consumer_type(kind: str) -> Any:
    """The client's enum member for a subscription type as Pulsar names it (``Key_Shared``)."""
    return getattr(pulsar.ConsumerType, kind.replace("_", ""))


# -- the schedule (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    at: float
    action: str
    """``failover`` or a fault kind."""
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    seed: int
    duration_s: float
    homes: dict[str, str]
    """Each subscription's region when the run starts."""
    failovers: list[Step]
    faults: list[Step]
    final: dict[str, str]
    """Each subscription's region for the final drain (always another than the one it is in)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "homes": self.homes,
            "failovers": [s.__dict__ for s in self.failovers],
            "faults": [s.__dict__ for s in self.faults],
            "final": self.final,
        }


def available_kinds(
    topology: topo.Topology, wanted: tuple[str, ...] = KINDS
) -> tuple[list[str], dict[str, str]]:
    """The fault kinds a lab supports among ``wanted``, and why each other one is not."""
    unavailable = {}
    for kind in wanted:
        if kind in WAN_KINDS and not topology.wan:
            unavailable[kind] = "the lab was booted without --wan (no Toxiproxy between regions)"
        elif kind == "broker-kill" and any(
            int(r.lab.get("brokers", 1)) > 1 for r in topology.regions.values()
        ):
            unavailable[kind] = "multi-broker regions: the run kills standalone regions only"
        elif kind in {"agent-kill", "zk-expiry"} and not topology.agents:
            unavailable[kind] = "the lab runs no agents"
    return [k for k in wanted if k not in unavailable], unavailable


def _fault(rng: random.Random, kind: str, names: list[str], round_: int) -> dict[str, Any]:
    region = rng.choice(names)
    pair = sorted(rng.sample(names, 2))
    if kind == "agent-kill":
        return {"region": region, "down_s": round(rng.uniform(1.0, 8.0), 1)}
    if kind == "broker-kill":
        return {"region": region, "down_s": round(rng.uniform(0.0, 5.0), 1)}
    if kind == "freeze":
        return {"region": region, "hold_s": round(rng.uniform(3.0, 10.0), 1)}
    if kind == "partition":
        return {"pair": pair, "hold_s": round(rng.uniform(5.0, 15.0), 1)}
    if kind == "latency":
        return {
            "pair": pair,
            "latency_ms": rng.choice([50, 100, 200, 400]),
            "jitter_ms": rng.choice([0, 10, 50]),
            "hold_s": round(rng.uniform(10.0, 25.0), 1),
        }
    if kind == "zk-expiry":
        return {"region": region, "hold_s": round(ZK_SESSION_TIMEOUT_S + rng.uniform(4.0, 8.0), 1)}
    if kind == "control":
        return {"region": region, "garbage": rng.randint(1, 4), "tampered": rng.randint(1, 3), "replayed": 2}
    if kind == "policy-edit":
        editors = sorted(rng.sample(names, rng.randint(2, len(names))))
        name = rng.choice(sorted(POLICY_FIELDS))
        values = rng.sample(range(100, 10_000), len(editors))
        return {"round_no": round_, "field": name, "edits": dict(zip(editors, values, strict=True))}
    raise ValueError(f"unknown fault kind {kind!r}")


def plan(
    seed: int,
    duration_s: float,
    region_names: list[str],
    kinds: list[str],
    *,
    failover_every_s: float = 20.0,
    fault_every_s: float = 15.0,
    warmup_s: float = 5.0,
) -> Plan:
    """The schedule of a run: the same arguments always give the same plan."""
    rng = random.Random(seed)
    names = sorted(region_names)
    homes = {sub: rng.choice(names) for sub in SUBSCRIPTIONS}
    where = dict(homes)
    failovers: list[Step] = []
    t = warmup_s + rng.expovariate(1 / failover_every_s)
    while t < duration_s:
        sub = rng.choice(sorted(SUBSCRIPTIONS))
        to = rng.choice([n for n in names if n != where[sub]])
        failovers.append(
            Step(
                round(t, 2),
                "failover",
                {"sub": sub, "from": where[sub], "to": to, "quiescent": rng.random() < 0.5},
            )
        )
        where[sub] = to
        t += rng.expovariate(1 / failover_every_s)
    faults: list[Step] = []
    order = list(kinds)
    rng.shuffle(order)  # every kind once before any repeats
    t = warmup_s + rng.uniform(0.0, fault_every_s)
    while t < duration_s and kinds:
        kind = order[len(faults)] if len(faults) < len(order) else rng.choice(kinds)
        args = _fault(rng, kind, names, len(faults))
        faults.append(Step(round(t, 2), kind, args))
        t += float(args.get("hold_s", args.get("down_s", 1.0))) + rng.expovariate(1 / fault_every_s)
    final = {sub: rng.choice([n for n in names if n != where[sub]]) for sub in SUBSCRIPTIONS}
    return Plan(seed, duration_s, homes, failovers, faults, final)


# -- the history -----------------------------------------------------------------------------------


class History:
    """Events as JSON lines, each with ``t``: seconds since the run started (one clock, monotonic)."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.counts: dict[str, int] = {}

    def now(self) -> float:
        return time.monotonic() - self._t0

    def record(self, ev: str, **fields: Any) -> None:
        with self._lock:
            line = json.dumps({"t": round(self.now(), 3), "ev": ev, **fields}, sort_keys=True, default=str)
            self._out.write(line + "\n")
            self.counts[ev] = self.counts.get(ev, 0) + 1

    def flush(self) -> None:
        with self._lock:
            self._out.flush()


# -- the generator ---------------------------------------------------------------------------------


@dataclass
class Settings:
    rate_per_region: float = 8.0
    """Messages per second each region's producers write (half batched, half not)."""
    settle_timeout_s: float = 20.0
    final_settle_timeout_s: float = 90.0
    drain_quiet_s: float = 10.0
    hole_ratio: float = HOLE_RATIO
    failover_every_s: float = 20.0
    fault_every_s: float = 15.0


class _Producers(threading.Thread):
    """A batched and an unbatched producer in one region, writing keyed messages at a steady rate."""

    def __init__(self, run: _Run, region: str, client: pulsar.Client) -> None:
        super().__init__(name=f"chaos-producers-{region}", daemon=True)
        self.run_, self.region, self.client = run, region, client
        self.rng = random.Random(f"{run.plan.seed}-{region}")
        self.seq = {f"{region}-b": 0, f"{region}-u": 0}
        self.producers: dict[str, Any] = {}

    def _open(self, name: str) -> Any:
        if name not in self.producers:
            batched = name.endswith("-b")
            self.producers[name] = self.client.create_producer(
                self.run_.topic,
                batching_enabled=batched,
                batching_max_messages=20,
                batching_max_publish_delay_ms=20,
                block_if_queue_full=False,
                max_pending_messages=2000,
                send_timeout_millis=30000,
            )
        return self.producers[name]

    def _send(self, name: str) -> None:
        seq = self.seq[name]
        key = f"k{self.rng.randrange(KEYS)}"
        uid = f"{name}-{seq}"
        body = json.dumps({"uid": uid, "producer": name, "seq": seq, "key": key}).encode()
        fields = {"uid": uid, "producer": name, "region": self.region, "seq": seq, "key": key}
        history = self.run_.history

        def sent(result: Any, msg_id: Any) -> None:
            ok = result == pulsar.Result.Ok
            history.record(
                "send", ok=ok, msg_id=str(msg_id) if ok else None, error=None if ok else str(result), **fields
            )

        try:
            producer = self._open(name)
        except Exception as e:  # the region is down: nothing of this producer is pending
            history.record("send", ok=False, error=f"no producer: {e}", **fields)
            time.sleep(0.5)
        else:
            try:
                producer.send_async(body, sent, partition_key=key)
            except Exception as e:  # its queue is full; the same producer keeps its order once it drains
                history.record("send", ok=False, error=f"not queued: {e}", **fields)
                time.sleep(0.5)
        self.seq[name] = seq + 1

    def run(self) -> None:
        interval = 2.0 / self.run_.settings.rate_per_region
        while not self.run_.producing_stop.is_set():
            for name in self.seq:
                self._send(name)
            self.run_.producing_stop.wait(interval)
        for p in self.producers.values():
            with contextlib.suppress(Exception):
                p.flush()
            with contextlib.suppress(Exception):
                p.close()


@dataclass(frozen=True)
class _Move:
    to: str
    quiescent: bool
    final: bool = False


class _Consumer(threading.Thread):
    """The one consumer of a subscription, in one region at a time; acknowledges with holes."""

    def __init__(self, run: _Run, sub: str, home: str) -> None:
        super().__init__(name=f"chaos-consumer-{sub}", daemon=True)
        self.run_, self.sub, self.region = run, sub, home
        self.name_ = f"{run.prefix}-{sub}"
        self.kind = _consumer_type(SUBSCRIPTIONS[sub])
        self.rng = random.Random(f"{run.plan.seed}-{sub}")
        self.moves: queue.Queue[_Move] = queue.Queue()
        self.consumer: Any = None
        self.done = threading.Event()

    def _subscribe(self, deadline: float) -> None:
        while self.consumer is None and time.monotonic() < deadline:
            try:
                self.consumer = self.run_.clients[self.region].subscribe(
                    self.run_.topic,
                    self.name_,
                    consumer_type=self.kind,
                    initial_position=pulsar.InitialPosition.Earliest,
                    batch_index_ack_enabled=True,
                    receiver_queue_size=100,
                )
            except Exception as e:  # the region is down or frozen: try again
                self.run_.report(f"{self.sub}: cannot subscribe in {self.region} yet ({e})")
                time.sleep(2.0)

    def _close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
        self.consumer = None

    def _receive(self, *, ack_all: bool, timeout_ms: int = 200) -> bool:
        if self.consumer is None:
            self._subscribe(time.monotonic() + 5.0)
            return False
        try:
            msg = self.consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return False
        except Exception:  # closed underneath us, e.g. after a long freeze: open it again
            self._close()
            return False
        history = self.run_.history
        try:
            uid = str(json.loads(msg.data())["uid"])
        except (ValueError, KeyError, TypeError):
            return True
        region, sub = self.region, self.sub
        history.record(
            "recv",
            sub=sub,
            region=region,
            uid=uid,
            msg_id=str(msg.message_id()),
            redelivery=msg.redelivery_count(),
        )
        if ack_all or self.rng.random() >= self.run_.settings.hole_ratio:
            try:
                self.consumer.acknowledge(msg)
            except Exception as e:
                history.record("ack-failed", sub=sub, region=region, uid=uid, error=str(e))
            else:
                history.record("ack", sub=sub, region=region, uid=uid)
        else:
            history.record("hole", sub=sub, region=region, uid=uid)
        return True

    def _move(self, move: _Move) -> None:
        source, history = self.region, self.run_.history
        closed_at = history.now()
        self._close()
        verdict, waited = "none", 0.0
        detail: dict[str, Any] = {}
        if move.quiescent:
            started = time.monotonic()
            timeout = (
                self.run_.settings.final_settle_timeout_s
                if move.final
                else self.run_.settings.settle_timeout_s
            )
            try:
                verdict, detail = self.run_.settle(source, move.to, self.name_, timeout)
            except Exception as e:
                verdict = f"error: {e}"
            waited = time.monotonic() - started
        self.region = move.to
        history.record(
            "failover",
            sub=self.sub,
            phase="final" if move.final else "run",
            quiescent=move.quiescent,
            settled=verdict == "safe",
            verdict=verdict,
            closed_at=round(closed_at, 3),
            waited_s=round(waited, 2),
            check=detail,
            **{"from": source, "to": move.to},
        )
        self._subscribe(time.monotonic() + 300.0)

    def _drain(self) -> None:
        quiet = self.run_.settings.drain_quiet_s
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            if self._receive(ack_all=True, timeout_ms=500):
                last = time.monotonic()
        time.sleep(1.0)  # the client's grouped acknowledgements go out before the close
        self._close()

    def run(self) -> None:
        self._subscribe(time.monotonic() + 300.0)
        while True:
            try:
                move = self.moves.get_nowait()
            except queue.Empty:
                self._receive(ack_all=False)
                continue
            self._move(move)
            if move.final:
                self._drain()
                self.done.set()
                return


# -- the nemesis -----------------------------------------------------------------------------------


class _Nemesis:
    def __init__(self, run: _Run) -> None:
        self.run_ = run
        self.lab = run.lab_dir

    def topology(self) -> topo.Topology:
        return labs.load(self.lab)

    def apply(self, step: Step, fault_id: int) -> None:
        args, history = dict(step.args), self.run_.history
        regions_hit = (
            [args["region"]] if "region" in args else list(args.get("pair") or args.get("edits", {}))
        )
        history.record("fault", id=fault_id, phase="start", kind=step.action, regions=regions_hit, args=args)
        details: dict[str, Any] = {}
        try:
            details = getattr(self, "_" + step.action.replace("-", "_"))(**args) or {}
        except Exception as e:
            details = {"error": f"{type(e).__name__}: {e}"}
            self.run_.report(f"fault {step.action} failed: {e}")
        finally:
            history.record(
                "fault", id=fault_id, phase="end", kind=step.action, regions=regions_hit, **details
            )

    def _agent_kill(self, region: str, down_s: float) -> dict[str, Any]:
        labs.stop_agent(self.lab, region, kill=True)
        time.sleep(down_s)
        return self._start_agent(region)

    def _start_agent(self, region: str) -> dict[str, Any]:
        started = time.monotonic()
        labs.start_agent(self.lab, region)
        labs.wait_agent_ready(self.lab, region, timeout_s=120.0)
        return {"ready_after_s": round(time.monotonic() - started, 1)}

    def _broker_kill(self, region: str, down_s: float) -> dict[str, Any]:
        labs.stop_region(self.lab, region, kill=True)
        time.sleep(down_s)
        started = time.monotonic()
        labs.start_region(self.lab, region)
        return {"restarted_after_s": round(time.monotonic() - started, 1)}

    def _freeze(self, region: str, hold_s: float) -> None:
        labs.freeze_region(self.lab, region, frozen=True)
        try:
            time.sleep(hold_s)
        finally:
            labs.freeze_region(self.lab, region, frozen=False)

    def _partition(self, pair: list[str], hold_s: float) -> None:
        topology, link = self.topology(), (pair[0], pair[1])
        wan.partition(topology, self.lab, link, heal=False)
        try:
            time.sleep(hold_s)
        finally:
            wan.partition(topology, self.lab, link, heal=True)

    def _latency(self, pair: list[str], latency_ms: int, jitter_ms: int, hold_s: float) -> None:
        topology, link = self.topology(), (pair[0], pair[1])
        wan.shape_links(topology, self.lab, wan.Shape(latency_ms, jitter_ms), link)
        try:
            time.sleep(hold_s)
        finally:
            wan.shape_links(topology, self.lab, wan.Shape(), link)

    def _zk_expiry(self, region: str, hold_s: float) -> dict[str, Any]:
        """Stop the agent's process for longer than its ZooKeeper session timeout: the server expires the
        session, and the agent finds it expired when it runs again (as after a long GC pause)."""
        agent = self.topology().agents[region]
        logfile = labs.agent_log(self.lab, region)
        offset = logfile.stat().st_size if logfile.exists() else 0
        if not agent.pid or not regions.signal_region(agent.pid, agent.config, signal.SIGSTOP):
            return {"error": f"the agent of {region} is not running"}
        try:
            time.sleep(hold_s)
        finally:
            regions.signal_region(agent.pid, agent.config, signal.SIGCONT)
        labs.wait_agent_ready(self.lab, region, timeout_s=120.0)
        time.sleep(3.0)
        with logfile.open("rb") as f:
            f.seek(offset)
            tail = f.read().decode(errors="replace").lower()
        return {"session_expired_logged": "session has expired" in tail or "expired_session" in tail}

    def _control(self, region: str, garbage: int, tampered: int, replayed: int) -> dict[str, Any]:
        """Write onto the namespace's control topic what an attacker with produce permission and no key
        can: garbage, genuine messages altered, genuine messages again (old and recent)."""
        topology = self.topology()
        control = (
            topology.namespaces[NAMESPACE].control_topic or f"persistent://{NAMESPACE}/{labs.CONTROL_TOPIC}"
        )
        rng = random.Random(f"{self.run_.plan.seed}-control-{self.run_.history.now():.0f}")
        genuine = _genuine(topology.region(region).service_url, control, limit=20)
        bad: list[bytes] = [rng.randbytes(rng.randint(1, 200)) for _ in range(garbage)]
        for data in rng.sample(genuine, min(tampered, len(genuine))):
            bad.append(_tamper(data, rng))
        bad.extend(rng.sample(genuine, min(replayed, len(genuine))))
        before = self._rejections()
        with messaging.client(topology.region(region).service_url) as c:
            producer = c.create_producer(control, batching_enabled=False)
            for data in bad:
                producer.send(data)
            producer.close()
        time.sleep(3.0)
        after = self._rejections()
        return {
            "written": len(bad),
            "genuine_read": len(genuine),
            "rejected": {
                r: {k: v - before.get(r, {}).get(k, 0) for k, v in c.items()} for r, c in after.items()
            },
        }

    def _rejections(self) -> dict[str, dict[str, int]]:
        out = {}
        for name in self.topology().agents:
            try:
                with urllib.request.urlopen(
                    labs.agent_metrics_url(self.lab, name) + "/state", timeout=3
                ) as r:
                    counters = json.loads(r.read()).get("counters") or {}
            except (OSError, ValueError):
                continue
            out[name] = {k: int(v) for k, v in counters.items() if k.startswith("control_rejected")}
        return out

    def _policy_edit(self, round_no: int, field: str, edits: dict[str, int]) -> None:
        topology, history = self.topology(), self.run_.history
        barrier = threading.Barrier(len(edits))

        def edit(region: str, value: int) -> None:
            body = POLICY_FIELDS[field](value)
            admin = AdminClient(topology.region(region).admin_url)
            barrier.wait(timeout=30)
            try:
                admin.post(f"/admin/v2/namespaces/{POLICY_NAMESPACE}/{field}", body)
            except AdminError as e:
                history.record(
                    "policy-edit", round=round, region=region, field=field, value=body, ok=False, error=str(e)
                )
            else:
                history.record("policy-edit", round=round_no, region=region, field=field, value=body, ok=True)

        threads = [threading.Thread(target=edit, args=(r, v), daemon=True) for r, v in edits.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)

    def restore(self) -> list[str]:
        """Put back whatever a fault that failed halfway may have left broken; what was done, and what
        could not be (the run goes on to its final phase either way: the checker judges what follows)."""
        done: list[str] = []

        def attempt(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as e:
                done.append(f"{what} failed: {type(e).__name__}: {e}")
                self.run_.report(f"restore: {what} failed: {e}")
            else:
                done.append(what)

        topology = self.topology()
        for name, up in labs.alive_regions(self.lab, topology).items():
            if up:
                with contextlib.suppress(Exception):
                    labs.freeze_region(self.lab, name, frozen=False)
            else:
                attempt(f"started region {name}", functools.partial(labs.start_region, self.lab, name))
        for name, agent in labs.load(self.lab).agents.items():
            if agent.pid:
                regions.signal_region(agent.pid, agent.config, signal.SIGCONT)
            if not agent.pid or not regions.owns(agent.pid, agent.config):
                attempt(f"started agent {name}", functools.partial(self._start_agent, name))
        if topology.wan:
            names = sorted(topology.regions)
            pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
            for x, y in pairs:
                attempt(
                    f"healed {x}-{y}", functools.partial(wan.partition, topology, self.lab, (x, y), heal=True)
                )
            attempt("cleared WAN shaping", lambda: wan.shape_links(topology, self.lab, wan.Shape(), None))
        return [d for d in done if "failed" in d or d.startswith("started")]


def _genuine(service_url: str, topic: str, *, limit: int) -> list[bytes]:
    """Up to ``limit`` messages of a control topic: the oldest ones and the next one written."""
    found: list[bytes] = []
    with messaging.client(service_url) as c:
        for start, wait_ms in ((pulsar.MessageId.earliest, 500), (pulsar.MessageId.latest, 5000)):
            reader = c.create_reader(topic, start)
            try:
                while len(found) < limit:
                    try:
                        found.append(reader.read_next(timeout_millis=wait_ms).data())
                    except pulsar.Timeout:
                        break
                    if start == pulsar.MessageId.latest:
                        break
            finally:
                reader.close()
            limit += 1
    return found


def _tamper(data: bytes, rng: random.Random) -> bytes:
    """A genuine envelope with one value changed and its signature kept, or a flipped byte."""
    try:
        value = json.loads(data)
        if isinstance(value, dict) and "seq" in value:
            value["seq"] = int(value["seq"]) + rng.randint(1, 10**6)
            return json.dumps(value).encode()
    except (ValueError, TypeError):
        pass
    at = rng.randrange(len(data)) if data else 0
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :] if data else b"\x00"


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class _Run:
    lab_dir: pathlib.Path
    plan: Plan
    history: History
    settings: Settings
    settle: Settle
    report: Report
    prefix: str
    topic: str
    clients: dict[str, pulsar.Client] = field(default_factory=dict)
    producing_stop: threading.Event = field(default_factory=threading.Event)


def fixed_settle(seconds: float) -> Settle:
    """A settle that only waits: its moves count as not settled (nothing judged them)."""

    def settle(_source: str, _target: str, _sub: str, _timeout_s: float) -> tuple[str, dict[str, Any]]:
        time.sleep(seconds)
        return "waited", {"seconds": seconds}

    return settle


@contextlib.contextmanager
def _clients(topology: topo.Topology, names: list[str]) -> Iterator[dict[str, pulsar.Client]]:
    with contextlib.ExitStack() as stack:
        yield {
            n: stack.enter_context(messaging.client(topology.region(n).service_url, timeout_s=10))
            for n in names
        }


def _prepare(run: _Run, topology: topo.Topology, names: list[str]) -> None:
    """The subscriptions exist in every region before any traffic; the policy namespace everywhere."""
    for sub, kind in SUBSCRIPTIONS.items():
        for name in names:
            run.clients[name].subscribe(
                run.topic,
                f"{run.prefix}-{sub}",
                consumer_type=_consumer_type(kind),
                initial_position=pulsar.InitialPosition.Earliest,
            ).close()
    admin = AdminClient(topology.region(names[0]).admin_url)
    admin.create_namespace(POLICY_NAMESPACE)


def _wait_replicated(run: _Run, topology: topo.Topology, names: list[str], timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        backlog = 0
        for name in names:
            try:
                stats = AdminClient(topology.region(name).admin_url).topic_stats(run.topic)
                backlog += sum(
                    int(r.get("replicationBacklog", 0)) for r in (stats.get("replication") or {}).values()
                )
            except AdminError:
                backlog += 1
        if backlog == 0:
            break
        time.sleep(1.0)
    return time.monotonic() - started


def _read_policies(topology: topo.Topology, names: list[str], timeout_s: float) -> dict[str, Any]:
    started = time.monotonic()
    while True:
        found: dict[str, str] = {}
        for name in names:
            try:
                found[name] = json.dumps(
                    AdminClient(topology.region(name).admin_url).namespace_policies(POLICY_NAMESPACE),
                    sort_keys=True,
                )
            except AdminError as e:
                found[name] = f"unreadable: {e}"
        parsed = {n: (json.loads(v) if v.startswith("{") else {}) for n, v in found.items()}
        keys = sorted({k for p in parsed.values() for k in p})
        differing = [
            k for k in keys if len({json.dumps(p.get(k), sort_keys=True) for p in parsed.values()}) > 1
        ]
        equal = len(set(found.values())) == 1 and not differing
        if equal or time.monotonic() - started > timeout_s:
            return {"equal": equal, "differing": differing, "waited_s": round(time.monotonic() - started, 1)}
        time.sleep(1.0)


def run(
    lab_dir: pathlib.Path,
    *,
    seed: int,
    duration_s: float,
    history_out: IO[str],
    settle: Settle,
    kinds: tuple[str, ...] = KINDS,
    settings: Settings | None = None,
    report: Report = _silent,
) -> Plan:
    """Play a seeded run on the running lab in ``lab_dir``, writing its history to ``history_out``."""
    settings = settings or Settings()
    lab_dir = lab_dir.resolve()
    topology = labs.load(lab_dir)
    names = sorted(topology.namespaces[NAMESPACE].regions)
    usable, unavailable = available_kinds(topology, kinds)
    the_plan = plan(
        seed,
        duration_s,
        names,
        usable,
        failover_every_s=settings.failover_every_s,
        fault_every_s=settings.fault_every_s,
    )
    prefix = f"chaos-{seed}-{uuid.uuid4().hex[:6]}"
    history = History(history_out)
    history.record(
        "run",
        seed=seed,
        duration_s=duration_s,
        regions=names,
        namespace=NAMESPACE,
        topic=f"persistent://{NAMESPACE}/{prefix}",
        subscriptions=dict(SUBSCRIPTIONS),
        subscription_names={s: f"{prefix}-{s}" for s in SUBSCRIPTIONS},
        kinds=usable,
        unavailable=unavailable,
        wall=time.time(),
        plan=the_plan.as_dict(),
    )
    with _clients(topology, names) as clients:
        state = _Run(
            lab_dir,
            the_plan,
            history,
            settings,
            settle,
            report,
            prefix,
            f"persistent://{NAMESPACE}/{prefix}",
            clients,
        )
        _prepare(state, topology, names)
        nemesis = _Nemesis(state)
        consumers = {sub: _Consumer(state, sub, home) for sub, home in the_plan.homes.items()}
        producers = [_Producers(state, n, clients[n]) for n in names]
        for t in [*consumers.values(), *producers]:
            t.start()
        report(
            f"run {prefix}: {len(the_plan.faults)} faults, {len(the_plan.failovers)} failovers "
            f"over {duration_s:.0f} s"
        )
        mover = threading.Thread(
            target=_dispatch, args=(state, consumers), name="chaos-failovers", daemon=True
        )
        mover.start()
        injected: set[str] = set()
        try:
            for n, step in enumerate(the_plan.faults):
                _sleep_until(history, step.at)
                if history.now() >= duration_s and step.action in injected:
                    # Late (earlier faults took longer than planned); a kind not yet injected still runs.
                    history.record("fault-skipped", kind=step.action, reason="past the end of the run")
                    continue
                injected.add(step.action)
                report(f"{history.now():7.1f} s  fault {step.action} {step.args}")
                nemesis.apply(step, n)
            _sleep_until(history, duration_s)
        finally:
            mover.join(timeout=600)
            restored = nemesis.restore()
            history.record("restored", done=restored)
        state.producing_stop.set()
        for p in producers:
            p.join(timeout=120)
        waited = _wait_replicated(state, topology, names, 180.0)
        history.record("replicated", waited_s=round(waited, 1))
        report("final failover and drain of every subscription")
        for sub, consumer in consumers.items():
            consumer.moves.put(_Move(the_plan.final[sub], quiescent=True, final=True))
        for consumer in consumers.values():
            consumer.join(timeout=settings.final_settle_timeout_s + 600)
        history.record("policies", **_read_policies(labs.load(lab_dir), names, 90.0))
        history.record("end", counts=dict(history.counts))
        history.flush()
    return the_plan


def _sleep_until(history: History, at: float) -> None:
    delay = at - history.now()
    if delay > 0:
        time.sleep(delay)


def _dispatch(run: _Run, consumers: dict[str, _Consumer]) -> None:
    for step in run.plan.failovers:
        _sleep_until(run.history, step.at)
        if run.history.now() >= run.plan.duration_s:
            return
        run.report(f"{run.history.now():7.1f} s  failover {step.args}")
        consumers[step.args["sub"]].moves.put(_Move(step.args["to"], bool(step.args["quiescent"])))
