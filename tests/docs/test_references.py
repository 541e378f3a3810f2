"""The docs site's reference pages are generated from the code (``scripts/gen_docs.py``); these tests keep
the committed pages equal to what the code gives now, and hold every alert of the chart to a runbook.

Whoever adds a setting, a geoctl command, a metric or an alert regenerates the pages with
``.venv/bin/python scripts/gen_docs.py`` and, for an alert, writes its runbook section in
``docs/operations/runbooks.md``.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "operations" / "runbooks.md"
RUNBOOK_PARTS = ("What it means", "What to check", "What to do")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.mark.parametrize("page", sorted(GEN.pages()), ids=lambda p: p.name)
def test_reference_page_is_what_the_code_gives(page: pathlib.Path) -> None:
    expected = GEN.pages()[page]
    committed = page.read_text() if page.exists() else ""
    assert committed == expected, (
        f"{page.relative_to(ROOT)} no longer matches the code: run '{GEN.COMMAND}' and commit the result"
    )


def test_every_setting_command_metric_and_alert_is_in_the_references() -> None:
    from geoctl.cli import main
    from geosync_agent.config import AgentConfig

    pages = {p.name: text for p, text in GEN.pages().items()}
    for name in AgentConfig.__dataclass_fields__:
        assert f"### `{name}`" in pages["settings.md"], name
    for command in main.commands:
        assert f"## `geoctl {command}`" in pages["geoctl.md"], command
    for _, rule, _ in GEN.alerts():
        assert f"## {rule['alert']}\n" in pages["alerts.md"], rule["alert"]
        # every metric an alert reads is one the metrics page names (the rules may use _total counters)
        for metric in re.findall(r"\bgeosync_[a-z_]+", str(rule["expr"])):
            assert f"| `{metric}` |" in pages["metrics.md"], (rule["alert"], metric)


def _runbook_sections() -> dict[str, str]:
    text = RUNBOOKS.read_text()
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def test_every_alert_has_a_runbook() -> None:
    sections = _runbook_sections()
    names = [rule["alert"] for _, rule, _ in GEN.alerts()]
    assert names, "no alert found in the chart's rule files"
    missing = [n for n in names if n not in sections]
    where = RUNBOOKS.relative_to(ROOT)
    assert not missing, f"alerts without a runbook section ('## NAME') in {where}: {missing}"
    for name in names:
        absent = [part for part in RUNBOOK_PARTS if f"**{part}" not in sections[name]]
        assert not absent, f"runbook {name} lacks {absent}"


def test_every_runbook_names_an_alert() -> None:
    names = {rule["alert"] for _, rule, _ in GEN.alerts()}
    orphans = sorted(set(_runbook_sections()) - names)
    assert not orphans, f"runbooks for alerts the chart no longer has: {orphans}"
