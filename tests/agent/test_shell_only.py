"""Only the shell reads clocks, draws random numbers and starts threads (decision 0001): the agent's parts
are given the time (``Now``, with its meters), the random draws (``rng``) and the threads' work as values,
so the same code runs in production, in the unit tests and in the simulator (``docs/simulation.md``).

An import-linter contract in ``pyproject.toml`` keeps ``time``, ``random``, ``secrets`` and ``uuid`` out of
these modules; this test keeps threads out, which the import alone cannot say (``threading``'s locks and
events are the mailboxes between the shell's tasks and the parts, and are allowed).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

AGENT = pathlib.Path(__file__).resolve().parents[2] / "controller" / "geosync_agent"
PARTS = (
    "agentstate",
    "tracking",
    "indexing",
    "controlling",
    "feeding",
    "observing",
    "folding",
    "saving",
    "lookups",
    "discovering",
    "snapshotting",
    "tailing",
    "reading",
    "owning",
    "calls",
    "ports",
    "mirrorlocal",
    "mirrorapplying",
    "mirrorstate",
    "mirrorholds",
    "core/mirror",
    "core/mirrorevents",
    "core/mirroring",
    "core/mirrorterm",
    "core/mirrorreleasing",
)
"""The parts and the modules they decide with, the policy mirror's among them. The shell: ``runtime`` (the
loop), ``effects`` (the ``Effector``), ``supervising``, ``serving``, ``reporting``, ``watching``,
``checkpointing`` (the writer task), ``collector``, ``allocator``, ``recent``, ``incarnating``, ``config``,
``jsonlog``, ``__main__``, and the policy mirror's ``mirroring`` (its ZooKeeper session and watches, its event
topic's client and reader, its loop)."""
FORBIDDEN_CALLS = frozenset(
    {"Thread", "Timer", "ThreadPoolExecutor", "ProcessPoolExecutor", "start_new_thread"}
)
FORBIDDEN_MODULES = frozenset({"time", "random", "secrets", "uuid"})


def offences(source: str) -> list[str]:
    """What in ``source`` starts a thread or reads a clock or randomness, by line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in FORBIDDEN_CALLS:
                found.append(f"line {node.lineno}: starts a thread ({name})")
        elif isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: imports {a.name}"
                for a in node.names
                if a.name.split(".")[0] in FORBIDDEN_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            found.append(f"line {node.lineno}: imports from {node.module}")
    return found


@pytest.mark.parametrize("part", PARTS)
def test_a_part_starts_no_thread_and_reads_no_clock_or_randomness(part: str) -> None:
    assert offences((AGENT / f"{part}.py").read_text()) == [], (
        f"geosync_agent.{part.replace('/', '.')} is one of the agent's parts: take the time from the Now the "
        "round is given (the mirror's: its wall_ms), random draws from the agent's rng (the mirror's: its "
        "new_id), and leave threads to the shell (supervising)"
    )


def test_the_check_finds_what_it_looks_for() -> None:
    source = (
        "import threading\nimport time as t\nfrom random import random\n"
        "threading.Thread(target=print).start()\nt.monotonic()\n"
    )
    assert offences(source) == [
        "line 2: imports time",
        "line 3: imports from random",
        "line 4: starts a thread (Thread)",
    ]
