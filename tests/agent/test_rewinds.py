"""Rewinds through the agents' rounds (fake ports): followed from the active region, not propagated from a
passive one, and never undone by a report from before them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosync_adapters import adminhttp
from geosync_core import ackstates, pacing, pluginapi
from geosync_core.indexing import OriginRun
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range, RangeSet
from tests.agent.fakes import Harness, message
from tests.agent.pairs import (
    A_LOG,
    B_LOG,
    CONTROL,
    SUB,
    TOPIC,
    carry,
    deliver_b_copies,
    pair,
    sealed,
)


def test_a_rewind_in_the_active_region_is_followed_and_older_claims_are_dropped() -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[2], A_LOG[4]])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2]).ack(B_LOG[4])
    old_claims = b.agent.subs[(TOPIC, SUB)].received
    # A user resets a's cursor to just after 5:0 (reset-cursor), and a consumer acknowledges 5:3 after it.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[0])
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[3]])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    generation = a.agent.subs[(TOPIC, SUB)].generation
    assert generation > 0
    # a had forgotten the entries below 5:2 (every subscription had acknowledged them): it reads them again
    # before it claims from the rewound cursor.
    a.step()
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    assert a.agent.stats.counters["topics_reread"] == 1
    carry(a, b)
    b.step()  # b follows: its cursor acknowledges more than the new claims, so it is rewound
    assert ("reset", TOPIC, SUB, (B_LOG[0].ledger, B_LOG[0].entry)) in b.region.calls
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0]).ack(B_LOG[3])
    assert b.agent.subs[(TOPIC, SUB)].generation == generation
    # b's agent rewound its copy itself: no new generation from b, and b's resync (the new claims) and an
    # envelope of the earlier generation change nothing in a.
    b.step(60.0)
    assert b.agent.stats.counters["rewinds"] == 0
    carry(b, a)
    stale = ackstates.AckStateMessage(TOPIC, SUB, "b", old_claims)
    a.messaging.deliver(CONTROL, message(CONTROL, Position(78, 0), data=sealed("b", [stale], seq=2**61)))
    for _ in range(3):
        a.step()
    assert a.agent.stats.counters["claims_superseded"] >= 1
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[0]).ack(A_LOG[3])


def test_a_rewind_in_a_passive_region_is_not_propagated() -> None:
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])
    b.region.cursors[(TOPIC, SUB)] = AckState.of(Position(9, -1))  # someone resets b's copy
    b.step(60.0)  # a resync polls it (the write that lands first is not judged: see judges_rewinds)
    assert b.agent.stats.counters["rewinds"] == 0
    carry(b, a)
    a.step()
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[2])
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])  # a's claims move the copy forward again


def test_what_a_consumer_acknowledged_before_the_tail_read_it_is_claimed_not_forgotten() -> None:
    """A consumer quicker than its agent: a acknowledges entries its tail has not read yet. The tail must not
    forget them (every subscription is past them) before they are claimed, or b never acknowledges them and
    a failover there delivers them again (found by the lab's exact-sync tests, one run in three)."""
    ha, hb = pair(a_reads=False)
    a, b = ha.region, hb.region
    a.consumer_acks(TOPIC, SUB, [*A_LOG[:3], A_LOG[4]])
    ha.step()  # a's tail has read nothing yet: nothing can be claimed
    for p in A_LOG[:4]:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    a.feed.append(a.report(TOPIC, SUB))  # the feed names the cursor again, unchanged
    ha.step()
    for p in A_LOG[4:]:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    ha.step()
    carry(ha, hb)
    hb.step()
    hb.step()
    assert b.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2]).ack(B_LOG[4])
    # once claimed, a forgets them (its only subscription is past them), at its next look at the cursors:
    # the feed names this one unchanged (a repeat, passed over), so the safety poll
    a.feed.append(a.report(TOPIC, SUB))
    ha.step(pacing.FEED_SAFETY_POLL_S)
    assert ha.agent.topics[TOPIC].tail.index.first == A_LOG[3]


def test_a_rewind_that_moves_the_mark_delete_forward_reads_forgotten_entries_again_before_claiming() -> None:
    """A reset-cursor in a to just after 5:2, where a's cursor stood at 5:1 with 5:3 and 5:4 acknowledged:
    the mark-delete moves forward but 5:3 and 5:4 are taken back (a rewind). The new claims are the cursor's
    whole translation, so a reads again the entries it forgot (up to 5:1) before claiming: b ends with
    exactly 5:0-5:2 acknowledged (found by the lab's rewind test, one run in two)."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3], A_LOG[4]])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[3], B_LOG[4])
    a.region.feed.append(a.region.report(TOPIC, SUB))
    a.step()
    assert a.agent.topics[TOPIC].tail.index.first == A_LOG[2]  # a forgot what every subscription acknowledged
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[2])
    a.region.consumer_acks(TOPIC, SUB, [])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    assert carry(a, b) == 0  # nothing claimed from the forgotten tail
    a.step()
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    assert a.agent.stats.counters["topics_reread"] == 1
    carry(a, b)
    for _ in range(3):
        b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])


def test_a_feed_report_from_before_the_agents_own_rewind_is_not_taken_after_it() -> None:
    """A report the feed gave before b's agent rewound its copy waits for the tail (it names a batch not read
    yet); taken after the rewind, it would show the cursor as it was, and b would claim again, under the new
    generation, what a's user took back."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:5])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[4])
    b.region.feed.append(b.region.report(TOPIC, SUB))  # the feed has spoken once (a read from 0 is special)
    b.step()
    # b's cursor as the feed reports it now, naming a batch at 9:7 that b's reader has not reached.
    ahead = (pluginapi.BatchState(Position(9, 7), (1,)),)
    pending = pluginapi.CursorReport(TOPIC, SUB, B_LOG[4], "[]", ahead)
    b.region.feed.append(pending)
    b.step()
    assert (TOPIC, SUB) in b.agent.unobserved
    # a's user rewinds a to its first entry; b follows.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[0])
    a.region.consumer_acks(TOPIC, SUB, [])
    a.step()
    assert a.agent.stats.counters["rewinds"] == 1
    a.step()
    for p in A_LOG:
        a.messaging.deliver(TOPIC, message(TOPIC, p))
    a.step()
    carry(a, b)
    b.step()
    b.step()  # b forgot the entries every subscription had acknowledged: it reads them again first
    deliver_b_copies(b)
    b.step()
    b.step()
    assert ("reset", TOPIC, SUB, (B_LOG[0].ledger, B_LOG[0].entry)) in b.region.calls
    assert (TOPIC, SUB) not in b.agent.unobserved  # the report from before the rewind is dropped
    # b's reader reaches 9:7 (two messages published in b).
    b.region.topics[TOPIC] += [Position(9, 6), Position(9, 7)]
    b.region.origin_runs[TOPIC].append(OriginRun(9, 6, 2, "b"))
    for p in (Position(9, 6), Position(9, 7)):
        b.messaging.deliver(TOPIC, message(TOPIC, p, batch_index=0, batch_size=2))
        b.messaging.deliver(TOPIC, message(TOPIC, p, batch_index=1, batch_size=2))
    for _ in range(3):
        b.step()
        carry(b, a)
        a.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[0])
    assert a.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[0])


def test_a_cursor_a_restarted_broker_shows_without_its_last_acknowledgements_is_no_rewind() -> None:
    """A broker killed before it persisted its cursor comes back without the last acknowledgements. A poll
    in a round whose feed read failed (the plugin not answering yet) saw that as a rewind in the region
    where the subscription is consumed: a new generation dropped the claims, the others did not follow it
    (claims made of acknowledgements), and a failover into that region was never judged safe again (lab
    chaos seed 90304). Such a poll is not judged; the feed's new epoch, read next, says what it was."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])
    a.step()
    carry(a, b)
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[1])  # the restarted broker lost 5:3
    a.region.feed_error = adminhttp.AdminTemporary("the plugin is not answering yet")
    a.step(60.0)  # a resync polls the cursor; the feed read failed
    assert a.agent.stats.counters["cursor_polls"] >= 1
    assert a.agent.stats.counters["rewinds"] == 0


def test_a_report_of_the_brokers_earlier_run_still_waiting_is_dropped_at_its_restart() -> None:
    """A feed report held back (its publish paused) shows the cursor as the broker had it before it died.
    Taken after the restart, it made the restarted broker's next report look like a rewind (chaos seed
    90304 again, once polls were no longer judged in such a round)."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:2])
    a.step()
    carry(a, b)
    state = a.agent.subs[(TOPIC, SUB)]
    state.publish_after = a.now().mono + 3600.0  # its publish is paused: the next report waits
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[3]])
    a.step(0.01)
    assert a.agent.stats.counters["feed_reports_deferred"] == 1
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[1])  # the broker restarted and lost 5:3
    real = a.region.plugin_feed
    a.region.plugin_feed = lambda *, since, epoch="", acked=True: replace(  # type: ignore[method-assign]
        real(since=since, epoch=epoch, acked=acked), epoch="epoch-2"
    )
    state.publish_after = 0.0
    a.step(0.01)  # the restart seen
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[4]])  # the new run's first report
    a.step(0.01)
    assert a.agent.stats.counters["rewinds"] == 0


@pytest.mark.parametrize("plugin", [True, False])
def test_a_rewind_taken_before_the_feed_answers_is_followed_only_where_claims_are_the_cursor(
    plugin: bool,
) -> None:
    """With claims made of what consumers acknowledged (the default), a rewind in another region is not
    followed: the cursor here stays (decision 0015). An agent back from a restart knows whether its feed
    carries acknowledgements only once the feed answers; claims of a newer generation taken before that
    (the control topic read in its first round, the broker busy) rewound the cursor here all the same (lab
    chaos seed 93910 on b7ca85e: c's agent, back from its kill, logged 'following it' 0.6 s after it started,
    then 'rewound ... to None, as another region did'). Now it waits for the answer; without the plugin
    (claims are the cursor's) it follows then."""
    a, b = pair()
    a.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    a.step()
    carry(a, b)
    b.step()
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])
    real = b.region.plugin_feed
    b.region.plugin_feed = lambda *, since, epoch="", acked=True: replace(  # type: ignore[method-assign]
        real(since=since, epoch=epoch, acked=acked), acked=()
    )  # the plugin reports what consumers acknowledged: claims are made of it
    b.region.feed_error = adminhttp.AdminError("the broker is busy")
    restarted = Harness.build(b.region)
    restarted.discover()
    restarted.step()  # its readers open; the feed does not answer
    newer = ackstates.AckStateMessage(TOPIC, SUB, "a", OriginAcks.of({"a": [Span(5, 0, 0)]}), 2**40)
    data = sealed("a", [newer], seq=2**61)
    restarted.messaging.deliver(CONTROL, message(CONTROL, Position(78, 0), data=data))
    deliver_b_copies(restarted)
    restarted.step()
    restarted.step()
    assert restarted.agent.subs[(TOPIC, SUB)].generation == 2**40
    assert restarted.agent.stats.counters.get("cursors_rewound", 0) == 0  # nothing done before it is known
    assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])
    assert restarted.agent.stats.counters["rewinds_deferred"] == 1
    b.region.feed_error = None if plugin else adminhttp.AdminNotFound("no plugin")
    for _ in range(3):
        restarted.step()
    if plugin:
        assert restarted.agent.claims_acknowledgements()
        assert restarted.agent.stats.counters["rewinds_not_followed"] == 1
        assert restarted.agent.stats.counters.get("cursors_rewound", 0) == 0
        assert b.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])  # not rewound
        assert not restarted.agent.subs[(TOPIC, SUB)].follow
    else:
        assert not restarted.agent.claims_acknowledgements()
        assert restarted.agent.stats.counters["cursors_rewound"] == 1
        assert ("reset", TOPIC, SUB, (B_LOG[0].ledger, B_LOG[0].entry)) in b.region.calls


def test_the_cursor_held_from_before_a_broker_restart_is_not_taken_as_the_new_runs_view() -> None:
    """The feed's first answer after a broker restart carries what consumers acknowledged since (``acked``)
    but no report of the cursor (it waits for the tail or a publish pause): the agent had its held cursor,
    from before the restart, looked at again with them, as if the feed had reported it. The restart had
    just cleared what was seen; the held cursor became it, with the acknowledgements the broker lost in its
    crash, and the poll the restart asked for, in the same round, lacked them: a new generation in the
    region where the subscription is consumed, the other regions' claims dropped, and a final move out of
    it never judged safe (lab chaos seed 29869 on b7ca85e, twice: 'rewound from 92:585 to 92:2124' 2.6 s
    after b's broker came back, the first feed answer of its new run 0.2 s before)."""
    a, _ = pair()
    epoch = ["epoch-1"]
    acked: list[pluginapi.AckedSet] = []
    real = a.region.plugin_feed

    def feed(*, since: int, epoch_: str = "", acked_: bool = True) -> pluginapi.Feed:
        answer = real(since=since, epoch=epoch_, acked=acked_)
        blocks, acked[:] = tuple(acked), []
        return replace(answer, epoch=epoch[0], acked=blocks)

    a.region.plugin_feed = lambda *, since, epoch="", acked=True: feed(  # type: ignore[method-assign]
        since=since, epoch_=epoch, acked_=acked
    )
    a.step()  # the feed answers with acknowledgements: claims are made of them
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])
    acked.append(pluginapi.AckedSet(TOPIC, SUB, RangeSet.of([Range(Position(5, -1), A_LOG[1])])))
    acked.append(pluginapi.AckedSet(TOPIC, SUB, RangeSet.of([Range.single(A_LOG[3])])))
    a.step()
    state = a.agent.subs[(TOPIC, SUB)]
    assert state.active
    assert state.cursor == AckState.of(A_LOG[1]).ack(A_LOG[3])
    generation = state.generation
    # The broker is killed before it persisted 5:3 and comes back (a new epoch); a consumer acknowledges
    # 5:2 again (re-delivered) before the feed's first answer, which names no cursor of it.
    epoch[0] = "epoch-2"
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[2])
    acked.append(pluginapi.AckedSet(TOPIC, SUB, RangeSet.of([Range.single(A_LOG[2])])))
    a.step(0.01)
    assert a.agent.stats.counters["cursor_polls"] >= 1
    assert a.agent.stats.counters["rewinds"] == 0
    assert state.generation == generation


def test_a_poll_read_while_the_mark_delete_moved_is_read_again_before_it_is_judged() -> None:
    """Pulsar's ``internalStats`` reads a cursor's mark-delete, then its ranges, not under one lock: read
    while a consumer's acknowledgement of a hole moves the mark-delete on, it shows the old mark-delete with
    only the ranges above the new one. That lacks entries acknowledged all along; judged at once, it was a
    rewind nobody made (lab chaos seed 93910 on b7ca85e: 'rewound from 167:3 to 167:3' on a poll 0.1 s after
    b's Key_Shared consumer subscribed, b's internalStats 1,446 bytes shorter than 0.7 s before). It is read
    again in the next round; a real rewind still shows then."""
    a, _ = pair()
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2], A_LOG[3], A_LOG[5]])
    a.step()
    state = a.agent.subs[(TOPIC, SUB)]
    assert state.active
    generation = state.generation
    # 5:1 acknowledged: the mark-delete moves from 5:0 to 5:3; the poll read the mark-delete before it.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[0]).ack(A_LOG[5])
    a.step(60.0)  # a resync polls
    assert a.agent.stats.counters["rewinds"] == 0
    assert a.agent.stats.counters["polls_unconfirmed"] == 1
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[3]).ack(A_LOG[5])
    polls = a.agent.stats.counters["cursor_polls"]
    a.step(0.01)
    assert a.agent.stats.counters["cursor_polls"] > polls  # read again at once
    assert a.agent.stats.counters["rewinds"] == 0
    assert state.generation == generation
    assert state.cursor == AckState.of(A_LOG[3]).ack(A_LOG[5])
    # A reset-cursor shows in the next poll too: judged then.
    a.region.cursors[(TOPIC, SUB)] = AckState.of(A_LOG[1])
    a.step(60.0)
    a.step(0.01)
    assert a.agent.stats.counters["rewinds"] == 1
    assert state.generation > generation
