"""geoctl lab up --brokers: port allocation, the configuration files of a multi-broker region, its topology
record, and what --brokers refuses. (That such a region boots, spreads topics over its brokers and moves
them is in integration_tests/test_multibroker.py.)"""

from __future__ import annotations

import pathlib

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from geoctl.cli import main
from geoctl.errors import EXIT_LAB
from geosync_core import topology as topo
from geosync_lab import booting, clusters, labs, plugins, regions
from geosync_lab.errors import LabError


def props(text: str) -> dict[str, str]:
    """A Java properties file as Java reads it: comments skipped, the last value of a key wins."""
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def region(brokers: int = 2, root: str = "/labs/x/regions/a") -> clusters.ClusterRegion:
    ports = clusters.allocate(list(range(7000, 7000 + clusters.ports_needed(brokers))), brokers)
    return clusters.ClusterRegion(name="a", root=pathlib.Path(root), ports=ports)


# -- ports -----------------------------------------------------------------------------------------


def test_ports_are_assigned_stores_bookie_then_each_broker() -> None:
    ports = clusters.allocate([1, 2, 3, 4, 5, 6, 7], 2)
    assert (ports.zookeeper, ports.configuration_store, ports.bookie) == (1, 2, 3)
    assert ports.brokers == (clusters.BrokerPorts(broker=4, web=5), clusters.BrokerPorts(broker=6, web=7))


@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.just(n), st.sets(st.integers(1024, 65535), min_size=3 + 2 * n, max_size=3 + 2 * n)
        )
    )
)
def test_every_port_is_used_once_and_the_record_round_trips(case: tuple[int, set[int]]) -> None:
    brokers, offered = case
    ports = clusters.allocate(sorted(offered), brokers)
    record = ports.as_dict()
    used = [record["zookeeper"], record["configuration_store"], record["bookie"]]
    used += [p for b in record["brokers"] for p in (b["broker"], b["web"])]
    assert sorted(used) == sorted(offered)
    # The keys a standalone region has name the first broker's ports.
    assert (record["broker"], record["web"]) == (ports.brokers[0].broker, ports.brokers[0].web)
    assert clusters.ClusterPorts.from_dict(record) == ports


@pytest.mark.parametrize(
    ("ports", "brokers"), [([1, 2, 3, 4], 2), ([1, 2, 3, 4, 5, 6, 6], 2), ([1, 2, 3], 0)]
)
def test_wrong_port_counts_are_refused(ports: list[int], brokers: int) -> None:
    with pytest.raises(ValueError, match=r"need|at least one"):
        clusters.allocate(ports, brokers)


def test_picked_ports_are_distinct_and_avoid_taken_ones() -> None:
    taken = set(regions.free_ports(5))
    ports = clusters.pick_ports(3, taken)
    record = ports.as_dict()
    used = {record["zookeeper"], record["configuration_store"], record["bookie"]}
    used |= {p for b in record["brokers"] for p in (b["broker"], b["web"])}
    assert len(used) == clusters.ports_needed(3)
    assert not used & taken


# -- addresses -------------------------------------------------------------------------------------


def test_a_region_is_reached_through_every_broker_and_administered_through_the_first() -> None:
    r = region(2)
    assert r.service_url == "pulsar://127.0.0.1:7003,127.0.0.1:7005"
    assert r.admin_url == r.broker_admin_url(0) == "http://127.0.0.1:7004"
    assert r.broker_service_url(1) == "pulsar://127.0.0.1:7005"
    assert (r.metadata_store, r.configuration_store) == ("127.0.0.1:7000", "127.0.0.1:7001")
    assert r.roles() == ["zookeeper", "configuration-store", "bookie", "broker-1", "broker-2"]
    # Every process names a file under the region's directory; a sibling region's must not match.
    assert r.marker == "/labs/x/regions/a/"
    assert not str(region(2, "/labs/x/regions/ab").conf_path("bookie")).startswith(r.marker)


# -- configuration ---------------------------------------------------------------------------------


def test_render_props_replaces_in_place_and_appends_the_rest() -> None:
    template = "# a comment with x=1\nx=0\ny=\n#z=3\n"
    text = regions.render_props(template, {"x": "1", "z": "3"})
    assert props(text) == {"x": "1", "y": "", "z": "3"}
    assert text.splitlines()[:2] == ["# a comment with x=1", "x=1"]
    assert text.count("x=1") == 2  # the comment is left as it was


def test_broker_conf_is_the_standalone_brokers_plus_its_ports_and_both_stores() -> None:
    r = region(2)
    template = "clusterName=\nmetadataStoreUrl=\nbrokerServicePort=6650\nloadManagerClassName=Modular\n"
    conf = props(clusters.broker_conf(template, r, 1, {"brokerInterceptors": "geosync"}))
    for key, value in regions.BROKER_CONF.items():
        assert conf[key] == value
    assert conf["clusterName"] == "a"
    assert (conf["brokerServicePort"], conf["webServicePort"]) == ("7005", "7006")
    assert conf["metadataStoreUrl"] == "zk:127.0.0.1:7000"
    assert conf["configurationMetadataStoreUrl"] == "zk:127.0.0.1:7001"
    assert conf["narExtractionDirectory"] == "/labs/x/regions/a/nar/broker-2"
    assert conf["brokerInterceptors"] == "geosync"
    assert conf["loadManagerClassName"] == "Modular"


def test_the_standalone_keeps_its_broker_keys_and_its_bookies_caches() -> None:
    assert set(regions.BROKER_CONF) < set(regions._CONF_OVERRIDES)
    assert regions._CONF_OVERRIDES["dbStorage_writeCacheMaxSizeMb"] == "16"


def test_zookeeper_conf_takes_no_fixed_port() -> None:
    template = (
        "clientPort=2181\nadmin.enableServer=true\nadmin.serverPort=9990\nmetricsProvider.httpPort=8000\n"
    )
    template += (
        "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider\n"
    )
    conf = props(clusters.zookeeper_conf(template, port=7001, data_dir=pathlib.Path("/d/cs")))
    assert (conf["clientPort"], conf["dataDir"]) == ("7001", "/d/cs")
    assert conf["admin.enableServer"] == "false"
    assert "prometheus" not in conf["metricsProvider.className"]


def test_bookie_conf_uses_the_regions_metadata_store_and_no_fixed_port() -> None:
    template = "bookiePort=3181\nmetadataServiceUri=\nprometheusStatsHttpPort=8000\nhttpServerEnabled=false\n"
    conf = props(clusters.bookie_conf(template, region(2)))
    assert conf["bookiePort"] == "7002"
    assert conf["metadataServiceUri"] == "zk+hierarchical://127.0.0.1:7000/ledgers"
    assert conf["statsProviderClass"].endswith("NullStatsProvider")
    assert conf["httpServerEnabled"] == "false"
    assert conf["journalDirectory"] == "/labs/x/regions/a/data/bookkeeper/journal"


def test_cluster_metadata_names_the_region_its_stores_and_every_broker() -> None:
    args = clusters.initialize_args(region(2))
    flags = dict(zip(args[1::2], args[2::2], strict=True))
    assert args[0] == "initialize-cluster-metadata"
    assert flags == {
        "--cluster": "a",
        "--metadata-store": "zk:127.0.0.1:7000",
        "--configuration-metadata-store": "zk:127.0.0.1:7001",
        "--web-service-url": "http://127.0.0.1:7004",
        "--broker-service-url": "pulsar://127.0.0.1:7003,127.0.0.1:7005",
    }


# -- topology --------------------------------------------------------------------------------------


def test_a_multi_broker_regions_record_round_trips_and_finds_its_processes_again(
    tmp_path: pathlib.Path,
) -> None:
    site = clusters.ClusterRegion(name="a", root=tmp_path / "regions" / "a", ports=region(2).ports)
    record = labs._booted_region(site, (11, 12, 13, 14, 15), True)
    assert record.zookeeper == "127.0.0.1:7001"  # the configuration store: where policies live
    assert [b.pid for b in record.brokers] == [14, 15]
    assert [b.service_url for b in record.brokers] == ["pulsar://127.0.0.1:7003", "pulsar://127.0.0.1:7005"]
    topology = topo.Topology(pulsar_version="4.0.8", regions={"a": record})
    again = topo.from_json(topology.to_json()).region("a")
    assert again == record
    assert labs.cluster_region(tmp_path, again) == site
    assert labs.region_process(tmp_path, again).ports.broker == 7003
    stopped = labs._with_pids(tmp_path, again, ())
    assert stopped.pids == ()
    assert [b.pid for b in stopped.brokers] == [None, None]


def test_a_standalone_region_lists_its_one_broker(tmp_path: pathlib.Path) -> None:
    proc = regions.RegionProcess(
        name="a", root=tmp_path, ports=regions.Ports(web=1, broker=2, zookeeper=3, bookie=4)
    )
    record = labs._booted_region(proc, (99,), True)
    assert record.brokers == (
        topo.Broker(service_url="pulsar://127.0.0.1:2", admin_url="http://127.0.0.1:1", pid=99),
    )
    assert labs.cluster_region(tmp_path, record) is None


def test_topologies_written_before_brokers_existed_still_load() -> None:
    old = '{"pulsar_version": "4.0.8", "regions": {"a": {"service_url": "pulsar://h:1", "admin_url": "http://h:2",'
    old += ' "zookeeper": "h:3", "pids": [5]}}}'
    assert topo.from_json(old).region("a").brokers == ()


# -- what --brokers refuses ------------------------------------------------------------------------


def test_brokers_with_wan_is_refused_before_anything_boots(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(
        main, ["lab", "up", "--regions", "a,b", "--brokers", "2", "--wan", "--dir", str(tmp_path)]
    )
    assert result.exit_code == EXIT_LAB
    assert "--wan cannot be combined with --brokers" in result.output
    assert not (tmp_path / "regions").exists()


def test_zero_brokers_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(main, ["lab", "up", "--brokers", "0", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--brokers" in result.output


def test_agent_settings_replace_the_labs_and_none_leaves_the_agents_default() -> None:
    values = {"region": "a", "checkpoint_interval_s": 2.0, "discover_interval_s": 5.0}
    merged = labs.with_settings(values, {"checkpoint_interval_s": None, "poll_interval_s": 0.5})
    assert merged == {"region": "a", "discover_interval_s": 5.0, "poll_interval_s": 0.5}
    assert values["checkpoint_interval_s"] == 2.0  # the lab's own values are not changed
    assert labs.with_settings(values, {}) == values


def test_a_lab_booted_without_the_plugins_records_it_and_a_restart_keeps_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = regions.RegionProcess(
        name="a", root=tmp_path, ports=regions.Ports(web=1, broker=2, zookeeper=3, bookie=4)
    )
    bare = labs._booted_region(proc, (99,), True, plugins_loaded=False)
    assert bare.lab["plugins"] is False
    assert topo.from_json(topo.Topology("4.0.8", {"a": bare}).to_json()).region("a").lab["plugins"] is False
    assert labs._booted_region(proc, (99,), True).lab["plugins"] is True
    # The broker keys: none without the plugins (the NAR is not even built), the plugins' keys with them.
    built: list[bool] = []

    def ensure() -> pathlib.Path:
        built.append(True)
        return tmp_path

    monkeypatch.setattr(plugins, "ensure_plugins", ensure)
    assert booting._plugin_conf(False) == {}
    assert not built
    assert booting._plugin_conf(True)["brokerInterceptors"] == plugins.PLUGIN_NAME
    assert built == [True]


def test_lab_up_no_plugins_boots_the_brokers_without_them(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: dict[str, object] = {}

    def up(*_a: object, **kw: object) -> labs.UpResult:
        asked.update(kw)
        raise LabError("stop here", hint="")

    monkeypatch.setattr(labs, "up", up)
    result = CliRunner().invoke(main, ["lab", "up", "--dir", str(tmp_path), "--no-plugins"])
    assert "stop here" in result.output
    assert asked["plugins_loaded"] is False
    CliRunner().invoke(main, ["lab", "up", "--dir", str(tmp_path)])
    assert asked["plugins_loaded"] is True
