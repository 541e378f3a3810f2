"""Three campaign findings that were strict expected failures (``unexplained-duplicate``, nothing lost), each
a documented limit the checker did not attribute; no agent fault. 20 topics each.

- seeds 300125 and 5180 of ``drops`` (the campaign on ef16620; helper D's slice 5000-5543 on 631b9be): a
  consumer acknowledged a message (a@22:6#1 of t11 in a at 6.15 s; b@14:23#3 of t3 in b at 28.90 s) less than
  a round before an operator deleted the topic there (6.21 s; 28.97 s). The plugin's feed hands that
  acknowledgement over at the next read (``AckFeed`` keeps its records by topic name: the model dropped them
  with the topic, and keeps them now), but the agent claims the cursor limited to what consumers acknowledged
  (decision 0015), and no cursor shows it any more: nobody claimed it, and the region the consumers moved to
  gave it again (19.70 s; 42.10 s). docs/limits.md (a topic deleted and created again) now says so; the
  checker classes it ``topic-deleted`` from the world's facts: the acknowledgement was still in the plugin's
  feed, unread, when the topic went.
- seed 5542 of ``partitions``: t16 is Key_Shared; a's consumers acknowledged a@44:12#0 (k6) at 26.30 s with
  k6's earlier a@44:11#0 unacknowledged, so a's claim held it back (per-key order), until a's consumers
  acknowledged a@44:11#0 at 42.85 s, 0.7 s before the consumers reached b (43.55 s). a claimed both then, and
  the claims were in flight when b gave a@44:12#0 again (43.60 s; b applied a@44:11#0 at 44.10 s). The checker
  counted the per-key minimum only for an earlier message unacknowledged at the failover; one acknowledged
  less than ``settle_s`` before it holds the later one back as long (``key-order-held``).
"""

from __future__ import annotations

import random

import pytest

from geosync_sim import running, schedules
from geosync_sim.checking import Checker
from geosync_sim.ports import SimAdmin
from geosync_sim.world import Ident, Msg, World


@pytest.mark.parametrize(
    ("seed", "profile", "cause"),
    [
        (300125, "drops", "topic-deleted"),
        (5180, "drops", "topic-deleted"),
        (5542, "partitions", "key-order-held"),
    ],
)
def test_the_campaign_finding_passes_with_its_duplicate_attributed(
    seed: int, profile: str, cause: str
) -> None:
    result = running.run(schedules.draw(seed, profile=profile, topics=20))
    assert not result.violations, "\n".join(map(str, result.violations))
    assert "unexplained" not in result.duplicates
    assert result.duplicates.get(cause, 0) >= 1


def test_the_plugins_feed_hands_over_what_consumers_acknowledged_before_their_topic_was_deleted() -> None:
    """The model: ``AckFeed`` keys its records by topic name and nothing removes them on a deletion, so the
    next read hands them over (in the old topic's positions), and the checker is told which they are."""
    world = World(random.Random(1), ["a", "b"], namespace="geo/sim")
    topic = "persistent://geo/sim/t0"
    world.add_topic(topic)
    world.create_subscription("a", topic, "sub", "Shared", latest=False, cause="setup")
    entry = world.publish("a", topic, (Msg("k0", "a-0-0", 1), Msg("k1", "a-0-0", 2)), batched=True)
    assert entry is not None
    admin = SimAdmin(world, "a")
    admin.plugin_feed(since=0)  # read once: nothing pending
    told: list[tuple[str, str, dict[str, list[Ident]]]] = []
    world.on_topic_deleted = lambda region, t, pending: told.append((region, t, pending))
    s = world.regions["a"].subs[(topic, "sub")]
    world.acked("a", topic, "sub", s.cursor.ack_index(world.regions["a"].topics[topic], 0, 1), "consumer")
    world.delete_topic("a", topic, back_in=1.0)
    assert told == [("a", topic, {"sub": [entry.ident(1)]})]
    feed = admin.plugin_feed(since=1)
    assert feed.acked is not None
    [block] = feed.acked
    assert (block.topic, block.subscription) == (topic, "sub")
    assert [(b.position, b.unacked) for b in block.batches] == [(entry.source, (0,))]
    again = admin.plugin_feed(since=2)
    assert again.acked == ()  # handed over once


def _deleted(*, unread: bool) -> Checker:
    """a's consumer acknowledges m at 6.15 s; a's topic is deleted at 6.21 s, ``unread``: before a's agent
    read that; the consumers reach c at 19.53 s, which gives m again."""
    m: Ident = ("a", 22, 6, 1)
    checker = Checker()
    checker.acked(6.15, "a", "t", "s", idents=[m], cause="consumer")
    if unread:
        checker.deleted_unread("a", "t", "s", [m])
    checker.failover(19.53, "t", "s")
    checker.delivered(19.7, "c", "t", "s", ident=m, msg=Msg("k0", "a-0-11", 1), kind="Exclusive")
    return checker


def test_an_acknowledgement_its_agent_never_read_before_the_topic_was_deleted_is_the_deletions() -> None:
    checker = _deleted(unread=True)
    assert not checker.violations, checker.violations
    assert checker.duplicates == {"topic-deleted": 1}
    read = _deleted(unread=False)  # read before the deletion: the agent should have claimed it
    assert [v.kind for v in read.violations] == ["unexplained-duplicate"]


def test_a_later_message_of_a_key_held_until_just_before_the_failover_is_the_per_key_minimums() -> None:
    """y (after x, same key and origin) acknowledged in a long before the failover, x only ``settle_s`` or
    less before it: y could be claimed only from then on (``key-order-held``); x acknowledged earlier than
    that, y's claim had time to arrive (``unexplained-duplicate``)."""
    x: Ident = ("a", 44, 11, 0)
    y: Ident = ("a", 44, 12, 0)
    m = Msg("k6", "a-0-16", 1)
    for x_acked_at, cause in ((42.85, "key-order-held"), (30.0, "unexplained")):
        checker = Checker()
        checker.delivered(26.3, "a", "t", "s", ident=x, msg=m, kind="Key_Shared")
        checker.delivered(26.3, "a", "t", "s", ident=y, msg=m, kind="Key_Shared")
        checker.acked(26.3, "a", "t", "s", idents=[y], cause="consumer")
        checker.acked(x_acked_at, "a", "t", "s", idents=[x], cause="consumer")
        checker.failover(43.55, "t", "s")
        checker.delivered(43.6, "b", "t", "s", ident=y, msg=m, kind="Key_Shared")
        assert dict(checker.duplicates) == {cause: 1}, x_acked_at
