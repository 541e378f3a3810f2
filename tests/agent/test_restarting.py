"""A restarted agent's first rounds (fake ports): from the checkpoint's cursors, polls spread, and at once
when it finds no feed."""

from __future__ import annotations

import json

from geosync_adapters import adminhttp
from geosync_agent.core import tuning
from geosync_agent.runtime import Now
from geosync_core.capabilities import Capability
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import Harness, message
from tests.agent.pairs import (
    A_LOG,
    B_LOG,
    SUB,
    TOPIC,
    carry,
    pair,
)


def test_a_restarted_agent_writes_from_the_checkpoints_cursors_and_polls_each_topic_once() -> None:
    """The checkpoint keeps the cursors: a restarted agent's first round plans from them instead of polling
    every topic first (at 10,000 subscriptions 1.2 s of that round), each topic's first poll comes within
    RESTORED_POLL_SPREAD_S, and claims received before its first writes are answered do not make the topics
    due again (plugin writes answer the cursor)."""
    ha, hb = pair()
    hb.region.cursors[(TOPIC, SUB)] = AckState.of(B_LOG[0])  # a consumer in b, before the checkpoint
    hb.region.feed.append(hb.region.report(TOPIC, SUB))
    hb.step()
    state = json.loads(json.dumps(hb.agent.checkpoint()))
    assert state["subscriptions"][0]["cursor"] is not None
    again = Harness.build(hb.region)
    again.messaging.control_positions = dict(hb.messaging.control_positions)  # the same log goes on
    again.agent.restore(state, Now(again.clock, again.clock))
    agent = again.agent
    counters = agent.stats.counters
    assert agent.subs[(TOPIC, SUB)].cursor == AckState.of(B_LOG[0])
    again.step(0.1)  # before discovery's first pass: the feed cannot be read yet
    new = Position(9, len(B_LOG))
    hb.region.topics[TOPIC].append(new)
    again.messaging.deliver(TOPIC, message(TOPIC, new))  # published here meanwhile
    again.step(0.1)
    assert counters.get("cursor_polls", 0) == 0  # new messages make a topic due only without the feed
    again.discover()
    again.step(0.1)
    assert agent.caps.get(Capability.PLUGIN_FEED) is True
    ha.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[3]])
    ha.step()
    assert carry(ha, again)
    again.step(0.1)  # takes the claims and writes them, from the checkpoint's cursor
    again.step(0.1)  # the writes are answered
    assert counters["plugin_acks"] == 1
    assert hb.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[1]).ack(B_LOG[3])
    assert counters.get("cursor_polls", 0) == 0
    again.step(tuning.RESTORED_POLL_SPREAD_S)
    assert counters["cursor_polls"] == 1  # its first poll, within the spread


def test_a_checkpoint_without_cursors_has_every_topic_polled_in_the_first_round() -> None:
    """A checkpoint written before cursors were kept (or one holding none): the first round reads them."""
    _, hb = pair()
    state = json.loads(json.dumps(hb.agent.checkpoint()))
    for item in state["subscriptions"]:
        del item["cursor"]
    again = Harness.build(hb.region)
    again.agent.restore(state, Now(again.clock, again.clock))
    assert again.agent.subs[(TOPIC, SUB)].cursor is None
    again.step()
    assert again.agent.stats.counters["cursor_polls"] == 1


def test_a_restarted_agent_that_finds_no_feed_polls_every_topic_at_once() -> None:
    """The checkpoint's cursors put the first polls off on the understanding that the feed reports what
    consumers acknowledge: found absent (a plugin removed meanwhile), every topic is polled at once."""
    _, hb = pair()
    state = json.loads(json.dumps(hb.agent.checkpoint()))
    again = Harness.build(hb.region)
    again.agent.restore(state, Now(again.clock, again.clock))
    counters = again.agent.stats.counters
    again.step(0.1)
    assert counters.get("cursor_polls", 0) == 0
    hb.region.feed_error = adminhttp.AdminNotFound("404 no geosync plugin")
    again.discover()
    again.step(0.1)
    assert again.agent.caps.get(Capability.PLUGIN_FEED) is False
    assert counters["cursor_polls"] == 1
