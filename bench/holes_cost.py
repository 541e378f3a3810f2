"""What a cursor with many holes kept for good costs the agent per report, plan and publish (issue 17.8).

    python bench/holes_cost.py [--entries 50000] [--share 0.9] [--rounds 20]

A topic of ``--entries`` single-message entries of this region's own messages; its cursor acknowledges each
with probability ``--share`` (the rest are holes for good, as in ``bench/region_down.py``), and the other
region's claims say the same (nothing to apply). Timed, median of ``--rounds`` in milliseconds: parsing the
feed's report of the cursor (``individuallyDeletedMessages``, the first time and again: ranges seen before
are reused), the rewind check's merge of two such cursors, a plan over the window above the mark-delete (as
the agent walks it, stretches of consecutive entries, and entry by entry), and the translation of the cursor
into claims (``claiming.decide``) with their news since the last publish. Each runs on the region_down
bench's a once per report, round or publish of every such subscription.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from geosync_core import claiming, rangesets, syncing, translating
from geosync_core.indexing import OriginIndex
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

LEDGER = 9


def timed(rounds: int, work: Callable[[], Any], *, before: Callable[[], None] | None = None) -> float:
    """Median milliseconds of ``work`` over ``rounds`` (``before`` runs untimed before each)."""
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000, help="entries above the mark-delete")
    parser.add_argument("--share", type=float, default=0.9, help="share of entries acknowledged")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(17)
    log = [Position(LEDGER, e) for e in range(args.entries)]
    index = OriginIndex()
    for p in log:
        index.append(p, Origin("a", p))
    acked = [
        p for p in log[1:] if rng.random() < args.share
    ]  # the first entry is a hole: the mark-delete stays
    cursor = AckState.of(Position(LEDGER, -1)).ack(*acked)
    newer = cursor.ack(*[p for p in log[-200:] if p not in cursor][:20])
    reported = str(newer.ranges)
    translated = translating.to_origin_acks(index, cursor, local="a")
    assert isinstance(translated, translating.Translation)
    claims = translated.acks
    # Older agents (before session 19) have neither stretches nor the table of ranges seen: the bench runs
    # on them too (PYTHONPATH=<their checkout>/controller), for a before-and-after in one command.
    stretched = getattr(syncing, "Stretches", None)
    stretches = stretched(((LEDGER, 0, args.entries - 1),)) if stretched else log
    seen = getattr(rangesets, "_SEEN", {})

    def decide() -> claiming.Claim | None:
        return claiming.decide(
            index, newer, received=claims, published=claims, last_translated=cursor, force=False, local="a"
        )

    made = decide()
    assert made is not None
    rows = [
        (
            "parse the report, ranges new",
            timed(args.rounds, lambda: AckState.parse("9:-1", reported), before=seen.clear),
        ),
        ("parse the report again", timed(args.rounds, lambda: AckState.parse("9:-1", reported))),
        ("rewind check's merge", timed(args.rounds, lambda: newer.merge(cursor))),
        (
            "plan over the window, as stretches",
            timed(
                args.rounds,
                lambda: syncing.plan_apply(
                    index, newer, remote=claims, log=stretches, size_of=lambda p: None
                ),
            ),
        ),
        (
            "plan over the window, entry by entry",
            timed(
                args.rounds,
                lambda: syncing.plan_apply(index, newer, remote=claims, log=log, size_of=lambda p: None),
            ),
        ),
        ("translate and decide the claims", timed(args.rounds, decide)),
        ("their news since the last publish", timed(args.rounds, lambda: made.claims.news_since(claims))),
    ]
    table = Table(
        "step",
        "ms (median)",
        title=(
            f"{args.entries:,} entries above the mark-delete, {len(cursor.ranges):,} ranges "
            f"({1 - args.share:.0%} holes), claims of {claims.count():,} entries in "
            f"{sum(len(s) for _, s in claims.by_region):,} spans"
        ),
    )
    for name, ms in rows:
        table.add_row(name, f"{ms:.2f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
