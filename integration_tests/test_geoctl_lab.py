"""``geoctl lab`` as a user meets it: status of the live lab and every error case the issue names."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import textwrap
from typing import Any

import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_LAB
from geosync_lab import distribution, labs, regions
from geosync_lab.errors import LabError
from integration_tests.helpers import Lab


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_status_reports_a_healthy_lab(lab: Lab) -> None:
    code, out = run("lab", "status", "--dir", str(lab.dir), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["healthy"] is True
    assert sorted(data["regions"]) == ["a", "b", "c"]
    assert data["regions"]["c"]["replication"] == {
        ns: {"a": True, "b": True} for ns in ("geo/abc", "geo/snap-abc")
    }
    assert all(r["rss_mb"] > 50 for r in data["regions"].values())


def test_up_on_the_live_lab_is_a_no_op(lab: Lab) -> None:
    code, out = run("lab", "up", "--regions", "a,b,c", "--dir", str(lab.dir))
    assert code == 0
    assert "already running" in out


def test_up_refuses_a_dir_holding_another_live_lab(lab: Lab) -> None:
    code, out = run("lab", "up", "--regions", "x,y", "--dir", str(lab.dir))
    assert code == EXIT_LAB
    assert "holds another live lab" in out
    assert "geoctl lab down" in out


@pytest.mark.parametrize(
    ("regions_arg", "message"),
    [
        ("a,a", "duplicate region name"),
        ("A,b", "invalid region name"),
        ("a", "at least two regions"),
        ("", "no regions given"),
    ],
)
def test_bad_region_lists_are_refused_before_anything_starts(
    tmp_path: pathlib.Path, regions_arg: str, message: str
) -> None:
    code, out = run("lab", "up", "--regions", regions_arg, "--dir", str(tmp_path))
    assert code != 0
    assert message in out
    assert not (tmp_path / "regions").exists()


def test_status_of_an_empty_dir_says_how_to_start(tmp_path: pathlib.Path) -> None:
    code, out = run("lab", "status", "--dir", str(tmp_path))
    assert code == EXIT_LAB
    assert "geoctl lab up" in out


def test_missing_java_is_explained(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabError, match="Java is not installed") as info:
        distribution.check_java()
    assert "openjdk" in info.value.hint


def test_old_java_is_refused(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(LabError, match="Java 11 is too old"):
        distribution.check_java()


def test_unreachable_maven_central_is_explained(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Maven mirror on a closed loopback port stands in for an unreachable Maven Central.
    settings = tmp_path / "settings.xml"
    settings.write_text(
        textwrap.dedent("""\
        <settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>
        <url>http://127.0.0.1:9/maven2</url></mirror></mirrors></settings>""")
    )
    monkeypatch.setenv("GEOSYNC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GEOSYNC_MAVEN_ARGS", f"-s {settings} -Dmaven.repo.local={tmp_path / 'm2'}")
    with pytest.raises(LabError, match="Maven could not download") as info:
        distribution.ensure_pulsar("4.0.8")
    assert "reachable" in info.value.hint
    assert not (tmp_path / "cache" / "apache-pulsar-4.0.8").exists()


def test_region_that_misses_its_deadline_is_reported_with_its_log(tmp_path: pathlib.Path) -> None:
    home = distribution.ensure_pulsar()
    with pytest.raises(LabError, match="did not come up within") as info:
        labs._boot_region(home, tmp_path / "slow", "slow", set(), deadline_s=1.0)
    assert "last lines of" in str(info.value) or "no log written yet" in str(info.value)
    assert not any("slow/conf" in " ".join(p.cmdline()) for p in _java_processes())


def test_port_taken_between_choice_and_bind_is_retried(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hold a listening socket on the web port the first choice will use: the JVM fails to bind it, and
    # the lab must choose new ports and boot anyway.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken_port = squatter.getsockname()[1]
    real_pick = regions.pick_ports
    calls = {"n": 0}

    def pick(avoid: set[int] | None = None) -> regions.Ports:
        calls["n"] += 1
        ports = real_pick(avoid)
        if calls["n"] == 1:
            return regions.Ports(
                web=taken_port, broker=ports.broker, zookeeper=ports.zookeeper, bookie=ports.bookie
            )
        return ports

    monkeypatch.setattr(regions, "pick_ports", pick)
    home = distribution.ensure_pulsar()
    try:
        proc, pid, boot = labs._boot_region(home, tmp_path / "p", "p", set(), deadline_s=180)
        try:
            assert boot.attempts == 2
            assert proc.ports.web != taken_port
        finally:
            regions.stop(pid, regions.region_marker(proc), grace_s=5)
    finally:
        squatter.close()


def _java_processes() -> list[Any]:
    import psutil

    out = []
    for p in psutil.process_iter(["name"]):
        try:
            if p.info["name"] == "java":
                out.append(p)
        except psutil.Error:
            continue
    return out
