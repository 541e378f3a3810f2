"""The lab's launch record with stand-in processes (small Python sleepers, each in its own session as the
lab's JVMs are): what is recorded is stopped, what is not ours is never touched, and ``down`` and ``up``
read the record when no topology names the processes. ``integration_tests/test_lab_interrupted.py``
interrupts a real boot."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import psutil
import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geosync_lab import labs, launches
from geosync_lab.errors import LabError

SLEEPER = "import time; print('ready', flush=True); time.sleep(120)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
    "time.sleep(120)"
)
Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    started: list[subprocess.Popen[bytes]] = []

    def start(code: str = SLEEPER) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # its handlers are set: signals now mean what they say
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def gone(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is not None


def test_a_swept_record_leaves_no_process_running_and_is_emptied(
    tmp_path: pathlib.Path, spawn: Spawn
) -> None:
    ledger = launches.Ledger(tmp_path)
    procs = [spawn(), spawn()]
    for i, proc in enumerate(procs):
        ledger.record(proc.pid, f"region r{i}")
    assert [launch.pid for launch in launches.running(tmp_path)] == [p.pid for p in procs]

    outcome = launches.sweep(tmp_path, grace_s=5)

    assert outcome == {f"region r{i} (pid {p.pid})": "stopped" for i, p in enumerate(procs)}
    assert all(gone(p) for p in procs)
    assert not launches.ledger_path(tmp_path).exists()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_time(
    tmp_path: pathlib.Path, spawn: Spawn
) -> None:
    proc = spawn(STUBBORN)
    launches.Ledger(tmp_path).record(proc.pid, "agent a")

    outcome = launches.sweep(tmp_path, grace_s=0.5)

    assert outcome == {f"agent a (pid {proc.pid})": "killed"}
    assert gone(proc)


def test_a_pid_now_held_by_another_process_is_never_signalled(tmp_path: pathlib.Path, spawn: Spawn) -> None:
    proc = spawn()
    real = launches.start_time(proc.pid)
    assert real is not None
    # The record of an earlier process that had this pid: it started at another time.
    recycled = launches.Launch(pid=proc.pid, started=real - 3600, role="region a")

    assert launches.stop([recycled], grace_s=0.5) == {f"region a (pid {proc.pid})": "not running"}
    assert not gone(proc)
    assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED


def test_a_launch_reported_after_the_ledger_closed_is_stopped_at_once(
    tmp_path: pathlib.Path, spawn: Spawn
) -> None:
    ledger = launches.Ledger(tmp_path)
    first = spawn()
    ledger.record(first.pid, "region a")
    assert ledger.close_and_stop(grace_s=5) == {f"region a (pid {first.pid})": "stopped"}

    late = spawn()  # a boot thread that was between its Popen and its record when the boot was abandoned
    with pytest.raises(LabError, match="boot was abandoned"):
        ledger.record(late.pid, "region b")
    assert gone(first)
    assert gone(late)
    assert [launch.role for launch in launches.read(tmp_path)] == ["region a"]


def test_a_torn_last_line_loses_only_that_entry(tmp_path: pathlib.Path) -> None:
    whole = launches.Launch(pid=123, started=1.5, role="region a")
    launches.ledger_path(tmp_path).write_text(whole.to_json() + "\n" + '{"pid": 124, "star')
    assert launches.read(tmp_path) == [whole]


@pytest.mark.parametrize(
    ("sig", "raised"),
    [
        (signal.SIGTERM, launches.Interrupted),
        (signal.SIGHUP, launches.Interrupted),
        (signal.SIGINT, KeyboardInterrupt),
    ],
)
def test_a_signal_inside_recording_stops_what_was_recorded_and_propagates(
    tmp_path: pathlib.Path, spawn: Spawn, sig: signal.Signals, raised: type[BaseException]
) -> None:
    proc = spawn()
    said: list[str] = []
    before = signal.getsignal(sig)

    def boot() -> None:
        with launches.recording(tmp_path, said.append) as ledger:
            ledger.record(proc.pid, "region a")
            os.kill(os.getpid(), sig)
            signal.pause()  # not reached: the handler raises as soon as the signal is delivered

    with pytest.raises(raised):
        boot()
    assert gone(proc)
    assert said == [
        "interrupted: stopping every process this boot started",
        f"region a (pid {proc.pid}): stopped",
    ]
    assert signal.getsignal(sig) is before


def test_down_without_a_topology_stops_what_an_interrupted_boot_left(
    tmp_path: pathlib.Path, spawn: Spawn
) -> None:
    procs = [spawn(), spawn()]
    ledger = launches.Ledger(tmp_path)
    ledger.record(procs[0].pid, "region a")
    ledger.record(procs[1].pid, "region b")

    result = CliRunner().invoke(main, ["lab", "down", "--dir", str(tmp_path)], catch_exceptions=False)

    assert result.exit_code == 0, result.output
    assert f"region a (pid {procs[0].pid}): stopped" in result.output
    assert all(gone(p) for p in procs)
    # ... and once nothing is left, the directory holds no lab at all.
    again = CliRunner().invoke(main, ["lab", "down", "--dir", str(tmp_path)])
    assert again.exit_code != 0
    assert "no lab in" in again.output


def test_up_refuses_a_dir_where_an_earlier_boot_left_processes(tmp_path: pathlib.Path, spawn: Spawn) -> None:
    proc = spawn()
    launches.Ledger(tmp_path).record(proc.pid, "region a")

    with pytest.raises(LabError, match=r"1 process\(es\) of an earlier lab running \(region a\)") as info:
        labs.up(tmp_path, ["a", "b"])

    assert "geoctl lab down" in info.value.hint
    assert not gone(proc)
    assert not (tmp_path / "regions").exists()


def test_status_of_a_dir_an_interrupted_boot_left_says_to_stop_it(
    tmp_path: pathlib.Path, spawn: Spawn
) -> None:
    proc = spawn()
    launches.Ledger(tmp_path).record(proc.pid, "region a")

    result = CliRunner().invoke(main, ["lab", "status", "--dir", str(tmp_path)])

    assert result.exit_code != 0
    assert "interrupted boot left 1 process(es) running" in result.output
    assert "geoctl lab down" in result.output
