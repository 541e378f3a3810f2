"""The record a bench leaves of a run: one JSON file that is one row of BENCHMARKS.md's "At a glance" table.

A bench takes ``--record FILE`` (``add_argument``) and, at its end, calls ``write`` with the row's cells
(what GeoSync gave, what PIP-33 gave in the same run) and its raw figures; ``write`` adds what makes the run
reproducible: the command as typed, the commit measured (``+dirty`` when the tree differed from it), the
machine and the date. ``python bench/report.py`` then rebuilds the table from ``bench/results/*.json``, one
row per file in file-name order: a new row is a new file there (copy the run's record in, name it
``NN-slug.json`` where NN places it) and one run of the report. A bench whose run gives several rows
(``scale.py``: one per subscription step) writes one file each with ``write_each``. A record that also has
``columns`` and ``rows`` (``failover.py``'s, of its scenarios) can be a section's table as well, as
``bench/results/tables/NAME.json`` (see ``bench/report.py``).

A record's keys:

* ``scenario``, ``command``, ``geosync``, ``pip33``, ``date``, ``commit``, ``machine``: the row's cells
  (Markdown; ``pip33`` is ``"-"`` where the scenario has no PIP-33 counterpart);
* ``source``: ``"bench/NAME.py"`` for a record the bench wrote, or a sentence saying the figures were
  transcribed from an earlier printed output and not re-run;
* ``figures``: the numbers behind the cells, as the bench measured them (optional).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import shlex
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
KEYS = ("scenario", "command", "geosync", "pip33", "date", "commit", "machine", "source")


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--record FILE``: where the bench writes its record (see this module)."""
    commit_at_start()
    parser.add_argument(
        "--record",
        type=pathlib.Path,
        metavar="FILE",
        help="write this run's row of BENCHMARKS.md as JSON here (then: copy it into bench/results/, "
        "run 'python bench/report.py')",
    )


def commit() -> str:
    """The commit measured: HEAD's short hash, ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT, check=False).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


_AT_START: dict[str, str] = {}


def commit_at_start() -> str:
    """``commit()`` as it was when this module was first asked, at the bench's start: the code measured
    (in a tree others commit to, HEAD may have moved by the end of a long run)."""
    if "commit" not in _AT_START:
        _AT_START["commit"] = commit()
    return _AT_START["commit"]


def machine() -> str:
    """Cores and memory of this machine, as the table's machine column gives them."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.0f} GiB"
    except (ValueError, OSError):
        memory = ""
    return f"{os.cpu_count()} cores{memory}"


def command(argv: list[str] | None = None) -> str:
    """The command as typed, ``python bench/NAME.py ARGS``, but for ``--record FILE`` (where it went)."""
    argv = sys.argv if argv is None else argv
    script = pathlib.Path(argv[0])
    with contextlib.suppress(ValueError):
        script = script.resolve().relative_to(ROOT)
    args: list[str] = []
    rest = iter(argv[1:])
    for arg in rest:
        if arg == "--record":
            next(rest, None)
        elif not arg.startswith("--record="):
            args.append(arg)
    return shlex.join(["python", str(script), *args])


def make(
    scenario: str, geosync: str, pip33: str = "-", figures: dict[str, Any] | None = None, **cells: str
) -> dict[str, Any]:
    """A record of this run; ``cells`` overrides any of command, date, commit, machine and source."""
    record: dict[str, Any] = {
        "scenario": scenario,
        "command": f"`{command()}`",
        "geosync": geosync,
        "pip33": pip33,
        "date": datetime.date.today().isoformat(),
        "commit": commit_at_start(),
        "machine": machine(),
        "source": f"written by bench/{pathlib.Path(sys.argv[0]).name} (bench/record.py)",
        **cells,
    }
    if figures is not None:
        record["figures"] = figures
    return record


def write_each(path: pathlib.Path | None, records: dict[str, dict[str, Any]]) -> None:
    """A bench whose run gives several rows: one file each, ``FILE`` named ``STEM-KEY.json`` per key."""
    if path is None:
        return
    for key, one in records.items():
        write(path.with_name(f"{path.stem}-{key}{path.suffix or '.json'}"), one)


def write(path: pathlib.Path | None, record: dict[str, Any]) -> None:
    """Writes ``record`` to ``path`` (nothing when ``path`` is None, i.e. no ``--record``)."""
    if path is None:
        return
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"record: {path} (copy it into bench/results/ and run 'python bench/report.py')")
