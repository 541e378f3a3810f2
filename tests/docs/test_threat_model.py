"""The threat model names, for each boundary, the test that proves its check: every test it names exists."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "threat-model.md"
NAMED = re.compile(r"`((?:tests|integration_tests)/[\w/]+\.py)(?:::(\w+))?`")


def test_every_test_the_threat_model_names_exists() -> None:
    named = NAMED.findall(PAGE.read_text())
    assert len(named) >= 10, "the threat model should name the tests that prove it"
    missing = []
    for path, function in named:
        source = ROOT / path
        if not source.is_file() or (function and f"def {function}(" not in source.read_text()):
            missing.append(f"{path}::{function}" if function else path)
    assert not missing, f"docs/threat-model.md names tests that do not exist: {missing}"
