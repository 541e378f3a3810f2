"""``bench/scale.py --cpu-hog``: a CPU hog beside a step (``stress-ng --cpu 1 --cpu-load LOAD``), started
before the step and stopped however it ends, and the option's loads parsed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time


def parse_hogs(text: str) -> list[int]:
    """``--cpu-hog``: the loads to run each step beside, percent of one core (0 for none); ``""`` is one run
    without a hog, as before the option."""
    try:
        loads = [int(x) for x in text.split(",") if x.strip()] or [0]
    except ValueError:
        loads = [-1]
    if any(not 0 <= load <= 100 for load in loads):
        raise SystemExit(
            f"--cpu-hog {text!r}: give loads in percent of one core, 0-100, comma-separated (e.g. 0,50: the "
            "step quiet, then beside stress-ng --cpu 1 --cpu-load 50)"
        )
    if any(loads) and shutil.which(CpuHog.program) is None:
        raise SystemExit(
            f"--cpu-hog needs {CpuHog.program} (scripts/setup.sh installs it: apt-get install stress-ng)"
        )
    return loads


class CpuHog:
    """``stress-ng --cpu 1 --cpu-load LOAD`` for as long as the ``with`` block runs (nothing for load 0). It
    runs in a session (process group) of its own, which is signalled as the block ends, however it ends,
    then killed if it has not gone within ``grace_s``; its own ``--timeout`` (``limit_s``) ends it even if
    this process is killed first. ``report()`` gives what it took: utime + stime of stress-ng and its workers
    (they are its children, counted in its rusage once it has reaped them)."""

    program = "stress-ng"

    def __init__(self, load: int, *, limit_s: float, grace_s: float = 10.0) -> None:
        self.load, self.limit_s, self.grace_s = load, limit_s, grace_s
        self.process: subprocess.Popen[bytes] | None = None
        self.began = self.ended = 0.0
        self.cpu_s: float | None = None

    def command(self) -> list[str]:
        return [
            self.program,
            "--cpu",
            "1",
            "--cpu-load",
            str(self.load),
            "--timeout",
            f"{max(1, int(self.limit_s))}s",
            "--quiet",
        ]

    def __enter__(self) -> CpuHog:
        if self.load > 0:
            self.began = time.monotonic()
            self.process = subprocess.Popen(
                self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            self._signal(process, signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            while process.returncode is None and time.monotonic() < deadline:
                self._reap(process)
                if process.returncode is None:
                    time.sleep(0.05)
        finally:
            if process.returncode is None:
                # Its group, workers and all, while the leader is not reaped (the group's id is still its).
                self._signal(process, signal.SIGKILL)
                process.wait()
            self.ended = time.monotonic()

    def _reap(self, process: subprocess.Popen[bytes]) -> None:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            self.cpu_s = usage.ru_utime + usage.ru_stime

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)  # its own session: the group's id is its pid

    def report(self) -> str:
        if self.load <= 0:
            return ""
        span = max(self.ended - self.began, 1e-9)
        if self.cpu_s is None:
            return f"stress-ng --cpu 1 --cpu-load {self.load} ran {span:.0f} s (its CPU not read: killed)"
        return (
            f"stress-ng --cpu 1 --cpu-load {self.load} ran {span:.0f} s and took {self.cpu_s:.1f} CPU-s "
            f"({self.cpu_s / span:.0%} of a core)"
        )
