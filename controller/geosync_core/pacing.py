"""When the agent works: round waits, cursor-poll backoff, resync phases and the mark-delete move gate.

These are the agent's timing decisions as pure functions of what it knows and the time it read (``now``,
monotonic seconds), so they can be tested as tables.

* Rounds run every ``poll_interval_s``, every ``feed_interval_s`` while the broker plugin's feed reports
  acknowledgements (and for ``ACTIVE_FEED_S`` after), at least ``ROUND_GAP_S`` apart, and the loop's thread
  uses at most ``CPU_SHARE`` of a core over time (``CpuBudget``).
* A topic's cursors are polled every round while busy (new messages in the last ``ACTIVE_WINDOW_S``, a
  cursor moved, a mark-delete move pending); otherwise the interval doubles up to a cap: ``MAX_IDLE_POLL_S``
  with consumers, ``UNCONSUMED_POLL_S`` without (only admin operations move those cursors), and
  ``FEED_SAFETY_POLL_S`` with the feed (which reports consumers' acknowledgements itself).
* Each topic is republished in full every resync period at its own phase, so resyncs spread out.
* Mark-delete moves through the admin API (``expireMessages``, which costs the broker a read) go at most one
  in flight per subscription, at most one per ``min_apply_interval_s``; a move not seen done within
  ``MOVE_SETTLE_S`` is retried.

Invariants: an interval never exceeds its cap nor falls below the base interval; a busy topic is due every
round; the gate never admits two moves to different targets less than ``min_apply_interval_s`` apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from geosync_core.positions import Position

MAX_IDLE_POLL_S = 2.0
UNCONSUMED_POLL_S = 5.0
FEED_SAFETY_POLL_S = 30.0
ACTIVE_WINDOW_S = 10.0
"""After new messages, a topic's cursors are polled every round for this long before backing off."""
ACTIVE_FEED_S = 2.0
"""After the feed reported acknowledgements, rounds run every feed_interval_s for this long."""
ROUND_GAP_S = 0.02
"""Least pause between rounds, so a burst of control messages is taken in one round."""
CPU_SHARE = 0.5
"""The share of one core the loop's thread may use over time (``CpuBudget``). A round's fixed part grows
with the subscriptions (at 10,000, 10-15 ms of going over them); woken by every control message, rounds
without a pause ran back to back, used whatever CPU the brokers left and took it from them, with little to
do each. Paced, more acknowledgements go into each round instead: the same work in fewer rounds."""
CPU_CREDIT_S = 0.5
"""The CPU-seconds a loop that used less than its share may use at once beyond it (``CpuBudget``)."""
MOVE_SETTLE_S = 2.0
"""A mark-delete move the broker accepted is expected to show in the cursor within this long."""


@dataclass(slots=True)
class CpuBudget:
    """The pause after each round, so that the loop's thread uses at most ``CPU_SHARE`` of a core over time
    (a token bucket): the share accrues as credit over time, up to ``CPU_CREDIT_S``, and each round spends
    its CPU. A round that leaves a debt is followed by the pause that repays it, one that leaves none by
    ``ROUND_GAP_S``.

    Until session 30 every round was followed by a pause as long as its CPU. That also held back the round
    after one costly round among cheap ones, and after one that waited (on brokers, the interpreter's lock,
    for a CPU) as long as it worked: at 10,000 subscriptions the slowest acknowledgements were those that
    came during such a round, then waited for its pause and the next round."""

    credit: float = 0.0
    at: float | None = None

    def gap(self, *, cpu_s: float, started: float, ended: float) -> float:
        """The pause after a round from ``started`` to ``ended`` (monotonic seconds) that used ``cpu_s``.
        What accrued before the round is capped; what accrued during it is spent as it accrued."""
        if self.at is not None:
            self.credit = min(CPU_CREDIT_S, self.credit + max(0.0, started - self.at) * CPU_SHARE)
        self.credit = min(CPU_CREDIT_S, self.credit + max(0.0, ended - started) * CPU_SHARE - cpu_s)
        self.at = ended
        return max(ROUND_GAP_S, -self.credit / CPU_SHARE)


def round_wait(
    *, elapsed: float, busy: bool, feed_interval_s: float, poll_interval_s: float, gap: float = ROUND_GAP_S
) -> float:
    """Seconds to wait, after a round that took ``elapsed`` and its ``gap`` (``CpuBudget.gap``), until the
    next unless a control message comes first; ``busy``: the feed reported acknowledgements within
    ``ACTIVE_FEED_S``."""
    interval = feed_interval_s if busy else poll_interval_s
    return max(0.0, interval - elapsed - gap)


@dataclass(frozen=True, slots=True)
class PollState:
    """When a topic's cursors are next polled and the interval that got there."""

    next_at: float = 0.0
    interval: float = 0.0
    active_until: float = 0.0


def after_new_messages(poll: PollState, *, now: float, base_s: float) -> PollState:
    """New messages arrived: consumers will acknowledge soon, so poll at once and closely for a while."""
    return PollState(next_at=min(poll.next_at, now), interval=base_s, active_until=now + ACTIVE_WINDOW_S)


def after_poll(
    poll: PollState,
    *,
    now: float,
    base_s: float,
    feed: bool,
    changed: bool,
    pending_move: bool,
    consumers: bool,
    spread: float = 0.0,
) -> PollState:
    """The schedule after a poll of one topic's cursors (see the module docstring). ``spread``, in [0, 1)
    (the runtime draws it at random): a topic polled at a backed-off interval is due up to half of what that
    interval adds to the base one early. Topics polled together (every one, in the first round after a start)
    otherwise came due together again, and again: at 10,000 subscriptions, a round of a hundred polls and
    ten thousand cursors every 20-30 s, each holding the claims waiting behind it."""
    busy = pending_move if feed else changed or pending_move or now < poll.active_until
    if busy:
        interval = base_s
    else:
        cap = FEED_SAFETY_POLL_S if feed else MAX_IDLE_POLL_S if consumers else UNCONSUMED_POLL_S
        interval = max(base_s, min(cap, 2 * (poll.interval or base_s)))
    early = spread * (interval - base_s) / 2
    # due half a round early, so a topic with the base interval is polled every round
    return PollState(
        next_at=now + interval - base_s / 2 - early, interval=interval, active_until=poll.active_until
    )


def first_resync(now: float, *, period_s: float, phase: float) -> float:
    """When a newly seen topic is first republished in full: ``phase`` in [0, 1) spreads topics over the
    period (the runtime draws it at random)."""
    return now + phase * period_s


@dataclass(frozen=True, slots=True)
class PendingMove:
    """A mark-delete move the broker accepted: its target and when it was sent."""

    target: Position
    at: float


def may_move(
    pending: PendingMove | None,
    *,
    current: Position | None,
    target: Position,
    now: float,
    min_interval_s: float,
) -> bool:
    """Whether to send a mark-delete move to ``target`` now (see the module docstring)."""
    if pending is None:
        return True
    age = now - pending.at
    in_flight = current is not None and current < pending.target and age < MOVE_SETTLE_S
    if in_flight or age < min_interval_s:
        return False
    return pending.target != target or age > MOVE_SETTLE_S
