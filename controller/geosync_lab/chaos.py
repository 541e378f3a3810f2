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

The parts live one per module: ``chaos_plan`` (fault kinds and the schedule), ``chaos_workload`` (the
generator and the history), ``chaos_nemesis`` (the faults); this one plays the run, and every name callers
use is here too.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any

import pulsar

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_core import topology as topo
from geosync_lab import labs
from geosync_lab.chaos_nemesis import _Nemesis
from geosync_lab.chaos_plan import (
    HOLE_RATIO,
    KEYS,
    KINDS,
    NAMESPACE,
    POLICY_FIELDS,
    POLICY_NAMESPACE,
    SUBSCRIPTIONS,
    WAN_KINDS,
    ZK_SESSION_TIMEOUT_S,
    Plan,
    Report,
    Settle,
    Step,
    available_kinds,
    plan,
    silent,
)
from geosync_lab.chaos_workload import History, Settings, _Consumer, _consumer_type, _Move, _Producers, _Run

__all__ = [
    "HOLE_RATIO",
    "KEYS",
    "KINDS",
    "NAMESPACE",
    "POLICY_FIELDS",
    "POLICY_NAMESPACE",
    "SUBSCRIPTIONS",
    "WAN_KINDS",
    "ZK_SESSION_TIMEOUT_S",
    "History",
    "Plan",
    "Report",
    "Settings",
    "Settle",
    "Step",
    "available_kinds",
    "fixed_settle",
    "plan",
    "run",
]

# -- the run ---------------------------------------------------------------------------------------


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
    report: Report = silent,
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
