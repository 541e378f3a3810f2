"""``bench/scale.py --cpu-hog``: its loads as given, the hog stopped however the step ends (never left running
beside whatever comes next on the machine), and the figures it compares taken over the measured load only,
per third of it."""

from __future__ import annotations

import pathlib
import shutil
import time
from typing import Any

import pytest

from tests import benchscripts

SCALE = benchscripts.load("scale")
DEGRADING = benchscripts.load("degrading")  # its sibling modules were imported with it


def test_the_loads_are_percent_of_a_core_and_nothing_means_one_run_without_a_hog() -> None:
    assert SCALE.parse_hogs("") == [0]
    assert SCALE.parse_hogs("0,50") == [0, 50]
    assert SCALE.parse_hogs("50, 0") == [50, 0]
    for wrong in ("150", "-5", "half", "0,x"):
        with pytest.raises(SystemExit, match="percent of one core"):
            SCALE.parse_hogs(wrong)


def test_a_hog_needs_stress_ng_and_a_quiet_run_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(SystemExit, match="stress-ng"):
        SCALE.parse_hogs("0,50")
    assert SCALE.parse_hogs("0") == [0]


def _gone(pid: int) -> bool:
    """The process ended: no longer there, or a zombie nobody has reaped yet (init's, not ours)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _stand_in(tmp_path: pathlib.Path, *, ignore_term: bool) -> tuple[pathlib.Path, pathlib.Path]:
    """A program in stress-ng's place that starts a worker and waits on it, as stress-ng does; it writes
    its arguments and its worker's pid to files."""
    worker = tmp_path / "worker.pid"
    argv = tmp_path / "argv"
    program = tmp_path / "hog"
    program.write_text(
        "#!/bin/sh\n"
        + ("trap '' TERM\n" if ignore_term else "")
        + f'echo "$@" > {argv}\nsleep 300 &\necho $! > {worker}\nwait\n'
    )
    program.chmod(0o755)
    return program, worker


def _wait_for(path: pathlib.Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"{path} not written")


@pytest.mark.parametrize("ignore_term", [False, True])
def test_the_hog_and_its_worker_are_stopped_when_the_step_fails(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, ignore_term: bool
) -> None:
    program, worker_pid = _stand_in(tmp_path, ignore_term=ignore_term)
    monkeypatch.setattr(SCALE.CpuHog, "program", str(program))
    hog = SCALE.CpuHog(50, limit_s=60, grace_s=0.5)
    seen: dict[str, int] = {}

    def step() -> None:
        with hog:
            seen["leader"] = hog.process.pid
            seen["worker"] = _wait_for(worker_pid)
            assert not _gone(seen["worker"])
            raise RuntimeError("the step failed")

    with pytest.raises(RuntimeError, match="the step failed"):
        step()
    leader, worker = seen["leader"], seen["worker"]
    assert hog.process is None
    assert _gone(leader)
    deadline = time.monotonic() + 5
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(worker), "the hog's worker outlived the step"
    # the command asks one worker at the load, with a timeout of its own should this process die first
    assert (tmp_path / "argv").read_text().split() == [
        "--cpu",
        "1",
        "--cpu-load",
        "50",
        "--timeout",
        "60s",
        "--quiet",
    ]


def test_no_load_starts_nothing() -> None:
    hog = SCALE.CpuHog(0, limit_s=60)
    with hog:
        assert hog.process is None
    assert hog.report() == ""


@pytest.mark.skipif(shutil.which("stress-ng") is None, reason="stress-ng not installed (scripts/setup.sh)")
def test_stress_ng_takes_about_its_load_and_is_gone_after() -> None:
    hog = SCALE.CpuHog(50, limit_s=30)
    with hog:
        pid = hog.process.pid
        time.sleep(1.5)
    assert _gone(pid)
    assert hog.cpu_s is not None
    assert 0.1 < hog.cpu_s < 1.5  # half a core over 1.5 s, on a machine other work shares
    assert "took" in hog.report()


def _step(window: tuple[float, float], states: dict[str, dict[str, Any]], hog: int = 0) -> Any:
    run = SCALE.failover.LoadRun(mode="geosync", lags=[0.2, 0.3, 0.4], acked=2000)
    return SCALE.Step(
        subs=10_000,
        mode="geosync",
        run=run,
        cpu={"a": 1.0, "b": 1.0},
        rss={"a": 1.0, "b": 1.0},
        tracked={"a": 1, "b": 1},
        load="1.0, 1.0, 1.0",
        pace="-",
        timelines={},
        window=window,
        states=states,
        hog=hog,
    )


def test_transit_and_rounds_are_those_of_the_measured_load_by_third() -> None:
    b = {
        # taken before the load (its warm-up), in each third, and after it
        "control_transit_recent": [[95.0, 9000], [101.0, 100], [105.0, 200], [108.0, 5000], [111.0, 7000]],
        "control_queued_recent": [[101.0, 50], [108.0, 4000]],
        "timeline": [
            {"kind": "round", "began": 99.0, "seconds": 8.0},
            {"kind": "round", "began": 102.0, "seconds": 0.5},
            {"kind": "discovery", "began": 104.0, "seconds": 3.0},
            {"kind": "round", "began": 109.0, "seconds": 2.0},
            {"kind": "round", "began": 110.0, "seconds": 9.0},
        ],
        "round_seconds_p99": 1.5,
        "since_round_ended_s": 3.0,
        "round_seconds_max": 2.0,
    }
    step = _step((100.0, 109.0), {"a": {}, "b": b})
    figures = DEGRADING.degrade_figures(step)

    into_b = figures["control_transit_into_b_s"]
    assert into_b["n"] == 3
    assert into_b["max"] == 5.0
    assert into_b["max_by_third"] == [0.1, 0.2, 5.0]
    assert figures["control_queued_in_b_s"]["max_by_third"] == [0.05, None, 4.0]
    rounds = figures["rounds_b_s"]
    # a round begun in the warm-up ran into the load (8 s, ended in its last third), the ones begun as it
    # ended or after did not, the discovery pass is no round; the one still running as the load ended (3 s)
    # counts in its last third
    assert rounds["long_rounds"] == 3
    assert rounds["max_by_third"] == [0.5, None, 8.0]
    assert [e["began"] for e in rounds["over_1_s"]] == [-1.0]
    assert rounds["unfinished_at_end_s"] == 3.0
    assert figures["rounds_a_s"]["max"] is None
    assert figures["agent_cpu_s_per_1000_acks"] == 1.0
    assert SCALE.degrade_lines(step)[0].endswith(
        "rounds of 0.25 s or more: 1 / 0 / 2, max 0.50 s / - / 8.00 s"
    )
