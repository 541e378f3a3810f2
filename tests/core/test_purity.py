"""The core must stay pure: only allow-listed standard-library modules may be imported there.

import-linter forbids the project's other layers and named I/O packages; this test closes the rest of
the gap (a stray ``import socket`` or ``import time``) by reading every core module's imports.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

CORE = pathlib.Path(__file__).resolve().parents[2] / "controller" / "geosync_core"

ALLOWED = {
    "__future__",
    "abc",
    "array",
    "base64",
    "bisect",
    "collections",
    "dataclasses",
    "datetime",
    "enum",
    "functools",
    "hashlib",
    "hmac",
    "heapq",
    "itertools",
    "json",
    "math",
    "operator",
    "re",
    "struct",
    "typing",
    "fnmatch",
    "string",
    "uuid",
    "zlib",
    "geosync_core",
    "types",
    "copy",
    "decimal",
}


def _modules() -> list[pathlib.Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_has_modules() -> None:
    assert _modules(), f"no modules found under {CORE}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_core_imports_only_allowed_stdlib(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= ALLOWED, f"{path.name} imports {sorted(imported - ALLOWED)}"
