"""Claims made before their sender had heard from the region whose messages they name go out without that
region's incarnation, and a peer that knows it refuses them (``reports.of_known_incarnations``). Found by the
simulator's campaign on 0d5044f (seed 200245, profile ``takeovers``, 20 topics): c's consumer acknowledged b's
first message of t8 0.4 s after the start, before b's first envelope reached c; a refused c's claim, c did
not send it again until its next resync, and t8's consumers, moved to a at 11.4 s, were given it again (an
unexplained duplicate: nothing lost). The agent now resyncs the topics holding such claims as soon as it
learns the region's incarnation (``controlling._resend_untagged``)."""

from __future__ import annotations

from geosync_sim import running, schedules


def test_claims_made_before_a_region_was_heard_of_reach_the_peers_that_know_it() -> None:
    result = running.run(schedules.draw(200245, profile="takeovers", topics=20))
    assert result.failovers > 40
    assert not result.failed, "\n".join(map(str, result.violations))
    assert "unexplained" not in result.duplicates
