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


def _healthy() -> dict[str, object]:
    return reporting.summarize(
        pairs=[(T, "s", "a", "b", 0, 0), (T, "s", "b", "a", 0, 0)],
        loss=None,
        replication=[(T, "a", "b", 0, 0, 0, 0, 0)],
        violations=None,
        meta={"as_of": "now", "regions": ["a", "b"], "messages": {"a": 5, "b": 5}},
    )


def test_a_healthy_audit_plots_no_drift_and_what_was_checked(tmp_path: pathlib.Path) -> None:
    import matplotlib.image

    summary = _healthy()
    assert not reporting.drifted(summary)
    lines = reporting._checked(summary)
    assert "1 subscription(s) in 2 region(s)" in lines[0]
    assert any("not checked" in line for line in lines)
    png = reporting.plot(summary, tmp_path / "drift.png")
    height, width = matplotlib.image.imread(png).shape[:2]
    assert (width, height) == (900, 420)  # the one-panel "no drift" figure


def test_drift_plots_matrix_lag_timeline_and_worst_subscriptions(tmp_path: pathlib.Path) -> None:
    import matplotlib.image

    summary = reporting.summarize(
        pairs=[(T, "s", "a", "b", 3, 40_000), (T, "s", "b", "a", 0, 0)],
        loss=None,
        replication=[],
        violations=None,
        meta={"as_of": "now"},
        timeline=[("a", "b", 1_700_000_000_000, 2), ("a", "b", 1_700_000_005_000, 1)],
    )
    assert reporting.drifted(summary)
    assert summary["unsynced_timeline"][0] == {"pair": "a->b", "at_ms": 1_700_000_000_000, "unsynced": 2}
    assert reporting._pair_totals(summary)[1:] == (
        {("a", "b"): 3, ("b", "a"): 0},
        {"a->b": 40_000, "b->a": 0},
    )
    png = reporting.plot(summary, tmp_path / "drift.png")
    height, width = matplotlib.image.imread(png).shape[:2]
    assert width > 1000  # the four-panel figure
    assert height > 800
