"""GeoSync against Pulsar's built-in replicated subscriptions (PIP-33), side by side on the same regions.

    python bench/failover.py [--lab DIR] [--duration 30] [--topics 10] [--subs 10] [--rate 1000]

Part 1, failover scenarios (both mechanisms, same workload, same regions, one after the other):
  * cumulative-ack Exclusive: consumer in a acknowledges a prefix cumulatively, fails over to b;
  * Shared with 10% holes: consumer in a acknowledges 90% of what it received, fails over to b;
  * one region down: region c of geo/abc is frozen (SIGSTOP); the consumer fails over from a to b.
  Each reports lost and duplicated messages after a quiescent failover (consumer stopped, 2 s of sync).

Part 2, sync lag under load: ``--topics`` topics x ``--subs`` Shared subscriptions in geo/ab, ``--rate``
messages/s consumed and acknowledged in region a across all subscriptions (publish rate = rate / subs).
Probes pick an acknowledged message at random and time how long until region b's cursor of the same
subscription shows it acknowledged (ack in a -> b's internalStats). The load's shape, by default (since
session 26): a's consumers create the subscriptions as the producers start, b's are created by GeoSync's
agent (PIP-33's beforehand), half the messages are published in b, and the measured load begins once b has
every subscription; ``--load-shape precreated --b-share 0`` is the earlier shape (subscriptions created in
both regions first, a alone publishing). ``--load-batching off,on`` (the
default) runs it with producers batching off and on; batched, consumers acknowledge batch indexes and probes
check the message's batch index in b's cursor through the plugin's cursor endpoint. Also: agent CPU seconds
and bytes the agents' readers read, during the run.

``--wan-latency 40ms`` (a lab booted with ``geoctl lab up --wan``) sets that one-way latency on every pair
of regions (``geoctl lab wan``) for the load runs and clears it after; the table then also shows each
mechanism's own cost: lag minus the one-way latency, the least any sync from a to b can take. The failover
scenarios (which need region c) are not run then.

Without ``--lab`` a fresh three-region lab is booted in a temporary directory and stopped at the end
(two regions, a and b, with a WAN, when ``--wan-latency`` is given).
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import pulsar
import record
import requests
from rich.console import Console
from rich.table import Table

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_adapters.messaging import REPL_SOURCE_POSITION
from geosync_agent.collector import Collections
from geosync_agent.recent import Timeline
from geosync_core import topology as topo
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from geosync_lab import failover, labs, wan
from geosync_lab.probes import acknowledged, copies, percentile

console = Console(width=170)


def paced(rate: float | Callable[[], float], stop: threading.Event) -> Iterator[int]:
    """0, 1, 2, ... at ``rate`` a second (catching up after a slow step, never bursting ahead) until
    ``stop`` is set: the publishing loop of every load here. ``rate`` may be a function, asked at every
    step (a load whose rate changes as it runs: ``bench/ceiling.py``)."""
    rate_now = rate if callable(rate) else lambda: rate
    next_at, n = time.monotonic(), 0
    while not stop.is_set():
        yield n
        n += 1
        next_at += 1.0 / rate_now()
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def agent_usage(lab_dir: pathlib.Path, topology: topo.Topology) -> dict[str, tuple[float, int]]:
    """(CPU seconds, bytes read by readers) per agent, now."""
    out = {}
    for name, agent in topology.agents.items():
        cpu = 0.0
        if agent.pid:
            with_children = psutil.Process(agent.pid)
            t = with_children.cpu_times()
            cpu = t.user + t.system
        state = requests.get(labs.agent_metrics_url(lab_dir, name) + "/state", timeout=5).json()
        out[name] = (cpu, int(state["bytes_read"]))
    return out


# -- part 1 ----------------------------------------------------------------------------------------


def marker_counts(lab_dir: pathlib.Path, topology: topo.Topology) -> tuple[int, int]:
    """(marker messages sent, their bytes estimated from the agents' counters) across all agents."""
    sent = 0
    for name in topology.agents:
        state = requests.get(labs.agent_metrics_url(lab_dir, name) + "/state", timeout=5).json()
        sent += sum(v for k, v in state["counters"].items() if k.startswith("markers_sent_"))
    return sent, sent * MARKER_BYTES


MARKER_BYTES = 420
"""Typical size of one signed marker message (envelope + body), measured from the codec's vectors."""


def scenarios(lab_dir: pathlib.Path) -> list[tuple[str, failover.Outcome]]:
    topology = labs.load(lab_dir)
    rows = []
    for mode in ("builtin", "geosync", "snapshot"):
        if mode == "snapshot":
            started, (sent0, _) = time.monotonic(), marker_counts(lab_dir, topology)
        for batching in (True, False):
            how = "batched" if batching else "unbatched"
            rows.append(
                (
                    f"cumulative-ack Exclusive, {how}",
                    failover.run(topology, mode=mode, cumulative=True, batching=batching),
                )
            )
            rows.append(
                (
                    f"Shared, 10% holes, {how}",
                    failover.run(topology, mode=mode, hole_ratio=0.1, batching=batching),
                )
            )
            labs.freeze_region(lab_dir, "c", frozen=True)
            try:
                rows.append(
                    (
                        f"one region down (c frozen), {how}",
                        failover.run(
                            topology, mode=mode, namespace="geo/abc", hole_ratio=0.1, batching=batching
                        ),
                    )
                )
            finally:
                labs.freeze_region(lab_dir, "c", frozen=False)
        if mode == "snapshot":
            sent1, _ = marker_counts(lab_dir, topology)
            elapsed = time.monotonic() - started
            console.print(
                f"snapshot mode marker overhead: {sent1 - sent0} marker messages in {elapsed:.0f} s over 3 "
                f"topics = {(sent1 - sent0) / elapsed / 3:.2f} msg/s per topic "
                f"(~{(sent1 - sent0) * MARKER_BYTES / elapsed / 3:.0f} B/s per topic)"
            )
    return rows


# -- part 2 ----------------------------------------------------------------------------------------


@dataclass
class LoadRun:
    mode: str
    lags: list[float] = field(default_factory=list)
    copied: list[float] = field(default_factory=list)
    """Per synced probe (same order as ``lags``): seconds from the acknowledgement in a until the probe
    first found b's copy of the entry (0 when it was there at the first look)."""
    timeouts: int = 0
    timed_out: list[float] = field(default_factory=list)
    """When each probe not synced within its 10 s was acknowledged in a (monotonic clock)."""
    acked: int = 0
    """Acknowledgements in a over the measured load."""
    published: int = 0
    warm_up_s: float | None = None
    """Seconds the traffic ran before the measured load began (``load_run`` with ``with_traffic``)."""
    settle_s: float = 0.0
    """Seconds the traffic ran after the warm-up before the measured load (``load_run``'s ``settle_s``)."""
    slow: list[SlowProbe] = field(default_factory=list)
    """Probes synced a second or more after their acknowledgement, with what their polls saw."""
    probes: list[tuple[float, float]] = field(default_factory=list)
    """Per synced probe (same order as ``lags``): when it was acknowledged in a and when b showed it, on this
    machine's monotonic clock (for relating probes to events, e.g. an agent restarted during the load)."""
    origins: list[str] = field(default_factory=list)
    """Per synced probe (same order as ``lags``): the region its message was published in (a or b)."""
    stalls: Timeline = field(default_factory=Timeline)
    """When this process itself could not run (a 50 ms sleep woke late, or a garbage collection), on the
    machine's monotonic clock like the agents' timelines: a probe's lag may be the bench's own."""

    def synced(
        self, acked_at: float, copied_at: float | None, polls: list[tuple[float, float]], *, origin: str = "a"
    ) -> None:
        """A probe acknowledged at ``acked_at`` is synced now; b's copy was first seen at ``copied_at``;
        ``polls``: when each of its polls of b began and how long it took; ``origin``: where its message was
        published."""
        now = time.monotonic()
        self.lags.append(now - acked_at)
        self.probes.append((acked_at, now))
        self.origins.append(origin)
        self.copied.append(max(0.0, (copied_at or acked_at) - acked_at))
        if now - acked_at >= 1.0:
            self.slow.append(SlowProbe(acked_at, copied_at, now, polls))


@dataclass
class SlowProbe:
    acked_at: float
    copied_at: float | None
    synced_at: float
    polls: list[tuple[float, float]]

    def describe(self) -> str:
        """Times from the acknowledgement: b's copy first seen, the last two polls (start, duration)."""

        def rel(t: float) -> str:
            return f"+{t - self.acked_at:.2f}"

        copied = "-" if self.copied_at is None else rel(self.copied_at)
        last = ", ".join(f"{rel(t)}/{d:.2f}" for t, d in self.polls[-2:])
        longest = max((d for _, d in self.polls), default=0.0)
        return (
            f"lag {self.synced_at - self.acked_at:.2f} s: copy seen {copied}, {len(self.polls)} polls "
            f"(longest {longest:.2f} s; last two began/took {last})"
        )


class Mapper:
    """Local positions in b of messages published in a (from the replicated copies' source property)."""

    def __init__(self, client: pulsar.Client, topics: list[str]) -> None:
        self.map: dict[tuple[str, Position], Position] = {}
        self.sources: dict[tuple[str, Position], Position] = {}
        self.lock = threading.Lock()
        self.readers = [
            client.create_reader(t, pulsar.MessageId.earliest, reader_listener=self._on(t)) for t in topics
        ]

    def _on(self, topic: str) -> Any:
        def listener(_reader: Any, msg: Any) -> None:
            stamp = msg.properties().get(REPL_SOURCE_POSITION)
            if stamp:
                mid = msg.message_id()
                with self.lock:
                    self.map[(topic, Position.parse(stamp))] = Position(mid.ledger_id(), mid.entry_id())

        return listener

    def get(self, topic: str, pos: Position) -> Position | None:
        with self.lock:
            return self.map.get((topic, pos))

    def get_batched(self, admin_b: AdminClient, topic: str, pos: Position) -> Position | None:
        """b's copy of a's entry ``pos`` from b's plugin origin index (batched copies carry no visible
        stamp); cached like the stamped ones."""
        return self._cached(
            self.map,
            (topic, pos),
            lambda: {(topic, s): c for s, c in copies(admin_b, topic, origin="a").items()},
        )

    def origin_in_b(self, admin_a: AdminClient, topic: str, copy: Position) -> Position | None:
        """The entry in b that a's entry ``copy`` (a copy of b's message) was copied from, from a's plugin
        origin index; cached."""
        return self._cached(
            self.sources,
            (topic, copy),
            lambda: {(topic, c): s for s, c in copies(admin_a, topic, origin="b").items()},
        )

    def _cached(
        self,
        table: dict[tuple[str, Position], Position],
        key: tuple[str, Position],
        fetch: Callable[[], dict[tuple[str, Position], Position]],
    ) -> Position | None:
        """``table[key]``, or once ``fetch``'s answer (an origin index read) is added to ``table``."""
        with self.lock:
            found = table.get(key)
        if found is not None:
            return found
        fetched = fetch()
        with self.lock:
            table.update(fetched)
            return table.get(key)

    def close(self) -> None:
        for r in self.readers:
            r.close()


def load_run(
    topology: topo.Topology,
    *,
    mode: str,
    duration: float,
    n_topics: int,
    n_subs: int,
    rate: float,
    probes: int = 4,
    batching: bool = False,
    during: Callable[[bool], None] | None = None,
    with_traffic: bool = False,
    b_share: float = 0.0,
    warm_up_limit: float = 600.0,
    settle_s: float = 0.0,
    hole_ratio: float = 0.0,
    rate_at: Callable[[float], float] | None = None,
    run: LoadRun | None = None,
) -> LoadRun:
    """``batching``: producers batch (the client's default) and consumers acknowledge batch indexes; probes
    then check single messages through the plugin's cursor endpoint instead of internalStats. ``during`` is
    called with True as the load starts (subscriptions, consumers and producers ready) and with False as it
    stops (for measuring the load alone, without the setup).

    ``with_traffic``: the subscriptions are created by a's consumers as the producers start, not beforehand,
    and not at all in b (GeoSync's agent in b creates them from a's claims; PIP-33's are created in b
    beforehand, as it needs). ``b_share``: that share of the messages is published in b (both regions
    producing); a's consumers acknowledge them all, and the probes sample both origins. With
    ``with_traffic`` the traffic runs until every subscription exists in b too (at most ``warm_up_limit`` s:
    ``LoadRun.warm_up_s``) before the measured load begins: its lag is the steady state's, not the new
    subscriptions' creation. ``settle_s``: the traffic then runs that much longer before the measured load
    (``LoadRun.settle_s``): the agents' first minute with the new subscriptions (their first discovery passes,
    checkpoints and resyncs of them) left out of the measured window, or, at 0, in it.
    ``LoadRun.acked`` counts the measured load's acknowledgements alone.

    ``hole_ratio``: that share of the messages a's consumers receive is never acknowledged (holes; the probes
    sample acknowledged messages only). ``rate_at``: the acknowledgement rate as a function of the seconds
    since the measured load began (``rate`` before it), for a load that steps its rate; ``run``: the
    ``LoadRun`` to fill (its ``acked`` and ``probes`` can then be read while the load runs)."""
    suffix = uuid.uuid4().hex[:6]
    topics = [f"persistent://geo/ab/load-{mode}-{suffix}-{i}" for i in range(n_topics)]
    prefix = failover.BUILTIN_PREFIX if mode == "builtin" else "load-"
    subs = [f"{prefix}{suffix}-{j}" for j in range(n_subs)]
    builtin = mode == "builtin"
    a, b = topology.region("a"), topology.region("b")
    run = run if run is not None else LoadRun(mode=mode)
    recent: list[tuple[str, str, Position, int, float, str]] = []
    recent_lock = threading.Lock()
    stop = threading.Event()  # set in ``finally`` too: a setup that fails leaves no publisher running
    ca = pulsar.Client(a.service_url, io_threads=2, message_listener_threads=2)
    cb = pulsar.Client(b.service_url)
    try:
        precreate = [ca, cb] if not with_traffic else [cb] if builtin else []
        for t in topics:
            for s in subs:
                for c in precreate:
                    c.subscribe(
                        t,
                        s,
                        consumer_type=pulsar.ConsumerType.Shared,
                        initial_position=pulsar.InitialPosition.Earliest,
                        replicate_subscription_state_enabled=builtin,
                    ).close()
        mapper = Mapper(cb, topics)
        if precreate:
            time.sleep(4)  # agents discover the new subscriptions; PIP-33 controllers start

        def listener_for(topic: str, sub: str) -> Any:
            holes = random.Random()

            def on_message(consumer: Any, msg: Any) -> None:
                if hole_ratio and holes.random() < hole_ratio:
                    return  # never acknowledged: a hole in the subscription's cursor
                consumer.acknowledge(msg)
                mid = msg.message_id()
                origin = "b" if msg.data()[:1] == b"b" else "a"
                with recent_lock:
                    run.acked += 1
                    position = Position(mid.ledger_id(), mid.entry_id())
                    recent.append((topic, sub, position, mid.batch_index(), time.monotonic(), origin))
                    if len(recent) > 2000:
                        del recent[:1000]

            return on_message

        def producers_in(client: pulsar.Client) -> list[Any]:
            return [
                client.create_producer(t, batching_enabled=batching, batching_max_publish_delay_ms=10)
                for t in topics
            ]

        producers = {"a": producers_in(ca), "b": producers_in(cb) if b_share > 0 else []}
        # every message is consumed by each of the n_subs subscriptions (and acknowledged but for the holes)
        per_message = n_subs * (1.0 - hole_ratio)
        measured_from: list[float] = []  # when the measured load began (rate_at's origin)

        def publish_rate() -> float:
            if rate_at is None or not measured_from:
                return rate / per_message
            return rate_at(time.monotonic() - measured_from[0]) / per_message

        def publish() -> None:
            rng = random.Random()
            for i in paced(publish_rate, stop):
                region = "b" if rng.random() < b_share else "a"
                producers[region][i % n_topics].send_async(f"{region}{i}".encode(), None)
                run.published += 1

        publisher = threading.Thread(target=publish, daemon=True)
        if with_traffic:
            publisher.start()  # the subscriptions below are created while the messages flow
        consumers = [
            ca.subscribe(
                t,
                s,
                consumer_type=pulsar.ConsumerType.Shared,
                message_listener=listener_for(t, s),
                initial_position=pulsar.InitialPosition.Earliest,
                replicate_subscription_state_enabled=builtin,
                batch_index_ack_enabled=batching,
            )
            for t in topics
            for s in subs
        ]
        admin_b = AdminClient(b.admin_url, timeout=5)
        admin_a = AdminClient(a.admin_url, timeout=5)

        def probe() -> None:
            rng = random.Random()
            while not stop.is_set():
                with recent_lock:
                    if not recent:
                        sample = None
                    else:
                        # one of the latest, probed once
                        sample = recent.pop(rng.randrange(max(0, len(recent) - 50), len(recent)))
                if sample is None:
                    time.sleep(0.02)
                    continue
                topic, sub, pos_a, index, acked_at, origin = sample
                if time.monotonic() - acked_at > 1.0:
                    continue  # older than a second: a newer one is probed instead
                deadline = acked_at + 10.0
                done = False
                copied_at: float | None = None
                polls: list[tuple[float, float]] = []

                while time.monotonic() < deadline and not stop.is_set():
                    began = time.monotonic()
                    if origin == "b":
                        pos_b = mapper.origin_in_b(admin_a, topic, pos_a)
                    elif batching:
                        pos_b = mapper.get_batched(admin_b, topic, pos_a)
                    else:
                        pos_b = mapper.get(topic, pos_a)
                    if pos_b is not None and copied_at is None:
                        copied_at = time.monotonic()
                    if pos_b is not None and batching:
                        done = (pos_b, index) in acknowledged(admin_b, topic, sub, [(pos_b, index)])
                    elif pos_b is not None:
                        try:
                            raw = admin_b.internal_stats(topic)["cursors"].get(sub)
                        except AdminError:
                            raw = None
                        done = bool(raw) and pos_b in AckState.parse(
                            raw["markDeletePosition"], raw["individuallyDeletedMessages"]
                        )
                    polls.append((began, time.monotonic() - began))
                    if done:
                        run.synced(acked_at, copied_at, polls, origin=origin)
                        break
                    # Every 20 ms for the first half second, then every 100 ms: four probes polling b's broker
                    # 50 times a second each were five times the cursor-write calls b's agent made there, on
                    # a machine the load saturates (a lag over 0.5 s is then measured to within 0.1 s).
                    time.sleep(0.02 if time.monotonic() - acked_at < 0.5 else 0.1)
                if not done and not stop.is_set():
                    run.timeouts += 1
                    run.timed_out.append(acked_at)

        def watch() -> None:
            """Record when this process could not run for a while (its sleeps wake late)."""
            while not stop.is_set():
                began = time.monotonic()
                time.sleep(0.05)
                run.stalls.add("asleep", began, time.monotonic() - began - 0.05)

        collections = Collections(timeline=run.stalls)
        gc.callbacks.append(collections.on_gc)
        threads = [threading.Thread(target=watch, daemon=True)]
        threads += [threading.Thread(target=probe, daemon=True) for _ in range(probes)]
        if not with_traffic:
            publisher.start()
        else:
            began = time.monotonic()
            while not all_in(admin_b, topics, subs) and time.monotonic() - began < warm_up_limit:
                time.sleep(2.0)
            run.warm_up_s = time.monotonic() - began
            if settle_s > 0:
                time.sleep(settle_s)
                run.settle_s = settle_s
        measured_from.append(time.monotonic())
        if during is not None:
            during(True)
        acked_before = run.acked
        for th in threads:
            th.start()
        time.sleep(duration)
        stop.set()
        measured = run.acked - acked_before  # a's consumers go on until they are closed below
        if during is not None:
            during(False)
        for th in [publisher, *threads]:
            th.join(timeout=15)
        gc.callbacks.remove(collections.on_gc)
        # Closing is best effort: the figures are taken (a loaded machine's broker may time a close out).
        for closable in [*consumers, *producers["a"], *producers["b"], mapper]:
            try:
                closable.close()
            except pulsar.PulsarException as e:
                console.print(f"closing after the load run: {e}")
    finally:
        stop.set()
        for pulsar_client in (ca, cb):
            try:
                pulsar_client.close()
            except pulsar.PulsarException as e:
                console.print(f"closing a client after the load run: {e}")
    run.acked = measured
    return run


def add_load_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """``load_run``'s ``with_traffic`` and ``b_share`` as options (read back by ``load_shape``)."""
    parser.add_argument(
        "--load-shape",
        choices=("with-traffic", "precreated"),
        default="with-traffic",
        help="with-traffic (the default): the load's subscriptions are created by a's consumers as its "
        "producers start, and in b by GeoSync's agent (PIP-33's beforehand); precreated: in both regions "
        "before the traffic (every run before session 26)",
    )
    parser.add_argument(
        "--b-share",
        type=float,
        default=0.5,
        help="share of the load's messages published in b (both regions producing; 0: a only, as before "
        "session 26); a's consumers acknowledge every message, whatever its origin",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with-traffic only: after every subscription exists in b, run the traffic this much longer "
        "before measuring (0, the default: measure from then on, the agents' first minute with the new "
        "subscriptions included; 60: their steady state)",
    )


def load_shape(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """``load_run``'s shape arguments from ``add_load_shape_arguments``' options (a bad share: the parser's
    error)."""
    if not 0.0 <= args.b_share <= 1.0:
        parser.error(f"--b-share {args.b_share}: a share of the messages, from 0 to 1")
    if args.settle < 0 or (args.settle and args.load_shape != "with-traffic"):
        parser.error(f"--settle {args.settle}: seconds (0 or more), and only with --load-shape with-traffic")
    return {
        "with_traffic": args.load_shape == "with-traffic",
        "b_share": args.b_share,
        "settle_s": args.settle,
    }


def all_in(admin: AdminClient, topics: list[str], subs: list[str]) -> bool:
    """Whether every one of ``subs`` exists on every one of ``topics`` in ``admin``'s region (one short list
    per topic, until one is missing)."""
    want = set(subs)
    for topic in topics:
        try:
            have = admin.get(f"/admin/v2/{AdminClient.topic_path(topic)}/subscriptions")
        except AdminError:
            return False
        if not want <= set(have or ()):
            return False
    return True


def pct(values: list[float], q: float, *, minus_ms: int = 0) -> str:
    value = percentile(values, q)
    return "-" if value is None else f"{value * 1000 - minus_ms:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=pathlib.Path, help="use this running lab instead of booting one")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load per mechanism")
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--subs", type=int, default=10, help="subscriptions per topic")
    parser.add_argument("--rate", type=float, default=1000.0, help="acknowledged messages/s across all subs")
    parser.add_argument("--skip-scenarios", action="store_true")
    parser.add_argument("--modes", default="builtin,geosync", help="which mechanisms to load-test")
    parser.add_argument(
        "--load-batching",
        default="off,on",
        help="load runs with producers batching off and/or on (batch-index acknowledgements with it)",
    )
    add_load_shape_arguments(parser)
    parser.add_argument(
        "--wan-latency",
        default=None,
        help="one-way latency between every pair of regions during the load runs, e.g. 40ms (a --wan lab)",
    )
    record.add_argument(parser)
    args = parser.parse_args()
    shape = load_shape(parser, args)
    outcomes: list[dict[str, Any]] = []
    loads: list[dict[str, Any]] = []
    latency_ms = wan.parse_duration_ms(args.wan_latency) if args.wan_latency else 0
    names = ["a", "b"] if args.wan_latency else ["a", "b", "c"]
    with labs.given_or_booted(
        args.lab, names, with_wan=bool(args.wan_latency), report=console.print
    ) as lab_dir:
        topology = labs.load(lab_dir)
        console.print(f"Pulsar {topology.pulsar_version}; machine: {psutil.cpu_count()} cores")
        if args.wan_latency:
            # Checked (and the lab's WAN found) before any load: a lab without one fails here.
            wan.shape_links(topology, lab_dir, wan.Shape(), None)
        if not args.skip_scenarios and not args.wan_latency:
            table = Table(
                "scenario",
                "mechanism",
                "acked in a",
                "delivered in b",
                "duplicates",
                "lost",
                "synced within 2 s",
            )
            for name, o in scenarios(lab_dir):
                outcomes.append(
                    {"scenario": name, "mode": o.mode, "batching": o.batching, "acked": o.acked_in_source}
                    | {"duplicates": o.duplicates, "lost": o.lost}
                )
                table.add_row(
                    name,
                    {"builtin": "PIP-33", "geosync": "GeoSync exact", "snapshot": "GeoSync snapshot"}[o.mode],
                    str(o.acked_in_source),
                    str(o.delivered_in_target),
                    str(o.duplicates),
                    str(o.lost),
                    "not measured (batched)"
                    if o.batching
                    else "no"
                    if o.synced_after_s is None
                    else f"yes ({o.synced_after_s:.2f} s)",
                )
            console.print(table)
        table = Table(
            "mechanism",
            "subs",
            "acks/s",
            "lag p50",
            "lag p99",
            "probes",
            "not synced in 10 s",
            *(["own cost p50", "own cost p99"] if latency_ms else []),
            f"agent CPU s ({'+'.join(topology.regions)})",
            "agent bytes read",
        )
        for mode, batching in [
            (m, b == "on") for b in args.load_batching.split(",") for m in args.modes.split(",")
        ]:
            before = agent_usage(lab_dir, topology)
            started = time.monotonic()
            if latency_ms:
                wan.shape_links(topology, lab_dir, wan.Shape(latency_ms=latency_ms), None)
            try:
                run = load_run(
                    topology,
                    mode=mode,
                    duration=args.duration,
                    n_topics=args.topics,
                    n_subs=args.subs,
                    rate=args.rate,
                    batching=batching,
                    **shape,
                )
            finally:
                if latency_ms:
                    wan.shape_links(topology, lab_dir, wan.Shape(), None)
            elapsed = time.monotonic() - started
            after = agent_usage(lab_dir, topology)
            cpu = sum(after[n][0] - before[n][0] for n in after)
            read = sum(after[n][1] - before[n][1] for n in after)
            p99 = percentile(run.lags, 0.99)
            loads.append(
                {"mode": mode, "batching": batching, "acks_per_s": run.acked / args.duration}
                | {"lag_p50_s": percentile(run.lags, 0.5), "lag_p99_s": p99, "probes": len(run.lags)}
                | {"not_synced_in_10_s": run.timeouts, "agent_cpu_s": cpu, "latency_ms": latency_ms}
            )
            table.add_row(
                ("PIP-33" if mode == "builtin" else "GeoSync") + (", batched" if batching else ""),
                str(args.topics * args.subs),
                f"{run.acked / args.duration:.0f}",
                pct(run.lags, 0.5),
                pct(run.lags, 0.99),
                str(len(run.lags)),
                str(run.timeouts),
                *(
                    [pct(run.lags, 0.5, minus_ms=latency_ms), pct(run.lags, 0.99, minus_ms=latency_ms)]
                    if latency_ms
                    else []
                ),
                f"{cpu:.1f} in {elapsed:.0f} s",
                f"{read:,}",
            )
        console.print(table)
        console.print(
            "lag = acknowledged in a -> shown acknowledged by b's cursor (internalStats; batched: the "
            "message's batch index, through the plugin's cursor endpoint)"
            + (
                f"; own cost = lag - {latency_ms} ms one-way latency between the regions"
                if latency_ms
                else ""
            )
        )
    record.write(args.record, failover_record(outcomes, loads, args))


def failover_record(
    outcomes: list[dict[str, Any]], loads: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    """This run's row: the failover scenarios when they ran, else the sync lag under load."""
    figures = {"scenarios": outcomes, "loads": loads}
    row: dict[str, Any]
    if outcomes:
        cells = {}
        for mode in ("geosync", "builtin"):
            mine = [o for o in outcomes if o["mode"] == mode]
            low, high = (
                min((o["duplicates"] for o in mine), default=0),
                max((o["duplicates"] for o in mine), default=0),
            )
            spread = str(low) if low == high else f"{low}-{high}"
            cells[mode] = (
                f"{spread} duplicates, {sum(o['lost'] for o in mine)} lost in {len(mine)}" if mine else "-"
            )
        # "Shared, 10% holes, batched" and "..., unbatched" are one case, batched and not
        cases = dict.fromkeys(
            o["scenario"].removesuffix(", batched").removesuffix(", unbatched") for o in outcomes
        )
        row = record.make(
            f"Quiescent failover, {len({o['scenario'] for o in outcomes})} cases, batched and not: "
            + "; ".join(cases),
            cells["geosync"],
            cells["builtin"],
            figures=figures,
        )
        # the scenarios' table too: this record is also a section table (bench/results/tables/)
        names = {"builtin": "PIP-33", "geosync": "GeoSync exact", "snapshot": "GeoSync snapshot"}
        row["columns"] = ["scenario", "mechanism", "acked in a", "duplicates", "lost"]
        row["rows"] = [
            [o["scenario"], names.get(o["mode"], o["mode"]), o["acked"], o["duplicates"], o["lost"]]
            for o in outcomes
        ]
        return row

    def p99(mode: str) -> str:
        values = [x["lag_p99_s"] for x in loads if x["mode"] == mode and x["lag_p99_s"] is not None]
        return ", ".join(f"p99 {v:.2f} s" for v in values) or "-"

    shaped = f", {args.wan_latency} one way between regions" if args.wan_latency else ""
    row = record.make(
        f"Sync lag, {args.topics * args.subs} subscriptions, {args.rate:,.0f} acks/s{shaped}",
        p99("geosync"),
        p99("builtin"),
        figures=figures,
    )
    return row


if __name__ == "__main__":
    main()
