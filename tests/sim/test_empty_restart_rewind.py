"""An agent restarted without its checkpoint, in a region whose claims are its cursor, follows an old rewind
again (found by the campaign `bench/sim.py --seeds 6001-6450 --profile all` on 2b97a2a: seed 6113, profile
``jumps``).

Regions a and b run without the plugin (their claims are their cursors, so they follow rewinds made
elsewhere by design: decision 0015). An operator resets the subscription in c at 8.35 s; a and b follow. a's
consumers then acknowledge 24 more messages; at 34.75 s a's agent dies and comes back at 36.10 s with no
checkpoint. Knowing no generation, it takes c's claims of the generation it had already followed as a newer
one and resets a's cursor again, over what a's consumers acknowledged since (``rewind``): those messages are
delivered again in a. Nothing is lost (a rewind only takes acknowledgements back); the limits page states it.
The mark flips to a failure the day the path is closed.
"""

from __future__ import annotations

import pytest

from geosync_sim import running, schedules


@pytest.mark.xfail(
    strict=True, reason="issue 45: an empty restart in a cursor-claims region follows an old rewind again"
)
def test_an_agent_restarted_empty_does_not_follow_a_rewind_it_had_followed() -> None:
    result = running.run(schedules.draw(6113, profile="jumps"), trace=True)
    assert any("agent restarted empty" in line for line in result.trace)  # the schedule's crash happened
    found = [str(v) for v in result.violations if v.kind == "rewind"]
    assert not found, "\n".join(found)
