"""Generations of a subscription's claims (``core.generations``): rewinds seen here, claims taken from peers.

Each invariant in the module's docstring is a test here, driving its public functions with values.
"""

from __future__ import annotations

import dataclasses

from geosync_agent.core import generations
from geosync_agent.core.generations import Rewind, Taken
from geosync_agent.core.subscriptions import BEFORE_ALL, Subscription
from geosync_core import ackstates
from geosync_core.indexing import OriginIndex
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

TOPIC = "persistent://geo/ab/orders"
SUB = "billing"
NOW_MS = 1_700_000_000_000


def at(entry: int) -> AckState:
    return AckState.of(Position(5, entry))


def claims(region: str, last: int, ledger: int = 5) -> OriginAcks:
    return OriginAcks.of({region: [Span(ledger, 0, last)]})


def claimed(generation: int, acks: OriginAcks, region: str = "b") -> ackstates.AckStateMessage:
    return ackstates.AckStateMessage(TOPIC, SUB, region, acks, generation)


def see(state: Subscription, cursor: AckState, source: str = "feed", now: float = 10.0) -> Rewind | None:
    seen = generations.rewound(state, cursor, source=source, now_mono=now, now_wall=NOW_MS / 1000)
    return None if seen is None else seen.kind


def active(generation: int = 3) -> Subscription:
    state = Subscription(TOPIC, SUB, active=True, generation=generation)
    state.received, state.published = claims("b", 2), claims("a", 4)
    return state


def test_a_cursor_moving_on_is_no_rewind_from_any_source() -> None:
    state = active()
    for source, entry in (("feed", 1), ("poll", 2), ("feed", 3), ("write", 3), ("poll", 7)):
        assert see(state, at(entry), source) is None
    assert state.generation == 3
    assert state.seen_any == at(7)


def test_a_rewind_where_the_subscription_is_consumed_starts_a_new_generation_of_its_own_claims() -> None:
    state = active()
    state.planned = (at(4), 1, state.received)
    assert see(state, at(4)) is None
    assert see(state, at(2)) is Rewind.NEW_GENERATION
    assert state.generation == NOW_MS  # newer than any before, and than any peer's at this time
    assert (state.received, state.published, state.follow) == (OriginAcks.of({}), None, False)
    assert state.planned is None
    assert state.claimed_to == BEFORE_ALL
    assert (state.seen_feed, state.seen_any) == (at(2), at(2))  # the new generation's first cursor


def test_a_rewind_says_what_it_was_judged_by_in_one_bounded_line() -> None:
    """The log line of a rewind names the view compared against (its source and age), the one that lacks
    some of it, and the first of what it lacks, counting the rest: the lab's rewinds nobody made could not
    be told apart without it (chaos seeds 29869, 93910)."""
    state = active()
    wide = at(2).ack(*(Position(5, e) for e in range(4, 400, 2)))
    assert see(state, wide, "write", now=10.0) is None
    assert see(state, at(3).ack(Position(5, 4)), "feed", now=10.5) is None  # the feed's own, merged
    assert see(state, at(3), "poll", now=11.0) is Rewind.UNCONFIRMED  # read again first
    rewind = generations.rewound(state, at(3), source="poll", now_mono=11.0, now_wall=NOW_MS / 1000)
    assert rewind is not None
    assert rewind.kind is Rewind.NEW_GENERATION
    line = generations.describe(rewind, at(3))
    assert line.startswith("on a poll: the view from a feed 0.50 s before (mark-delete 5:4, 197 ranges)")
    assert line.endswith("lacks: up to 5:4 (mark-delete), (5:5..5:6], (5:7..5:8] and 195 more")
    assert len(line) < 400
    assert generations.lacking(at(4), at(3).ack(Position(5, 4))) == ([], 0)
    assert generations.lacking(at(4), at(2)) == (["up to 5:4 (mark-delete)"], 1)


def test_a_rewind_where_the_subscription_is_not_consumed_is_left_to_the_active_regions_claims() -> None:
    state = active()
    state.active = False
    see(state, at(4))
    assert see(state, at(2)) is Rewind.PASSIVE
    assert state.generation == 3
    assert state.received == claims("b", 2)
    assert state.planned is None  # planned again from the cursor as it is


def test_the_agents_own_rewind_seen_late_is_not_taken_for_a_new_one() -> None:
    state = active()
    see(state, at(6), "poll")
    state.reset_to = (Position(5, 2), 40.0)  # the agent rewound it to 5:2, settling until 40 s
    assert see(state, at(3), "write", now=20.0) is Rewind.OWN
    assert state.generation == 3
    see(state, at(6), "write", now=21.0)
    assert see(state, at(1), "write", now=22.0) is Rewind.NEW_GENERATION  # below where the agent put it


def test_a_poll_that_lacks_what_was_seen_is_believed_only_when_the_next_one_does_too() -> None:
    """``internalStats`` reads a cursor's mark-delete before its ranges: a poll while the mark-delete moves
    from 5:1 to 5:6 (a hole acknowledged) can show 5:1 with the ranges above 5:6 only, lacking 5:3 and 5:5,
    acknowledged all along (lab chaos seed 93910: 'rewound from 167:3 to 167:3' 0.1 s after a Key_Shared
    consumer subscribed and was given its hole again). The next poll shows the move; a rewind stays."""
    state = active()
    assert see(state, at(1).ack(Position(5, 3), Position(5, 5), Position(5, 8)), "poll", now=1.0) is None
    torn = at(1).ack(Position(5, 8))
    assert see(state, torn, "poll", now=2.0) is Rewind.UNCONFIRMED
    assert state.generation == 3
    assert state.seen_any == at(1).ack(Position(5, 3), Position(5, 5), Position(5, 8))  # not the torn view
    assert see(state, at(6).ack(Position(5, 8)), "poll", now=3.0) is None
    assert state.generation == 3
    # A rewind: the next poll lacks it too, and it is judged then.
    assert see(state, at(2), "poll", now=4.0) is Rewind.UNCONFIRMED
    assert see(state, at(2), "poll", now=5.0) is Rewind.NEW_GENERATION
    assert state.generation == NOW_MS
    # Other sources are believed at once: the plugin reads the ranges before the mark-delete.
    assert see(state, at(7), "write", now=6.0) is None
    assert see(state, at(3), "write", now=7.0) is Rewind.NEW_GENERATION


def test_a_subscription_created_again_starts_a_new_generation_with_its_first_cursor() -> None:
    state = active()
    state.recreated = True
    seen = generations.rewound(state, at(9), source="poll", now_mono=1.0, now_wall=NOW_MS / 1000)
    assert seen is not None
    assert (seen.kind, seen.recreated, state.recreated) == (Rewind.NEW_GENERATION, True, False)


def test_a_generation_never_goes_back() -> None:
    state = active(generation=NOW_MS + 5)
    see(state, at(4))
    see(state, at(2))
    assert state.generation == NOW_MS + 6


def test_claims_of_an_older_generation_change_nothing() -> None:
    state = active(generation=3)
    before = (state.received, state.published, state.received_from, state.announced)
    assert (
        generations.take_claims(state, claimed(2, claims("b", 9)), index=None, now_wall=5.0)
        is Taken.SUPERSEDED
    )
    assert (state.received, state.published, state.received_from, state.announced) == before


def test_claims_of_a_newer_generation_replace_those_held_and_have_the_cursor_follow() -> None:
    state = active(generation=3)
    taken = generations.take_claims(state, claimed(4, claims("b", 1)), index=None, now_wall=5.0)
    assert taken is Taken.CHANGED
    assert (state.generation, state.follow, state.received, state.published) == (
        4,
        True,
        claims("b", 1),
        None,
    )
    assert (state.received_from, state.announced) == ({"b": 5.0}, True)


def test_without_following_a_newer_generation_replaces_the_claims_and_what_consumers_acknowledged() -> None:
    """claims_from: acknowledgements (invariant 7): the cursor here stays; what its consumers acknowledged
    before belongs to the old generation and is not claimed again."""
    state = dataclasses.replace(active(generation=3), acked=at(6))
    taken = generations.take_claims(
        state, claimed(4, claims("b", 1)), index=None, now_wall=5.0, follow_rewinds=False
    )
    assert taken is Taken.CHANGED
    assert (state.generation, state.follow, state.received, state.acked) == (4, False, claims("b", 1), None)


def test_claims_of_the_same_generation_merge_and_say_whether_they_told_anything_new() -> None:
    state = Subscription(TOPIC, SUB, generation=3, received=claims("b", 2))
    assert (
        generations.take_claims(state, claimed(3, claims("b", 1)), index=None, now_wall=5.0)
        is Taken.UNCHANGED
    )
    assert generations.take_claims(state, claimed(3, claims("c", 1, 7), "c"), index=None, now_wall=6.0) is (
        Taken.CHANGED
    )
    assert state.received == claims("b", 2).merge(claims("c", 1, 7))
    assert state.received_from == {"b": 5.0, "c": 6.0}


def test_claims_telling_of_acknowledgements_not_made_here_first_make_this_region_passive() -> None:
    index = OriginIndex()
    for entry in range(6):
        index.append(Position(5, entry), Origin("a", Position(5, entry)))
    state = active()
    state.received, state.published = OriginAcks.of({}), claims("a", 2)
    generations.take_claims(state, claimed(3, claims("a", 1)), index=index, now_wall=1.0)
    assert state.active  # they only repeat what this region claimed
    generations.take_claims(state, claimed(3, claims("a", 4)), index=index, now_wall=2.0)
    assert not state.active  # 5:3 and 5:4 were acknowledged there first
