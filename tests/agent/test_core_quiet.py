"""Which subscriptions the apply step looks at (``core.quiet``), and the table that tells it (``SubsTable``).

One test per invariant the module states, over ``test_core_applying``'s log values, then through two agents:
a round after nothing changed looks at none of them, and a claim received is looked at (a copy read after
the claim that names it: ``test_syncing``'s test of plans made again for appended entries). Then the observe
step's counterpart (``observing``): a feed round decides the claims of the subscriptions the feed names, and
of those whose cursor was set since (``SubsTable.cursor_set``), not of every subscription of the topic.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_agent.core import quiet, subscriptions, tuning
from geosync_agent.core.subscriptions import (
    APPLY_READS,
    Subscription,
    SubsTable,
    decided_already,
    undecided,
)
from geosync_core import syncing
from geosync_core.batches import BatchAcks
from geosync_core.indexing import OriginRun
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import FakeRegion, Harness, message
from tests.agent.pairs import A_LOG, B_LOG, NS, SUB, TOPIC, carry, deliver_b_copies, pair, states_sent
from tests.agent.test_core_applying import FakeLog, claims_up_to


def walked_after(log: FakeLog, *claims: OriginAcks, restless: tuple[str, ...] = ()) -> quiet.Walked:
    return quiet.after_look(None, log, whole=True, looked=claims, restless=restless, quiet=())


# -- the table tells what changed ----------------------------------------------------------------------


def test_setting_a_field_the_apply_step_reads_lists_the_subscription_as_touched() -> None:
    table = SubsTable()
    state = table[(TOPIC, SUB)] = Subscription(TOPIC, SUB)
    assert table.touched == {TOPIC: {SUB: None}}  # new to the table: looked at
    table.touched.clear()
    state.waiting = "its cursor has not been read here yet"  # for /state only
    state.published = claims_up_to(3)
    state.parked = False  # the value it had
    assert table.touched == {}
    state.cursor = AckState.of(Position(9, 2))
    assert table.touched == {TOPIC: {SUB: None}}
    table.touched.clear()
    state.received = claims_up_to(4)
    assert table.touched == {TOPIC: {SUB: None}}


def test_a_table_made_from_subscriptions_and_a_hand_off_touch_them() -> None:
    state = Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, 2)))
    table = SubsTable({state.key: state})
    assert table.touched == {TOPIC: {SUB: None}}
    table.touched.clear()
    state.hand_off()
    assert table.touched == {TOPIC: {SUB: None}}


def test_every_field_the_apply_step_reads_is_watched() -> None:
    """The apply step and what it calls read these; forgetting one would leave changes unlooked."""
    for name in ("cursor", "received", "planned", "pending_move", "exists", "announced", "follow"):
        assert name in APPLY_READS


# -- the log: what a quiet subscription may not see -----------------------------------------------------


def test_entries_no_claim_names_leave_the_log_unchanged_for_quiet_subscriptions() -> None:
    log = FakeLog(5)
    walked = walked_after(log, claims_up_to(4))
    assert quiet.log_unchanged(walked, log, {})
    log.append(2)  # 9:5, 9:6 from a's 5:5, 5:6: above everything claimed
    assert quiet.log_unchanged(walked, log, {})
    assert walked.version == log.version  # taken as looked at
    assert quiet.to_look_at(walked, ["other"], True) == ["other"]


def test_entries_a_claim_may_name_are_looked_at_by_every_subscription() -> None:
    log = FakeLog(5)
    walked = walked_after(log, claims_up_to(4), claims_up_to(6))  # a claim that came before the copies
    log.append(1)
    assert not quiet.log_unchanged(walked, log, {})
    assert quiet.to_look_at(walked, [], False) is None


def test_a_partly_claimed_entry_counts_in_the_reach() -> None:
    log = FakeLog(5)
    partly = OriginAcks.of({}, {"a": [(Position(5, 5), BatchAcks(4, 0b0011))]})
    walked = walked_after(log, claims_up_to(4), partly)
    log.append(1)
    assert not quiet.log_unchanged(walked, log, {})


@pytest.mark.parametrize("change", ["rewritten", "new tail", "too many", "never looked", "sizing"])
def test_every_subscription_is_looked_at_after_other_changes_of_the_log(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = FakeLog(5)
    walked: quiet.Walked | None = walked_after(log, claims_up_to(2))
    assert walked is not None
    if change == "rewritten":
        log.rewrites += 1
    elif change == "new tail":
        log = FakeLog(5)
    elif change == "too many":
        monkeypatch.setattr(tuning, "APPENDED_CHECK_MAX", 2)
        log.append(3)
    elif change == "never looked":
        walked = None
    else:
        log.sizing = log.last  # the last entry's size was being counted at the look
        walked = walked_after(log, claims_up_to(2))
        log.sizing = None
        log.append(1)
    assert not quiet.log_unchanged(walked, log, {})


def test_restless_subscriptions_are_looked_at_until_a_look_leaves_them_quiet() -> None:
    log = FakeLog(5)
    walked = walked_after(log, restless=("waits",))
    assert quiet.to_look_at(walked, ["touched"], True) == ["waits", "touched"]
    walked = quiet.after_look(walked, log, whole=False, looked=(), restless=(), quiet=("waits", "touched"))
    assert quiet.to_look_at(walked, [], True) == []


def test_a_look_at_some_raises_the_reach_to_their_new_claims() -> None:
    log = FakeLog(5)
    walked = walked_after(log, claims_up_to(2))
    walked = quiet.after_look(walked, log, whole=False, looked=(claims_up_to(6),), restless=(), quiet=("s",))
    log.append(1)  # 9:5 from 5:5, which the new claims name
    assert not quiet.log_unchanged(walked, log, {})


spans = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 5)), min_size=1, max_size=6
).map(lambda items: OriginAcks.of({"a": [Span(lg, first, first + n) for lg, first, n in items]}))


@given(st.lists(spans, min_size=1, max_size=4))
def test_the_reach_lies_at_or_above_everything_claimed(claims: list[OriginAcks]) -> None:
    reach: quiet.Reach = {}
    for acks in claims:
        quiet.add_reach(reach, acks)
    for acks in claims:
        for region, region_spans in acks.by_region:
            for span in region_spans:
                assert (span.ledger, span.last) <= reach[region]


# -- through two agents ----------------------------------------------------------------------------------


def counting_plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    plans: list[str] = []
    plan_apply = syncing.plan_apply

    def counted(*args: object, **kwargs: object) -> syncing.ApplyPlan:
        plans.append("planned")
        return plan_apply(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(syncing, "plan_apply", counted)
    return plans


def test_a_round_after_nothing_changed_looks_at_no_subscription(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    carry(a, b)
    b.step()
    b.step()  # the write lands
    b.step()
    looks = b.agent.stats.counters["apply_looks_skipped"]
    plans = counting_plans(monkeypatch)
    b.step()
    assert plans == []
    assert b.agent.stats.counters["apply_looks_skipped"] == looks + len(b.agent.subs)
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1])


def test_a_claim_received_is_looked_at_and_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = pair()
    for h in (a, b):
        h.step()
        h.step()
    plans = counting_plans(monkeypatch)
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    b.step()
    assert plans == ["planned"]
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])


# -- the observe step: the subscriptions the feed names, and those whose cursor was set since ------------

SUBS = ("s1", "s2", "s3")


def trio() -> tuple[Harness, Harness]:
    """``pairs.pair`` with three subscriptions on the topic."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(B_LOG)})
    for region in (a, b):
        for name in SUBS:
            region.cursors[(TOPIC, name)] = AckState.of(Position(region.topics[TOPIC][0].ledger, -1))
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    b.origin_runs[TOPIC] = [OriginRun(9, 0, len(B_LOG), "a", A_LOG[0])]
    ha, hb = Harness.build(a), Harness.build(b)
    for h in (ha, hb):
        h.discover()
        h.step()
    for p in A_LOG:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    deliver_b_copies(hb)
    for _ in range(3):
        for h, other in ((ha, hb), (hb, ha)):
            h.step()
            carry(h, other)
    for h in (ha, hb):  # no poll due while the tests look: only the feed names cursors
        for ts in h.agent.topics.values():
            ts.poll = replace(ts.poll, next_at=1e12)
            ts.resync_at = 1e12
    return ha, hb


def counting_publishes(monkeypatch: pytest.MonkeyPatch, harness: Harness) -> list[tuple[str, str]]:
    """The subscriptions a look at their topic's cursors decides the claims of (``to_decide``), by region:
    the ``harness``'s agent's looks from now on (the other agents' are not counted)."""
    seen: list[tuple[str, str]] = []
    decides = subscriptions.to_decide

    def counted(state: Subscription, **kwargs: Any) -> bool:
        decided = decides(state, **kwargs)
        if decided and harness.agent.subs.get((state.topic, state.name)) is state:
            seen.append((harness.agent.config.region, state.name))
        return decided

    monkeypatch.setattr(subscriptions, "to_decide", counted)
    return seen


def test_a_feed_round_decides_the_claims_of_the_subscriptions_it_names_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, _b = trio()
    seen = counting_publishes(monkeypatch, a)
    a.region.consumer_acks(TOPIC, "s1", A_LOG[:2])
    a.step()
    assert seen == [("a", "s1")]
    assert [name for name, _ in states_sent(a)] == ["s1"]


def test_a_cursor_a_write_set_is_decided_at_the_next_feed_round_of_its_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = trio()
    a.region.consumer_acks(TOPIC, "s1", A_LOG[:2])
    a.step()
    carry(a, b)
    b.step()  # the claim is written to b's s1
    b.step()  # the write lands: s1's cursor is set
    assert b.region.cursors[(TOPIC, "s1")] == AckState.of(B_LOG[1])
    seen = counting_publishes(monkeypatch, b)
    b.region.consumer_acks(TOPIC, "s2", B_LOG[:1])  # the feed names s2 only
    b.step()
    assert ("b", "s2") in seen
    assert ("b", "s1") in seen  # its cursor was set by the write: its claims may have to follow
    assert ("b", "s3") not in seen


@pytest.mark.parametrize(
    ("polled", "moved", "claims", "written", "decided"),
    [
        (True, False, True, False, True),  # a poll decides every subscription it read
        (False, True, True, False, True),  # the feed's look, one it moved
        (False, False, True, False, False),  # ... not one decided already from its cursor
        (False, False, True, True, True),  # ... but one a write moved since
        (False, False, False, True, False),  # ... unless no claims are made (snapshots)
    ],
)
def test_a_look_decides_what_it_polled_moved_or_left_undecided(
    polled: bool, moved: bool, claims: bool, written: bool, decided: bool
) -> None:
    cursor = AckState.of(Position(9, 2))
    state = Subscription(TOPIC, SUB, cursor=cursor, published=claims_up_to(2), translated=cursor)
    state.translated_from = (cursor, None, False, cursor)
    if written:
        state.cursor = AckState.of(Position(9, 3))
    assert (
        subscriptions.to_decide(
            state, polled=polled, moved=moved, claims=claims, acknowledgements=False, log_version=3
        )
        is decided
    )


def test_decided_already_holds_for_the_very_objects_decided_from() -> None:
    cursor = AckState.of(Position(9, 2))
    state = Subscription(TOPIC, SUB, cursor=cursor, published=claims_up_to(2), translated=cursor)
    state.translated_from = (cursor, None, False, cursor)
    assert decided_already(state, acknowledgements=False, log_version=3)
    assert not undecided(state, False, 3)
    state.cursor = AckState.of(Position(9, 2))  # the same value, another object: decided again
    assert not decided_already(state, acknowledgements=False, log_version=3)
    assert not undecided(state, False, 3)  # ... but nothing to follow: it is the translated value
    state.cursor = moved = AckState.of(Position(9, 3))
    assert undecided(state, False, 3)
    state.translated_from = (moved, None, False, cursor)
    assert not decided_already(state, acknowledgements=True, log_version=3)  # claims made otherwise now
    state.incomplete_at = 2  # the last translation stopped short of the log, which grew since
    assert not decided_already(state, acknowledgements=False, log_version=3)


def test_setting_a_cursor_lists_the_subscription_for_the_observe_step() -> None:
    table = SubsTable()
    state = table[(TOPIC, SUB)] = Subscription(TOPIC, SUB)
    assert table.cursor_set == {TOPIC: {SUB: None}}
    table.cursor_set.clear()
    state.received = claims_up_to(3)
    assert table.cursor_set == {}
    state.cursor = AckState.of(Position(9, 2))
    assert table.cursor_set == {TOPIC: {SUB: None}}
