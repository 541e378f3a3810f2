"""geoctl status / failover check / tenants migrate / demo / lab: bad input gets a clear error and a stable
exit code before anything is changed. (Their behaviour on real regions is in integration_tests.)"""

from __future__ import annotations

import json
import pathlib

import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_LAB


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"GEOCTL_TOKEN": "", "GEOSYNC_LAB_DIR": ""})
    return result.exit_code, result.output


def topology(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "topology.json"
    # Two regions whose admin APIs nobody listens on (port 9 on loopback).
    region = {
        "service_url": "pulsar://127.0.0.1:9",
        "admin_url": "http://127.0.0.1:9",
        "zookeeper": "127.0.0.1:9",
    }
    path.write_text(json.dumps({"pulsar_version": "4.0.8", "regions": {"a": region, "b": region}}))
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--help"],
        ["failover", "check", "--help"],
        ["tenants", "migrate", "--help"],
        ["demo", "failover", "--help"],
        ["lab", "up", "--help"],
    ],
)
def test_every_command_explains_itself(args: list[str]) -> None:
    code, out = run(*args)
    assert code == 0
    assert "Usage:" in out
    assert "--help" in out


def test_failover_check_needs_both_regions() -> None:
    code, out = run("failover", "check", "--from", "a")
    assert code == 2
    assert "--to" in out


def test_failover_check_refuses_unknown_regions(tmp_path: pathlib.Path) -> None:
    code, out = run("failover", "check", "--from", "a", "--to", "zz", "--topology", str(topology(tmp_path)))
    assert code != 0
    assert "unknown region 'zz'" in out
    assert "a, b" in out


def test_failover_check_to_the_same_region_is_refused(tmp_path: pathlib.Path) -> None:
    code, out = run("failover", "check", "--from", "a", "--to", "a", "--topology", str(topology(tmp_path)))
    assert code != 0
    assert "same region" in out


def test_migrate_refuses_unknown_regions(tmp_path: pathlib.Path) -> None:
    code, out = run(
        "tenants",
        "migrate",
        "t",
        "--from",
        "a",
        "--to",
        "zz",
        "--topology",
        str(topology(tmp_path)),
        "--state-file",
        str(tmp_path / "state.json"),
    )
    assert code != 0
    assert "zz" in out
    assert not (tmp_path / "state.json").exists()


def test_missing_topology_says_where_it_looked(tmp_path: pathlib.Path) -> None:
    code, out = run("status", "--topology", str(tmp_path / "nowhere.json"))
    assert code != 0
    assert "nowhere" in out


def test_demo_needs_a_lab(tmp_path: pathlib.Path) -> None:
    code, out = run("demo", "failover", "--dir", str(tmp_path))
    assert code == EXIT_LAB
    assert "geoctl lab up" in out


@pytest.mark.parametrize("flag", ["--messages", "--holes"])
def test_demo_rejects_out_of_range_values(tmp_path: pathlib.Path, flag: str) -> None:
    code, out = run("demo", "failover", "--dir", str(tmp_path), flag, "-5")
    assert code == 2
    assert flag in out


def test_status_shows_the_replicators_agents_report_stalled(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geoctl import observing
    from geoctl.access import AgentView

    stall = {"topic": "persistent://geo/ab/t", "to": "b", "backlog": 78279, "connected": True}
    stall["stalled_for_s"] = 840
    agents = {
        "a": AgentView(url="http://a", alive=True, ready=True, state={"replicators_stalled": [stall]}),
        "b": AgentView(url="http://b", alive=True, ready=True, state={"replicators_stalled": "garbage"}),
    }
    monkeypatch.setattr(
        observing, "observe", lambda *_a, **_k: observing.Observation(rows=[], agents=agents, namespaces={})
    )
    code, out = run("status", "--topology", str(topology(tmp_path)))
    assert code == 0, out
    assert "stalled replicators" in out
    assert "78279" in out
    assert "840.0 s" in out
    assert "STALLED: 1 Pulsar replicator(s)" in out
    code, out = run("status", "--topology", str(topology(tmp_path)), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["agents"]["a"]["replicators_stalled"] == [stall]
    assert data["agents"]["b"]["replicators_stalled"] == []


def test_status_says_what_each_agents_claims_are_made_of(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geoctl import observing
    from geoctl.access import AgentView

    agents = {
        "a": AgentView(url="http://a", alive=True, ready=True, state={"claims": {"exact": True}}),
        "b": AgentView(url="http://b", alive=True, ready=True, state={"claims": {"exact": False}}),
        "c": AgentView(url="http://c", alive=True, ready=True, state={"claims": "garbage"}),
    }
    monkeypatch.setattr(
        observing, "observe", lambda *_a, **_k: observing.Observation(rows=[], agents=agents, namespaces={})
    )
    code, out = run("status", "--topology", str(topology(tmp_path)), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert [data["agents"][r]["claims"] for r in "abc"] == ["acknowledgements", "cursor", "-"]
    code, out = run("status", "--topology", str(topology(tmp_path)))
    assert "claims from" in out
    assert "acknowledgements" in out


def test_status_warns_of_namespaces_that_keep_no_acknowledged_message(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geoctl import observing
    from geoctl.access import AgentView

    key = "namespaces_without_retention"
    agents = {
        "a": AgentView(url="http://a", alive=True, ready=True, state={key: []}),
        "b": AgentView(url="http://b", alive=True, ready=True, state={key: ["geo/ab"]}),
    }
    monkeypatch.setattr(
        observing, "observe", lambda *_a, **_k: observing.Observation(rows=[], agents=agents, namespaces={})
    )
    code, out = run("status", "--topology", str(topology(tmp_path)))
    assert code == 0, out
    assert "warning: in b, geo/ab keep(s) no acknowledged message" in out.replace("\n", " ")
    assert "in a," not in out
    code, out = run("status", "--topology", str(topology(tmp_path)), "-o", "json")
    assert json.loads(out)["agents"]["b"][key] == ["geo/ab"]


def test_status_lists_the_deletions_a_policy_mirror_holds(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geoctl import observing
    from geoctl.access import AgentView

    why = "this region still holds 1 topic(s): orders"
    agents = {
        "a": AgentView(url="http://a", alive=True, ready=True, state={"mirror": {"held": {}}}),
        "b": AgentView(
            url="http://b", alive=True, ready=True, state={"mirror": {"held": {"/admin/policies/t/ns": why}}}
        ),
        "c": AgentView(url="http://c", alive=True, ready=True, state={"mirror": {"held": ["garbage"]}}),
    }
    monkeypatch.setattr(
        observing, "observe", lambda *_a, **_k: observing.Observation(rows=[], agents=agents, namespaces={})
    )
    code, out = run("status", "--topology", str(topology(tmp_path)))
    assert code == 0, out
    assert "deletions held" in out
    assert "/admin/policies/t/ns" in out
    assert "geoctl policies release" in out
    code, out = run("status", "--topology", str(topology(tmp_path)), "-o", "json")
    data = json.loads(out)
    assert data["agents"]["b"]["held_deletions"] == {"/admin/policies/t/ns": why}
    assert data["agents"]["c"]["held_deletions"] == {}
