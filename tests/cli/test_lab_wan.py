"""geoctl lab wan / lab partition: parsing, the Toxiproxy requests they plan, and their errors, against a
fake Toxiproxy API. (That a shaped or cut link really delays or stops replication is in
integration_tests/test_wan.py.)"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_LAB
from geosync_lab import wan
from geosync_lab.errors import LabError

# -- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"), [("40ms", 40), ("40", 40), ("0.5s", 500), ("1s", 1000), (" 12 ms ", 12), ("0ms", 0)]
)
def test_durations(text: str, ms: int) -> None:
    assert wan.parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "fast", "-5ms", "40us", "1m"])
def test_bad_durations_say_how_to_write_one(text: str) -> None:
    with pytest.raises(LabError, match="40ms"):
        wan.parse_duration_ms(text)


def test_pairs() -> None:
    assert wan.parse_pair("a,b", ["a", "b", "c"]) == ("a", "b")
    assert wan.parse_pair(" c , a ", ["a", "b", "c"]) == ("c", "a")
    for bad in ("a", "a,a", "a,b,c", "a,"):
        with pytest.raises(LabError):
            wan.parse_pair(bad, ["a", "b", "c"])
    with pytest.raises(LabError, match="unknown region"):
        wan.parse_pair("a,z", ["a", "b"])


# -- plans -----------------------------------------------------------------------------------------


def test_a_pair_means_both_directions_and_no_pair_every_pair() -> None:
    assert wan.proxies_of(("a", "b"), ["a", "b", "c"]) == ["a-to-b", "b-to-a"]
    assert sorted(wan.proxies_of(None, ["a", "b", "c"])) == sorted(
        ["a-to-b", "b-to-a", "a-to-c", "c-to-a", "b-to-c", "c-to-b"]
    )


def test_latency_is_one_way_on_each_stream() -> None:
    toxics = wan.toxics(wan.Shape(latency_ms=40, jitter_ms=10))
    assert {(t["type"], t["stream"]) for t in toxics} == {("latency", "upstream"), ("latency", "downstream")}
    assert all(t["attributes"] == {"latency": 40, "jitter": 10} for t in toxics)


def test_bandwidth_alone() -> None:
    toxics = wan.toxics(wan.Shape(bandwidth_kbps=256))
    assert [t["type"] for t in toxics] == ["bandwidth", "bandwidth"]
    assert all(t["attributes"] == {"rate": 256} for t in toxics)


def test_a_shape_replaces_our_toxics_and_keeps_others() -> None:
    existing = {"a-to-b": ["wan-latency-upstream", "someone-elses"], "b-to-a": []}
    plan = wan.plan_shape(["a-to-b", "b-to-a"], existing, wan.Shape(latency_ms=5))
    deletes = [r.path for r in plan if r.method == "DELETE"]
    assert deletes == ["/proxies/a-to-b/toxics/wan-latency-upstream"]
    # Deletions come before the additions of the same proxy (a toxic name is unique per proxy).
    assert plan[0].method == "DELETE"
    assert sum(r.method == "POST" for r in plan) == 4


def test_clearing_only_deletes() -> None:
    plan = wan.plan_shape(
        ["a-to-b"], {"a-to-b": ["wan-latency-upstream", "wan-bandwidth-downstream"]}, wan.Shape()
    )
    assert [r.method for r in plan] == ["DELETE", "DELETE"]


def test_partition_and_heal_toggle_both_proxies() -> None:
    cut = wan.plan_partition(["a-to-b", "b-to-a"], heal=False)
    assert [(r.method, r.path, r.body) for r in cut] == [
        ("POST", "/proxies/a-to-b", {"enabled": False}),
        ("POST", "/proxies/b-to-a", {"enabled": False}),
    ]
    assert all(r.body == {"enabled": True} for r in wan.plan_partition(["a-to-b"], heal=True))


def test_layout_listeners_and_cluster_records_agree() -> None:
    record = wan.with_upstreams(
        wan.layout(["a", "b", "c"], 9000, [9001, 9002, 9003, 9004, 9005, 9006]),
        {
            "a": 7001,
            "b": 7002,
            "c": 7003,
        },
    )
    conf = wan.advertised_listeners("b", 7002, record)
    assert conf["advertisedAddress"] == ""
    listeners = dict(item.split(":", 1) for item in conf["advertisedListeners"].split(","))
    assert listeners["internal"] == "pulsar://127.0.0.1:7002"
    # Region a's record for b names the a->b proxy and the listener b advertises at that proxy's port.
    assert listeners[wan.listener_name("a")] == wan.proxy_service_url(record, "a", "b")
    assert listeners[wan.listener_name("c")] == wan.proxy_service_url(record, "c", "b")
    assert record["proxies"]["a-to-b"]["upstream"] == "127.0.0.1:7002"
    assert len({p["listen"] for p in record["proxies"].values()}) == 6


# -- the commands, on a fake Toxiproxy -------------------------------------------------------------


class FakeToxiproxy(wan.ToxiproxyApi):
    """Keeps proxies and toxics in memory, as the real server's API would."""

    def __init__(self, names: list[str]) -> None:
        super().__init__("http://fake")
        self.state: dict[str, dict[str, Any]] = {
            n: {"name": n, "listen": "127.0.0.1:1", "upstream": "127.0.0.1:2", "enabled": True, "toxics": []}
            for n in names
        }
        self.sent: list[wan.Request] = []

    def send(self, request: wan.Request) -> Any:
        self.sent.append(request)
        parts = request.path.strip("/").split("/")
        if request.method == "GET":
            return self.state
        proxy = self.state[parts[1]]
        if request.method == "DELETE":
            proxy["toxics"] = [t for t in proxy["toxics"] if t["name"] != parts[3]]
        elif len(parts) == 3:
            proxy["toxics"].append(request.body)
        else:
            proxy.update(request.body or {})
        return None


@pytest.fixture
def fake(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> FakeToxiproxy:
    region = {"service_url": "pulsar://127.0.0.1:9", "admin_url": "http://127.0.0.1:9", "zookeeper": "x:9"}
    record = {"api": "http://fake", "pid": 1, "proxies": {}}
    (tmp_path / "topology.json").write_text(
        json.dumps({"pulsar_version": "4.0.8", "regions": {"a": region, "b": region}, "wan": record})
    )
    api = FakeToxiproxy(["a-to-b", "b-to-a"])
    monkeypatch.setattr(wan, "ToxiproxyApi", lambda _url: api)
    monkeypatch.setattr(wan, "owns_server", lambda _dir, _wan: True)
    return api


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"GEOSYNC_LAB_DIR": ""})
    return result.exit_code, result.output


def test_wan_sets_latency_on_both_directions(fake: FakeToxiproxy, tmp_path: pathlib.Path) -> None:
    code, out = run(
        "lab", "wan", "--dir", str(tmp_path), "--latency", "40ms", "--jitter", "10ms", "-o", "json"
    )
    assert code == 0, out
    shown = json.loads(out)
    for proxy in ("a-to-b", "b-to-a"):
        assert shown[proxy]["toxics"]["wan-latency-upstream"] == {"latency": 40, "jitter": 10}
    code, out = run("lab", "wan", "--dir", str(tmp_path), "--clear", "-o", "json")
    assert code == 0
    assert all(not p["toxics"] for p in json.loads(out).values())


def test_partition_and_heal(fake: FakeToxiproxy, tmp_path: pathlib.Path) -> None:
    code, _ = run("lab", "partition", "--dir", str(tmp_path), "a", "b")
    assert code == 0
    assert not any(p["enabled"] for p in fake.state.values())
    code, _ = run("lab", "partition", "--dir", str(tmp_path), "b", "a", "--heal")
    assert code == 0
    assert all(p["enabled"] for p in fake.state.values())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["lab", "partition", "a", "c"], "unknown region"),
        (["lab", "partition", "a", "a"], "two different regions"),
        (["lab", "wan", "--pair", "a,c", "--latency", "1ms"], "unknown region"),
        (["lab", "wan", "--latency", "soon"], "not a duration"),
        (["lab", "wan", "--clear", "--latency", "5ms"], "--clear"),
    ],
)
def test_bad_input_changes_nothing(
    fake: FakeToxiproxy, tmp_path: pathlib.Path, args: list[str], says: str
) -> None:
    code, out = run(*args, "--dir", str(tmp_path))
    assert code != 0
    assert says in out
    assert not [r for r in fake.sent if r.method != "GET"]


def test_a_lab_without_wan_says_how_to_get_one(tmp_path: pathlib.Path) -> None:
    region = {"service_url": "pulsar://127.0.0.1:9", "admin_url": "http://127.0.0.1:9", "zookeeper": "x:9"}
    (tmp_path / "topology.json").write_text(
        json.dumps({"pulsar_version": "4.0.8", "regions": {"a": region, "b": region}})
    )
    code, out = run("lab", "partition", "--dir", str(tmp_path), "a", "b")
    assert code == EXIT_LAB
    assert "no WAN" in out
    assert "lab up --wan" in out


@pytest.mark.parametrize("cmd", ["wan", "partition"])
def test_help_explains(cmd: str) -> None:
    code, out = run("lab", cmd, "--help")
    assert code == 0
    assert "Toxiproxy" in out
    assert "lab up --wan" in out


def test_the_topology_keeps_its_wan_and_labs_without_one_have_no_key() -> None:
    from geosync_core import topology as topo

    region = topo.Region(name="a", service_url="pulsar://h:1", admin_url="http://h:2", zookeeper="h:3")
    record = wan.layout(["a", "b"], 9000, [9001, 9002])
    with_wan = topo.Topology(pulsar_version="4.0.8", regions={"a": region}, wan=record)
    assert topo.from_json(with_wan.to_json()).wan == record
    plain = topo.Topology(pulsar_version="4.0.8", regions={"a": region})
    assert "wan" not in json.loads(plain.to_json())
    assert topo.from_json(plain.to_json()).wan == {}
