"""The pause between the agent's rounds (``geosync_core.pacing.CpuBudget`` and ``round_wait``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_core import pacing

from .strategies import fast


def test_a_cheap_round_is_followed_by_the_least_gap() -> None:
    budget = pacing.CpuBudget()
    assert budget.gap(cpu_s=0.0, started=0.0, ended=0.01) == pacing.ROUND_GAP_S
    assert budget.gap(cpu_s=pacing.ROUND_GAP_S / 4, started=0.1, ended=0.11) == pacing.ROUND_GAP_S


def test_a_round_that_only_worked_is_followed_by_a_pause_as_long_as_its_cpu() -> None:
    budget = pacing.CpuBudget()
    assert budget.gap(cpu_s=0.2, started=9.8, ended=10.0) == pytest.approx(0.2)
    # back to back after its pause: the same again (the loop's thread uses half a core)
    assert budget.gap(cpu_s=0.2, started=10.2, ended=10.4) == pytest.approx(0.2)


def test_one_costly_round_among_cheap_ones_is_not_held_back() -> None:
    budget = pacing.CpuBudget()
    now = 0.0
    for _ in range(20):  # cheap rounds, 0.1 s apart: credit builds up to its cap
        assert budget.gap(cpu_s=0.01, started=now, ended=now + 0.02) == pacing.ROUND_GAP_S
        now += 0.1
    # 0.8 s of CPU in a round of 1.2 s (it waited too): the credit and its own time pay for it
    assert budget.gap(cpu_s=0.8, started=now, ended=now + 1.2) == pacing.ROUND_GAP_S
    assert budget.credit == pytest.approx(pacing.CPU_CREDIT_S + 0.6 - 0.8)
    # and a second one at once pays: the pause repays the debt at the loop's share
    now += 1.2 + pacing.ROUND_GAP_S
    gap = budget.gap(cpu_s=0.8, started=now, ended=now + 0.8)
    assert gap == pytest.approx((0.8 - 0.3 - 0.4 - pacing.ROUND_GAP_S * pacing.CPU_SHARE) / pacing.CPU_SHARE)


@fast
@given(
    st.lists(
        st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=60,
    )
)
def test_the_loop_never_uses_more_than_its_share_and_credit(rounds: list[tuple[float, float, float]]) -> None:
    """Rounds of ``cpu`` CPU-seconds taking ``cpu + waited`` seconds, each followed by its pause and then
    ``idle`` seconds: over any run, the CPU used is at most the share of the time taken (up to the end of
    the last pause) plus the credit's cap."""
    budget = pacing.CpuBudget()
    now = used = 0.0
    for cpu, waited, idle in rounds:
        started, now = now, now + cpu + waited
        used += cpu
        now += budget.gap(cpu_s=cpu, started=started, ended=now)
        assert used <= pacing.CPU_SHARE * now + pacing.CPU_CREDIT_S + 1e-9
        now += idle


def test_the_wait_for_the_next_round_counts_the_gap_already_paused() -> None:
    times = {"feed_interval_s": 0.1, "poll_interval_s": 0.25}
    assert pacing.round_wait(elapsed=0.01, busy=True, gap=0.02, **times) == pytest.approx(0.07)
    assert pacing.round_wait(elapsed=0.01, busy=False, gap=0.02, **times) == pytest.approx(0.22)
    assert pacing.round_wait(elapsed=0.01, busy=True, gap=0.2, **times) == 0.0  # the gap was longer already


@pytest.mark.parametrize("feed", [True, False])
def test_idle_topics_polled_together_come_due_apart_and_busy_ones_every_round(feed: bool) -> None:
    """After a start every topic is polled in the first round: spread, their next polls fall over half of
    what backing off added, and none comes later than without the spread. A busy topic is due every round."""

    def after(spread: float = 0.0, pending_move: bool = False) -> pacing.PollState:
        return pacing.after_poll(
            pacing.PollState(interval=20.0),
            now=100.0,
            base_s=10.0,
            feed=feed,
            changed=False,
            pending_move=pending_move,
            consumers=False,
            spread=spread,
        )

    dues = [after(s / 10).next_at for s in range(10)]
    latest = after()
    assert max(dues) == latest.next_at
    assert max(dues) - min(dues) == pytest.approx(0.9 * (latest.interval - 10.0) / 2)
    assert min(dues) >= 100.0 + 10.0 / 2  # never earlier than a busy topic
    busy = after(0.99, pending_move=True)
    assert busy.next_at == pytest.approx(100.0 + 10.0 / 2)
