"""The agent's memory report (``/debug/memory``): there only while Python's tracemalloc traces."""

from __future__ import annotations

import tracemalloc

from geosync_agent import serving


def test_the_memory_report_names_the_largest_sites_only_while_tracing() -> None:
    assert not tracemalloc.is_tracing()
    assert serving.memory_report() is None
    assert "PYTHONTRACEMALLOC" in serving.NOT_TRACING  # what the endpoint tells whoever asks
    tracemalloc.start()
    try:
        held = [bytes(1000) for _ in range(2000)]  # about 2 MB from one line of this file
        report = serving.memory_report(top=5)
    finally:
        tracemalloc.stop()
    assert report is not None
    assert report["traced_mib"] >= 1.5
    assert report["peak_mib"] >= report["traced_mib"]
    assert 1 <= len(report["top"]) <= 5
    assert "test_serving.py" in report["top"][0]["site"]
    assert report["top"][0]["kib"] >= 1900
    assert report["rss_mib"] is None or report["rss_mib"] > report["traced_mib"]
    assert len(held) == 2000
