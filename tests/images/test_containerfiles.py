"""The container images' promises, read from their Containerfiles (``images/``), and the plugin image's
entry point run as a script.

Kubernetes' runAsNonRoot needs a numeric non-root USER; the chart's probes, the HEALTHCHECK and EXPOSE
must name the agent's metrics port; the runtime stage must install the built wheels and nothing else from
the source tree; the base must be a build argument (scripts/build-images.sh passes one made from Debian
packages where no registry answers). Building and running the images is
``integration_tests/test_images.py``'s job.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
CHART = ROOT / "charts" / "geosync-agent"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(path: pathlib.Path) -> list[Instruction]:
    """A Containerfile's instructions, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{path}: a continuation line ends the file"
    out = []
    for text in logical:
        keyword, _, args = text.strip().partition(" ")
        out.append(Instruction(keyword.upper(), " ".join(args.split())))
    return out


def stages(path: pathlib.Path) -> list[list[Instruction]]:
    """The instructions of each stage (the global ARGs before the first FROM are stage 0's prelude)."""
    found: list[list[Instruction]] = [[]]
    for ins in instructions(path):
        if ins.keyword == "FROM" and found[-1] and any(i.keyword == "FROM" for i in found[-1]):
            found.append([])
        found[-1].append(ins)
    return found


def only(stage: list[Instruction], keyword: str) -> Instruction:
    hits = [i for i in stage if i.keyword == keyword]
    assert len(hits) == 1, f"expected one {keyword}, found {hits}"
    return hits[0]


def exec_form(ins: Instruction) -> list[str]:
    return list(json.loads(ins.args))


def chart_values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


AGENT = IMAGES / "agent" / "Containerfile"
PLUGINS = IMAGES / "plugins" / "Containerfile"


@pytest.mark.parametrize("path", [AGENT, PLUGINS], ids=["agent", "plugins"])
def test_the_base_is_a_build_argument_and_the_user_is_numeric_and_not_root(path: pathlib.Path) -> None:
    first = instructions(path)[0]
    assert first.keyword == "ARG"
    assert first.args.startswith("BASE=docker.io/library/")
    assert all(only(s, "FROM").args.split()[0] == "${BASE}" for s in stages(path))
    final = stages(path)[-1]
    uid_arg = {i.args.split("=")[0]: i.args.split("=")[1] for i in final if i.keyword == "ARG"}
    user = only(final, "USER").args.replace("${UID}", uid_arg.get("UID", "${UID}"))
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), user
    assert int(uid) != 0, user
    assert not gid or gid.isdigit(), user


def test_agent_builds_wheels_in_one_stage_installs_them_in_another_and_ships_only_the_venv() -> None:
    build, install, runtime = stages(AGENT)
    assert re.search(r"\bAS build\b", only(build, "FROM").args)
    wheels = only(build, "RUN").args
    assert "pip wheel" in wheels
    assert "-c constraints.txt" in wheels
    assert re.search(r"\bAS install\b", only(install, "FROM").args)
    # Copied, so the install step's cache is keyed on the wheels' content (a RUN bind-mounting the build
    # stage was cached on its text and shipped stale code).
    assert only(install, "COPY").args == "--from=build /wheels /wheels"
    assert "--no-index --find-links=/wheels geosync" in only(install, "RUN").args
    assert not [i for i in runtime if i.keyword == "ADD"]
    assert [i.args for i in runtime if i.keyword == "COPY"] == ["--from=install /opt/geosync /opt/geosync"]
    assert not [i for i in runtime if "--mount" in i.args]


def test_agent_healthcheck_entrypoint_and_port_match_the_chart() -> None:
    runtime = stages(AGENT)[-1]
    port = str(chart_values()["metrics"]["port"])
    assert only(runtime, "EXPOSE").args == port
    env = only(runtime, "ENV").args
    assert f"GEOSYNC_HEALTHZ_PORT={port}" in env
    healthcheck = only(runtime, "HEALTHCHECK").args
    assert "/healthz" in healthcheck
    assert "curl" not in healthcheck
    command = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert command[:2] == ["python", "-c"]
    compile(command[2], "<healthcheck>", "exec")
    assert exec_form(only(runtime, "ENTRYPOINT")) == ["python", "-m", "geosync_agent"]
    assert exec_form(only(runtime, "CMD")) == ["--config", "/etc/geosync/agent.yaml"]
    # The chart runs the same module with the config its ConfigMap mounts.
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'command: ["python", "-m", "geosync_agent", "--config", "/etc/geosync/agent.yaml"]' in helpers


def test_plugin_image_copies_into_the_chart_s_plugin_directory_by_default() -> None:
    final = stages(PLUGINS)[-1]
    assert exec_form(only(final, "ENTRYPOINT")) == ["/bin/sh", "/usr/local/bin/geosync-install-plugins"]
    assert exec_form(only(final, "CMD")) == [chart_values()["plugins"]["directory"]]
    copies = [shlex.split(i.args) for i in final if i.keyword == "COPY"]
    assert ["install-plugins.sh", "/usr/local/bin/geosync-install-plugins"] in copies


def test_the_build_context_holds_what_the_agent_build_copies_and_nothing_else() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignore = [line for line in lines if line and not line.startswith("#")]
    assert ignore[0] == "*", "an allow-list: new top-level files stay out of the context"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {
        src.rstrip("/")
        for ins in stages(AGENT)[0]
        if ins.keyword == "COPY"
        for src in shlex.split(ins.args)[:-1]
    }
    assert copied == allowed
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_roots = set(pyproject["tool"]["setuptools"]["packages"]["find"]["where"])
    assert package_roots <= copied
    assert pyproject["project"]["readme"] in copied


def test_the_build_script_tags_what_the_chart_pulls() -> None:
    script = (ROOT / "scripts" / "build-images.sh").read_text()
    assert "AGENT_IMAGE=$REGISTRY/agent:$VERSION" in script
    assert "PLUGINS_IMAGE=$REGISTRY/broker-plugins:$VERSION" in script
    assert "--format docker" in script, "the OCI format drops HEALTHCHECK"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert chart["appVersion"] == pyproject["project"]["version"], "the chart's default tag"
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "build-images.sh")], check=True)


def install(src: pathlib.Path, dest: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(IMAGES / "plugins" / "install-plugins.sh"), str(dest)],
        env={"GEOSYNC_PLUGINS_SOURCE": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_install_plugins_copies_every_nar_and_names_its_digest(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    nar = src / "geosync-broker-plugin-0.1.0.nar"
    nar.write_bytes(b"PK\x03\x04 not really a zip")
    (src / "README").write_text("not a plugin")
    dest = tmp_path / "pulsar" / "geosync"
    for _ in range(2):  # a restarted pod runs its init containers again over the same volume
        result = install(src, dest)
        assert result.returncode == 0, result.stderr
        assert sorted(p.name for p in dest.iterdir()) == [nar.name]
        assert (dest / nar.name).read_bytes() == nar.read_bytes()
        assert hashlib.sha256(nar.read_bytes()).hexdigest() in result.stdout


def test_install_plugins_fails_without_a_nar(tmp_path: pathlib.Path) -> None:
    (tmp_path / "src").mkdir()
    result = install(tmp_path / "src", tmp_path / "dest")
    assert result.returncode == 1
    assert "no plugin NAR" in result.stderr
