"""Findings of the simulator's campaigns not understood yet, kept as strict expected failures so that they
stay in sight and a fix shows (the test then passes and must be turned into a plain one). Each is an
unexplained duplicate: a message acknowledged in one region delivered again after a failover to another;
nothing lost.

- seed 5180, profile ``drops``, 20 topics: b's consumer acknowledged b@14:23#3 of t3 (Shared) at 28.90 s, b's
  topic was deleted at 28.97 s, and a gave the message again at 42.10 s: probably acknowledged too shortly
  before the deletion for b's agent to claim it (found by helper D's slice 5000-5543 on 631b9be).
- seed 5542, profile ``partitions``, 20 topics: a's consumer acknowledged a@44:12#0 of t16-partition-0 at
  26.30 s, and b gave it again at 43.60 s (same slice).
- seed 300125, profile ``drops``, 20 topics: a's consumer acknowledged a@22:6#1 of t11 at 6.15 s, and c gave
  it again at 19.70 s (the same campaign).
"""

from __future__ import annotations

import pytest

from geosync_sim import running, schedules


@pytest.mark.xfail(strict=True, reason="issue 45: open finding, an unexplained duplicate (nothing lost)")
@pytest.mark.parametrize(("seed", "profile"), [(5180, "drops"), (5542, "partitions"), (300125, "drops")])
def test_campaign_findings_not_understood_yet(seed: int, profile: str) -> None:
    result = running.run(schedules.draw(seed, profile=profile, topics=20))
    assert not result.failed, "\n".join(map(str, result.violations))
