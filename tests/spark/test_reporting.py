"""The summary document, its table and the plot, from summary rows (no Spark needed)."""

from __future__ import annotations

import pathlib

from rich.console import Console

from geosync_audit import reporting

T = "persistent://geo/abc/t"


def test_summary_groups_rows_per_subscription_and_totals_them(tmp_path: pathlib.Path) -> None:
    summary = reporting.summarize(
        pairs=[(T, "s", "a", "b", 3, 40), (T, "s", "b", "a", 0, 0)],
        loss=[(T, "s", "a", 5, 2), (T, "s", "b", 2, 0)],
        replication=[(T, "a", "b", 0, 1, 2, 900, 0)],
        violations=[(T, "s", 1)],
        meta={"as_of": "now"},
    )
    (sub,) = summary["subscriptions"]
    assert sub["unsynced"] == {"a->b": 3, "b->a": 0}
    assert sub["lost"] == {"a": 2, "b": 0}
    assert sub["order_violations"] == 1
    assert summary["totals"] == {
        "unsynced": 3,
        "lost": 2,
        "order_violations": 1,
        "replication_gaps": 1,
        "replication_lag": 2,
    }
    console = Console(record=True, width=140)
    reporting.print_summary(summary, console)
    assert "a->b 3" in console.export_text()
    png = reporting.plot(summary, tmp_path / "drift.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_without_a_delivery_log_loss_and_order_are_unknown_not_zero() -> None:
    summary = reporting.summarize(
        pairs=[(T, "s", "a", "b", 0, 0)], loss=None, replication=[], violations=None, meta={}
    )
    assert summary["subscriptions"][0]["lost"] is None
    assert summary["totals"]["lost"] is None
