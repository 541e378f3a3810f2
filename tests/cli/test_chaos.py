"""geoctl chaos: the schedule is a pure function of the seed, and the checker finds each kind of violation
in hand-written histories (a loss, an unexplained duplicate, Key_Shared order, policies that differ) while
accepting the duplicates its model allows. That a real run on the lab passes is in
integration_tests/test_chaos.py."""

from __future__ import annotations

import io
import json
import pathlib
from types import SimpleNamespace
from typing import Any, cast

import pytest
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_UNHEALTHY
from geosync_lab import chaos, chaos_causes, chaos_checker

REGIONS = ["a", "b", "c"]

# -- the schedule ----------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_schedule() -> None:
    one = chaos.plan(42, 600.0, REGIONS, list(chaos.KINDS))
    two = chaos.plan(42, 600.0, list(reversed(REGIONS)), list(chaos.KINDS))
    assert one == two
    assert one.as_dict() == two.as_dict()
    assert chaos.plan(43, 600.0, REGIONS, list(chaos.KINDS)) != one


def test_every_kind_comes_once_before_any_repeats() -> None:
    plan = chaos.plan(7, 1800.0, REGIONS, list(chaos.KINDS))
    first = [s.action for s in plan.faults[: len(chaos.KINDS)]]
    assert sorted(first) == sorted(chaos.KINDS)
    assert len(plan.faults) > len(chaos.KINDS)


def test_faults_do_not_overlap_and_fit_in_the_run() -> None:
    plan = chaos.plan(3, 900.0, REGIONS, list(chaos.KINDS))
    for before, after in zip(plan.faults, plan.faults[1:], strict=False):
        held = float(before.args.get("hold_s", before.args.get("down_s", 0.0)))
        assert after.at >= before.at + held
    assert all(s.at < 900.0 for s in plan.faults + plan.failovers)


def test_failovers_chain_from_region_to_region() -> None:
    plan = chaos.plan(11, 900.0, REGIONS, [])
    where = dict(plan.homes)
    assert plan.failovers
    assert not plan.faults
    for step in plan.failovers:
        sub = step.args["sub"]
        assert step.args["from"] == where[sub] != step.args["to"]
        where[sub] = step.args["to"]
    assert {s.args["quiescent"] for s in plan.failovers} == {True, False}
    assert all(plan.final[sub] != where[sub] for sub in chaos.SUBSCRIPTIONS)


def test_zookeeper_expiry_outlasts_the_session_timeout() -> None:
    plan = chaos.plan(5, 3600.0, REGIONS, ["zk-expiry"])
    assert all(float(s.args["hold_s"]) > chaos.ZK_SESSION_TIMEOUT_S + 3 for s in plan.faults)


def test_concurrent_policy_edits_write_different_values_in_several_regions() -> None:
    plan = chaos.plan(9, 600.0, REGIONS, ["policy-edit"])
    for step in plan.faults:
        edits = step.args["edits"]
        assert len(edits) >= 2
        assert len(set(edits.values())) == len(edits)
        assert step.args["field"] in chaos.POLICY_FIELDS


def _topology(*, wan: bool, agents: bool = True) -> Any:
    regions = {n: SimpleNamespace(lab={"brokers": 1}) for n in REGIONS}
    return cast(
        Any,
        SimpleNamespace(
            wan={"api": "x"} if wan else {},
            regions=regions,
            agents=dict.fromkeys(REGIONS, 1) if agents else {},
        ),
    )


def test_wan_faults_need_a_wan_lab() -> None:
    usable, unavailable = chaos.available_kinds(_topology(wan=False))
    assert set(unavailable) == {"partition", "latency"}
    assert "--wan" in unavailable["partition"]
    assert set(usable) == set(chaos.KINDS) - {"partition", "latency"}
    usable, unavailable = chaos.available_kinds(_topology(wan=True))
    assert not unavailable
    assert usable == list(chaos.KINDS)


def test_the_history_is_json_lines_with_times() -> None:
    out = io.StringIO()
    history = chaos.History(out)
    history.record("send", uid="a-b-0", ok=True)
    history.record("end")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["ev"] for e in lines] == ["send", "end"]
    assert lines[0]["t"] <= lines[1]["t"]
    assert lines[0]["uid"] == "a-b-0"
    assert history.counts == {"send": 1, "end": 1}


# -- the checker -----------------------------------------------------------------------------------

SUBS = {"shared": "Shared", "key-shared": "Key_Shared"}


class H:
    """A history written by hand, one event at a time, with increasing times."""

    def __init__(self) -> None:
        self.t = 0.0
        self.events: list[dict[str, Any]] = [{"t": 0.0, "ev": "run", "seed": 99, "subscriptions": SUBS}]

    def add(self, ev: str, **fields: Any) -> H:
        self.t += 1.0
        self.events.append({"t": self.t, "ev": ev, **fields})
        return self

    def send(self, uid: str, *, key: str = "k0", ok: bool = True) -> H:
        producer, seq = uid.rsplit("-", 1)
        region = producer.split("-", 1)[0]  # the workload names producers after their region
        return self.add("send", uid=uid, producer=producer, region=region, seq=int(seq), key=key, ok=ok)

    def got(self, sub: str, region: str, uid: str, *, ack: bool = True, msg_id: str = "") -> H:
        self.add("recv", sub=sub, region=region, uid=uid, msg_id=msg_id or f"{region}:{uid}")
        return self.add("ack" if ack else "hole", sub=sub, region=region, uid=uid)

    def failover(
        self, sub: str, src: str, dst: str, *, quiescent: bool, settled: bool, phase: str = "run"
    ) -> H:
        fields = {"from": src, "to": dst, "closed_at": self.t}
        return self.add("failover", sub=sub, quiescent=quiescent, settled=settled, phase=phase, **fields)

    def fault(self, kind: str, region: str, n: int = 0) -> H:
        self.add("fault", id=n, phase="start", kind=kind, regions=[region])
        return self.add("fault", id=n, phase="end", kind=kind, regions=[region])

    def check(self, *, end: bool = True) -> chaos_checker.Summary:
        events = self.events + ([{"t": self.t + 1, "ev": "end"}] if end else [])
        return chaos_checker.check(events)


def _both(h: H, uid: str, region: str = "a") -> H:
    for sub in SUBS:
        h.got(sub, region, uid)
    return h


def test_a_clean_history_passes() -> None:
    h = H().send("a-b-0").send("a-b-1")
    _both(h, "a-b-0")
    h.got("shared", "a", "a-b-1", ack=False).got("key-shared", "a", "a-b-1")
    h.failover("shared", "a", "b", quiescent=True, settled=True).got("shared", "b", "a-b-1")
    summary = h.check()
    assert summary.ok, summary.violations
    assert summary.lost == {"shared": 0, "key-shared": 0}
    assert summary.duplicates == {}
    assert summary.operations["send_ok"] == 2
    assert summary.operations["hole"] == 1


def test_a_message_no_consumer_acknowledged_is_lost() -> None:
    h = _both(H().send("a-b-0").send("b-u-0"), "a-b-0")
    h.got("key-shared", "b", "b-u-0")  # never delivered on "shared": acknowledged there by someone else
    summary = h.check()
    assert not summary.ok
    assert summary.lost == {"shared": 1, "key-shared": 0}
    assert any("b-u-0" in v and "lost" in v for v in summary.violations)


def test_a_failed_send_need_not_arrive() -> None:
    h = _both(H().send("a-b-0").send("a-b-1", ok=False), "a-b-0")
    assert h.check().ok


def test_a_duplicate_after_a_settled_failover_is_a_violation() -> None:
    h = _both(H().send("a-b-0"), "a-b-0")
    h.failover("shared", "a", "b", quiescent=True, settled=True).got("shared", "b", "a-b-0")
    summary = h.check()
    assert summary.duplicates == {"unexplained": 1}
    assert not summary.ok
    assert "a-b-0" in summary.violations[0]


@pytest.mark.parametrize(
    ("quiescent", "cause"), [(False, "failover-not-quiescent"), (True, "failover-not-settled")]
)
def test_duplicates_after_a_failover_before_sync_are_allowed_and_classified(
    quiescent: bool, cause: str
) -> None:
    h = _both(H().send("a-b-0"), "a-b-0")
    h.failover("shared", "a", "b", quiescent=quiescent, settled=False).got("shared", "b", "a-b-0")
    summary = h.check()
    assert summary.ok, summary.violations
    assert summary.duplicates == {cause: 1}


def test_an_acknowledgement_just_before_the_close_counts_as_before_the_failover() -> None:
    h = _both(H().send("a-b-0"), "a-b-0")
    h.t -= 1.0  # recorded in the same millisecond as the close
    h.failover("shared", "a", "b", quiescent=False, settled=False).got("shared", "b", "a-b-0")
    assert h.check().duplicates == {"failover-not-quiescent": 1}


def test_a_final_failover_never_judged_safe_is_a_violation() -> None:
    h = _both(H().send("a-b-0"), "a-b-0")
    h.failover("key-shared", "a", "b", quiescent=True, settled=False, phase="final")
    h.got("key-shared", "b", "a-b-0")
    summary = h.check()
    assert summary.duplicates == {"failover-not-settled": 1}
    assert any("sync did not settle" in v for v in summary.violations)


def _key_shared_after_a_hole(second_key: str, *, first: str = "a-b-0") -> H:
    """``first`` (key k0) left unacknowledged on key-shared, a-b-1 acknowledged, then a final move that
    stays not safe, and both delivered in b."""
    h = H().send(first).send("a-b-1", key=second_key)
    for uid in (first, "a-b-1"):
        h.got("shared", "a", uid)
    h.got("key-shared", "a", first, ack=False).got("key-shared", "a", "a-b-1")
    h.failover("key-shared", "a", "b", quiescent=True, settled=False, phase="final")
    return h.got("key-shared", "b", first).got("key-shared", "b", "a-b-1")


def test_key_shared_acknowledgements_after_a_key_hole_may_come_again() -> None:
    summary = _key_shared_after_a_hole("k0").check()
    assert summary.ok, summary.violations
    assert summary.duplicates == {"key-order": 1}
    assert summary.final_moves["key-shared"]["seen"] == 1


def test_a_hole_of_another_key_explains_no_key_shared_duplicate() -> None:
    summary = _key_shared_after_a_hole("k1").check()
    assert summary.duplicates == {"failover-not-settled": 1}
    assert any("sync did not settle" in v for v in summary.violations)


def test_a_hole_of_the_same_key_from_another_origin_explains_no_key_shared_duplicate() -> None:
    """Decision 0016: claims keep each origin's per-key order only (two origins interleave differently in
    each region's log), so b's message left unacknowledged does not hold back a's of the same key."""
    summary = _key_shared_after_a_hole("k0", first="b-b-0").check()
    assert summary.duplicates == {"failover-not-settled": 1}
    assert any("sync did not settle" in v for v in summary.violations)


def test_a_key_shared_final_move_may_cost_what_failover_check_predicted() -> None:
    h = _key_shared_after_a_hole("k1")
    move = next(e for e in h.events if e["ev"] == "failover")
    move["check"] = {"duplicates": 1}
    assert h.check().ok
    move["check"] = {"duplicates": 0}
    assert any("caused 1 duplicate(s) (predicted 0)" in v for v in h.check().violations)


def test_key_order_duplicates_after_a_final_move_are_at_most_the_per_key_minimum_failover_check_gave() -> (
    None
):
    """Issue 45: failover check now judges a Key_Shared move safe once only the per-key minimum is left; the
    key-order duplicates that follow are that minimum, and a move it never judged safe is not excused."""
    h = _key_shared_after_a_hole("k0")
    move = next(e for e in h.events if e["ev"] == "failover")
    move.update(settled=True, verdict="safe", check={"duplicates": 1, "key_order_duplicates": 1})
    summary = h.check()
    assert summary.ok, summary.violations
    assert summary.final_moves["key-shared"]["key_order"] == 1
    assert summary.final_moves["key-shared"]["key_order_minimum"] == 1
    move["check"] = {"duplicates": 0, "key_order_duplicates": 0}
    assert any("more than the per-key minimum" in v for v in h.check().violations)
    move.update(settled=False, verdict="not-safe", check={"duplicates": 1, "key_order_duplicates": 1})
    assert any("sync did not settle" in v for v in h.check().violations)


def test_a_copy_written_twice_and_left_unacknowledged_holds_its_key_back() -> None:
    """Lab seed 55491 (cd11d7c): c's broker was killed, its replicator sent c-u-182 (key k5) to b again, so
    b's log held it twice; b's consumers acknowledged one copy and left the other a hole. b's cursor still
    held k5 back behind that copy, so the agent rightly did not carry c-b-403's acknowledgement and c
    delivered it again after the final move: key-order, not a duplicate no cause explains (the checker took
    the message's other copy's acknowledgement for this one's)."""
    h = H().send("c-u-0").send("c-b-1")
    h.got("key-shared", "b", "c-u-0", ack=False, msg_id="(31,10,-1,-1)")
    h.got("key-shared", "b", "c-u-0", msg_id="(31,20,-1,-1)")  # the copy written again, acknowledged
    h.got("key-shared", "b", "c-b-1", msg_id="(31,30,-1,0)")
    h.failover("key-shared", "b", "c", quiescent=True, settled=True)
    h.got("key-shared", "c", "c-b-1", msg_id="(32,5,-1,0)")
    assert h.check().duplicates == {"key-order": 1}
    # The first copy acknowledged too (at the later delivery): nothing held the key back.
    h = H().send("c-u-0").send("c-b-1")
    h.got("key-shared", "b", "c-u-0", ack=False, msg_id="(31,10,-1,-1)")
    h.got("key-shared", "b", "c-u-0", msg_id="(31,20,-1,-1)")
    h.got("key-shared", "b", "c-u-0", msg_id="(31,10,-1,-1)")
    h.got("key-shared", "b", "c-b-1", msg_id="(31,30,-1,0)")
    h.failover("key-shared", "b", "c", quiescent=True, settled=True)
    h.got("key-shared", "c", "c-b-1", msg_id="(32,5,-1,0)")
    assert h.check().duplicates == {"unexplained": 1, "written-twice": 1}  # c-u-0's first copy again in b


def test_an_acknowledgement_a_crash_lost_does_not_count_against_the_key_hole_it_left() -> None:
    """Lab seed 7194 (cd11d7c): a's broker was killed; a-u-403 (key k1), acknowledged in a before, came
    again in a and was left a hole, so a's cursor held k1 back when consumers left a, and a-u-432's
    acknowledgement (made after the restart) was rightly not carried. The checker took a-u-403's first
    acknowledgement for its state when they left."""
    h = H().send("a-u-0").send("a-u-1")
    h.got("key-shared", "a", "a-u-0", msg_id="(45,1,-1,-1)")
    h.fault("broker-kill", "a")
    h.got("key-shared", "a", "a-u-0", ack=False, msg_id="(45,1,-1,-1)")  # the crash lost its acknowledgement
    h.got("key-shared", "a", "a-u-1", msg_id="(57,2,-1,-1)")
    h.failover("key-shared", "a", "c", quiescent=True, settled=True)
    h.got("key-shared", "c", "a-u-1", msg_id="(55,9,-1,-1)")
    assert h.check().duplicates == {"broker-crash": 1, "key-order": 1}


def test_an_acknowledgement_elsewhere_a_crash_lost_does_not_fill_the_key_hole() -> None:
    """Lab seed 66174 (cd11d7c): a-b-310 (key k4) was acknowledged in a, a's broker was killed before sync
    carried that, and b's consumers left it a hole after the move, so b held k4 back and a-b-458's
    acknowledgement in b was rightly not carried; a delivered both again. The checker counted a's lost
    acknowledgement as carried to b."""
    h = H().send("a-b-0").send("a-b-1")
    h.got("key-shared", "a", "a-b-0", msg_id="(84,1,-1,0)")
    h.fault("broker-kill", "a")
    h.failover("key-shared", "a", "b", quiescent=True, settled=False)
    h.got("key-shared", "b", "a-b-0", ack=False, msg_id="(84,2,-1,0)")
    h.got("key-shared", "b", "a-b-1", msg_id="(84,3,-1,0)")
    h.failover("key-shared", "b", "a", quiescent=True, settled=True)
    h.got("key-shared", "a", "a-b-0", msg_id="(84,1,-1,0)")  # a's acknowledgement was lost
    h.got("key-shared", "a", "a-b-1", msg_id="(97,5,-1,0)")
    assert h.check().duplicates == {"broker-crash": 2, "key-order": 1}


def test_an_acknowledgement_elsewhere_behind_a_hole_there_does_not_fill_the_key_hole() -> None:
    """Lab seeds 66046 and 45189 (cd11d7c): a-u-497 was a hole in a and acknowledged in c, but c's agent held
    its claim back behind an earlier hole of the key in c, so a held the key back and a-b-502's
    acknowledgement in a was rightly not carried; b delivered it again. The checker counted c's
    acknowledgement as carried to a."""
    h = H().send("a-u-0").send("a-u-1").send("a-b-2")
    h.got("key-shared", "c", "a-u-0", ack=False, msg_id="(30,1,-1,-1)")  # c's hole
    h.got("key-shared", "c", "a-u-1", msg_id="(30,2,-1,-1)")  # held back behind it: c does not claim it
    h.failover("key-shared", "c", "a", quiescent=True, settled=True)
    h.got("key-shared", "a", "a-u-0", msg_id="(40,1,-1,-1)")
    h.got("key-shared", "a", "a-u-1", ack=False, msg_id="(40,2,-1,-1)")  # a's hole
    h.got("key-shared", "a", "a-b-2", msg_id="(40,3,-1,0)")  # held back behind it
    h.failover("key-shared", "a", "b", quiescent=True, settled=True)
    h.got("key-shared", "b", "a-b-2", msg_id="(50,3,-1,0)")
    assert h.check().duplicates == {"key-order": 2}


def test_the_per_key_minimum_of_a_final_move_bounds_what_the_region_left_had_acknowledged() -> None:
    """Lab seed 53524 (cd11d7c): consumers moved a -> b at the end of the run and on to c 10 ms later, b's
    having delivered nothing; c then delivered again what a had held back (the a -> b check's minimum) as
    well as b's (the final check's). Only the latter is the final move's minimum."""
    h = H().send("a-b-0").send("a-b-1")
    h.got("key-shared", "a", "a-b-0", ack=False).got("key-shared", "a", "a-b-1")
    h.failover("key-shared", "a", "b", quiescent=True, settled=True)
    h.failover("key-shared", "b", "c", quiescent=True, settled=True, phase="final")
    h.events[-1].update(verdict="safe", check={"duplicates": 0, "key_order_duplicates": 0})
    h.got("key-shared", "c", "a-b-0").got("key-shared", "c", "a-b-1")
    summary = h.check()
    assert summary.duplicates == {"key-order": 1}
    move = summary.final_moves["key-shared"]
    assert (move["key_order"], move["key_order_from_source"], move["key_order_minimum"]) == (1, 0, 0)
    assert not any("per-key minimum" in v for v in summary.violations), summary.violations


def test_a_duplicate_in_the_same_region_needs_a_crash_to_be_allowed() -> None:
    h = _both(H().send("a-b-0"), "a-b-0").got("shared", "a", "a-b-0")
    assert H.check(h).duplicates == {"unexplained": 1}
    h = _both(H().send("a-b-0"), "a-b-0").fault("broker-kill", "a").got("shared", "a", "a-b-0")
    assert h.check().duplicates == {"broker-crash": 1}
    h = _both(H().send("a-b-0"), "a-b-0").fault("broker-kill", "c").got("shared", "a", "a-b-0")
    assert h.check().duplicates == {"unexplained": 1}, "a crash elsewhere explains nothing"
    h = _both(H().send("a-b-0"), "a-b-0").fault("agent-kill", "a").got("shared", "a", "a-b-0")
    assert h.check().duplicates == {"unexplained": 1}, "an agent restart must not undo acknowledgements"


def test_a_crash_long_after_the_acknowledgement_explains_nothing() -> None:
    h = _both(H().send("a-b-0"), "a-b-0")
    h.t += chaos_causes.CRASH_REACH_S + 5
    h.fault("broker-kill", "a").got("shared", "a", "a-b-0")
    assert h.check().duplicates == {"unexplained": 1}


def test_a_message_written_twice_may_be_delivered_twice() -> None:
    h = _both(H().send("a-b-0"), "a-b-0").got("shared", "a", "a-b-0", msg_id="(9,1,-1,0)")
    assert h.check().duplicates == {"written-twice": 1}


def test_a_copy_after_a_later_message_of_its_producer_was_written_twice() -> None:
    """Lab seed 4844 (cd11d7c): c's broker was killed for 37 s; its replicator then sent b again entries b
    already had (their first copies acknowledged there by sync, never delivered), and b's consumers got
    the second copies, after c-u-510 of the same producer: stored twice, though seen there once."""
    h = H().send("c-u-0").send("c-u-1")
    h.got("shared", "a", "c-u-0").got("shared", "a", "c-u-1", ack=False)
    h.failover("shared", "a", "b", quiescent=True, settled=True)
    h.got("shared", "b", "c-u-1", msg_id="(184,20,-1,-1)")
    h.got("shared", "b", "c-u-0", msg_id="(184,30,-1,-1)")
    assert h.check().duplicates == {"written-twice": 1}
    h = H().send("c-u-0").send("c-u-1")
    h.got("shared", "a", "c-u-0").got("shared", "a", "c-u-1", ack=False)
    h.failover("shared", "a", "b", quiescent=True, settled=True)
    h.got("shared", "b", "c-u-0", msg_id="(184,10,-1,-1)").got(
        "shared", "b", "c-u-1", msg_id="(184,20,-1,-1)"
    )
    assert h.check().duplicates == {"unexplained": 1}, "in its producer's order: no sign of a second copy"


def test_key_shared_first_deliveries_keep_each_producers_key_order() -> None:
    h = H().send("a-b-0").send("a-b-1").send("b-u-0")
    for uid in ("a-b-0", "a-b-1", "b-u-0"):
        h.got("shared", "a", uid)
    h.got("key-shared", "a", "b-u-0").got("key-shared", "a", "a-b-1").got("key-shared", "a", "a-b-0")
    summary = h.check()
    assert summary.order_violations == 1
    assert any("key k0 of a-b delivered #0 after #1" in v for v in summary.violations)


def test_redelivering_a_hole_is_not_out_of_order() -> None:
    h = H().send("a-b-0").send("a-b-1")
    for uid in ("a-b-0", "a-b-1"):
        h.got("shared", "a", uid)
    h.got("key-shared", "a", "a-b-0", ack=False).got("key-shared", "a", "a-b-1")
    h.failover("key-shared", "a", "b", quiescent=True, settled=True).got("key-shared", "b", "a-b-0")
    summary = h.check()
    assert summary.ok, summary.violations
    assert summary.order_violations == 0


def test_policies_that_differ_at_the_end_are_a_violation() -> None:
    h = _both(H().send("a-b-0"), "a-b-0")
    h.add("policy-edit", round=0, region="a", field="messageTTL", value=100, ok=True)
    h.add("policy-edit", round=0, region="b", field="messageTTL", value=200, ok=True)
    h.add("policies", equal=False, differing=["message_ttl_in_seconds"])
    summary = h.check()
    assert summary.policies["conflicting_rounds"] == 1
    assert not summary.policies["converged"]
    assert any("message_ttl_in_seconds" in v for v in summary.violations)
    h.events[-1] = {**h.events[-1], "equal": True, "differing": []}
    assert h.check().ok


def test_a_run_that_did_not_finish_is_a_violation() -> None:
    assert not _both(H().send("a-b-0"), "a-b-0").check(end=False).ok


# -- geoctl chaos check ----------------------------------------------------------------------------


def _write(tmp_path: pathlib.Path, h: H) -> pathlib.Path:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in [*h.events, {"t": h.t + 1, "ev": "end"}]))
    return path


def test_check_exits_0_on_a_clean_history(tmp_path: pathlib.Path) -> None:
    path = _write(tmp_path, _both(H().send("a-b-0"), "a-b-0"))
    result = CliRunner().invoke(main, ["chaos", "check", "--history", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"]
    assert data["seed"] == 99
    assert data["lost_total"] == 0


def test_check_exits_6_with_the_seed_on_a_violation(tmp_path: pathlib.Path) -> None:
    path = _write(tmp_path, _both(H().send("a-b-0").send("a-b-1"), "a-b-0"))
    result = CliRunner().invoke(main, ["chaos", "check", "--history", str(path)])
    assert result.exit_code == EXIT_UNHEALTHY
    assert "VIOLATION" in result.output
    assert "--seed 99" in result.output
    assert "lost: 2" in result.output


def test_run_refuses_unknown_fault_kinds(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(
        main, ["chaos", "run", "--dir", str(tmp_path), "--seed", "1", "--faults", "meteor"]
    )
    assert result.exit_code != 0
    assert "meteor" in result.output


def test_a_subscription_whose_final_move_never_came_is_undrained_not_lost() -> None:
    h = _both(H().send("a-b-0").send("a-b-1"), "a-b-0")
    h.events[0]["plan"] = {"final": {"shared": "b", "key-shared": "b"}}
    h.got("key-shared", "a", "a-b-1").failover(
        "key-shared", "a", "b", quiescent=True, settled=True, phase="final"
    )
    summary = h.check()
    assert not summary.ok
    assert summary.undrained == {"shared": 1}
    assert summary.lost == {"key-shared": 0}
    assert any("shared never reached its final move" in v for v in summary.violations)


def test_check_refuses_a_file_that_is_not_a_history_by_its_line(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "history.jsonl"
    bad.write_text('{"ev": "run"}\ngarbage{\n')
    result = CliRunner().invoke(main, ["chaos", "check", "--history", str(bad)])
    assert result.exit_code == 1, result.output
    assert f"{bad}:2: not JSON" in result.output
    assert "Traceback" not in result.output


# -- waiting on failover check ---------------------------------------------------------------------


def _settle_on(monkeypatch: pytest.MonkeyPatch, verdict: Any) -> tuple[str, dict[str, Any]]:
    """settle_by_check's answer when every failover check answers ``verdict``, on a clock that only the
    waits between checks move."""
    import time

    from geoctl import chaos as chaos_cmd

    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(chaos_cmd, "_bounded_check", lambda *_a, **_k: verdict)
    return chaos_cmd.settle_by_check(pathlib.Path("/nonexistent-lab"), stable_s=3.0)(
        "c", "a", "key-shared", 60.0
    )


def test_a_wait_that_never_ends_records_what_was_owed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 99859 (record 233): a final move never judged safe left only 'a has not applied 17
    acknowledgement(s) of c' behind. The last verdict's rows now go with it: which messages were owed and
    what both agents said of the subscription (outside what the wait compares: their ages change)."""
    from geoctl import failover as failover_cmd

    waits = ["a has not applied 1 acknowledgement(s) of c"]
    row: dict[str, Any] = {
        "topic": "t",
        "subscription": "key-shared",
        "duplicates": 3,
        "owed": ["9:3 (from c/7:3, key 'k2')"],
        "cells": {"a": {"agent": {"generation": 2, "waiting": None}}},
        "wait_for": waits,
    }
    stuck = failover_cmd.Verdict(
        source="c", target="a", safe=False, duplicates=3, subscriptions=[row], wait_for=waits
    )
    verdict, detail = _settle_on(monkeypatch, stuck)
    assert verdict == failover_cmd.NOT_SAFE
    assert detail["unchanged_s"] >= 3.0
    assert detail["subscriptions"] == [row]
    safe = failover_cmd.Verdict(source="c", target="a", safe=True, duplicates=0, subscriptions=[row])
    verdict, detail = _settle_on(monkeypatch, safe)
    assert verdict == failover_cmd.SAFE
    assert "subscriptions" not in detail
