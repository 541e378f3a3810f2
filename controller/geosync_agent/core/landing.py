"""Landing: what the cursor writes did, folded into the subscriptions' state through the core's entry
(``core.stepping.step`` with ``Written`` for a batch of plugin writes' outcomes, ``Moved`` for a batch of
admin-API moves'; round steps 13-14).

The shell carries the writes out and hands their outcomes over as they came, one event per batch (thousands
a second at 10,000 subscriptions: nothing is built per outcome but the fold's own changes). What the brokers
alone tell (a capability learned, a replicator unloaded, a subscription created, a cursor reset) the shell
still folds itself (``folding._fold``).

Invariants (tests in ``tests/agent/test_core_landing.py``, through ``step``):

* a plugin write's answer is the cursor: taken as reported (``reports.cursor_of``, the tail's batch sizes),
  and the pending admin-API move and held-back holes it supersedes are cleared;
* a write's cursor is judged for a rewind like a poll's (``generations.rewound``, source "write": a write
  never moves the mark-delete back), unless snapshot mode covers the topic or rewinds are not judged in
  this round (the shell's ``judges_rewinds``); a rewind taken starts a new generation
  (``looking.took_rewind``);
* a write the plugin refused for good is planned again (``planned`` cleared); one it could not take keeps
  its plan (the admin API writes it, ``Landed``); a refused ``planned_from`` stops it being sent for
  ``REPROBE_S`` (``Feed.planned_from_refused_at``); a stale write (nothing applied: the cursor was moved
  below the plan's) is counted and noticed;
* an admin move that failed is planned again; one that found the subscription gone is planned again and
  taken as absent here (``Stepped.absent``, the shell's discovery bookkeeping), not retried as an error;
  one that moved the mark-delete waits for the broker to show it (``pending_move``) unless snapshot mode
  covers the topic; the holes it held back (consumers connected) are remembered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from geosync_agent.core import generations, looking, reports
from geosync_agent.core.effects import PLANNED_FROM_REFUSED, AdminMoved, CursorWritten, NotWritten, Outcome
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Tracked
from geosync_agent.core.stepped import MoveFailed, Stepped, WriteStale
from geosync_core import pacing


class Landing(Tracked, Protocol):
    """What of the agent's state folding the writes' outcomes reads and changes."""


def fold_writes(
    state: Landing,
    outcomes: Iterable[Outcome],
    out: Stepped,
    now: Now,
    *,
    covered: Callable[[str], bool],
    judged: bool,
    acknowledgements: bool,
) -> None:
    """The plugin writes' ``outcomes`` folded into the state, their counters and notices into ``out`` (see
    the module docstring). ``judged``: rewinds are judged in this round (where the feed is read, only in a
    round whose feed read answered); ``acknowledgements``: claims are made of what consumers acknowledged."""
    subs, topics, counts = state.subs, state.topics, out.counts
    for outcome in outcomes:
        if isinstance(outcome, CursorWritten):
            sub = subs.get(outcome.key)
            if sub is None:
                continue
            report = outcome.cursor
            if outcome.stale:
                counts["plugin_writes_stale"] += 1
                out.notices.append(WriteStale(sub, report.mark_delete))
            if report.batches_truncated:
                counts["feed_batches_truncated"] += 1
            ts = topics.get(report.topic)
            cursor = sub.cursor = reports.cursor_of(report, None if ts is None else ts.tail)
            if judged and not covered(sub.topic):
                # A write never moves the mark-delete back: below what was seen, someone rewound it.
                rewind = generations.rewound(
                    sub, cursor, source="write", now_mono=now.mono, now_wall=now.wall
                )
                if rewind is not None:
                    looking.took_rewind(state, sub, rewind, cursor, out, acknowledgements=acknowledgements)
            sub.pending_move = None
            sub.pending_holes = 0
            sub.last_applied_at = now.wall
            counts["plugin_acks"] += 1
            counts["mark_delete_moves"] += int(outcome.moved)
            counts["holes_acked"] += outcome.holes
            counts["batch_indexes_acked"] += outcome.batch_indexes
        elif isinstance(outcome, NotWritten):
            sub = subs.get(outcome.key)
            if sub is None:
                continue
            if outcome.reason == PLANNED_FROM_REFUSED:
                state.feed.planned_from_refused_at = now.mono
                counts["plugin_planned_from_refused"] += 1
            if not outcome.fallback:
                counts["apply_errors"] += 1
                sub.planned = None  # plan again next round


def fold_moves(
    state: Landing, outcomes: Iterable[AdminMoved], out: Stepped, now: Now, *, covered: Callable[[str], bool]
) -> None:
    """The admin-API moves' ``outcomes`` folded into the state, their counters, notices and the
    subscriptions found gone into ``out`` (see the module docstring)."""
    subs, counts = state.subs, out.counts
    for outcome in outcomes:
        sub = subs.get(outcome.key)
        if sub is None:
            continue
        if outcome.gone:
            # Deleted here since discovery listed it: as a discovery pass that no longer finds it (not
            # created again from claims; synced again once it exists), not an error to retry every round.
            out.notices.append(MoveFailed(sub, outcome.error, gone=True))
            sub.planned = None
            out.absent.append(sub)
            continue
        if outcome.error:
            counts["apply_errors"] += 1
            out.notices.append(MoveFailed(sub, outcome.error, gone=False))
            sub.planned = None
            continue
        sub.consumers = outcome.consumers
        if outcome.busy:
            counts["expire_busy"] += 1
        if outcome.moved_to is not None:
            counts[outcome.counter] += 1
            sub.last_applied_at = now.wall
            if not covered(sub.topic):
                sub.pending_move = pacing.PendingMove(outcome.moved_to, now.mono)
        sub.pending_holes = outcome.held_back
        if outcome.holes_acked:
            counts["holes_acked"] += outcome.holes_acked
            sub.last_applied_at = now.wall
