"""``scripts/setup.sh`` installs per purpose: ``--for demo`` what the demo needs (the project without extras,
Pulsar, the plugins) and no Go build; ``--for test``, the default and what ``scripts/test.sh`` runs, also the
extras and the Go-built promtool and toxiproxy-server. The script runs in a copy of the repository against
stand-in tools (java, mvn, go and the virtualenv's python each only record how they were called), so this
checks what it would run, in a second."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RECORDER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{calls}"
{extra}
exit 0
"""
# go install PACKAGE@VERSION leaves the binary in $GOBIN under the package's last path element.
GO_EXTRA = 'pkg="${2%@*}"; touch "$GOBIN/${pkg##*/}"; chmod +x "$GOBIN/${pkg##*/}"'


def _tool(path: pathlib.Path, calls: pathlib.Path, extra: str = "") -> None:
    path.write_text(RECORDER.format(calls=calls, extra=extra))
    path.chmod(0o755)


@pytest.fixture
def repo(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the scripts with a virtualenv and tools that only record their calls (in ``calls.log``)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    for name in ("pyproject.toml", "constraints.txt"):
        (repo / name).write_text("")
    calls = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("java", "mvn", "python3.11", "stress-ng"):
        _tool(bin_dir / name, calls)
    _tool(bin_dir / "go", calls, GO_EXTRA)
    (repo / ".venv" / "bin").mkdir(parents=True)
    _tool(repo / ".venv" / "bin" / "python", calls)
    return repo


def setup(
    repo: pathlib.Path, *args: str, system: str = "/usr/bin:/bin"
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    tmp = repo.parent
    env = {
        "PATH": f"{tmp / 'bin'}:{system}",
        "HOME": str(tmp),
        "GEOSYNC_SETUP_LOG": str(tmp / "setup.log"),
    }
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    calls = tmp / "calls.log"
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_the_demo_gets_the_project_pulsar_and_the_plugins_and_no_go_build(repo: pathlib.Path) -> None:
    done, calls = setup(repo, "--for", "demo")

    assert done.returncode == 0, done.stdout + done.stderr
    installs = [c for c in calls if " pip install " in c and "-e" in c]
    assert len(installs) == 1
    assert installs[0].endswith("-e .")
    assert any("ensure_pulsar" in c for c in calls)
    assert any("ensure_plugins" in c for c in calls)
    assert not [c for c in calls if c.startswith("go ")]
    assert (repo / ".venv" / ".geosync-installed").read_text().strip() == "demo"
    # One progress line per step, and the tools' own output kept out of the terminal.
    assert [line.split(" ... ")[0] for line in done.stdout.splitlines()] == [
        "setup: Python packages: the project and its dependencies",
        "setup: Pulsar distribution (Maven Central, cached under ~/.cache/geosync)",
        "setup: GeoSync broker plugins (Maven build of interceptors/, cached by source hash)",
    ]


def test_the_default_installs_the_extras_and_builds_both_go_tools(repo: pathlib.Path) -> None:
    done, calls = setup(repo)

    assert done.returncode == 0, done.stdout + done.stderr
    installs = [c for c in calls if " pip install " in c and "-e" in c]
    assert installs[-1].endswith("-e .[dev,spark,containers]")
    assert sorted(c.split("@")[0] for c in calls if c.startswith("go ")) == [
        "go install github.com/Shopify/toxiproxy/v2/cmd/server",
        "go install github.com/prometheus/prometheus/cmd/promtool",
    ]
    assert os.access(repo / ".venv" / "bin" / "promtool", os.X_OK)
    assert os.access(repo / ".venv" / "bin" / "toxiproxy-server", os.X_OK)
    assert (repo / ".venv" / ".geosync-installed").read_text().strip() == "test"


def test_a_demo_install_is_completed_for_the_tests_and_then_left_alone(repo: pathlib.Path) -> None:
    setup(repo, "--for", "demo")
    done, calls = setup(repo, "--for", "test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c for c in calls if " pip install " in c and "-e" in c][-1].endswith("-e .[dev,spark,containers]")

    (repo.parent / "calls.log").unlink()
    _, again = setup(repo, "--for", "demo")
    assert not [c for c in again if " pip install " in c]  # a test install covers the demo
    assert not [c for c in again if c.startswith("go ")]


def _system_without(tmp: pathlib.Path, *missing: str) -> str:
    """A PATH of the machine's own tools but ``missing`` (links in a directory of their own)."""
    system = tmp / "system"
    system.mkdir()
    for directory in (pathlib.Path("/usr/bin"), pathlib.Path("/bin")):
        for tool in directory.iterdir():
            if tool.name not in missing and not (system / tool.name).exists():
                (system / tool.name).symlink_to(tool)
    return str(system)


def test_the_tests_get_stress_ng_from_apt_when_it_is_missing_and_the_demo_does_not(
    repo: pathlib.Path,
) -> None:
    tmp = repo.parent
    (tmp / "bin" / "stress-ng").unlink()
    _tool(tmp / "bin" / "apt-get", tmp / "calls.log")
    system = _system_without(tmp, "stress-ng", "apt-get")

    done, calls = setup(repo, "--for", "demo", system=system)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [c for c in calls if c.startswith("apt-get")]

    done, calls = setup(repo, "--for", "test", system=system)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c for c in calls if c.startswith("apt-get install")] == ["apt-get install -y -qq stress-ng"]
    assert done.stdout.splitlines()[0].startswith("setup: Debian packages stress-ng (apt-get) ... done")


def test_an_unknown_purpose_is_refused_before_anything_runs(repo: pathlib.Path) -> None:
    done, calls = setup(repo, "--for", "prod")
    assert done.returncode == 2
    assert "--for takes demo or test" in done.stderr
    assert calls == []


def test_the_demo_and_test_commands_ask_for_their_purpose() -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    test = (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/setup.sh --for demo" in demo
    setup_line = next(line for line in test.splitlines() if "scripts/setup.sh" in line)
    assert "--for demo" not in setup_line


def test_help_names_both_purposes_and_runs_nothing(repo: pathlib.Path) -> None:
    done, calls = setup(repo, "--help")
    assert done.returncode == 0
    assert "--for demo" in done.stdout
    assert "--for test" in done.stdout
    assert "set -euo" not in done.stdout
    assert calls == []
