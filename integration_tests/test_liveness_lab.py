"""Liveness on the lab (issue 47): regions that answer nothing make agents' rounds fail, not stall.

Regions b and c are frozen (SIGSTOP: their brokers and ZooKeeper keep their sockets and answer nothing, like
hung hosts) for five minutes, with every agent at the default ``stuck_after_s`` (120 s). For b's and c's
agents their own region is down; for a's, two peers are. No agent may end: the watchdog is for a loop
blocked in a call, and every call of theirs has a timeout. b's /readyz says it is failing meanwhile, and
once the regions thaw every agent is ready again, the same processes.
"""

from __future__ import annotations

import pathlib
import time
from functools import partial

import pytest
import requests

from geosync_lab import labs, regions
from integration_tests.helpers import Lab, wait_for

pytestmark = pytest.mark.lab

FROZEN_S = 300.0
AGENTS = ("a", "b", "c")


def _running(lab: Lab, name: str, pid: int | None) -> bool:
    agent = labs.load(lab.dir).agents[name]
    return pid is not None and agent.pid == pid and regions.owns(pid, agent.config)


def _probe(lab: Lab, name: str, path: str) -> int:
    """The status code of the agent's ``path`` (0: no answer)."""
    try:
        return requests.get(labs.agent_metrics_url(lab.dir, name) + path, timeout=5).status_code
    except requests.RequestException:
        return 0


def _why(log: pathlib.Path, offset: int) -> str:
    """What the agent's log says since ``offset`` about why it ended (its watchdog's line)."""
    lines = log.read_text(errors="replace")[offset:].splitlines()
    return "\n".join(line for line in lines if "made no progress" in line or "CRITICAL" in line) or "?"


def _ready(lab: Lab, name: str) -> bool:
    return _probe(lab, name, "/readyz") == 200


def test_regions_frozen_for_five_minutes_end_no_agent(lab: Lab) -> None:
    pids = {name: labs.load(lab.dir).agents[name].pid for name in AGENTS}
    assert all(pids.values()), pids
    for name in AGENTS:
        wait_for(partial(_ready, lab, name), timeout_s=60, what=f"{name} ready")
    logs = {name: labs.agent_log(lab.dir, name) for name in AGENTS}
    offsets = {name: log.stat().st_size for name, log in logs.items()}
    frozen = ("b", "c")
    for region in frozen:
        labs.freeze_region(lab.dir, region, frozen=True)
    try:
        started = time.monotonic()
        not_ready_seen = False
        while time.monotonic() - started < FROZEN_S:
            for name in AGENTS:
                assert _running(lab, name, pids[name]), (
                    f"agent {name} ended: {_why(logs[name], offsets[name])}"
                )
                assert _probe(lab, name, "/healthz") == 200, f"agent {name}'s /healthz failed"
            not_ready_seen = not_ready_seen or _probe(lab, "b", "/readyz") == 503
            time.sleep(10)
    finally:
        for region in frozen:
            labs.freeze_region(lab.dir, region, frozen=False)
    assert not_ready_seen, "b's /readyz never said its region was down"
    for name in AGENTS:
        wait_for(partial(_ready, lab, name), timeout_s=180, what=f"{name} ready again")
        assert _running(lab, name, pids[name])
        text = logs[name].read_text(errors="replace")[offsets[name] :]
        assert "made no progress" not in text, f"agent {name}'s watchdog acted"
