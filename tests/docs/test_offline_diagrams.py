"""The docs site needs no CDN when read: no fonts from Google (``theme.font: false``), and its diagrams drawn
by the pinned mermaid that scripts/setup.sh puts into docs/assets/javascripts/ and mkdocs.yml loads
(Material for MkDocs fetches mermaid from unpkg.com only when a page lacks it). The README's picture is a
mermaid block, which GitHub draws itself."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import material
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pinned() -> str:
    found = re.search(r"^MERMAID_VERSION=(\S+)$", (ROOT / "scripts" / "setup.sh").read_text(), re.MULTILINE)
    assert found, "scripts/setup.sh pins no MERMAID_VERSION"
    return found.group(1)


def _config() -> dict[str, Any]:
    # mkdocs.yml holds a !!python/name tag: read it with a loader that leaves tags alone
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda _loader, _suffix, _node: None)
    config: dict[str, Any] = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    return config


def _extra_javascript() -> list[str]:
    return list(_config().get("extra_javascript") or [])


def test_the_site_loads_the_pinned_mermaid_from_its_own_assets() -> None:
    wanted = f"assets/javascripts/mermaid-{_pinned()}.min.js"
    assert wanted in _extra_javascript()
    script = ROOT / "docs" / wanted
    assert script.is_file(), f"{script.relative_to(ROOT)} is missing: run 'bash scripts/setup.sh'"
    head = script.read_text(errors="replace")[:200_000]
    assert "mermaid" in head
    assert "unpkg.com" not in head


def test_the_pinned_mermaid_is_the_major_version_material_expects() -> None:
    bundles = list(
        (pathlib.Path(material.__file__).parent / "templates" / "assets" / "javascripts").glob(
            "bundle.*.min.js"
        )
    )
    assert bundles
    expected = re.search(r"unpkg\.com/mermaid@(\d+)/", bundles[0].read_text())
    assert expected, "Material no longer names the mermaid it would fetch: check how it loads diagrams"
    assert _pinned().split(".")[0] == expected.group(1)


def test_the_readme_picture_is_a_block_github_draws() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "```mermaid\n" in readme
    assert "unpkg.com" not in readme


def test_the_site_loads_no_fonts_from_google() -> None:
    assert _config()["theme"].get("font") is False
