"""The audit's summary: one JSON document, a terminal table and a plot, built from the small summary rows.

The summary is plain data (``summary.json``): per subscription, how many messages each region acknowledged
that each other region did not (``unsynced``, keyed ``"R->O"``) and the sync lag, what each region lost
(with a delivery log), order violations; per origin and region, replication trimmed/gaps/lag; and
``unsynced_timeline``, unsynced messages per region pair by publish time.

The plot (``drift.png``) is for a person deciding whether to act: when nothing drifted it says "no drift"
and what was checked; otherwise four panels: unsynced messages as a region-by-region matrix (acknowledged
in the row's region, not in the column's), sync lag per region pair, unsynced messages over publish time
per pair (when drift began, whether it is growing), and the subscriptions that drifted most.
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
    timeline: Sequence[Sequence[Any]] = (),
) -> dict[str, Any]:
    """The summary document. ``violations`` rows are ``(topic, subscription, count)``; ``timeline`` rows
    ``(region, other, bucket_ms, unsynced)`` (``findings.unsynced_timeline``)."""
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
        "unsynced_timeline": [
            {"pair": f"{region}->{other}", "at_ms": int(at), "unsynced": int(n)}
            for region, other, at, n in timeline
        ],
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


def drifted(summary: dict[str, Any]) -> bool:
    """Whether anything drifted: unsynced, lost or out-of-order messages, replication gaps or lag."""
    totals = summary["totals"]
    keys = ("unsynced", "lost", "order_violations", "replication_gaps", "replication_lag")
    return any(totals.get(k) for k in keys)


def _pair_totals(summary: dict[str, Any]) -> tuple[list[str], dict[tuple[str, str], int], dict[str, int]]:
    """Regions, unsynced per (region, other) and the largest sync lag per ``"R->O"`` over subscriptions."""
    regions = sorted(
        {r for s in summary["subscriptions"] for r in s["regions"]} | set(summary.get("regions", []))
    )
    counts: dict[tuple[str, str], int] = {}
    lags: dict[str, int] = {}
    for s in summary["subscriptions"]:
        for pair, n in s["unsynced"].items():
            region, other = pair.split("->")
            counts[(region, other)] = counts.get((region, other), 0) + n
            lags[pair] = max(lags.get(pair, 0), s["sync_lag_ms"].get(pair, 0))
    return regions, counts, lags


def _headline(summary: dict[str, Any]) -> str:
    t = summary["totals"]
    lost = "not checked" if t["lost"] is None else str(t["lost"])
    order = "not checked" if t["order_violations"] is None else str(t["order_violations"])
    return (
        f"unsynced {t['unsynced']}  ·  lost {lost}  ·  key-order violations {order}  ·  "
        f"replication gaps {t['replication_gaps']}, behind {t['replication_lag']}"
    )


def _checked(summary: dict[str, Any]) -> list[str]:
    subs = summary["subscriptions"]
    regions = summary.get("regions") or sorted({r for s in subs for r in s["regions"]})
    messages = summary.get("messages") or {}
    t = summary["totals"]
    lines = [
        f"{len(subs)} subscription(s) in {len(regions)} region(s) ({', '.join(regions)}); "
        + (
            f"messages read per region: {', '.join(f'{k} {v}' for k, v in sorted(messages.items()))}"
            if messages
            else "no messages read"
        ),
        "every message acknowledged in one region is acknowledged in every other",
        f"replication complete: {len(summary['replication'])} origin -> region stream(s), "
        "no gaps, none behind",
    ]
    if t["lost"] is None:
        lines.append("loss and key order not checked (no --deliveries log)")
    else:
        lines.append("no message lost, no key delivered out of order")
    return lines


def plot(summary: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
    """Write the PNG described in the module docstring; "no drift" when nothing drifted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title = f"GeoSync drift audit, as of {summary.get('as_of', '?')}"
    if not drifted(summary):
        fig = plt.figure(figsize=(9, 4.2))
        fig.suptitle(title, fontsize=11)
        fig.text(0.5, 0.68, "no drift", ha="center", va="center", fontsize=40, color="#2e7d32", weight="bold")
        for i, line in enumerate(_checked(summary)):
            fig.text(0.5, 0.45 - i * 0.08, line, ha="center", va="center", fontsize=10, color="#333333")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    fig = plt.figure(figsize=(13, 9))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1], hspace=0.45, wspace=0.35)
    fig.suptitle(f"{title}\n{_headline(summary)}", fontsize=11)
    regions, counts, lags = _pair_totals(summary)
    _matrix(fig.add_subplot(grid[0, 0]), regions, counts)
    _lags(fig.add_subplot(grid[0, 1]), lags, counts)
    _timeline(fig.add_subplot(grid[1, 0]), summary.get("unsynced_timeline") or [])
    _worst(fig.add_subplot(grid[1, 1]), summary)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _matrix(ax: Any, regions: list[str], counts: dict[tuple[str, str], int]) -> None:
    import numpy as np

    n = len(regions)
    grid = np.zeros((n, n))
    for (r, o), v in counts.items():
        if r in regions and o in regions:
            grid[regions.index(r), regions.index(o)] = v
    masked = np.ma.masked_where(np.eye(n, dtype=bool), grid)
    ax.imshow(masked, cmap="Reds", vmin=0, vmax=max(1.0, float(grid.max())))
    for i in range(n):
        for j in range(n):
            text = "" if i == j else f"{int(grid[i, j])}"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=11,
                color="white" if grid[i, j] > grid.max() / 2 else "black",
            )
    ax.set_xticks(range(n), regions)
    ax.set_yticks(range(n), regions)
    ax.set_xlabel("... but not acknowledged in")
    ax.set_ylabel("acknowledged in ...")
    ax.set_title("unsynced messages per region pair", fontsize=10)


def _lags(ax: Any, lags: dict[str, int], counts: dict[tuple[str, str], int]) -> None:
    unsynced = {f"{r}->{o}" for (r, o), n in counts.items() if n}
    pairs = sorted(p for p in lags if p in unsynced)
    values = [lags[p] / 1000 for p in pairs]
    ax.barh(pairs, values, color="#c62828")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.1f} s", va="center", fontsize=9)
    ax.set_xlabel("seconds (largest over subscriptions)")
    ax.set_title("sync lag per region pair", fontsize=10)
    ax.invert_yaxis()
    if not pairs:
        ax.text(0.5, 0.5, "no unsynced pair", transform=ax.transAxes, ha="center")
    ax.margins(x=0.25)


def _timeline(ax: Any, timeline: list[dict[str, Any]]) -> None:
    import datetime as dt

    import matplotlib.dates as mdates

    by_pair: dict[str, list[tuple[dt.datetime, int]]] = {}
    for row in timeline:
        at = dt.datetime.fromtimestamp(row["at_ms"] / 1000, dt.UTC)
        by_pair.setdefault(row["pair"], []).append((at, row["unsynced"]))
    for pair, points in sorted(by_pair.items()):
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", markersize=3, drawstyle="steps-mid", label=pair)
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    # concise labels stay distinct down to sub-second spans (a lab audit covers seconds)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("publish time (UTC)")
    ax.set_ylabel("unsynced messages")
    ax.set_title("unsynced messages by publish time, per region pair", fontsize=10)
    if by_pair:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "none", transform=ax.transAxes, ha="center")


def _clip(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _worst(ax: Any, summary: dict[str, Any], top: int = 8) -> None:
    rows: list[tuple[str, int, int, int]] = []
    for s in summary["subscriptions"]:
        unsynced = sum(s["unsynced"].values())
        lost = sum((s["lost"] or {}).values())
        order = s["order_violations"] or 0
        if unsynced or lost or order:
            label = f"{_clip(_short(s['topic']))}\n{_clip(s['subscription'])}"
            rows.append((label, unsynced, lost, order))
    rows.sort(key=lambda r: -(r[1] + r[2] + r[3]))
    rows = rows[:top]
    labels = [r[0] for r in rows]
    series = {
        "unsynced": ([r[1] for r in rows], "#ef9a9a"),
        "lost": ([r[2] for r in rows], "#b71c1c"),
        "order violations": ([r[3] for r in rows], "#5c6bc0"),
    }
    left = [0] * len(rows)
    for name, (values, color) in series.items():
        ax.barh(labels, values, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("messages")
    ax.set_title(f"subscriptions that drifted most (top {top})", fontsize=10)
    ax.legend(fontsize=8)
