"""Degrade, don't collapse (issue 46.4): a round's steps work within a time budget and resume where they
stopped, and control messages are taken between long steps and during the CPU budget's pause, so that a
loop starved of CPU lags more but neither falls behind without bound nor leaves control messages waiting
behind a long round.

The clock here is a test's (``Now``'s ``clock``): the steps' work is made to take time by advancing it.
Where a round's time stands still (``Now`` without a clock: the other unit tests, the simulator), nothing
is cut, and every step does all its work as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from geosync_agent.core import tuning
from geosync_agent.runtime import Now
from geosync_agent.tailing import Tail
from geosync_core.indexing import OriginRun
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import FakeRegion, Harness, message
from tests.agent.pairs import A_LOG, B_LOG, CONTROL, NS, SUB, TOPIC, carry, pair

TOPICS = [f"persistent://{NS}/t{i}" for i in range(6)]


class Clock:
    """A round's clock that the steps' work moves on (``advance``)."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.spent = 0.0

    def advance(self, seconds: float) -> None:
        self.spent += seconds

    def now(self) -> Now:
        """The harness's time for a round, the work's seconds counted from zero (``Now.since``)."""
        self.spent = 0.0
        return Now(self.harness.clock, self.harness.clock, clock=lambda: self.harness.clock + self.spent)

    def round(self, seconds: float = 1.0) -> None:
        self.harness.clock += seconds
        self.harness.agent.round(self.now())


def region_of_topics(**settings: object) -> Harness:
    """Region a with six topics of one subscription each, three messages in each, read by the agent."""
    region = FakeRegion(
        "a",
        {NS: ["a", "b"]},
        topics={t: [Position(10 + i, e) for e in range(3)] for i, t in enumerate(TOPICS)},
    )
    for i, topic in enumerate(TOPICS):
        region.cursors[(topic, SUB)] = AckState.of(Position(10 + i, -1))
        region.origin_runs[topic] = [OriginRun(10 + i, 0, 3, "a")]
    h = Harness.build(region, **settings)
    h.discover()
    h.step()
    for topic in TOPICS:
        for p in region.topics[topic]:
            h.messaging.deliver(topic, message(topic, p))
    h.step()
    return h


def slowed(
    owner: object, name: str, clock: Clock, seconds: float, calls: list[Any], *, note: str = ""
) -> None:
    """Make ``owner``'s public method ``name`` (the agent's, or the fake region's: what the agent asks of the
    region) take ``seconds`` of the round's clock per call, noting its first argument in ``calls`` (with
    ``note``: ``(note, argument)``)."""
    method: Callable[..., Any] = getattr(owner, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else None
        calls.append((note, first) if note else first)
        clock.advance(seconds)
        return method(*args, **kwargs)

    setattr(owner, name, slow)


def test_control_messages_are_taken_between_a_rounds_long_steps() -> None:
    """A claim that arrives while a step takes long is taken right after it, not at the round's next receive
    step: here it arrives during the feed step (3 s), and it is taken before the polls begin."""
    a, b = pair()
    clock = Clock(b)
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    feed, poll = b.agent.observe_feed, b.agent.poll
    seen_by_polls: list[bool] = []

    def long_feed(now: Now) -> None:
        carry(a, b)  # a's claim comes in while the feed step works
        clock.advance(3.0)
        feed(now)

    def polls(now: Now) -> None:
        seen_by_polls.append(any(not t.inbox.empty() for t in b.agent.controls.values()))
        poll(now)

    b.agent.observe_feed = long_feed  # type: ignore[method-assign]
    b.agent.poll = polls  # type: ignore[method-assign]
    clock.round()
    assert seen_by_polls == [False], "the claim waited behind the polls for the round's next receive step"
    assert "receive between" in b.agent.phase_seconds.report()
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[1]


def test_no_step_is_cut_where_a_rounds_time_stands_still() -> None:
    """``Now`` without a clock (the unit tests' default, the simulator): no budget is ever used up, and no
    control message is taken between steps (nothing arrives during a round there)."""
    h = region_of_topics()
    for topic in TOPICS:
        h.region.consumer_acks(topic, SUB, h.region.topics[topic][:1])
    h.step()
    assert not h.agent.feed_left
    assert not h.agent.polls_left
    assert h.agent.index_from is None
    counters = h.agent.stats.counters
    assert not any(counters[k] for k in ("index_turns_cut", "feed_turns_cut", "poll_turns_cut"))


def test_the_index_step_resumes_where_its_budget_ran_out_and_drains_every_topic_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = region_of_topics()
    clock = Clock(h)
    drained: list[str] = []
    taken = Tail.taken

    def slow_drain(self: Tail, *args: Any, **kwargs: Any) -> Any:
        drained.append(self.topic)
        clock.advance(0.3)
        return taken(self, *args, **kwargs)

    monkeypatch.setattr(Tail, "taken", slow_drain)
    turns: list[list[str]] = []
    for _ in range(3):
        drained.clear()
        clock.round()
        turns.append([t for t in drained if t in TOPICS])
    # 0.3 s a topic, a budget of 0.5 s: two topics a turn, each turn from where the last one stopped
    assert turns == [TOPICS[0:2], TOPICS[2:4], TOPICS[4:6]]
    assert h.agent.stats.counters["index_turns_cut"] == 3


def test_messages_read_while_a_topic_waits_for_its_turn_are_indexed_at_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing a reader handed over is skipped: what waits in a topic's inbox is indexed at its turn."""
    h = region_of_topics()
    clock = Clock(h)
    drain = Tail.drain

    def slow_drain(self: Tail, *args: Any, **kwargs: Any) -> Any:
        clock.advance(0.3)
        return drain(self, *args, **kwargs)

    monkeypatch.setattr(Tail, "drain", slow_drain)
    for i, topic in enumerate(TOPICS):
        more = [Position(10 + i, e) for e in range(3, 6)]
        h.region.topics[topic].extend(more)
        for p in more:
            h.messaging.deliver(topic, message(topic, p))
    for _ in range(3):
        clock.round()
    for i, topic in enumerate(TOPICS):
        assert h.agent.topics[topic].tail.last == Position(10 + i, 5)


def test_the_receive_step_stops_at_its_budget_and_takes_the_rest_in_order_at_its_next_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, b = pair()
    clock = Clock(b)
    taken: list[bytes] = []

    def handle(data: bytes, *, topic: str, now: Now) -> None:
        taken.append(data)
        clock.advance(0.3)

    b.agent.receive(Now(b.clock, b.clock))  # what pair() left there
    monkeypatch.setattr(b.agent, "handle_control", handle)
    for i in range(5):
        b.messaging.deliver(CONTROL, message(CONTROL, Position(78, i), data=b"m%d" % i))
    turns = []
    for _ in range(3):
        now = clock.now()
        b.agent.step_until = now.since() + tuning.STEP_BUDGET_S
        b.agent.receive(now)
        turns.append(list(taken))
        taken.clear()
    assert turns == [[b"m0", b"m1"], [b"m2", b"m3"], [b"m4"]]


def test_the_feed_step_leaves_what_it_did_not_look_at_to_its_next_turn_and_those_topics_polls_wait() -> None:
    """Each topic's look at its cursors costs 0.3 s (the feed step's look, ``outran_tail`` first, and a
    poll's read): a turn of the feed step looks at two, and carries the rest to the next round's turn, first.
    A topic carried is not polled before its report is looked at (the report would then be older than what
    the poll read)."""
    h = region_of_topics()
    clock = Clock(h)
    for topic in TOPICS:
        h.region.consumer_acks(topic, SUB, h.region.topics[topic][:2])
    looks: list[tuple[str, Any]] = []
    slowed(h.agent, "outran_tail", clock, 0.3, looks, note="feed")
    slowed(h.region, "internal_stats", clock, 0.3, looks, note="poll")

    def looked() -> list[tuple[str, str]]:
        return [(how, what if how == "poll" else what.tail.topic) for how, what in looks]

    clock.round()
    fed_first = [t for how, t in looked() if how == "feed"]
    assert fed_first == TOPICS[0:2]
    assert set(h.agent.feed_left) == set(TOPICS[2:])
    for _ in range(3):
        clock.round()
    assert not h.agent.feed_left
    for topic in TOPICS:
        first = next(how for how, t in looked() if t == topic)
        assert first == "feed", f"{topic} was polled before its feed report was looked at"
        assert h.agent.subs[(topic, SUB)].cursor == h.region.cursors[(topic, SUB)]


def test_a_report_left_for_the_next_turn_is_old_news_once_a_write_set_another_cursor() -> None:
    h = region_of_topics()
    clock = Clock(h)
    for topic in TOPICS:
        h.region.consumer_acks(topic, SUB, h.region.topics[topic][:1])
    looks: list[Any] = []
    slowed(h.agent, "outran_tail", clock, 0.3, looks)  # the feed step's look at a topic
    slowed(h.region, "internal_stats", clock, 0.3, looks)  # a poll's
    clock.round()
    last = TOPICS[-1]
    assert last in h.agent.feed_left
    # as a cursor write's answer does (``folding``): the broker's cursor after the write, newer
    h.region.acknowledge(last, SUB, h.region.topics[last][:2])
    h.agent.subs[(last, SUB)].cursor = h.region.cursors[(last, SUB)]
    for _ in range(3):
        clock.round()
    assert h.agent.stats.counters["feed_reports_left_superseded"] == 1
    assert h.agent.subs[(last, SUB)].cursor == h.region.cursors[(last, SUB)]


def test_the_poll_step_resumes_with_the_topics_it_did_not_get_to_and_polls_each_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the plugin every busy topic is due a poll every round: a turn polls what its budget allows,
    and the next begins with those left, so no topic waits more than a few turns."""
    h = region_of_topics(plugin_cursors=False)
    h.region.plugin = False
    clock = Clock(h)
    monkeypatch.setattr(tuning, "POLLS_AT_ONCE", 1)
    polled: list[str] = []
    slowed(h.region, "internal_stats", clock, 0.3, polled)  # what a poll reads of a topic
    for i in range(4):
        for topic in TOPICS:  # new messages keep every topic busy
            p = Position(10 + TOPICS.index(topic), 3 + i)
            h.region.topics[topic].append(p)
            h.messaging.deliver(topic, message(topic, p))
    turns = []
    for _ in range(3):
        polled.clear()
        clock.round()
        turns.append([t for t in polled if t in TOPICS])
    assert all(len(turn) == 2 for turn in turns), turns
    assert sorted(t for turn in turns for t in turn) == sorted(TOPICS), "a topic waited more than 3 turns"


def test_a_control_message_arriving_during_the_cpu_budgets_pause_is_taken_before_it_ends() -> None:
    """The pause after a costly round (``pacing.CpuBudget``) runs no round, but takes control messages as
    they arrive; the round that applies them follows right after it."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    b.agent.receive(b.now())  # what pair() left there
    b.agent.wake.clear()
    taken_at: list[float] = []
    handle = b.agent.handle_control

    def noted(data: bytes, *, topic: str, now: Now) -> None:
        taken_at.append(time.monotonic())
        handle(data, topic=topic, now=now)

    b.agent.handle_control = noted  # type: ignore[method-assign]
    for tail in b.agent.controls.values():
        tail.wake = b.agent.wake  # the reader's hand-over wakes the loop, as in production
    began = time.monotonic()
    threading.Timer(0.1, lambda: carry(a, b)).start()
    b.agent.pause(threading.Event(), 1.5)
    ended = time.monotonic()
    assert len(taken_at) == 1
    assert taken_at[0] - began < 1.0
    assert ended - began >= 1.5  # the pause is kept (lengthened by what taking it cost)
    assert b.agent.wake.is_set()  # the next round comes at once
    assert b.agent.subs[(TOPIC, SUB)].received
