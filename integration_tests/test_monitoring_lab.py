"""Every metric the chart's dashboard and alerts query is served by the real agents of the lab."""

from __future__ import annotations

import pathlib
from functools import partial

import pytest
import requests
import yaml

from integration_tests.helpers import Lab, wait_for
from tests.charts.test_monitoring import declared, metric_names, queries

pytestmark = pytest.mark.lab


def _ready(url: str) -> bool:
    return requests.get(f"{url}/readyz", timeout=5).ok


def served(url: str) -> set[str]:
    return declared(requests.get(f"{url}/metrics", timeout=5).text)


def test_dashboard_and_alert_metrics_are_served_by_every_lab_agent(lab: Lab) -> None:
    agents = lab.topology.agents
    assert agents, "the lab runs no agents"
    used = {n for e in queries() for n in metric_names(e)}
    for region, agent in sorted(agents.items()):
        conf = yaml.safe_load(pathlib.Path(agent.config).read_text())
        url = f"http://127.0.0.1:{conf['metrics_port']}"
        wait_for(partial(_ready, url), timeout_s=60, what=f"agent {region} ready")
        missing = used - served(url)
        assert not missing, f"agent {region} does not serve {sorted(missing)}"
