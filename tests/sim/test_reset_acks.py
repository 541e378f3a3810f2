"""A reset takes back what consumers acknowledged before it, not what they acknowledged after it. Found by the
simulator's campaign on 0d5044f (seed 200171, profile ``jumps``, 20 topics): an operator reset b's copy of t8
to the earliest message at 23.8 s while b's consumers were on it, and one of them acknowledged c@19:26#3 at
23.9 s; b's agent read the reset cursor and that acknowledgement in one feed answer, took the rewind and
dropped every acknowledgement it held, that one too, so nobody claimed it, and the consumers moved to c at
34 s were given it again (an unexplained duplicate; nothing lost). What the cursor after a rewind still shows
acknowledged is now kept (``observing._observe``). The unit harness's fake plugin reports no acknowledgement
blocks, so this path is the simulator's (its plugin model reports them)."""

from __future__ import annotations

from geosync_sim import running, schedules


def test_what_consumers_acknowledged_after_a_reset_is_claimed() -> None:
    result = running.run(schedules.draw(200171, profile="jumps", topics=20), trace=True)
    assert any("admin b 8 reset" in line for line in result.trace)
    assert not result.failed, "\n".join(map(str, result.violations))
    assert "unexplained" not in result.duplicates
