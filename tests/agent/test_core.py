"""The agent's core through its public interface: subscription state, pauses and the checkpoint's wire forms.

Each invariant stated in a ``geosync_agent.core`` module docstring is a test here, by table or property;
nothing here needs a region, fake or real.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_agent.core import checkpoint, pauses, tuning
from geosync_agent.core.subscriptions import (
    BEFORE_ALL,
    Subscription,
    SubsTable,
    claim_size,
    forgettable_floor,
)
from geosync_core import ackstates, envelopes, pacing
from geosync_core.batches import BatchAcks
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

TOPIC = "persistent://geo/ab/orders"
SUB = "billing"
CLAIMS = OriginAcks.of({"b": [Span(9, 0, 3)]})


def test_the_subscriptions_table_counts_every_change_to_its_keys() -> None:
    table = SubsTable()
    sub = Subscription(TOPIC, SUB)
    changes: list[Callable[[], object]] = [
        lambda: table.__setitem__(sub.key, sub),
        lambda: table.setdefault((TOPIC, "x"), sub),
        lambda: table.update({(TOPIC, "y"): sub}),
        lambda: table.pop((TOPIC, "y")),
        lambda: table.__delitem__((TOPIC, "x")),
        table.popitem,
        table.clear,
    ]
    for i, change in enumerate(changes, start=1):
        change()
        assert table.version == i
    sub.cursor = AckState.of(Position(1, 1))  # a subscription's own fields are not the table's keys
    assert table.version == len(changes)


OTHER = "persistent://geo/ab/other"


def names(groups: dict[str, list[Subscription]]) -> dict[str, list[str]]:
    return {t: [s.name for s in g] for t, g in groups.items()}


def test_subscriptions_are_grouped_by_topic_again_only_when_they_come_or_go() -> None:
    table = SubsTable()
    first = table[(TOPIC, "one")] = Subscription(TOPIC, "one")
    table[(OTHER, "two")] = Subscription(OTHER, "two")
    groups = table.by_topic(existing_only=False)
    assert names(groups) == {TOPIC: ["one"], OTHER: ["two"]}
    assert table.by_topic(existing_only=False) is groups  # nothing came or went: the same grouping
    first.exists = False  # a field changing is seen without regrouping
    assert TOPIC not in table.by_topic(existing_only=True)
    third = table[(TOPIC, "three")] = Subscription(TOPIC, "three")
    regrouped = table.by_topic(existing_only=False)
    assert regrouped is not groups
    assert regrouped[TOPIC] == [first, third]
    assert table.by_topic(existing_only=True)[TOPIC] == [third]
    assert names(table.by_topic(existing_only=True, topics=[OTHER, "nowhere"])) == {OTHER: ["two"]}
    del table[first.key]
    assert table.by_topic(existing_only=False)[TOPIC] == [third]
    restored = SubsTable({third.key: third})  # as a checkpoint's restore replaces the table
    restored.version = table.version  # another table that happens to be at the same count
    assert restored.by_topic(existing_only=False) == {TOPIC: [third]}


def test_heavy_ones_are_counted_while_their_subscription_is_the_tables() -> None:
    table = SubsTable()
    light = table[(TOPIC, "light")] = Subscription(TOPIC, "light")
    heavy_one = table[(TOPIC, "heavy")] = Subscription(TOPIC, "heavy")
    heavy: dict[tuple[str, str], Subscription] = {}
    pauses.note_heavy(heavy, light, tuning.HEAVY_PLAN_S / 2)
    pauses.note_heavy(heavy, heavy_one, tuning.HEAVY_PLAN_S)
    assert table.still_held(heavy) == 1
    pauses.note_heavy(heavy, heavy_one, 1.0)
    del table[heavy_one.key]
    table[(TOPIC, "heavy")] = Subscription(TOPIC, "heavy")  # made again: a new state, never timed
    assert table.still_held(heavy) == 0
    assert heavy == {}


def test_known_claims_are_those_received_merged_with_those_published() -> None:
    sub = Subscription(TOPIC, SUB, received=CLAIMS)
    assert sub.known() is CLAIMS  # nothing published: the very claims received
    own = OriginAcks.of({"a": [Span(5, 0, 1)]})
    sub.published = own
    assert sub.known() == CLAIMS.merge(own)


def test_one_deleted_here_and_confirmed_again_is_a_new_subscription_with_its_claims_kept() -> None:
    sub = Subscription(TOPIC, SUB, received=CLAIMS, cursor=AckState.of(Position(9, 2)))
    sub.planned = (sub.cursor, 1, CLAIMS)
    sub.pending_move = pacing.PendingMove(Position(9, 3), 1.0)
    sub.confirm(5.0)
    assert (sub.cursor, sub.recreated, sub.confirmed_at) == (AckState.of(Position(9, 2)), False, 5.0)
    sub.deleted_here, sub.exists = True, False
    sub.confirm(3.0)  # an older confirmation does not take the time back
    assert (sub.exists, sub.deleted_here, sub.recreated) == (True, False, True)
    assert sub.cursor is None
    assert sub.planned is None
    assert sub.pending_move is None
    assert sub.received is CLAIMS
    assert sub.confirmed_at == 5.0


def test_a_hand_off_forgets_what_was_read_and_published_here_and_keeps_the_claims_received() -> None:
    sub = Subscription(TOPIC, SUB, received=CLAIMS, cursor=AckState.of(Position(9, 2)), published=CLAIMS)
    sub.claimed_to, sub.pending_holes, sub.parked = Position(9, 2), 3, True
    sub.hand_off()
    assert (sub.cursor, sub.published, sub.translated, sub.planned) == (None, None, None, None)
    assert (sub.claimed_to, sub.pending_holes, sub.parked) == (BEFORE_ALL, 0, False)
    assert sub.received is CLAIMS
    assert sub.waiting.startswith("handed off")


def test_the_kind_is_sticky_and_key_shared_once_seen_stays() -> None:
    sub = Subscription(TOPIC, SUB)
    sub.learn_kind("Key_Shared")
    sub.learn_kind("")  # an idle subscription reports no type
    sub.learn_kind("None")
    assert (sub.kind, sub.key_shared) == ("Key_Shared", True)
    sub.learn_kind("Shared")
    assert (sub.kind, sub.key_shared) == ("Shared", True)


def _with(
    cursor: Position | None, *, claimed_to: Position = BEFORE_ALL, follow: bool = False
) -> Subscription:
    sub = Subscription(TOPIC, SUB, cursor=None if cursor is None else AckState.of(cursor))
    sub.claimed_to, sub.follow = claimed_to, follow
    return sub


def test_a_tail_forgets_no_further_than_every_cursor_and_what_was_claimed_of_it() -> None:
    low, high = Position(9, 2), Position(9, 5)
    assert forgettable_floor([_with(high), _with(low)], claims=False) == low
    assert forgettable_floor([_with(high, claimed_to=low)], claims=True) == low  # not claimed yet above
    assert forgettable_floor([_with(high, claimed_to=low)], claims=False) == high  # snapshot mode: no claims
    assert forgettable_floor([_with(high), _with(None)], claims=True) is None  # a cursor not read yet
    assert forgettable_floor([_with(high, claimed_to=high, follow=True)], claims=True) == BEFORE_ALL
    assert forgettable_floor([], claims=True) is None


def test_a_claims_size_counts_spans_and_partly_claimed_entries() -> None:
    partial = OriginAcks.of({"b": [Span(9, 0, 1)]}, {"b": [(Position(9, 3), BatchAcks.of(4, [0]))]})
    assert (claim_size(None), claim_size(CLAIMS), claim_size(partial)) == (0, 1, 2)


def test_a_heavy_plan_is_noted_as_it_is_timed_and_dropped_when_light_again() -> None:
    heavy: dict[tuple[str, str], Subscription] = {}
    light, costly = Subscription(TOPIC, "light"), Subscription(TOPIC, "costly")
    pauses.note_heavy(heavy, light, tuning.HEAVY_PLAN_S / 2)
    pauses.note_heavy(heavy, costly, tuning.HEAVY_PLAN_S)
    assert heavy == {costly.key: costly}
    pauses.note_heavy(heavy, Subscription(TOPIC, "costly"), 0.0)  # another state of the same key
    assert heavy == {costly.key: costly}
    pauses.note_heavy(heavy, costly, 0.0)
    assert heavy == {}


@pytest.mark.parametrize(
    ("spans", "pause"), [(0, 0.0), (2_000, 0.0), (2_001, 0.2001), (30_000, 3.0), (10**6, 10.0)]
)
def test_publish_pause_grows_with_the_claims_and_is_capped(spans: int, pause: float) -> None:
    assert pauses.publish_pause(spans) == pytest.approx(pause)


@pytest.mark.parametrize(
    ("spans", "took", "pause"),
    [(500, 0.05, 0.0), (501, 0.05, 0.5), (2_001, 0.001, 0.2001), (30_000, 0.5, 5.0), (600, 3.0, 10.0)],
)
def test_publish_pause_is_also_ten_times_what_a_large_publish_took(
    spans: int, took: float, pause: float
) -> None:
    assert pauses.publish_pause(spans, took=took) == pytest.approx(pause)
    if spans > 2_000 and took < 0.1:
        return  # the pause by spans, whatever the cost
    assert pauses.publish_pause(spans, took=took / 4, heavy=4) == pytest.approx(pause)  # shared out


@pytest.mark.parametrize(
    ("took", "heavy", "wait"),
    [(0.0001, 0, 0.001), (0.01, 1, 0.1), (0.01, 4, 0.4), (0.05, 4, 2.0), (0.01, 10_000, 2.0)],
)
def test_plan_waits_grow_with_the_subscriptions_whose_plans_are_heavy(
    took: float, heavy: int, wait: float
) -> None:
    """Four subscriptions each waiting ten times its own plan still re-planned for 4/11 of the loop."""
    assert pauses.plan_wait(took, heavy=heavy) == pytest.approx(wait)


costs = st.floats(min_value=0.0, max_value=100.0)
counts = st.integers(min_value=0, max_value=100_000)


@given(took=costs, heavy=counts, more=counts)
def test_a_plan_wait_is_bounded_and_never_shorter_with_more_heavy_plans(
    took: float, heavy: int, more: int
) -> None:
    wait = pauses.plan_wait(took, heavy=heavy)
    assert 0.0 <= wait <= tuning.MAX_PLAN_WAIT_S
    assert pauses.plan_wait(took, heavy=heavy + more) >= wait


@given(spans=st.integers(min_value=0, max_value=10**7), took=costs, heavy=counts, more=counts)
def test_a_publish_pause_is_bounded_and_never_shorter_with_more_heavy_publishes(
    spans: int, took: float, heavy: int, more: int
) -> None:
    pause = pauses.publish_pause(spans, took=took, heavy=heavy)
    assert 0.0 <= pause <= tuning.MAX_PUBLISH_PAUSE_S
    assert pauses.publish_pause(spans, took=took, heavy=heavy + more) >= pause
    if spans <= tuning.PAUSE_FROM_SPANS:
        assert pauses.publish_pause(spans) == 0.0


def test_a_cursor_comes_back_from_the_checkpoint_as_it_was() -> None:
    cursor = AckState.of(
        Position(3, 4), [Range(Position(3, 6), Position(3, 9))], [(Position(3, 5), BatchAcks.of(10, [0, 7]))]
    )
    wire = json.loads(json.dumps(checkpoint.cursor_to_wire(cursor)))
    assert checkpoint.cursor_from_wire(wire) == cursor
    for bad in ([], [[3, 4], [], [[[3, 5], 10, "zz"]]], [[3, "4"], [], []]):
        with pytest.raises((ValueError, TypeError)):
            checkpoint.cursor_from_wire(bad)


entries = st.integers(min_value=0, max_value=1_000)


@given(md=entries, holes=st.lists(st.tuples(entries, st.integers(min_value=1, max_value=5)), max_size=8))
def test_any_cursor_reads_back_equal(md: int, holes: list[tuple[int, int]]) -> None:
    ranges = [Range(Position(7, md + 1 + lo), Position(7, md + 1 + lo + width)) for lo, width in holes]
    cursor = AckState.of(Position(7, md), ranges)
    assert checkpoint.cursor_from_wire(json.loads(json.dumps(checkpoint.cursor_to_wire(cursor)))) == cursor


def test_a_replay_guard_comes_back_from_the_checkpoint_as_it_was() -> None:
    guard = envelopes.ReplayGuard((("a", 17), ("c", 3)), (("a", (15, 16, 17)), ("c", (3,))))
    wire = json.loads(json.dumps(checkpoint.guard_to_wire(guard)))
    assert checkpoint.guard_from_wire(wire) == guard
    with pytest.raises(KeyError):
        checkpoint.guard_from_wire({"highest": []})


def _wire(sub: Subscription) -> dict[str, object]:
    wire: dict[str, object] = json.loads(
        json.dumps(
            {
                **checkpoint.subscription_fields(sub),
                "received": ackstates.acks_to_json(sub.received),
                "published": None if sub.published is None else ackstates.acks_to_json(sub.published),
                "cursor": None if sub.cursor is None else checkpoint.cursor_to_wire(sub.cursor),
            }
        )
    )
    return wire


def test_a_subscription_comes_back_from_the_checkpoint_with_what_it_claimed_and_was_told() -> None:
    sub = Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, 2)), received=CLAIMS, published=CLAIMS)
    sub.announced, sub.kind, sub.key_shared, sub.generation, sub.active = True, "Key_Shared", True, 7, True
    back = checkpoint.subscription_from_wire(_wire(sub))
    assert checkpoint.subscription_fields(back) == checkpoint.subscription_fields(sub)
    assert (back.received, back.published, back.cursor) == (sub.received, sub.published, sub.cursor)
    assert back.confirmed_at == tuning.CHECKPOINT_CONFIRMED  # earlier than any discovery pass


def test_a_subscription_of_an_older_agents_checkpoint_reads_as_that_agent_meant_it() -> None:
    old = _wire(Subscription(TOPIC, SUB, exists=False, received=CLAIMS))
    for absent in ("generation", "follow", "active", "cursor"):
        del old[absent]
    back = checkpoint.subscription_from_wire(old)
    assert (back.generation, back.follow, back.active, back.cursor) == (0, False, False, None)
    assert back.confirmed_at == 0.0  # it did not exist: nothing to confirm
    del old["deleted_here"]
    with pytest.raises(KeyError):
        checkpoint.subscription_from_wire(old)
