"""Regions whose claims are their cursor follow rewinds made elsewhere by design (decision 0015), and what
their consumers acknowledged between the operator's rewind and the following is delivered again there: the
checker records it as the documented limit ``rewind-by-cursor-claims``, not as ``rewind`` (the agent moving
a cursor back over what consumers acknowledged, which fails a run).

Found by the simulator's campaigns (profile ``jumps``): seed 6113 (a, without the plugin, restarted without
its checkpoint, takes c's claims of a generation it had already followed for a newer one and resets its
cursor again over 24 messages its consumers acknowledged since), seeds 6308 and 6362 (a and c, without the
plugin, follow a reset made in another region some seconds after it, over 8 and 45 messages their consumers
acknowledged meanwhile). Nothing is lost in any: a rewind only takes acknowledgements back. Seed 6308 no
longer reaches the limit since agents resync claims made before they heard of a region's incarnation (the
rounds' timing changed); 6113 and 6362 still do.
"""

from __future__ import annotations

import pytest

from geosync_sim import running, schedules
from geosync_sim.checking import Checker

LIMIT = "rewind-by-cursor-claims"


@pytest.mark.parametrize("seed", [6113, 6362])
def test_a_region_without_the_plugin_following_a_rewind_is_the_documented_limit(seed: int) -> None:
    result = running.run(schedules.draw(seed, profile="jumps"), trace=True)
    assert LIMIT in result.kinds()
    assert "rewind" not in result.kinds()
    assert not result.failed, "\n".join(map(str, result.violations))


def test_the_same_rewind_where_claims_are_acknowledgements_is_a_violation() -> None:
    """The limit is only where the claims are the cursor: the checker calls the same move back a violation in
    a region that claims what its consumers acknowledged."""
    result = running.run(schedules.draw(6113, profile="jumps"), trace=True)
    assert any("agent restarted empty" in line for line in result.trace)
    limit = next(v for v in result.violations if v.kind == LIMIT)
    checker = Checker(cursor_claims=set())
    ident = ("c", 11, 12, 0)
    checker.acked(30.0, limit.region, limit.topic, limit.subscription, idents=[ident], cause="consumer")
    checker.rewind(31.0, limit.region, limit.topic, limit.subscription, "agent:reset", idents=[ident])
    assert [v.kind for v in checker.violations] == ["rewind"]
