"""The agents' CPU per acknowledgement at 10,000 subscriptions, without brokers (issue 12).

    python bench/agent_cpu.py [--topics 100] [--subs 100] [--rounds 10] [--acks 2000] [--round-s 1.0]
                              [--profile N] [--collector agent|python]

Two agents, a and b, each over the unit tests' fake region (``tests/agent/fakes.py``: no broker, no network,
the control topic carried by hand), in one process. ``--topics`` topics of 400 entries each, published in a
and replicated to b, with ``--subs`` subscriptions each. Per round, a's consumers acknowledge ``--acks``
messages in order over randomly chosen subscriptions (one in twenty skipping one: a hole), both regions'
producers add an entry to ``--grow`` random topics (nobody claims those yet), then a's agent runs a round,
its control messages reach b, b's agent runs a round, and b's reach a. Printed: the CPU each agent's rounds
took per acknowledgement (``time.process_time`` around them), and of that what the fakes' broker work took
(their internal stats, cursor writes, feed and origin answers: a broker's CPU, not the agent's, timed around
each call the agent makes into the fake region) and the agent's own part, which is the figure issue 46's
target is about; a few of their counters; then the CPU of each agent's apply step alone after every topic
grew by an entry nobody claims (``apply_walks``: what a round costs at 10,000 subscriptions whatever the
acknowledgements).

This is what the lab's 10,000-subscription step (``bench/scale.py``) cannot say on a two-core machine shared
with the brokers: the agent's own work, apart from waits on brokers and for a CPU. It is not a lab figure:
the fakes answer instantly, and a round's HTTP and JSON work against brokers is missing. ``--profile N``
runs the rounds under cProfile and prints each agent's N costliest functions (which doubles the times).
Also printed: the garbage collections over the measured rounds (both agents' objects in one process), with
the collector set as the agent sets it (``--collector agent``, the default: tuned, and what is alive frozen
after each agent's round as its loop does) or as CPython does.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pathlib
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from geosync_agent import collector
from geosync_agent.runtime import read_now
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import FakeRegion, Harness, message
from tests.agent.pairs import NS, carry  # the control topic carried by hand

ENTRIES = 400
STAMP = "__MSG_PROP_REPL_SOURCE_POSITION"


GROWTH_LEDGER = {"a": 300, "b": 700}
"""Per region, the first ledger of the entries its producers add while the bench runs (topic i: this + i)."""


def build(topics: list[str], subs: int) -> tuple[Harness, Harness]:
    a = FakeRegion(
        "a",
        {NS: ["a", "b"]},
        topics={t: [Position(100 + i, e) for e in range(ENTRIES)] for i, t in enumerate(topics)},
    )
    b = FakeRegion(
        "b",
        {NS: ["a", "b"]},
        topics={t: [Position(500 + i, e) for e in range(ENTRIES)] for i, t in enumerate(topics)},
    )
    for i, topic in enumerate(topics):
        a.origin_runs[topic] = [OriginRun(100 + i, 0, ENTRIES, "a")]
        b.origin_runs[topic] = [OriginRun(500 + i, 0, ENTRIES, "a", Position(100 + i, 0))]
        for s in range(subs):
            a.cursors[(topic, f"s{s}")] = AckState.of(Position(100 + i, -1))
            b.cursors[(topic, f"s{s}")] = AckState.of(Position(500 + i, -1))
    ha, hb = Harness.build(a), Harness.build(b)
    for h in (ha, hb):
        h.metered = True  # plans and publishes timed, and heavy ones paused, as in production
        h.discover()
        h.step()
    for i, topic in enumerate(topics):
        for e in range(ENTRIES):
            ha.messaging.deliver(topic, message(topic, Position(100 + i, e)))
            stamp = {STAMP: f"{100 + i}:{e}"}
            hb.messaging.deliver(
                topic, message(topic, Position(500 + i, e), properties=stamp, producer="a-1-0")
            )
    return ha, hb


BROKER_WORK = (
    "internal_stats",
    "topic_stats",
    "plugin_feed",
    "plugin_write",
    "plugin_origins",
    "plugin_topics",
    "entry_headers",
)
"""What the fake region answers in a broker's stead when the agent asks (its admin API and plugin)."""


class BrokerClock:
    """The CPU the agents' calls into their fake regions take (the outermost call only: ``plugin_write``
    reports each cursor through ``report``)."""

    def __init__(self) -> None:
        self.took = 0.0
        self.depth = 0

    def wrap(self, region: FakeRegion) -> None:
        for name in BROKER_WORK:
            setattr(region, name, self._timed(getattr(region, name)))

    def _timed(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            started = time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.took += time.process_time() - started

        return timed


def apply_walks(h: Harness, topics: list[str], ledgers: list[int], grown: dict[str, int]) -> list[float]:
    """The CPU of ``h``'s apply step (with the landing of its writes), 20 times, each after one entry nobody
    claims was appended to every topic and read by the agent's index step: what every round pays whatever
    the acknowledgements, as every topic grows all the time under the lab's load."""
    agent, took = h.agent, []
    for _ in range(20):
        for topic, ledger in zip(topics, ledgers, strict=True):
            p = Position(ledger, 10_000 + grown[topic])
            h.region.topics[topic].append(p)
            h.messaging.deliver(topic, message(topic, p))
            grown[topic] += 1
        now = read_now()
        agent.index(now)
        started = time.process_time()
        agent.apply(now)
        agent.land_writes(now)
        took.append(time.process_time() - started)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--subs", type=int, default=100, help="subscriptions per topic")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds")
    parser.add_argument("--acks", type=int, default=2000, help="acknowledgements per round")
    parser.add_argument("--grow", type=int, default=20, help="topics each region's producers add an entry to")
    parser.add_argument(
        "--round-s",
        type=float,
        default=1.0,
        help="seconds each measured round moves the agents' clocks (polls and resyncs are paced by it): "
        "0.1 with --acks 200 is the lab's 2,000 acknowledgements a second at 0.1 s rounds",
    )
    parser.add_argument("--warmup", type=int, default=60, help="quiet rounds first (polls settle)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions per agent")
    parser.add_argument(
        "--collector",
        choices=("agent", "python"),
        default="agent",
        help="the garbage collector as the agent sets it (geosync_agent.collector), or CPython's defaults",
    )
    args = parser.parse_args()
    # As the agent's loop: tuned, and what is alive frozen after every round (``Collections.after_round``).
    tuned = collector.tune({}) if args.collector == "agent" else None

    topics = [f"persistent://{NS}/t{i}" for i in range(args.topics)]
    started = time.monotonic()
    ha, hb = build(topics, args.subs)
    for _ in range(args.warmup):
        ha.step()
        carry(ha, hb)
        hb.step()
        carry(hb, ha)
    if tuned is not None:
        tuned.after_round(time.monotonic())
    print(
        f"{len(topics) * args.subs:,} subscriptions ready in {time.monotonic() - started:.0f} s", flush=True
    )

    # The interpreter's garbage collections over the measured rounds: a full one walks every object both
    # agents hold, with the loop (and every thread) stopped.
    collections = collector.Collections()
    gc.callbacks.append(collections.on_gc)
    rng = random.Random(args.seed)
    keys = [(t, f"s{s}") for t in topics for s in range(args.subs)]
    next_entry = dict.fromkeys(keys, 0)
    grown = dict.fromkeys(topics, 0)
    cpu = {"a": 0.0, "b": 0.0}
    brokers = {"a": BrokerClock(), "b": BrokerClock()}
    brokers["a"].wrap(ha.region)
    brokers["b"].wrap(hb.region)
    fakes = {"a": 0.0, "b": 0.0}
    profiles = {"a": cProfile.Profile(), "b": cProfile.Profile()}
    acks = 0
    for _ in range(args.rounds):
        touched: dict[tuple[str, str], None] = {}
        for _ in range(args.acks):
            key = rng.choice(keys)
            i = int(key[0].rsplit("t", 1)[1])
            entry = next_entry[key]
            if entry >= ENTRIES - 2:
                continue
            skip = 1 if rng.random() < 0.05 else 0
            ha.region.acknowledge(key[0], key[1], [Position(100 + i, entry + skip)])
            next_entry[key] = entry + 1 + skip
            acks += 1
            touched[key] = None
        ha.region.feed.extend(ha.region.report(*key) for key in touched)
        for i in rng.sample(range(len(topics)), min(args.grow, len(topics))):
            topic = topics[i]
            for h, ledger in ((ha, GROWTH_LEDGER["a"] + i), (hb, GROWTH_LEDGER["b"] + i)):
                p = Position(ledger, grown[topic])
                h.region.topics[topic].append(p)
                h.messaging.deliver(topic, message(topic, p))
            grown[topic] += 1
        for name, h, other in (("a", ha, hb), ("b", hb, ha)):
            t0, f0 = time.process_time(), brokers[name].took
            if args.profile:
                profiles[name].enable()
            h.step(args.round_s)
            if tuned is not None:
                tuned.after_round(time.monotonic())
            if args.profile:
                profiles[name].disable()
            cpu[name] += time.process_time() - t0
            fakes[name] += brokers[name].took - f0
            carry(h, other)
    gc.callbacks.remove(collections.on_gc)
    print(f"{acks:,} acknowledgements over {args.rounds} rounds")
    print(
        f"garbage collections ({len(gc.get_objects()):,} objects tracked, {gc.get_freeze_count():,} frozen): "
        + ", ".join(
            f"generation {g} {collections.counts[g]} x, max {collections.longest[g] * 1e3:.0f} ms, "
            f"total {collections.total[g] * 1e3:.0f} ms"
            for g in range(3)
        )
    )
    for name, h in (("a", ha), ("b", hb)):
        counters = h.agent.stats.counters
        shown = {k: counters.get(k, 0) for k in ("states_published", "claims_received", "plugin_acks")}
        shown |= {k: v for k, v in counters.items() if k.startswith("plans_")}
        per_ack, fake = cpu[name] / max(acks, 1) * 1e6, fakes[name] / max(acks, 1) * 1e6
        print(
            f"{name}: {cpu[name]:.2f} CPU-s, {per_ack:.0f} us per acknowledgement, of which the fakes' "
            f"broker work {fake:.0f} us: the agent's own {per_ack - fake:.0f} us; {shown}"
        )
    for name, h in (("a", ha), ("b", hb)):
        walks = apply_walks(h, topics, [GROWTH_LEDGER[name] + i for i in range(len(topics))], grown)
        print(
            f"{name}: the apply step alone after every topic grew by an entry nobody claims (a round's fixed "
            f"part): median {statistics.median(walks) * 1e3:.1f} ms, max {max(walks) * 1e3:.1f} ms "
            f"({len(walks)} times, {len(h.agent.subs):,} subscriptions)"
        )
    if args.profile:
        for name in ("a", "b"):
            print(f"\n--- {name} ---")
            pstats.Stats(profiles[name]).sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
