"""One version for everything a release ships: the Python distribution (``pyproject.toml``), the broker
plugin NAR (``interceptors/`` poms: the NAR's file name carries it), the images (``scripts/build-images.sh``
tags both with it) and the chart's ``appVersion`` (its default image tag); the changelog has a section for
it. A release bumps them together; this test names the one that was forgotten."""

from __future__ import annotations

import pathlib
import re
import tomllib
import xml.etree.ElementTree as ET

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
POM = "{http://maven.apache.org/POM/4.0.0}"


def _pom_version(path: pathlib.Path) -> str:
    project = ET.parse(path).getroot()
    own = project.find(f"{POM}version")
    parent = project.find(f"{POM}parent/{POM}version")
    found = own if own is not None else parent
    assert found is not None, f"{path} declares no version"
    assert found.text, f"{path} declares an empty version"
    return found.text.strip()


def test_every_maven_module_has_the_python_version() -> None:
    poms = sorted((ROOT / "interceptors").glob("**/pom.xml"))
    assert len(poms) >= 3
    assert {str(p.relative_to(ROOT)): _pom_version(p) for p in poms} == {
        str(p.relative_to(ROOT)): VERSION for p in poms
    }


def test_the_chart_runs_images_of_the_python_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "geosync-agent" / "Chart.yaml").read_text())
    assert str(chart["appVersion"]) == VERSION


def test_the_images_are_tagged_from_pyproject() -> None:
    script = (ROOT / "scripts" / "build-images.sh").read_text()
    assert re.search(r'^VERSION=\$\(.*tomllib.*pyproject\.toml.*\["version"\]', script, re.MULTILINE)
    assert "agent:$VERSION" in script
    assert "broker-plugins:$VERSION" in script


def test_the_changelog_has_a_section_for_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.MULTILINE)
