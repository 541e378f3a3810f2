"""The lab's record of every process it launches, written the moment each one starts.

``topology.json`` names a lab's processes only once every region has booted, so a ``geoctl lab up`` stopped
before that (Ctrl-C, SIGTERM from a CI timeout or a closed terminal, SIGKILL) used to leave its JVMs with
nothing naming them. Each launch is appended to ``DIR/launches.jsonl`` as soon as its pid is known, with
the process's start time; ``up`` stops what it started when interrupted, and ``down`` stops what any
earlier run left, with or without a topology.

Invariants (each one a test in ``tests/lab/test_launches.py``):

1. A process is signalled only while its pid is alive with the start time recorded for it: a pid the
   kernel has since given to another program is never touched.
2. Once a ledger is closed (the boot is being abandoned), a launch reported to it is stopped at once and
   its caller gets ``LabError``: a boot thread that was still starting a process cannot leave it behind
   a sweep that already ran.
3. A sweep leaves none of the recorded processes running: SIGTERM to each one's session, SIGKILL to what
   is left after the grace time.
4. A torn last line (the writer killed mid-append) loses at most that entry; every other one is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

import psutil

from geosync_lab.errors import LabError

LEDGER_FILE = "launches.jsonl"
OnLaunch = Callable[[int, str], None]
"""Told ``(pid, role)`` right after a process starts, before anything waits on it."""

_START_TIME_TOLERANCE_S = 0.05
"""psutil derives a start time from boot time and clock ticks: equal for one process, far apart otherwise."""


@dataclass(frozen=True)
class Launch:
    """One launched process: its pid, when it started (epoch seconds, from the kernel) and what it is."""

    pid: int
    started: float
    role: str

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "started": self.started, "role": self.role}, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Launch:
        raw = json.loads(line)
        return cls(pid=int(raw["pid"]), started=float(raw["started"]), role=str(raw["role"]))


def ledger_path(lab_dir: pathlib.Path) -> pathlib.Path:
    return lab_dir / LEDGER_FILE


def start_time(pid: int) -> float | None:
    """The kernel's start time of ``pid``, or None if no such process (or not ours to read)."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def alive(launch: Launch) -> bool:
    """True while the recorded process itself runs (not a zombie, not a later process with its pid)."""
    try:
        proc = psutil.Process(launch.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(float(proc.create_time()) - launch.started) < _START_TIME_TOLERANCE_S
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def read(lab_dir: pathlib.Path) -> list[Launch]:
    """Every launch recorded in ``lab_dir`` (none when there is no ledger); unreadable lines are skipped."""
    path = ledger_path(lab_dir)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            out.append(Launch.from_json(line))
    return out


def running(lab_dir: pathlib.Path) -> list[Launch]:
    """The recorded processes still running."""
    return [launch for launch in read(lab_dir) if alive(launch)]


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal the process's whole session when it leads one (the lab starts each in its own), else it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _label(launch: Launch) -> str:
    return f"{launch.role} (pid {launch.pid})"


def stop(launches: list[Launch], *, grace_s: float = 10.0) -> dict[str, str]:
    """Stop every one of ``launches`` still running, all at once: SIGCONT (a frozen process cannot handle
    SIGTERM), SIGTERM, then SIGKILL to those left after ``grace_s``. What happened to each, by role and
    pid."""
    outcome = {_label(launch): "not running" for launch in launches}
    procs: dict[psutil.Process, Launch] = {}
    for launch in launches:
        if alive(launch):
            # Held from here on: psutil refuses to signal a Process whose pid has been reused since.
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                procs[psutil.Process(launch.pid)] = launch
    for launch in procs.values():
        _signal(launch.pid, signal.SIGCONT)
        _signal(launch.pid, signal.SIGTERM)
    # wait_procs also reaps those that are our own children (an interrupted boot's).
    _, left = psutil.wait_procs(list(procs), timeout=grace_s)
    for proc, launch in procs.items():
        outcome[_label(launch)] = "stopped"
        if proc in left and alive(launch):
            _signal(launch.pid, signal.SIGKILL)
            outcome[_label(launch)] = "killed"
    psutil.wait_procs(left, timeout=10)
    return outcome


def sweep(lab_dir: pathlib.Path, *, grace_s: float = 10.0) -> dict[str, str]:
    """Stop every recorded process of ``lab_dir`` still running and empty the record; what was stopped
    (processes that had already ended are left out)."""
    live = running(lab_dir)
    outcome = stop(live, grace_s=grace_s) if live else {}
    if not running(lab_dir):
        ledger_path(lab_dir).unlink(missing_ok=True)
    return outcome


class Ledger:
    """The record a lab appends to as it launches processes; safe to use from several boot threads."""

    def __init__(self, lab_dir: pathlib.Path) -> None:
        self.path = ledger_path(lab_dir)
        self._lock = threading.Lock()
        self._closed = False
        self._launches: list[Launch] = []

    def record(self, pid: int, role: str) -> None:
        """Note a process that has just started (an ``OnLaunch``). On a closed ledger, stop it and raise."""
        started = start_time(pid)
        if started is None:
            return  # it has already ended: nothing to stop later
        launch = Launch(pid=pid, started=started, role=role)
        with self._lock:
            if not self._closed:
                self._launches.append(launch)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # One write on an O_APPEND descriptor: a line lands whole or (killed mid-call) not at all.
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, (launch.to_json() + "\n").encode())
                finally:
                    os.close(fd)
                return
        stop([launch], grace_s=5)
        raise LabError(f"{role}: stopped as soon as it started, because the lab's boot was abandoned")

    def close_and_stop(self, *, grace_s: float = 10.0) -> dict[str, str]:
        """Refuse further launches and stop every process recorded by this ledger; what happened to each."""
        with self._lock:
            self._closed = True
            launches = list(self._launches)
        return stop(launches, grace_s=grace_s)


class Interrupted(BaseException):
    """A termination signal arrived: like KeyboardInterrupt for SIGINT, not caught by ``except Exception``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


INTERRUPTING = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end an interactive command (SIGINT already raises KeyboardInterrupt)."""


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise ``Interrupted`` in the main thread instead of ending the
    process at once, so cleanup code runs. Outside the main thread this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, raise_interrupted) for sig in INTERRUPTING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def recording(lab_dir: pathlib.Path, report: Callable[[str], None]) -> Iterator[Ledger]:
    """A fresh ledger for a lab's boot. Within the block SIGTERM and SIGHUP interrupt as Ctrl-C does; an
    interruption stops every process recorded so far (and any launched later) before it propagates."""
    ledger_path(lab_dir).unlink(missing_ok=True)
    ledger = Ledger(lab_dir)
    with interruptible():
        try:
            yield ledger
        except (KeyboardInterrupt, Interrupted):
            report("interrupted: stopping every process this boot started")
            for what, happened in ledger.close_and_stop().items():
                report(f"{what}: {happened}")
            raise
