"""Synthetic audit input in the data source's shape: for the Spark tests' oracle checks and the benchmark.

Each region publishes its own messages; each other region of the namespace receives them in origin order
through its own log, interleaved with everyone else's, minus what the knobs take away (a lagging tail, a
trimmed head, random gaps) plus replicator duplicates. Ledger ids collide between regions on purpose, as
they do in a fresh lab. Subscriptions acknowledge a random prefix plus random holes in each region; the
delivery log lists most acknowledged messages (the rest are lost), with some deliveries out of order.
Deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from geosync_core import drift
from geosync_core.positions import Position
from geosync_core.rangesets import AckState


@dataclass
class Scenario:
    messages: list[tuple[Any, ...]] = field(default_factory=list)
    """``source.MESSAGES_SCHEMA`` rows."""
    cursors: list[tuple[Any, ...]] = field(default_factory=list)
    """``source.CURSORS_SCHEMA`` rows."""
    deliveries: list[tuple[Any, ...]] = field(default_factory=list)
    """``findings.DELIVERIES_SCHEMA`` rows."""
    expected: dict[str, list[str]] = field(default_factory=dict)
    as_of_ms: int = 0

    def copies(self) -> list[drift.Copy]:
        return [copy_of(r) for r in self.messages]

    def cursor_values(self) -> list[drift.Cursor]:
        return [cursor_of(r) for r in self.cursors]

    def delivery_values(self) -> list[drift.Delivery]:
        return [delivery_of(r) for r in self.deliveries]


def copy_of(r: Sequence[Any]) -> drift.Copy:
    return drift.Copy(
        region=r[0],
        topic=r[1],
        partition=r[2],
        ledger=r[3],
        entry=r[4],
        batch_index=r[5],
        origin_region=r[6],
        origin_ledger=r[7],
        origin_entry=r[8],
        key=r[9],
        publish_time=r[10],
    )


def cursor_of(r: Sequence[Any]) -> drift.Cursor:
    from geosync_core.rangesets import Range

    ranges = [Range(Position(x[0], x[1]), Position(x[2], x[3])) for x in r[6]]
    return drift.Cursor(
        region=r[0],
        topic=r[1],
        partition=r[2],
        subscription=r[3],
        state=AckState.of(Position(r[4], r[5]), ranges),
    )


def delivery_of(r: Sequence[Any]) -> drift.Delivery:
    return drift.Delivery(
        region=r[0],
        topic=r[1],
        partition=r[2],
        subscription=r[3],
        key=r[4],
        origin_region=r[5],
        origin_ledger=r[6],
        origin_entry=r[7],
        batch_index=r[8],
        delivered_at=r[9],
    )


def scenario(
    *,
    seed: int,
    regions: Sequence[str] = ("a", "b", "c"),
    topics: int = 1,
    partitions: int = 1,
    per_origin: int = 50,
    subscriptions: int = 2,
    keys: int = 5,
    gap: float = 0.02,
    lag: int = 3,
    trim: int = 1,
    duplicate: float = 0.01,
    undelivered: float = 0.05,
    disorder: float = 0.03,
    holes: float = 0.3,
    with_properties: bool = True,
) -> Scenario:
    rnd = random.Random(seed)
    out = Scenario(as_of_ms=1_700_000_000_000 + per_origin * 1000)
    namespace = "geo/synthetic"
    out.expected = {namespace: list(regions)}
    props: dict[str, str] = {}
    for t in range(topics):
        topic = f"persistent://{namespace}/t{t}"
        for p in range(partitions if partitions > 1 else 1):
            partition = p if partitions > 1 else -1
            # what each origin published: (ledger, entry, key, publish_time)
            published = {
                o: [
                    (10, e, f"k{rnd.randrange(keys)}", 1_700_000_000_000 + e * 1000 + i)
                    for e in range(per_origin)
                ]
                for i, o in enumerate(regions)
            }
            logs: dict[str, list[tuple[str, int, int, str, int]]] = {}
            for r in regions:
                streams = []
                for o in regions:
                    msgs = published[o]
                    if o != r:
                        msgs = msgs[trim : max(trim, len(msgs) - lag)]
                        msgs = [m for m in msgs if rnd.random() >= gap]
                        msgs = [m for m in msgs for _ in range(2 if rnd.random() < duplicate else 1)]
                    streams.append([(o, *m) for m in msgs])
                log: list[tuple[str, int, int, str, int]] = []
                cursors_at = [0] * len(streams)
                while any(cursors_at[i] < len(s) for i, s in enumerate(streams)):
                    i = rnd.choice([i for i, s in enumerate(streams) if cursors_at[i] < len(s)])
                    log.append(streams[i][cursors_at[i]])
                    cursors_at[i] += 1
                logs[r] = log
                for entry, (o, ol, oe, key, pt) in enumerate(log):
                    row_props = (
                        props
                        if o == r or not with_properties
                        else {"__MSG_PROP_REPL_SOURCE_POSITION": f"{ol}:{oe}"}
                    )
                    out.messages.append((r, topic, partition, 20, entry, -1, o, ol, oe, key, pt, row_props))
            for s in range(subscriptions):
                sub = f"sub{s}"
                delivered: dict[tuple[str, int, int], tuple[str, str]] = {}
                for r in regions:
                    log = logs[r]
                    md = rnd.randrange(-1, len(log))
                    above = [e for e in range(md + 1, len(log)) if rnd.random() < holes]
                    state = AckState.of(Position(20, md)).ack(*(Position(20, e) for e in above))
                    out.cursors.append(
                        (
                            r,
                            topic,
                            partition,
                            sub,
                            state.mark_delete.ledger,
                            state.mark_delete.entry,
                            [
                                (x.lower.ledger, x.lower.entry, x.upper.ledger, x.upper.entry)
                                for x in state.ranges
                            ],
                        )
                    )
                    for e, (o, ol, oe, key, _pt) in enumerate(log):
                        if Position(20, e) in state and rnd.random() >= undelivered:
                            delivered.setdefault((o, ol, oe), (r, key))
                times = sorted(delivered.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0]))
                for n, ((o, ol, oe), (r, key)) in enumerate(times):
                    at = 1_700_000_000_000 + n * 10
                    if rnd.random() < disorder:
                        at -= 10 * rnd.randrange(1, 20)
                    out.deliveries.append((r, topic, partition, sub, key, o, ol, oe, None, at))
    return out
