"""The agent's garbage-collector settings (``geosync_agent.collector``)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from geosync_agent import collector
from geosync_agent.recent import Timeline


@pytest.fixture
def restored() -> Iterator[None]:
    """The interpreter's collector as it was before the test (thresholds, frozen objects, callbacks)."""
    threshold, callbacks = gc.get_threshold(), list(gc.callbacks)
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    gc.callbacks[:] = callbacks


def test_tune_freezes_what_exists_sets_the_thresholds_and_counts_collections(restored: None) -> None:
    stats = collector.tune({})
    assert gc.get_threshold() == collector.THRESHOLD
    assert gc.get_freeze_count() > 1000  # the modules and classes loaded so far
    status = stats.status()
    assert status["tuned"] is True
    assert status["threshold"] == list(collector.THRESHOLD)
    assert status["collections"] == [0, 0, 0]
    gc.collect()
    status = stats.status()
    assert status["collections"][2] == 1
    assert stats.longest[2] > 0  # seconds (a collection after the freeze may round to 0.0 ms)
    assert stats.total[2] == stats.longest[2]


def test_the_environment_can_keep_the_defaults_or_leave_the_collector_alone(restored: None) -> None:
    stats = collector.tune({collector.ENV: "700,10,10"})
    assert gc.get_threshold() == (700, 10, 10)
    assert stats.status()["tuned"] is True
    gc.unfreeze()
    gc.set_threshold(123, 4, 5)
    stats = collector.tune({collector.ENV: " OFF "})
    assert gc.get_threshold() == (123, 4, 5)
    assert gc.get_freeze_count() == 0
    assert stats.status() == {
        "threshold": [123, 4, 5],
        "frozen": 0,
        "tuned": False,
        "collections": [0, 0, 0],
        "longest_ms": [0.0, 0.0, 0.0],
        "total_ms": [0.0, 0.0, 0.0],
        "collected": [0, 0, 0],
        "frozen_now": 0,
        "full_collections_of_frozen": 0,
    }
    stats.after_round(0.0)  # not tuned: nothing frozen after the rounds either
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("value", ["", "20000", "20000,10", "0,10,10", "a,b,c", "20000,10,10,10", "-1,10,10"])
def test_a_bad_threshold_is_refused_with_what_to_give(value: str) -> None:
    with pytest.raises(ValueError, match="three whole numbers"):
        collector.parse(value)


def test_reading_the_counts_while_a_collection_starts_does_not_deadlock(restored: None) -> None:
    """The interpreter calls ``on_gc`` in whichever thread allocated: also in one reading ``status()`` (whose
    copies allocate) or adding to the timeline. A plain lock taken there would never be released."""
    stats = collector.tune({collector.ENV: "off"})
    stats.timeline = Timeline(at_least_s=0.0)
    done = threading.Event()

    def read() -> None:
        gc.set_threshold(1, 1, 1)  # every allocation of a tracked object collects
        try:
            for _ in range(200):
                stats.status()
                stats.timeline.report() if stats.timeline else None
        finally:
            gc.set_threshold(700, 10, 10)
        done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert done.wait(20), "status() deadlocked in a collection it started"
    assert sum(stats.counts) > 0
    assert any(e["kind"] == "gc" for e in stats.timeline.report())


class _Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_what_a_round_leaves_alive_is_frozen_and_collected_whole_every_full_period(restored: None) -> None:
    """After each round what is alive leaves the generations the collections walk; every FULL_EVERY_S it
    is all unfrozen and collected once, so cycles made meanwhile are freed then (and counted)."""
    stats = collector.tune({})
    stats.after_round(100.0)  # the first round: frozen, the first full collection due FULL_EVERY_S on
    assert stats.full_at == 100.0 + collector.FULL_EVERY_S
    frozen = gc.get_freeze_count()
    alive = [object() for _ in range(10)] + [[] for _ in range(1000)]
    gc.collect(0)
    stats.after_round(101.0)
    assert gc.get_freeze_count() >= frozen + 1000  # the lists made since (objects are not tracked)
    assert gc.get_count()[0] < 100  # the young generation holds nothing from before the round

    cycle = _Cycle()
    gone = weakref.ref(cycle)
    del cycle
    stats.after_round(102.0)  # frozen with the rest: no collection before the full one frees it
    gc.collect(0)
    gc.collect(1)
    assert gone() is not None
    found = stats.collected[2]
    stats.after_round(100.0 + collector.FULL_EVERY_S)
    assert gone() is None
    assert stats.full_collections == 1
    assert stats.collected[2] >= found + 1  # the cycle, counted
    assert stats.full_at == 100.0 + 2 * collector.FULL_EVERY_S
    assert gc.get_freeze_count() > 0  # frozen again after the collection
    assert stats.status()["full_collections_of_frozen"] == 1
    assert alive


def test_nothing_is_collected_while_a_checkpoint_is_restored_and_what_it_built_is_frozen(
    restored: None,
) -> None:
    stats = collector.tune({})
    frozen = gc.get_freeze_count()
    with stats.building():
        assert not gc.isenabled()
        built: list[list[int]] = [[] for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + 1000
    assert built
    untuned = collector.tune({collector.ENV: "off"})
    gc.unfreeze()
    with untuned.building():
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # a collector left alone is not frozen either
