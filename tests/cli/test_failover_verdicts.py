"""``failover check``'s three verdicts (safe, not safe, cannot tell) and exit codes, with fake admin APIs.

The case that matters: a region the consumers would leave that does not answer. What the target shows by
itself may look in step, and used to make the check say SAFE; it must say it cannot tell (exit 8), give
what the target knows for a forced failover, and stop ``tenants migrate`` before it switches. The same
check against a real lab with region a's admin URL dead: ``integration_tests/test_operator_tools.py``.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from click.testing import CliRunner

from geoctl import access, failover, observing
from geoctl.cli import main
from geoctl.errors import EXIT_UNHEALTHY, EXIT_UNKNOWN
from geosync_adapters import adminhttp
from geosync_core import topology as topo
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

TOPIC = "persistent://geo/ab/orders"
SUB = "billing"
RECEIVED_AT = 1_795_000_000.0


class Admin:
    """A region's admin API holding one namespace geo/ab replicated to a and b, with one idle topic."""

    def __init__(self, in_flight_to: dict[str, int] | None = None) -> None:
        self.in_flight_to = in_flight_to or {}

    def tenants(self) -> list[str]:
        return ["pulsar", "geo"]

    def namespaces(self, tenant: str) -> list[str]:
        return ["geo/ab"] if tenant == "geo" else []

    def replication_clusters(self, ns: str) -> list[str]:
        return ["a", "b"]

    def topics(self, ns: str) -> list[str]:
        return [TOPIC]

    def topic_stats(self, topic: str) -> dict[str, Any]:
        return {
            "subscriptions": {SUB: {"msgBacklog": 0, "consumers": [], "isDurable": True}},
            "replication": {r: {"replicationBacklog": n} for r, n in self.in_flight_to.items()},
        }


class Dead:
    """A region whose admin API does not answer: every call fails as the real client's would."""

    def __getattr__(self, name: str) -> Any:
        def call(*_a: Any, **_k: Any) -> Any:
            raise adminhttp.AdminTemporary(
                "GET http://127.0.0.1:9/admin/v2/tenants: ConnectionError: Connection refused"
            )

        return call


def _agent(site: access.Site, *, timeout: float = 3.0) -> access.AgentView:
    if site.name == "a":
        return access.AgentView(url="http://127.0.0.1:9", error="ConnectionError: Connection refused")
    synced = [
        {
            "topic": TOPIC,
            "subscription": SUB,
            "received_from": {"a": RECEIVED_AT},
            "last_applied_at": RECEIVED_AT + 1,
            "behind_since": None,
        }
    ]
    return access.AgentView(url="http://b-agent", alive=True, ready=True, state={"synced": synced})


@pytest.fixture
def regions(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Region name -> its fake admin API (tests replace entries); sites get theirs by name."""
    table: dict[str, Any] = {"a": Admin(), "b": Admin()}
    monkeypatch.setattr(access.Site, "admin", lambda self, **_kw: table[self.name])
    monkeypatch.setattr(observing, "probe_agent", _agent)
    return table


def _topology(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "topology.json"
    region = {"service_url": "pulsar://127.0.0.1:9", "admin_url": "http://127.0.0.1:9", "zookeeper": "x:9"}
    path.write_text(json.dumps({"pulsar_version": "4.0.8", "regions": {"a": region, "b": region}}))
    return str(path)


def check(tmp_path: pathlib.Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        ["failover", "check", "--topology", _topology(tmp_path), "--from", "a", "--to", "b", *args],
        env={"GEOCTL_TOKEN": "", "GEOSYNC_LAB_DIR": ""},
    )
    return result.exit_code, result.output


def _sites() -> dict[str, access.Site]:
    def region(name: str) -> topo.Region:
        return topo.Region(name, "pulsar://127.0.0.1:9", "http://127.0.0.1:9", "127.0.0.1:9")

    return {n: access.Site(name=n, region=region(n)) for n in ("a", "b")}


def test_both_regions_in_step_is_safe(regions: dict[str, Any], tmp_path: pathlib.Path) -> None:
    code, out = check(tmp_path, "-o", "json")
    data = json.loads(out)
    assert (code, data["verdict"], data["safe"]) == (0, "safe", True)
    assert data["unread"] == {}
    assert data["standby"] == []


def test_messages_in_flight_are_not_safe(regions: dict[str, Any], tmp_path: pathlib.Path) -> None:
    regions["a"] = Admin(in_flight_to={"b": 3})
    code, out = check(tmp_path, "-o", "json")
    data = json.loads(out)
    assert (code, data["verdict"], data["safe"]) == (EXIT_UNHEALTHY, "not-safe", False)


def test_with_the_source_unreachable_the_check_cannot_tell(
    regions: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    regions["a"] = Dead()
    code, out = check(tmp_path, "-o", "json")
    data = json.loads(out)
    assert code == EXIT_UNKNOWN
    assert (data["verdict"], data["safe"]) == ("unknown", False)
    assert data["unread"]["a"].startswith("unreachable (")
    assert "Connection refused" in data["unread"]["a"]
    assert data["errors"]
    # What b knows by itself, for an operator failing over because a is down.
    [standby] = data["standby"]
    assert (standby["subscription"], standby["exists"]) == (SUB, True)
    assert standby["received_from_source_at"] == RECEIVED_AT
    assert standby["last_applied_at"] == RECEIVED_AT + 1
    assert data["agents"]["a"]["alive"] is False
    assert data["agents"]["b"]["ready"] is True


def test_the_text_says_it_cannot_tell_and_what_a_forced_failover_means(
    regions: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    regions["a"] = Dead()
    code, out = check(tmp_path)
    assert code == EXIT_UNKNOWN
    assert "SAFE" not in out.replace("NOT SAFE", "")
    assert "CANNOT TELL whether consumers can move from a to b: region a unreachable (" in out
    assert "what b shows by itself" in out
    assert "forced failover" in out
    assert "agent of b: alive, ready" in out


def test_with_the_target_unreachable_the_check_cannot_tell(
    regions: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    regions["b"] = Dead()
    code, out = check(tmp_path, "-o", "json")
    data = json.loads(out)
    assert (code, data["verdict"]) == (EXIT_UNKNOWN, "unknown")
    assert set(data["unread"]) == {"b"}
    assert data["standby"] == []  # only a missing source makes it a forced failover
    code, out = check(tmp_path)
    assert "check again once b answers" in out


def test_waiting_for_a_region_that_stays_down_ends_unknown(
    regions: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    regions["a"] = Dead()
    code, out = check(tmp_path, "--wait", "--timeout", "0.2", "--interval", "0.1", "-o", "json")
    assert (code, json.loads(out)["verdict"]) == (EXIT_UNKNOWN, "unknown")


def test_the_provider_and_the_check_share_one_notion(regions: dict[str, Any]) -> None:
    regions["a"] = Dead()
    verdict = failover.check(_sites(), "a", "b", ["geo/ab"])
    assert verdict.outcome == failover.UNKNOWN
    said = failover.figures(verdict)
    assert not said.exact
    assert said.duplicates is None
    assert said.error is not None
    assert "region a" in said.error
    regions["a"] = Admin()
    verdict = failover.check(_sites(), "a", "b", ["geo/ab"])
    assert verdict.outcome == failover.SAFE
    assert failover.figures(verdict).exact


def test_a_verdict_with_anything_unread_is_never_safe() -> None:
    base = failover.Verdict(source="a", target="b", safe=True, duplicates=0, checked=1)
    assert base.outcome == failover.SAFE
    base.unread = {"b": "unreachable (refused)"}
    assert base.outcome == failover.UNKNOWN
    assert base.as_dict()["safe"] is False
    assert failover.EXIT_BY_OUTCOME == {"safe": 0, "not-safe": EXIT_UNHEALTHY, "unknown": EXIT_UNKNOWN}


@pytest.mark.parametrize("args", [["failover", "check", "--help"], ["tenants", "migrate", "--help"]])
def test_help_documents_the_cannot_tell_exit_code(args: list[str]) -> None:
    out = CliRunner().invoke(main, args).output
    assert "8 cannot tell" in out


def _migrate(tmp_path: pathlib.Path, state: dict[str, Any], until: str) -> tuple[int, dict[str, Any]]:
    state_file = tmp_path / "migrate.json"
    state_file.write_text(json.dumps({"tenant": "geo", "from": "a", "to": "b", **state}))
    args = [
        "tenants", "migrate", "geo", "--from", "a", "--to", "b", "--topology", _topology(tmp_path),
        "--state-file", str(state_file), "--resume", "--until", until, "--timeout", "0",
        "--interval", "0.05", "-o", "json",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args, env={"GEOCTL_TOKEN": "", "GEOSYNC_LAB_DIR": ""})
    return result.exit_code, json.loads(result.output)


def test_migration_does_not_switch_when_it_cannot_tell(
    regions: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    regions["a"] = Dead()
    code, data = _migrate(tmp_path, {"done": ["copy-metadata", "replicate", "sync"]}, "switch")
    assert code == EXIT_UNKNOWN
    assert data["verdict"] == "unknown"
    assert data["stopped"].startswith("cannot tell whether consumers would keep their place: region a")
    assert data["done"] == ["copy-metadata", "replicate", "sync"]
    saved = json.loads((tmp_path / "migrate.json").read_text())
    assert "switch" not in saved["done"]


def test_migration_sync_does_not_pass_when_it_cannot_tell(
    regions: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    regions["a"] = Dead()
    facts = {"replicate": {"replication_start": {TOPIC: "5:3"}}}
    code, data = _migrate(tmp_path, {"done": ["copy-metadata", "replicate"], "facts": facts}, "sync")
    assert (code, data["verdict"]) == (EXIT_UNKNOWN, "unknown")
    assert data["done"] == ["copy-metadata", "replicate"]


def test_migration_switches_when_safe(regions: dict[str, Any], tmp_path: pathlib.Path) -> None:
    code, data = _migrate(tmp_path, {"done": ["copy-metadata", "replicate", "sync"]}, "switch")
    assert code == 0, data
    assert data["done"] == ["copy-metadata", "replicate", "sync", "switch"]


def _key_shared_row(kind: str, holes: int, *, key_order: int = 0) -> observing.Observation:
    cells = {
        "a": observing.Cell(region="a", exists=True, holes=holes, kind=kind),
        "b": observing.Cell(
            region="b",
            exists=True,
            duplicates_from={"a": 5},
            key_order_from={"a": key_order} if key_order else {},
        ),
    }
    return observing.Observation(
        rows=[observing.Row("geo/ab", TOPIC, SUB, cells, read=True)], agents={}, namespaces={"geo/ab": []}
    )


def test_key_shared_with_holes_is_safe_once_only_the_per_key_minimum_is_left() -> None:
    """Issue 45: a Key_Shared subscription with holes was never judged safe (the chaos run's final move
    waited in vain, costing 404 duplicates). Acknowledgements behind a key's hole are never carried
    (invariant 6), so the move is in step once only those are left, and the verdict says how many."""
    verdict = failover.judge(_key_shared_row("Key_Shared", 3, key_order=5), "a", "b")
    assert verdict.safe
    assert (verdict.duplicates, verdict.key_order_duplicates) == (5, 5)
    assert verdict.wait_for == []
    behind = failover.judge(_key_shared_row("Key_Shared", 3, key_order=2), "a", "b")
    assert not behind.safe
    assert any("has not applied 3 acknowledgement(s)" in r for r in behind.wait_for)
    assert failover.judge(_key_shared_row("Shared", 3), "a", "b").safe is False


def _log(region: str, keys: list[str]) -> observing.Log:
    """Region ``region``'s copy of a's messages 0..n-1 (ledger 7 in a, 9 in b), one key each."""
    log = observing.Log()
    ledger = 7 if region == "a" else 9
    for i, key in enumerate(keys):
        position = Position(ledger, i)
        log.positions.append(position)
        log.index.append(position, Origin("a", Position(7, i)))
        log.keys[(position, 0)] = key
        log.publish_ms[position] = 1_795_000_000_000 + i
    return log


def test_the_per_key_minimum_is_what_a_key_shared_agent_never_claims() -> None:
    """a acknowledged k2's two messages and k1's second, not k1's first: k1's second is never carried (it
    k1's first would come after it in b). b applied the rest: in step, 1 duplicate required."""
    keys = ["k1", "k2", "k1", "k2"]
    logs = {"a": _log("a", keys), "b": _log("b", keys)}
    cursors = {
        "a": {SUB: AckState.of(Position(7, -1)).ack(Position(7, 1), Position(7, 2), Position(7, 3))},
        "b": {SUB: AckState.of(Position(9, -1)).ack(Position(9, 1), Position(9, 3))},
    }
    stats = {r: {"subscriptions": {SUB: {"type": "Key_Shared", "msgBacklog": 1}}} for r in ("a", "b")}
    row = observing._row("geo/ab", TOPIC, SUB, stats, logs, cursors, {}, now=RECEIVED_AT, read=True)
    assert row.cells["b"].duplicates_from == {"a": 1}
    assert row.cells["b"].key_order_from == {"a": 1}
    obs = observing.Observation(rows=[row], agents={}, namespaces={"geo/ab": ["a", "b"]})
    verdict = failover.judge(obs, "a", "b")
    assert verdict.safe
    assert verdict.key_order_duplicates == 1
    # Had b not applied k2's second message, that one is owed: not safe.
    cursors["b"] = {SUB: AckState.of(Position(9, -1)).ack(Position(9, 1))}
    row = observing._row("geo/ab", TOPIC, SUB, stats, logs, cursors, {}, now=RECEIVED_AT, read=True)
    assert (row.cells["b"].duplicates_from, row.cells["b"].key_order_from) == ({"a": 2}, {"a": 1})
    obs = observing.Observation(rows=[row], agents={}, namespaces={"geo/ab": ["a", "b"]})
    owing = failover.judge(obs, "a", "b")
    assert not owing.safe
    # ... and the check names it (the message k1's hole does not hold back), with both regions' cells.
    assert owing.subscriptions[0]["owed"] == ["9:3 (from a/7:3, key 'k2')"]
    assert owing.subscriptions[0]["cells"]["b"]["key_order_from"] == {"a": 1}


def test_claims_a_region_holds_back_behind_its_own_earlier_messages_are_the_per_key_minimum() -> None:
    """A rebuilt a never had c's first two messages (k1, k2); its consumers acknowledged c's next two of the
    same keys, and a claims them. b holds all four and its agent applies neither of the later two while the
    earlier ones are unacknowledged there (``keyorder.key_ordered_plan``): both are the per-key minimum, and
    the move a -> b is in step."""
    logs = {"a": observing.Log(), "b": observing.Log()}
    for region, first, ledger in (("a", 2, 3), ("b", 0, 9)):
        log = logs[region]
        for i in range(first, 4):
            position = Position(ledger, i)
            log.positions.append(position)
            log.index.append(position, Origin("c", Position(14, i)))
            log.keys[(position, 0)] = f"k{i % 2}"
            log.publish_ms[position] = 1_795_000_000_000 + i
    cursors = {
        "a": {SUB: AckState.of(Position(3, -1)).ack(Position(3, 2), Position(3, 3))},
        "b": {SUB: AckState.of(Position(9, -1))},
    }
    stats = {r: {"subscriptions": {SUB: {"type": "Key_Shared", "msgBacklog": 1}}} for r in ("a", "b")}
    row = observing._row("geo/ab", TOPIC, SUB, stats, logs, cursors, {}, now=RECEIVED_AT, read=True)
    assert (row.cells["b"].duplicates_from, row.cells["b"].key_order_from) == ({"a": 2}, {"a": 2})
    obs = observing.Observation(rows=[row], agents={}, namespaces={"geo/ab": ["a", "b"]})
    assert failover.judge(obs, "a", "b").safe
    # Once b's consumers acknowledged c's first k1, its later k1 is owed: not in step until b applies it.
    cursors["b"] = {SUB: AckState.of(Position(9, 0))}
    row = observing._row("geo/ab", TOPIC, SUB, stats, logs, cursors, {}, now=RECEIVED_AT, read=True)
    assert (row.cells["b"].duplicates_from, row.cells["b"].key_order_from) == ({"a": 2}, {"a": 1})
    obs = observing.Observation(rows=[row], agents={}, namespaces={"geo/ab": ["a", "b"]})
    assert not failover.judge(obs, "a", "b").safe


def _third_region_row(a_holds: int, a_applied: int) -> observing.Row:
    """c published 5 messages (origin 19:0..4); b holds all 5 (ledger 50) and its consumers acknowledged
    them; a holds the first ``a_holds`` (ledger 31), of which its agent applied the first ``a_applied``."""
    logs = {"a": observing.Log(), "b": observing.Log()}
    for region, ledger, held in (("a", 31, a_holds), ("b", 50, 5)):
        for i in range(held):
            position = Position(ledger, i)
            logs[region].positions.append(position)
            logs[region].index.append(position, Origin("c", Position(19, i)))
            logs[region].publish_ms[position] = 1_795_000_000_000 + i
    cursors = {"a": {SUB: AckState.of(Position(31, a_applied - 1))}, "b": {SUB: AckState.of(Position(50, 4))}}
    stats = {r: {"subscriptions": {SUB: {"type": "Shared", "msgBacklog": 0}}} for r in ("a", "b")}
    return observing._row("geo/ab", TOPIC, SUB, stats, logs, cursors, {}, now=RECEIVED_AT, read=True)


def test_a_third_regions_messages_the_source_acknowledged_must_reach_the_target_first() -> None:
    """Record 276's chaos run: c's messages sent while a and c were partitioned reached b, whose consumers
    acknowledged them, but not a; the check said b -> a was safe (a had applied all it held, b's own backlog
    into a was 0), and a's consumers were given them as they arrived. Not safe while c's replicator into a
    has a backlog and b acknowledged c's entries past the last one a holds; safe once they arrived and
    were applied."""
    row = _third_region_row(a_holds=2, a_applied=2)
    assert row.cells["a"].duplicates_from == {"b": 0}
    assert row.cells["a"].not_arrived_from == {"b": 3}
    behind = observing.Observation(rows=[row], agents={}, namespaces={"geo/ab": ["a", "b", "c"]})
    behind.replication_backlog[(TOPIC, "c", "a")] = 3
    verdict = failover.judge(behind, "b", "a")
    assert not verdict.safe
    assert any("3 entr(y/ies) of other regions that b acknowledged not yet" in r for r in verdict.wait_for)
    # c's replicator into a has nothing left: what a lacks of c is not on its way (trimmed, say): no wait.
    behind.replication_backlog[(TOPIC, "c", "a")] = 0
    assert failover.judge(behind, "b", "a").safe
    arrived = _third_region_row(a_holds=5, a_applied=5)
    assert arrived.cells["a"].not_arrived_from == {}
    obs = observing.Observation(rows=[arrived], agents={}, namespaces={"geo/ab": ["a", "b", "c"]})
    obs.replication_backlog[(TOPIC, "c", "a")] = 2  # later messages of c's, which b did not acknowledge
    assert failover.judge(obs, "b", "a").safe
