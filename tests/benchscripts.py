"""The scripts under ``bench/`` as modules for the tests: they are scripts, not a package."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    """``bench/NAME.py`` as the module ``bench_NAME``, registered in ``sys.modules`` (its dataclasses need it,
    and worker processes find its functions by the module's name)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module
