"""The chart's Grafana dashboard and Prometheus alerts: rendered by Helm, rules checked and unit-tested by
promtool (``tests/charts/geosync.rules.test.yaml``), and every metric a panel or an alert queries is one
the agent exports (its collector run on a stand-in agent, so the names come from serving.py's own
exposition; ``integration_tests/test_monitoring_lab.py`` checks the same against real agents)."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from tests.charts.test_geosync_agent_chart import CHART, by_kind, render

RULES = CHART / "rules" / "geosync.rules.yaml"
DASHBOARD = CHART / "dashboards" / "geosync.json"
RULE_TESTS = pathlib.Path(__file__).with_name("geosync.rules.test.yaml")
PROMQL_WORDS = {
    "by", "on", "without", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
}  # fmt: skip


def promtool() -> str:
    found = shutil.which("promtool") or shutil.which(
        "promtool", path=str(pathlib.Path(sys.executable).parent)
    )
    if found is None:
        pytest.skip("promtool is not installed (scripts/setup.sh installs it into .venv/bin)")
    return found


def queries() -> list[str]:
    """Every PromQL expression of the dashboard and the alerts."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    variables = [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    # Grafana's label_values(METRIC, LABEL): only METRIC is a metric
    exprs += [re.sub(r"label_values\((.*),\s*\w+\)", r"\1", v) for v in variables]
    rules = yaml.safe_load(RULES.read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    return exprs


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label lists,
    label matchers, ranges, strings or Grafana variables."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\w+", "", text)
    names = set(re.findall(r"\b[A-Za-z_:][A-Za-z0-9_:]*\b(?!\s*\()", text))
    functions = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", text))
    return {n for n in names - functions - PROMQL_WORDS if not re.fullmatch(r"[0-9.e]+|label_values", n)}


def declared(exposition: str) -> set[str]:
    """Metric names a Prometheus text exposition declares (``# TYPE`` lines: a family counts even before
    its first sample, e.g. a counter of rejections that never happened)."""
    return {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}


def exported() -> set[str]:
    """Names in the agent's /metrics exposition (serving.py's collector on a stand-in agent and mirror)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from geosync_agent import serving

    class Agent:
        def status(self) -> dict[str, Any]:
            synced = [
                {"topic": "persistent://t/n/x", "subscription": "s", "behind_since": 1.0, "pending_holes": 2}
            ]
            counters = {"control_rejected_bad_signature": 1, "apply_errors": 1, "mark_delete_moves": 3}
            keys = ("topics", "subscriptions", "index_runs", "bytes_read", "messages_read", "inbox")
            return {"region": "a", "counters": counters, "synced": synced, **dict.fromkeys(keys, 1)}

        snapshot = status  # the name before the agent's status dump was renamed

        def readiness(self, now_mono: float) -> tuple[bool, str]:
            return True, "ready"

    class Mirror:
        def status(self) -> dict[str, Any]:
            return {"counters": {"applied": 1}, "leader": True}

        snapshot = status

    registry = CollectorRegistry()
    registry.register(serving._AgentCollector(Agent(), Mirror()))  # type: ignore[arg-type]
    return declared(generate_latest(registry).decode())


def test_every_metric_a_panel_or_an_alert_queries_is_exported_by_the_agent() -> None:
    names = exported()
    assert "geosync_control_rejected_total" in names  # counters carry their _total suffix
    used = {n for e in queries() for n in metric_names(e)}
    assert used, "no metric found in the dashboard and rules"
    assert used <= names, f"not exported by the agent: {sorted(used - names)}"


def test_the_metric_name_parser_ignores_functions_labels_and_keywords() -> None:
    expr = 'sum by (region) (rate(geosync_x_total{a="b"}[5m])) > 0 and on () max(geosync_y) == 0'
    assert metric_names(expr) == {"geosync_x_total", "geosync_y"}


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_rule_unit_tests_pass() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_chart_ships_the_dashboard_for_grafanas_sidecar_and_the_rules(tmp_path: pathlib.Path) -> None:
    docs = render(
        {
            "agent": {"region": "a"},
            "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "GeoSync"}},
            "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        }
    )
    (dashboard,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GeoSync"}
    assert json.loads(dashboard["data"]["geosync.json"]) == json.loads(DASHBOARD.read_text())
    (rule,) = by_kind(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    rendered = tmp_path / "rendered.rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(
        [promtool(), "check", "rules", str(rendered)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_both_are_off_by_default() -> None:
    docs = render({"agent": {"region": "a"}})
    assert not by_kind(docs, "PrometheusRule")
    assert [d["metadata"]["name"] for d in by_kind(docs, "ConfigMap")] == ["r1-geosync-agent"]
