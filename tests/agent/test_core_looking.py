"""A look's cursors through the core's entry (``core.stepping.step`` with ``CursorsRead``, round step 2):
which are taken, which rewinds are judged, doubted or taken, from values only (a ``LogView`` fed messages,
``Subscription``s in a ``SubsTable``): events in, values out. One test per invariant ``core.looking``
states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from geosync_agent.core import generations, stepping
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import Feed, Subscription, SubsTable
from geosync_core.batches import BatchAcks
from geosync_core.origins import OriginAcks
from geosync_core.pacing import PollState
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .test_core_planning import SUB, TOPIC, Topic, copies


@dataclass
class State:
    """The agent's state as a look reads it (``looking.Looking``)."""

    topics: dict[str, Topic] = field(default_factory=lambda: {TOPIC: Topic(copies(6))})
    subs: SubsTable = field(default_factory=SubsTable)
    feed: Feed = field(default_factory=Feed)


def world(*subs: Subscription) -> State:
    state = State()
    for sub in subs:
        state.subs[sub.key] = sub
    return state


def at(md: int) -> AckState:
    return AckState.of(Position(9, md))


def look(
    state: State,
    md: int | AckState,
    *,
    polled: bool = False,
    reloaded: bool = False,
    mono: float = 100.0,
) -> stepping.Looked:
    cursor = at(md) if isinstance(md, int) else md
    event = stepping.CursorsRead(
        TOPIC,
        {SUB: cursor},
        list(state.subs.values()),
        polled=polled,
        reloaded=reloaded,
        judged=True,
        acknowledgements=False,
    )
    return stepping.step(state, event, Now(mono, 1_000.0 + mono))


def test_a_cursor_that_moved_is_taken_and_the_same_value_read_again_keeps_its_object() -> None:
    sub = Subscription(TOPIC, SUB, kind="Shared")
    state = world(sub)
    looked = look(state, 3)
    assert (looked.moved, looked.changed, looked.reported) == ([sub], True, [sub])
    assert sub.cursor == at(3)
    held = sub.cursor
    again = look(state, 3, polled=True)
    assert (again.moved, again.changed) == ([], False)
    assert sub.cursor is held
    assert not looked.learn_kinds


def test_a_subscription_of_unknown_type_that_moved_is_to_have_it_learned_first() -> None:
    assert look(world(Subscription(TOPIC, SUB)), 3).learn_kinds


def test_a_rewind_shown_by_a_poll_alone_is_doubted_then_taken_at_the_second() -> None:
    sub = Subscription(TOPIC, SUB, kind="Shared")
    sub.active = True
    state = world(sub)
    look(state, 5, polled=True)
    first = look(state, 2, polled=True, mono=101.0)
    assert (first.doubted, first.moved) == (True, [])
    assert first.out.counts["polls_unconfirmed"] == 1
    assert isinstance(first.out.notices[0], generations.Unconfirmed)
    assert sub.cursor == at(5)  # not taken
    generation = sub.generation
    second = look(state, 2, polled=True, mono=102.0)
    assert (second.doubted, second.moved) == (False, [sub])
    assert sub.generation > generation
    assert second.out.counts["rewinds"] == 1
    (notice,) = second.out.notices
    assert isinstance(notice, generations.RewindTaken)
    assert notice.generation == sub.generation


def test_a_rewind_taken_has_a_tail_that_forgot_what_the_cursor_acknowledges_read_again() -> None:
    sub = Subscription(TOPIC, SUB, kind="Shared")
    sub.active = True
    state = world(sub)
    look(state, 5)
    state.topics[TOPIC].tail.forget_up_to(Position(9, 1))
    look(state, 0, mono=101.0)  # the feed's report is believed at once
    assert state.topics[TOPIC].tail.stale
    assert "rewound" in state.topics[TOPIC].tail.stale_reason


def test_a_poll_keeps_the_partly_acknowledged_batches_held_unless_the_topic_was_reloaded() -> None:
    batched = AckState.of(Position(9, 2)).ack_batches(((Position(9, 3), BatchAcks.of(4, [1])),))
    sub = Subscription(TOPIC, SUB, kind="Shared")
    state = world(sub)
    look(state, batched)  # the feed saw the batch indexes
    look(state, 2, polled=True, mono=101.0)  # a poll cannot
    assert sub.cursor is not None
    assert sub.cursor.batch(Position(9, 3)) == BatchAcks.of(4, [1])
    sub.planned = (None, 0, OriginAcks.of({}))
    reloaded = look(state, 2, polled=True, reloaded=True, mono=102.0)
    assert sub.cursor == at(2)
    assert reloaded.moved == [sub]
    assert sub.planned is None  # planned again: the broker may have forgotten them


@dataclass
class PolledTopic(Topic):
    poll: PollState = field(default_factory=PollState)


@dataclass
class PollSettings:
    poll_interval_s: float = 5.0


@dataclass
class PollingState:
    """The agent's state as a poll's end reads it (``looking.Polling``)."""

    topics: dict[str, PolledTopic]
    config: PollSettings = field(default_factory=PollSettings)


def polled(
    sub: Subscription, *, doubted: bool = False, changed: bool = False, mono: float = 100.0
) -> PolledTopic:
    topic = PolledTopic(copies(6))
    event = stepping.Polled(TOPIC, [sub], changed=changed, doubted=doubted, feed=False, spread=0.5)
    stepping.step(PollingState({TOPIC: topic}), event, Now(mono, 1_000.0 + mono))
    return topic


def test_after_a_poll_the_next_is_paced_brought_forward_to_a_pause_end_or_to_a_doubt() -> None:
    sub = Subscription(TOPIC, SUB, cursor=at(3))
    paced = polled(sub).poll.next_at
    assert paced > 100.0
    assert polled(sub, doubted=True).poll.next_at == 100.0  # read again next round
    sub.publish_after = 100.5  # its claim waits for the pause to end, and differs from what was sent
    assert polled(sub).poll.next_at == min(paced, 100.5)
