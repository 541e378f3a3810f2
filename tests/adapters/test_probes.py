"""geosync_lab.probes: finding copies and reading cursors message by message, over a stub admin client."""

from __future__ import annotations

from typing import Any, cast

from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminNotFound
from geosync_core import pluginapi, pluginwrites
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position
from geosync_lab import probes


class Stub:
    def __init__(self, runs: list[OriginRun], report: pluginapi.CursorReport | None) -> None:
        self.runs, self.report = runs, report

    def plugin_origins(self, topic: str, **_: Any) -> list[OriginRun]:
        if not self.runs:
            raise AdminNotFound("no plugin")
        return self.runs

    def plugin_write(self, items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckResult]:
        return [pluginwrites.AckResult(pluginapi.Status.OK, cursor=self.report)]


def admin(stub: Stub) -> AdminClient:
    return cast(AdminClient, stub)


def test_copies_map_the_origins_entries_to_this_regions() -> None:
    runs = [
        OriginRun(9, 0, 2, "a", Position(5, 3)),
        OriginRun(9, 2, 1, "b", Position(1, 1)),
        OriginRun(9, 3, 1, "a"),
    ]
    assert probes.copies(admin(Stub(runs, None)), "t", origin="a") == {
        Position(5, 3): Position(9, 0),
        Position(5, 4): Position(9, 1),
    }
    assert probes.copies(admin(Stub([], None)), "t", origin="a") == {}


def test_acknowledged_reads_whole_entries_and_batch_indexes() -> None:
    report = pluginapi.CursorReport(
        "t", "s", Position(9, 0), "[(9:1..9:2]]", (pluginapi.BatchState(Position(9, 4), (1,)),)
    )
    asked = [
        (Position(9, 0), -1),
        (Position(9, 2), 3),
        (Position(9, 3), -1),
        (Position(9, 4), 0),
        (Position(9, 4), 1),
    ]
    assert probes.acknowledged(admin(Stub([], report)), "t", "s", asked) == {
        (Position(9, 0), -1),
        (Position(9, 2), 3),
        (Position(9, 4), 0),
    }


def test_percentile_by_nearest_rank() -> None:
    assert probes.percentile([], 0.5) is None
    assert probes.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert probes.percentile([float(i) for i in range(100)], 0.99) == 99.0
