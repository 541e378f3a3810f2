"""A real ``geoctl lab up`` interrupted while its regions boot leaves nothing running: SIGTERM to its process
group (what a CI timeout or a closed terminal sends) makes it stop what it started; after a SIGKILL, which
it cannot catch, ``geoctl lab down`` finds the JVMs in the lab's launch record and stops them.

Each test boots two regions without agents and interrupts as soon as a region's JVM runs, so it costs
seconds, not a whole boot. Whether anything is left is judged from every process's command line naming
the lab directory, not from the launch record the code under test writes."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from geosync_lab import launches


def lab_processes(lab_dir: pathlib.Path) -> list[psutil.Process]:
    """Every live process whose command line names a path under ``lab_dir`` (regions, agents, the WAN)."""
    prefix = f"{lab_dir}{os.sep}"
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(prefix in arg for arg in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


CTRL_C_AS_IN_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'geoctl'; runpy.run_module('geoctl', run_name='__main__')"
)
"""``python -m geoctl`` with Ctrl-C raising KeyboardInterrupt, as in a terminal's foreground job: a test run
started in the background inherits SIGINT ignored, and Python would keep ignoring it."""


UP = ("lab", "up", "--regions", "a,b", "--no-agents")


def boot_until_a_jvm_runs(lab_dir: pathlib.Path, *, timeout_s: float = 180.0) -> subprocess.Popen[bytes]:
    """``geoctl lab up`` in its own process group, returned once a region's JVM of it is running."""
    log = (lab_dir.parent / f"{lab_dir.name}-geoctl.log").open("wb")
    up = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_AS_IN_A_TERMINAL, *UP, "--dir", str(lab_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        assert up.poll() is None, f"geoctl lab up ended (exit {up.returncode}) before any region started"
        jvms = [p for p in lab_processes(lab_dir) if "java" in (p.info["cmdline"] or [""])[0]]
        if jvms and launches.read(lab_dir):
            return up
        time.sleep(0.1)
    os.killpg(up.pid, signal.SIGKILL)
    raise AssertionError(f"no region JVM of {lab_dir} ran within {timeout_s:.0f} s")


def geoctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "geoctl", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "signum",
    [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
    ids=["SIGTERM (CI timeout)", "SIGINT (Ctrl-C)", "SIGHUP (closed terminal)"],
)
def test_a_signal_during_boot_stops_every_process_it_started(
    tmp_path: pathlib.Path, signum: signal.Signals
) -> None:
    lab_dir = tmp_path / "lab"
    up = boot_until_a_jvm_runs(lab_dir)

    os.killpg(up.pid, signum)

    assert up.wait(timeout=60) == 128 + signum
    assert lab_processes(lab_dir) == []
    assert not (lab_dir / "topology.json").exists()  # stopped before the regions were wired
    down = geoctl("lab", "down", "--dir", str(lab_dir))
    assert down.returncode == 0, down.stdout + down.stderr


def test_down_stops_what_a_killed_boot_left(tmp_path: pathlib.Path) -> None:
    lab_dir = tmp_path / "lab"
    up = boot_until_a_jvm_runs(lab_dir)

    os.killpg(up.pid, signal.SIGKILL)
    up.wait(timeout=30)
    left = lab_processes(lab_dir)
    assert left, "the SIGKILLed boot should have left its JVMs running (else this test proves nothing)"

    down = geoctl("lab", "down", "--dir", str(lab_dir))

    assert down.returncode == 0, down.stdout + down.stderr
    assert "region a" in down.stdout
    assert lab_processes(lab_dir) == []
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in left)
