"""A rebuilt region's claims and Key_Shared order (found by the campaign `bench/sim.py --seeds 5001-5450
--profile all` on 8c50dc4: seed 5043, profile ``rebuilds``; seed 5430 is the same path with b rebuilt).

Region a is wiped and rebuilt while messages c published had reached the old a but not its consumers (c's
batch c@14:14 at 19.9 s, a wiped at 20.4 s). The new a never receives them (what the old life had received
is not replicated again), so its Key_Shared consumers acknowledge c's later messages of the same keys
(c@14:18#0 and #1, keys k2 and k3, at 25.5 s); a's claims are key-ordered over a's own log, which lacks the
earlier ones, and b applied them (29.85 s). After the failover to b (34.8 s), b gave c@14:14#3 and #4 for
the first time while its cursor held the later c@14:18#0 and #1: invariant 6 broken (``key-order``), nothing
lost.

Closed by keeping per-key order where claims are applied too (``keyorder.key_ordered_plan``): b leaves c's
later k2 and k3 unacknowledged while the earlier ones are, and gives them again after them (duplicates,
classed ``in-flight`` or ``key-order-held``). b learns the subscription is Key_Shared from the claims
themselves (``"key_shared": true`` in the ack-state): nobody consumed it in b before the failover, and a
broker reports a subscription's type only once a consumer connected (the model does so since 631b9be; it
reported the type everywhere before, which hid that need). Each part is needed: with the guard but claims
that do not say Key_Shared, or claims that say it and no guard, both seeds fail as before.
"""

from __future__ import annotations

import random

import pytest

from geosync_sim import running, schedules
from geosync_sim.apps import Apps
from geosync_sim.checking import Checker
from geosync_sim.ports import SimAdmin
from geosync_sim.world import Ident, Msg, World


@pytest.mark.parametrize("seed", [5043, 5430])
def test_a_rebuilt_region_missing_earlier_messages_keeps_key_order_in_its_peers(seed: int) -> None:
    result = running.run(schedules.draw(seed, profile="rebuilds"))
    assert result.failovers  # the schedule ran its moves
    assert not result.violations, "\n".join(map(str, result.violations))


def test_a_region_where_nobody_consumed_does_not_know_the_subscription_type() -> None:
    """The model: the stats report a subscription's type once a consumer connected (the broker makes its
    dispatcher then), ``None`` before; a region the subscription was never consumed in cannot tell it is
    Key_Shared. The sim reported the type everywhere, which hid that peers need the claims to say it."""
    world = World(random.Random(1), ["a", "b"], namespace="geo/sim")
    topic = "persistent://geo/sim/t0"
    world.add_topic(topic)
    apps = Apps(world, random.Random(1), on_delivered=lambda *_, **__: None)
    apps.add(topic, "sub", "Key_Shared", "a")
    types = {r: SimAdmin(world, r).topic_stats(topic)["subscriptions"]["sub"]["type"] for r in ("a", "b")}
    assert types == {"a": "Key_Shared", "b": "None"}


def test_a_later_message_given_again_behind_an_earlier_one_never_given_is_held_by_key_order() -> None:
    """The checker: y (after x, same key and origin) was given and acknowledged in a long before the failover
    (a rebuilt a never had x); b gives x for the first time, then y again. y's duplicate is the per-key
    minimum's (``key-order-held``), whichever of the two was given first."""
    x: Ident = ("c", 14, 14, 3)
    y: Ident = ("c", 14, 18, 0)
    m = Msg("k2", "c-0-0", 1)
    checker = Checker(cursor_has=lambda *_: False)
    checker.delivered(1.0, "a", "t", "s", ident=y, msg=m, kind="Key_Shared")
    checker.acked(1.5, "a", "t", "s", idents=[y], cause="consumer")
    checker.failover(20.0, "t", "s")
    checker.delivered(21.0, "b", "t", "s", ident=x, msg=m, kind="Key_Shared")
    checker.delivered(21.5, "b", "t", "s", ident=y, msg=m, kind="Key_Shared")
    assert not checker.violations, checker.violations
    assert checker.duplicates == {"key-order-held": 1}
