"""The switch decision of the PIP-121 provider (``geosync_core.switching``): tables, then the module's
invariants as properties over random event sequences."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core import switching as sw
from geosync_core.errors import MalformedMessage

T0 = 1_000.0
TIMING = sw.Timing(first_delay_s=1.0, max_delay_s=8.0, check_timeout_s=30.0)
EXACT = sw.Figures(exact=True, duplicates=0, subscriptions=1)
SEVEN = sw.Figures(exact=False, duplicates=7, wait_for=("b has not applied 7",), subscriptions=1)


def start(active: str = "a") -> sw.State:
    return sw.initial(("a", "b", "c"), active, T0)


def run(state: sw.State, event: sw.Event, now: float) -> sw.Step:
    return sw.step(state, event, now, TIMING)


def kinds(step: sw.Step) -> list[str]:
    return [type(e).__name__ for e in step.effects]


def records(step: sw.Step) -> list[dict[str, Any]]:
    return [e.entry for e in step.effects if isinstance(e, sw.Record)]


def requested(max_wait: float | None = None, at: float = T0) -> sw.Step:
    return run(start(), sw.Requested("b", max_wait, by="ops"), at)


# -- requests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (sw.Requested("zz"), "unknown-region"),
        (sw.Requested("a"), "already-active"),
        (sw.Requested("b", -1.0), "bad-request"),
        (sw.Cancelled(), "none-pending"),
    ],
)
def test_bad_requests_are_refused_and_change_nothing(event: sw.Event, why: str) -> None:
    state = start()
    result = run(state, event, T0)
    assert result.state == state
    assert len(result.effects) == 1
    refused = result.effects[0]
    assert isinstance(refused, sw.Refused)
    assert refused.why == why


def test_unknown_region_says_where_clients_can_go() -> None:
    refused = run(start(), sw.Requested("zz"), T0).effects[0]
    assert isinstance(refused, sw.Refused)
    assert "'zz'" in refused.message
    assert "a, b, c" in refused.message


def test_a_request_is_recorded_saved_and_checked_at_once() -> None:
    result = requested(max_wait=60)
    assert kinds(result) == ["Accepted", "Record", "Save", "StartCheck"]
    assert result.state.active == "a"  # clients stay where they are until the check says exact
    pending = result.state.pending
    assert pending is not None
    assert (pending.id, pending.target, pending.deadline, pending.checks) == (1, "b", T0 + 60, 1)
    assert records(result)[0] | {"at": 0} == {
        "event": "requested", "at": 0, "from": "a", "to": "b", "request_id": 1, "requested_at": T0,
        "requested_by": "ops", "max_wait_s": 60.0, "checks": 0,
    }  # fmt: skip
    assert result.effects[-1] == sw.StartCheck(1, 1, "a", "b")


def test_asking_again_for_the_pending_target_is_accepted_as_is() -> None:
    state = requested().state
    result = run(state, sw.Requested("b", 5.0), T0 + 1)
    assert result.state == state
    assert kinds(result) == ["Accepted"]
    accepted = result.effects[0]
    assert isinstance(accepted, sw.Accepted)
    assert not accepted.changed


def test_another_target_while_pending_is_refused() -> None:
    state = requested().state
    result = run(state, sw.Requested("c"), T0 + 1)
    assert result.state == state
    assert isinstance(result.effects[0], sw.Refused)
    assert result.effects[0].why == "pending"


def test_cancel_drops_the_pending_switch_and_records_it() -> None:
    state = requested().state
    result = run(state, sw.Cancelled(by="ops"), T0 + 2)
    assert result.state.pending is None
    assert result.state.active == "a"
    assert kinds(result) == ["Accepted", "Record", "Save"]
    assert records(result)[0]["event"] == "cancelled"
    # the answer to the cancelled request's check changes nothing
    late = run(result.state, sw.Checked(1, 1, EXACT), T0 + 3)
    assert late.state == result.state
    assert late.effects == ()


# -- deciding ----------------------------------------------------------------------------------------


def test_exact_switches_and_records_the_checks_figures() -> None:
    state = requested(max_wait=60).state
    result = run(state, sw.Checked(1, 1, EXACT), T0 + 2)
    assert result.state.active == "b"
    assert result.state.active_since == T0 + 2
    assert result.state.pending is None
    assert kinds(result) == ["Record", "Save"]
    record = records(result)[0]
    assert (record["event"], record["from"], record["to"], record["reason"]) == (
        "switched",
        "a",
        "b",
        "exact",
    )
    assert record["predicted_duplicates"] == 0
    assert record["waited_s"] == 2.0
    assert record["check"]["subscriptions"] == 1


def test_not_exact_waits_and_checks_again_with_backoff() -> None:
    state = requested().state  # no maximum wait: never forced
    now = T0
    pauses = []
    for n in range(1, 7):
        result = run(state, sw.Checked(1, n, SEVEN), now + 0.5)
        assert result.state.active == "a"
        assert kinds(result) == ["Save"]
        pending = result.state.pending
        assert pending is not None
        assert pending.last == SEVEN
        pauses.append(pending.next_check_at - (now + 0.5))
        # nothing happens before the next check is due; then exactly one check starts
        assert run(result.state, sw.Tick(), pending.next_check_at - 0.01).effects == ()
        due = run(result.state, sw.Tick(), pending.next_check_at)
        assert due.effects == (sw.StartCheck(1, n + 1, "a", "b"),)
        state, now = due.state, pending.next_check_at
    assert pauses == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_max_wait_forces_the_switch_with_the_last_checks_prediction() -> None:
    state = requested(max_wait=3).state
    waiting = run(state, sw.Checked(1, 1, SEVEN), T0 + 2.5)
    pending = waiting.state.pending
    assert pending is not None
    assert pending.next_check_at == T0 + 3  # backoff never passes the deadline
    final = run(waiting.state, sw.Tick(), T0 + 3)
    assert final.effects == (sw.StartCheck(1, 2, "a", "b"),)
    forced = run(final.state, sw.Checked(1, 2, SEVEN), T0 + 3.8)
    assert forced.state.active == "b"
    record = records(forced)[0]
    assert record["reason"] == sw.FORCED
    assert record["predicted_duplicates"] == 7
    assert record["check"]["wait_for"] == ["b has not applied 7"]
    assert record["max_wait_s"] == 3.0


def test_exact_at_the_deadline_is_still_exact() -> None:
    state = requested(max_wait=0).state
    result = run(state, sw.Checked(1, 1, EXACT), T0 + 1)
    assert records(result)[0]["reason"] == sw.EXACT


def test_zero_wait_forces_after_one_check() -> None:
    state = requested(max_wait=0).state
    result = run(state, sw.Checked(1, 1, SEVEN), T0 + 1)
    assert records(result)[0]["reason"] == sw.FORCED


def test_a_hung_check_counts_as_failed() -> None:
    state = requested(max_wait=10).state
    assert run(state, sw.Tick(), T0 + TIMING.check_timeout_s - 1).effects == ()
    result = run(state, sw.Tick(), T0 + TIMING.check_timeout_s)
    record = records(result)[0]  # past the deadline by then: forced, duplicates unknown
    assert record["reason"] == sw.FORCED
    assert record["predicted_duplicates"] is None
    assert "did not answer" in record["check"]["error"]


def test_a_failed_check_before_the_deadline_waits() -> None:
    state = requested(max_wait=60).state
    failed = sw.Figures(exact=False, duplicates=None, error="region a unreachable")
    result = run(state, sw.Checked(1, 1, failed), T0 + 1)
    assert result.state.active == "a"
    assert result.state.pending is not None
    assert result.state.pending.last == failed


@pytest.mark.parametrize(
    "event",
    [sw.Checked(2, 1, EXACT), sw.Checked(1, 2, EXACT), sw.Checked(1, 0, EXACT)],
    ids=["other request", "later check", "older check"],
)
def test_answers_to_other_checks_change_nothing(event: sw.Event) -> None:
    state = requested().state
    result = run(state, event, T0 + 1)
    assert result.state == state
    assert result.effects == ()


def test_an_answer_when_no_check_is_in_flight_changes_nothing() -> None:
    waiting = run(requested().state, sw.Checked(1, 1, SEVEN), T0 + 1).state
    result = run(waiting, sw.Checked(1, 1, EXACT), T0 + 1.1)
    assert result.state == waiting


# -- restart -------------------------------------------------------------------------------------------


def test_restart_keeps_the_active_region_and_the_pending_request() -> None:
    switched = run(requested().state, sw.Checked(1, 1, EXACT), T0 + 1).state
    assert sw.load(sw.dump(switched)) == switched
    pending = run(switched, sw.Requested("c", 30.0), T0 + 5).state  # check 1 of request 2 in flight
    restored = sw.load(sw.dump(pending))
    assert restored.active == "b"
    assert restored.pending is not None
    assert restored.pending.checking_since is None  # forgotten: checked again at once
    assert restored.pending.deadline == T0 + 35
    assert pending.pending is not None
    assert restored == replace(pending, pending=replace(pending.pending, checking_since=None))
    assert run(restored, sw.Tick(), T0 + 6).effects == (sw.StartCheck(2, 2, "b", "c"),)


def test_resume_finishes_a_switch_the_journal_recorded() -> None:
    state = requested().state
    record = records(run(state, sw.Checked(1, 1, EXACT), T0 + 2))[0]
    resumed = sw.resume(sw.load(sw.dump(state)), record, T0 + 10)
    assert (resumed.active, resumed.active_since, resumed.pending) == ("b", T0 + 2, None)
    # a record of another request leaves the state alone
    other = sw.resume(sw.load(sw.dump(state)), {**record, "request_id": 99}, T0 + 10)
    assert other.pending is not None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {},
        {"version": 2, "active": "a"},
        {"version": 1, "regions": ["a"]},
        {"version": 1, "active": "a"},
    ],
)
def test_a_state_file_that_is_not_ours_is_refused(raw: Any) -> None:
    with pytest.raises(MalformedMessage):
        sw.load(raw)


# -- invariants as properties --------------------------------------------------------------------------

figures = st.builds(
    sw.Figures,
    exact=st.booleans(),
    duplicates=st.none() | st.integers(0, 50),
    in_flight=st.integers(0, 5),
)
events = st.one_of(
    st.builds(sw.Requested, st.sampled_from(["a", "b", "c", "zz"]), st.none() | st.floats(-1, 40)),
    st.just(sw.Cancelled()),
    st.just(sw.Tick()),
    st.builds(sw.Checked, st.integers(0, 4), st.integers(0, 6), figures),
)


@settings(deadline=None, max_examples=300)
@given(st.lists(st.tuples(events, st.floats(0, 20)), max_size=40))
def test_invariants_hold_over_any_sequence(script: list[tuple[sw.Event, float]]) -> None:
    state, now = start(), T0
    for event, gap in script:
        now += gap
        result = sw.step(state, event, now, TIMING)
        after = result.state
        switched = [r for r in records(result) if r["event"] == "switched"]
        # 1. the active region changes only with a switched record, to the pending target
        if after.active != state.active:
            assert state.pending is not None
            assert len(switched) == 1
            assert after.active == state.pending.target == switched[0]["to"]
        else:
            assert not switched
        for record in switched:
            pending = state.pending
            assert pending is not None
            # 2. exact only when the deciding check, for this request, said exact
            if record["reason"] == sw.EXACT:
                assert isinstance(event, sw.Checked)
                assert event.figures.exact
                assert (event.request_id, event.check) == (pending.id, pending.checks)
            # 3. forced only at or after a deadline
            else:
                assert pending.deadline is not None
                assert now >= pending.deadline
        # 4. a refusal changes nothing
        if any(isinstance(e, sw.Refused) for e in result.effects):
            assert after == state
        # 5. backoff never passes the deadline and never exceeds the cap
        if (
            after.pending is not None
            and after.pending.checking_since is None
            and after.pending != state.pending
        ):
            p = after.pending
            if p.checks:
                assert p.next_check_at - now <= TIMING.max_delay_s + 1e-9
            if p.deadline is not None:
                assert p.next_check_at <= max(p.deadline, now)
        # 6. the saved state round-trips, without its check in flight
        restored = sw.load(sw.dump(after))
        expected = (
            after
            if after.pending is None
            else replace(after, pending=replace(after.pending, checking_since=None))
        )
        assert restored == expected
        # 7. stale answers change nothing
        if isinstance(event, sw.Checked) and (
            state.pending is None
            or state.pending.checking_since is None
            or (event.request_id, event.check) != (state.pending.id, state.pending.checks)
        ):
            assert after == state
            assert result.effects == ()
        state = after
