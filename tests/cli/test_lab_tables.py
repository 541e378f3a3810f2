"""The tables the demo prints (``lab status``, ``demo failover``) read whole in 80 columns, rich's width
when the output is not a terminal (CI logs): no line longer than that, no address or pid split over lines,
and no column that only ever says it measured nothing."""

from __future__ import annotations

import pathlib
import types
from typing import Any

import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geosync_core import topology as topo
from geosync_lab import failover, labs

WIDTH = 80


def _region(name: str, port: int, pid: int, peers: list[str]) -> dict[str, Any]:
    namespaces = {"geo/ab": ["a", "b"], "geo/abc": ["a", "b", "c"], "geo/snap-abc": ["a", "b", "c"]}
    return {
        "process": "running",
        "admin_url": f"http://127.0.0.1:{port + 1}",
        "service_url": f"pulsar://127.0.0.1:{port}",
        "rss_mb": 1021.4,
        "admin": "ok",
        "brokers": [
            {
                "service_url": f"pulsar://127.0.0.1:{port}",
                "admin_url": f"http://127.0.0.1:{port + 1}",
                "pid": pid,
                "process": "running",
                "rss_mb": 1021.4,
            }
        ],
        "replication": {
            ns: {p: True for p in members if p != name}
            for ns, members in namespaces.items()
            if name in members
        },
        "clusters": peers,
    }


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": str(WIDTH)}, catch_exceptions=False)
    return result.exit_code, result.output


def test_lab_status_fits_100_columns_with_every_address_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    state = {
        "dir": "/tmp/lab",
        "pulsar_version": "4.0.8",
        "healthy": True,
        "regions": {
            "a": _region("a", 48193, 11987, ["a", "b", "c"]),
            "b": _region("b", 41007, 12001, ["a", "b", "c"]),
            "c": _region("c", 39555, 12044, ["a", "b", "c"]),
        },
    }
    monkeypatch.setattr(labs, "status", lambda _dir: state)

    code, out = invoke("lab", "status", "--dir", "/tmp/lab")

    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    for cell in ("127.0.0.1:48193 pid 11987", "127.0.0.1:41007 pid 12001", "geo/snap-abc: a✓ b✓"):
        assert cell in out


def _outcome(mode: str, synced_after_s: float | None, *, batching: bool) -> failover.Outcome:
    return failover.Outcome(
        mode=mode,
        published=200,
        acked_in_source=137,
        delivered_in_target=63 if mode == "geosync" else 171,
        duplicates=0 if mode == "geosync" else 108,
        lost=0,
        settle_s=2.0,
        synced_after_s=synced_after_s,
        batching=batching,
    )


@pytest.mark.parametrize("batching", [True, False])
def test_demo_table_shows_a_sync_time_only_where_one_was_measured(
    monkeypatch: pytest.MonkeyPatch, batching: bool
) -> None:
    lab = types.SimpleNamespace(agents={"a": types.SimpleNamespace(pid=1)})
    monkeypatch.setattr(labs, "load", lambda _dir: lab)
    synced = {"builtin": None, "geosync": 0.41 if not batching else None}
    monkeypatch.setattr(
        failover, "run", lambda _t, *, mode, **_kw: _outcome(mode, synced[mode], batching=batching)
    )

    flag = "--batching" if batching else "--no-batching"
    code, out = invoke("demo", "failover", "--dir", "/tmp/lab", flag)

    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    assert "not measured" not in out
    assert "Pulsar PIP-33" in out
    if batching:
        assert "synced" not in out
    else:
        assert "(≤2 s)" in out
        assert "0.41 s" in out


def test_lab_up_table_shows_every_url_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    ports = {"a": 48193, "b": 41007, "c": 39555}
    topology = topo.Topology(
        pulsar_version="4.0.8",
        regions={
            n: topo.Region(n, f"pulsar://127.0.0.1:{p}", f"http://127.0.0.1:{p + 1}", f"127.0.0.1:{p + 2}")
            for n, p in ports.items()
        },
    )
    result = labs.UpResult(
        topology=topology,
        path=tmp_path / "topology.json",
        boots=[labs.RegionBoot(n, 31.5, 270.0, 1) for n in ports],
        total_seconds=49.0,
    )
    monkeypatch.setattr(labs, "up", lambda *_a, **_kw: result)

    code, out = invoke("lab", "up", "--dir", str(tmp_path))

    assert code == 0, out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(table) == 7  # three regions, one line each
    assert max(len(line) for line in table) <= WIDTH
    for p in ports.values():
        assert f"pulsar://127.0.0.1:{p}" in out
        assert f"http://127.0.0.1:{p + 1}" in out
