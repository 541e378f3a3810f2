"""An agent killed (-9) and started again resumes from its checkpoint (issue 12.3), on the shared lab.

It neither re-reads retained history nor loses the claims that arrived while it was down: a failover right
after the restart is exact.
"""

from __future__ import annotations

import random
import time

from geosync_lab import labs
from integration_tests.helpers import Lab, ack_some, consume_all, produce_batched, wait_for
from integration_tests.helpers import agent_state as _state

RETAINED = 3000


def _backlog(lab: Lab, region: str, topic: str, sub: str) -> int:
    stats = lab.admin(region).topic_stats(topic)
    return int(((stats.get("subscriptions") or {}).get(sub) or {}).get("msgBacklog", -1))


def _messages_in(lab: Lab, region: str, topic: str) -> int:
    return int(lab.admin(region).topic_stats(topic).get("msgInCounter", -1))


def test_an_agent_killed_and_restarted_resumes_from_its_checkpoint(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/restart-{unique}", f"restart-{unique}"
    payloads = [f"m{i}" for i in range(RETAINED)]
    for region in ("a", "b"):
        lab.admin(region).create_subscription(topic, sub)
    produce_batched(lab.service_url("a"), topic, payloads, batch=1000)
    wait_for(
        lambda: (
            _messages_in(lab, "b", topic) == RETAINED
            and topic in {s["topic"] for s in _state(lab, "b")["synced"]}
        ),
        timeout_s=60,
        what="b to hold the messages and its agent to track the topic",
    )
    wait_for(
        lambda: (_state(lab, "b")["checkpoint"] or {}).get("at", 0) > time.time() - 1.5,
        timeout_s=30,
        what="a fresh checkpoint in b",
    )
    time.sleep(2.5)  # one more checkpoint after the topic was read to its end
    labs.stop_agent(lab.dir, "b", kill=True)

    # While b's agent is down:
    acked = ack_some(lab.service_url("a"), topic, sub, total=RETAINED, share=0.9, rng=random.Random(unique))

    started = time.monotonic()
    labs.start_agent(lab.dir, "b")
    labs.wait_agent_ready(lab.dir, "b", timeout_s=120)
    state = _state(lab, "b")
    assert state["counters"].get("checkpoint_restored") == 1, state["counters"]
    # Resumed, not rebuilt (readers start at the last entry read: its batch is read again, nothing before).
    assert "checkpoint_topics_rebuilt" not in state["counters"], state["counters"]
    expected = sorted(set(payloads) - acked)
    wait_for(
        lambda: (
            not any(
                s["topic"] == topic and (s["behind_since"] or s["unapplied_batch_messages"])
                for s in _state(lab, "b")["synced"]
            )
            # Entries with an unacknowledged message: the same in both regions once b applied a's claims.
            and _backlog(lab, "b", topic, sub) == _backlog(lab, "a", topic, sub)
        ),
        timeout_s=60,
        what="b's agent to apply what a acknowledged while it was down",
    )
    print(
        f"restart to in step: {time.monotonic() - started:.1f} s; "
        f"messages read after restart: {state['messages_read']}"
    )
    time.sleep(2)  # sync given 2 s, as every quiescent failover
    got = consume_all(lab.service_url("b"), topic, sub)
    assert sorted(got) == expected
