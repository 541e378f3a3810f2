"""The C allocator's settings for a process that runs for weeks (glibc only; elsewhere nothing changes).

Why: the agent's Python state is small (a soak at 185,000 origin-index runs: memray's peak of live memory 154
MB, tracemalloc's 30 MiB of Python objects), but every checkpoint and every resync encodes the whole state
(JSON strings of several MB, freed at once) on the loop's thread, the checkpoint thread and the Pulsar
client's threads. With glibc's defaults each of those threads gets an arena of its own (up to eight per core),
large buffers are carved out of the arenas once a freed mapping has raised the dynamic mmap threshold (up to
32 MiB), and freed memory stays in the process: RSS was twice the live memory and kept rising after traffic
stopped.

What ``tune`` sets, each only if neither its ``MALLOC_*_`` variable nor ``GLIBC_TUNABLES`` in the environment
already says otherwise (an operator's choice wins):

* ``M_ARENA_MAX`` 2: threads share two arenas instead of up to sixteen on two cores;
* ``M_MMAP_THRESHOLD`` 256 KiB, fixed: larger buffers are always their own mappings, returned to the system
  when freed (fixing it turns the dynamic threshold off);
* ``M_TRIM_THRESHOLD`` 1 MiB: free memory at an arena's top goes back once it passes 1 MiB.

``Allocator.trim`` (``malloc_trim(0)``) hands free pages inside the arenas back as well; the agent calls it
after each checkpoint, the moment the largest temporary buffers have just been freed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("geosync.agent")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

SETTINGS: tuple[tuple[str, int, str, int], ...] = (
    # name in /state, mallopt parameter, environment variable that overrides it, value
    ("arena_max", M_ARENA_MAX, "MALLOC_ARENA_MAX", 2),
    ("mmap_threshold", M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 256 * 1024),
    ("trim_threshold", M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 1024 * 1024),
)


@dataclass
class Allocator:
    """What ``tune`` set (``settings``; empty where the C library is not glibc) and the trims done since."""

    libc: Any = None
    settings: dict[str, int | str] = field(default_factory=dict)
    trims: int = 0
    released: int = 0
    """How many trims gave memory back to the system."""

    def trim(self) -> None:
        """Return free memory to the system (glibc's ``malloc_trim(0)``); nothing without glibc."""
        if self.libc is None:
            return
        self.trims += 1
        if self.libc.malloc_trim(0):
            self.released += 1

    def report(self) -> dict[str, Any]:
        """For ``/state``."""
        return {"settings": dict(self.settings), "trims": self.trims, "trims_released": self.released}


def tune(environ: dict[str, str] | None = None, libc: Any = None) -> Allocator:
    """Set the allocator up for a long run (see the module's text); ``libc`` for tests (default: the process's
    C library if it is glibc)."""
    environ = dict(os.environ) if environ is None else environ
    if libc is None:
        if platform.libc_ver()[0] != "glibc":
            return Allocator()
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError) as e:
            log.warning("cannot reach the C allocator (%s): its defaults stay", e)
            return Allocator()
    settings: dict[str, int | str] = {}
    tunables = environ.get("GLIBC_TUNABLES", "")
    for name, parameter, variable, value in SETTINGS:
        if variable in environ or f"glibc.malloc.{name}" in tunables:
            settings[name] = "from the environment"
            continue
        if libc.mallopt(parameter, value) == 1:
            settings[name] = value
        else:
            log.warning("mallopt(%s, %s) was refused: glibc's default stays", name, value)
    return Allocator(libc=libc, settings=settings)
