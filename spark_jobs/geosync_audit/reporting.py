"""The audit's summary: one JSON document, a terminal table and a plot, built from the small summary rows.

The summary is plain data (``summary.json``): per subscription, how many messages each region acknowledged
that each other region did not (``unsynced``, keyed ``"R->O"``) and the sync lag, what each region lost
(with a delivery log), order violations; per origin and region, replication trimmed/gaps/lag. The plot
draws the same per-subscription counts, one group of bars per subscription.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

PAIRS = ("topic", "subscription", "region", "other", "unsynced", "sync_lag_ms")
LOSS = ("topic", "subscription", "region", "acked", "lost")
REPLICATION = ("topic", "origin_region", "region", "trimmed", "gaps", "lag", "lag_ms", "duplicates")


def summarize(
    *,
    pairs: Sequence[Sequence[Any]],
    loss: Sequence[Sequence[Any]] | None,
    replication: Sequence[Sequence[Any]],
    violations: Sequence[Sequence[Any]] | None,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """The summary document. ``violations`` rows are ``(topic, subscription, count)``."""
    subs: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(topic: str, sub: str) -> dict[str, Any]:
        return subs.setdefault(
            (topic, sub),
            {
                "topic": topic,
                "subscription": sub,
                "regions": [],
                "unsynced": {},
                "sync_lag_ms": {},
                "acked": None if loss is None else {},
                "lost": None if loss is None else {},
                "order_violations": None if violations is None else 0,
            },
        )

    for topic, sub, region, other, unsynced, lag_ms in pairs:
        e = entry(topic, sub)
        e["unsynced"][f"{region}->{other}"] = int(unsynced)
        e["sync_lag_ms"][f"{region}->{other}"] = int(lag_ms)
        if region not in e["regions"]:
            e["regions"].append(region)
    for topic, sub, region, acked, lost in loss or ():
        e = entry(topic, sub)
        e["acked"][region] = int(acked)
        e["lost"][region] = int(lost)
        if region not in e["regions"]:
            e["regions"].append(region)
    for topic, sub, count in violations or ():
        entry(topic, sub)["order_violations"] = int(count)
    for e in subs.values():
        e["regions"].sort()
    return {
        **meta,
        "subscriptions": [subs[k] for k in sorted(subs)],
        "replication": [dict(zip(REPLICATION, map(_plain, row), strict=True)) for row in replication],
        "totals": {
            "unsynced": sum(int(p[4]) for p in pairs),
            "lost": None if loss is None else sum(int(x[4]) for x in loss),
            "order_violations": None if violations is None else sum(int(v[2]) for v in violations),
            "replication_gaps": sum(int(r[4]) for r in replication),
            "replication_lag": sum(int(r[5]) for r in replication),
        },
    }


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, int) else value


def _short(topic: str) -> str:
    return topic.rsplit("/", 1)[-1]


def table(summary: dict[str, Any]) -> Table:
    t = Table(title=f"drift per subscription (as of {summary.get('as_of', '?')})")
    for col in ("topic", "subscription", "unsynced R->O", "sync lag", "lost", "order violations"):
        t.add_column(col)
    for s in summary["subscriptions"]:
        unsynced = ", ".join(f"{k} {v}" for k, v in sorted(s["unsynced"].items())) or "-"
        lag = max(s["sync_lag_ms"].values(), default=0)
        lost = "n/a" if s["lost"] is None else ", ".join(f"{k} {v}" for k, v in sorted(s["lost"].items()))
        order = "n/a" if s["order_violations"] is None else str(s["order_violations"])
        t.add_row(_short(s["topic"]), s["subscription"], unsynced, f"{lag} ms", lost, order)
    return t


def replication_table(summary: dict[str, Any]) -> Table:
    t = Table(title="replication per origin -> region")
    for col in ("topic", "origin", "region", "trimmed", "gaps", "lag", "lag ms", "duplicates"):
        t.add_column(col)
    for r in summary["replication"]:
        t.add_row(
            _short(r["topic"]),
            r["origin_region"],
            r["region"],
            *(str(r[k]) for k in ("trimmed", "gaps", "lag", "lag_ms", "duplicates")),
        )
    return t


def print_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    out = console or Console(width=140)
    out.print(table(summary))
    out.print(replication_table(summary))
    totals = summary["totals"]
    out.print(
        "totals: "
        + ", ".join(f"{k} {'n/a' if v is None else v}" for k, v in totals.items())
        + f"; messages read {summary.get('messages', {})}, unresolved origins {summary.get('unresolved', 0)}"
    )


def plot(summary: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
    """A PNG with one group of bars per subscription: unsynced (all region pairs), lost, order violations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subs = summary["subscriptions"]
    labels = [f"{_short(s['topic'])}\n{s['subscription']}" for s in subs]
    series = {
        "unsynced (sum over region pairs)": [sum(s["unsynced"].values()) for s in subs],
        "lost": [sum((s["lost"] or {}).values()) for s in subs],
        "order violations": [s["order_violations"] or 0 for s in subs],
    }
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(subs) + 2), 4.5))
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + (i - 1) * width for x in range(len(subs))], values, width, label=name)
    ax.set_xticks(list(range(len(subs))), labels, fontsize=7)
    ax.set_ylabel("messages")
    ax.set_title("GeoSync drift per subscription")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
