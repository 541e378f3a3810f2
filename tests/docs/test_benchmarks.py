"""BENCHMARKS.md's "At a glance" table is what ``python bench/report.py`` builds from ``bench/results/*.json``
(one record a row), and a bench's record (``bench/record.py``) is a row that command takes as it is."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import pytest

from tests import benchscripts

ROOT = pathlib.Path(__file__).resolve().parents[2]


REPORT = benchscripts.load("report")
RECORD = benchscripts.load("record")


def test_benchmarks_md_is_what_the_records_give() -> None:
    page = REPORT.PAGE.read_text()
    assert page == REPORT.render(page, REPORT.records()), (
        f"BENCHMARKS.md's table differs from bench/results/*.json: run '{REPORT.COMMAND}' and commit it"
    )


def test_every_record_is_a_complete_row() -> None:
    found = REPORT.records()
    assert len(found) >= 20
    for path, record in found:
        assert path.name[:3].isdigit(), f"{path.name}: name it NN-slug.json (NN orders the rows)"
        assert set(RECORD.KEYS) <= set(record), path.name
        if record["source"].startswith("transcribed"):
            assert "not re-run" in record["source"], path.name


def test_a_bench_record_dropped_into_results_becomes_a_row(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    RECORD.add_argument(parser)
    out = tmp_path / "run.json"
    args = parser.parse_args(["--record", str(out)])
    monkeypatch.setattr(
        sys, "argv", [str(ROOT / "bench" / "signing.py"), "--rounds", "5", "--record", str(out)]
    )
    RECORD.write(
        args.record,
        RECORD.make("Signing, a test row", "seal **1 ms** | open 2 ms", figures={"seal_us": 1000.0}),
    )
    record = json.loads(out.read_text())
    assert record["command"] == "`python bench/signing.py --rounds 5`"
    assert record["figures"] == {"seal_us": 1000.0}
    assert record["pip33"] == "-"
    assert record["date"]
    assert record["commit"]
    assert "cores" in record["machine"]

    results = tmp_path / "results"
    results.mkdir()
    (results / "010-first.json").write_text(out.read_text())
    (results / "005-earlier.json").write_text(json.dumps({**record, "scenario": "Earlier"}))
    page = f"# B\n\n{REPORT.START}\nstale\n{REPORT.END}\n\nafter\n"
    rendered = REPORT.render(page, REPORT.records(results))
    rows = [line for line in rendered.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0] for row in rows] == ["| Earlier", "| Signing, a test row"]
    assert "seal **1 ms** \\| open 2 ms" in rows[1]
    assert "stale" not in rendered
    assert rendered.endswith(f"{REPORT.END}\n\nafter\n")
    assert REPORT.render(rendered, REPORT.records(results)) == rendered


def test_a_record_without_a_cell_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "010-bad.json").write_text(json.dumps({"scenario": "x", "command": "y"}))
    with pytest.raises(REPORT.RecordError, match=r"010-bad\.json: no geosync"):
        REPORT.records(tmp_path)


def test_a_bench_of_several_rows_writes_one_record_each(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "scale.py"), "--steps", "100,1000"])
    rows = {
        str(n): RECORD.make(f"Sync lag, {n} subscriptions", "p99 0.5 s", "p99 1.1 s") for n in (100, 1000)
    }

    RECORD.write_each(tmp_path / "scale.json", rows)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["scale-100.json", "scale-1000.json"]
    assert [r["scenario"] for _, r in REPORT.records(tmp_path)] == [
        "Sync lag, 100 subscriptions",
        "Sync lag, 1000 subscriptions",
    ]


def test_every_section_table_is_on_the_page_and_every_marker_has_its_table() -> None:
    named = set(REPORT.table_names(REPORT.PAGE.read_text()))
    files = {p.stem for p in REPORT.TABLES.glob("*.json")}
    assert named == files, (
        f"tables without markers: {files - named}; markers without a table: {named - files}"
    )
    assert named, "BENCHMARKS.md has no generated section table"


def test_a_section_table_is_rendered_between_its_markers(tmp_path: pathlib.Path) -> None:
    spec = {
        "columns": ["mechanism", "lag p99"],
        "rows": [["GeoSync", "**0.6 s**"], ["PIP-33", "1.1 s"]],
        "command": "`python bench/scale.py`",
        "machine": "2 cores, 24 GiB",
        "date": "2026-11-29",
        "commit": "abc1234",
        "source": "written by bench/scale.py (bench/record.py)",
    }
    (tmp_path / "lag.json").write_text(json.dumps(spec))
    start, end = REPORT.TABLE_START.format(name="lag"), REPORT.TABLE_END.format(name="lag")
    page = f"{REPORT.START}\n{REPORT.END}\n\n## Lag\n\n{start}\nold\n{end}\n\nafter\n"

    rendered = REPORT.render(page, [], tmp_path)

    assert "| GeoSync | **0.6 s** |" in rendered
    assert "Recorded 2026-11-29, abc1234, 2 cores, 24 GiB, written by bench/scale.py" in rendered
    assert "old" not in rendered
    assert REPORT.render(rendered, [], tmp_path) == rendered
    (tmp_path / "lag.json").write_text(json.dumps({**spec, "rows": [["GeoSync"]]}))
    with pytest.raises(REPORT.RecordError, match="as many cells"):
        REPORT.render(page, [], tmp_path)
