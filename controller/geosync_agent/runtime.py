"""The agent's sync loop: one region, one thread, rounds of observe, decide, apply.

A round runs every ``poll_interval_s`` (``feed_interval_s`` while the broker plugin's feed reports
acknowledgements, and at once when a control message arrives):

0. own, adopt (``tracking``): sidecar mode's ownership (``shard_by_ownership``, ``owning``); the newest
   discovery pass adopted: readers for new topics and control topics, subscriptions tracked;
1. index (``indexing``): drain every partition's reader queue into its origin index (``tailing``);
2. receive (``controlling``): verify and de-duplicate control messages, merge each subscription's claims;
3. writes (``folding.land_writes``): the outcomes of the cursor writes the last round sent, handed to the
   core's entry (``core.stepping``);
4. feed, polls (``observing``): cursors from the plugin's feed (only subscriptions consumers just
   acknowledged on) and from ``internalStats`` polls paced by ``geosync_core.pacing``; decide each
   subscription's claim (``geosync_core.claiming``) and publish what changed, one signed envelope per
   namespace and ``tuning.STATES_PER_ENVELOPE`` states (``controlling``);
5. apply (``folding.apply``): the core's entry (``core.stepping.step``) plans each subscription's cursor
   change (``core.planning``) and returns the effects: plugin writes or admin-API moves through the gate;
   the ``Effector`` carries them out and their outcomes are folded back;
6. bound the entries held, snapshot mode for its namespaces (``indexing``, ``snapshotting``);
7. a checkpoint when due (``saving``), written by the checkpoint writer.

The state is ``agentstate.AgentState``; each step's part extends it in its own module, and ``Agent`` (here)
is the last of them: the loop, readiness and closing. Checkpoints are functions over the state (``saving``),
named here as ``Agent``'s methods. ``Agent``, ``Now`` and ``ROUND_ERRORS`` are imported from here.

Only the loop's thread reads or writes the agent's state. Reader listeners only put into queues, the
discovery task only fills a mailbox, the effector's pool only calls ports and returns values (and opens
readers, each worker a tail of its own while the loop waits: see ``reading``), and the HTTP endpoint only
reads ``status()``. Time is read once per round (``read_now``) and passed down.

This module is the shell's loop: ``run`` and ``read_now`` read the machine's clocks, and ``round`` times each
step for /state. The parts below it read no clock, draw no random number and start no thread (see
``agentstate``): what they need of time comes in the ``Now`` they are given, with its meters.

The agent is being split into a pure core and this shell (``docs/decisions/0001-sans-io-agent.md``): the
decisions that need no I/O are in ``geosync_agent.core`` (subscription state, generations of claims,
sealing, applying, pauses, readiness, tuning), every outside call goes through the ``Effector`` as a value
of ``calls``, readers are opened by ``reading``, origins looked up by ``lookups``, /state rendered by
``reporting``. What is still decided here is listed in that decision record.

Invariants (the core proves the planning; tests against the lab prove the whole): a cursor only moves
forward; only entries whose origin some region acknowledged are acknowledged; applying again changes
nothing; unsigned, altered, replayed or malformed control messages change nothing and are counted.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from geosync_adapters import adminhttp
from geosync_adapters import messaging as msg
from geosync_agent import reporting, saving
from geosync_agent.agentstate import Now, Stats, TopicState
from geosync_agent.core import readiness, tuning
from geosync_agent.folding import Folding
from geosync_core import pacing
from geosync_core.capabilities import Capability

log = logging.getLogger("geosync.agent")
ROUND_ERRORS = (adminhttp.AdminError, msg.MessagingUnavailable)
"""Failures a round survives: it is counted, and the next round tries again."""


class Agent(Folding):
    """The sync state of one region and the round that advances it (see the module docstring)."""

    # -- the loop ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event, progress: Callable[[], None] = lambda: None) -> None:
        """Rounds until ``stop`` is set (the sync-loop task's body); ``progress`` is told each time a round
        ends, failed or not (the watchdog's heartbeat: ``geosync_agent.watching``)."""
        log.info("agent for region %s starting (admin %s)", self.config.region, self.config.admin_url)
        while not stop.is_set():
            now = read_now()
            cpu_before = time.thread_time()
            try:
                self.round(now)
                self.failing_since = None
            except ROUND_ERRORS as e:
                self.stats.inc("loop_errors")
                if self.failing_since is None:
                    self.failing_since = now.mono
                self.last_error = str(e)[:200]
                log.warning("round failed, retrying: %s", e)
                stop.wait(1.0)
            progress()
            elapsed = time.monotonic() - now.mono
            self.round_seconds.append(elapsed)
            del self.round_seconds[:-200]
            busy = self.caps.get(Capability.PLUGIN_FEED) is True and time.monotonic() < self.feed.busy_until
            gap = self.cpu_budget.gap(
                cpu_s=time.thread_time() - cpu_before, started=now.mono, ended=now.mono + elapsed
            )
            if self.collections is not None:
                # What the round left alive is frozen (a full collection of it now and then): see
                # ``geosync_agent.collector``. Not in the round's CPU, so not in the pause either.
                self.collections.after_round(time.monotonic())
            self.pause(stop, gap)
            # A control message ends the wait: remote acknowledgements are applied as they arrive.
            self.wake.wait(
                pacing.round_wait(
                    elapsed=elapsed,
                    busy=busy,
                    feed_interval_s=self.config.feed_interval_s,
                    poll_interval_s=self.config.poll_interval_s,
                    gap=gap,
                )
            )
            self.wake.clear()

    def pause(self, stop: threading.Event, seconds: float) -> None:
        """The pause the CPU budget puts after a round (``pacing.CpuBudget``): no round, but the control
        messages that arrive meanwhile are taken (``receive``, within a step's budget), and their CPU
        lengthens the pause; none waits for its end (issue 46.4). If any was taken, the next round comes right
        after it, to apply them."""
        ends = time.monotonic() + seconds
        taken = False
        while not stop.is_set():
            left = ends - time.monotonic()
            if left <= 0 or not self.wake.wait(left):
                break
            self.wake.clear()
            if stop.is_set() or not self.control_waiting():
                continue
            now, cpu = read_now(), time.thread_time()
            self.step_until = tuning.STEP_BUDGET_S
            try:
                self.receive(now)
            except ROUND_ERRORS as e:
                self.stats.inc("loop_errors")
                log.warning("taking control messages failed, retrying: %s", e)
            finally:
                self.step_until = math.inf
            self.phase_seconds.lap("receive in pause", now.mono)
            taken = True
            ends += (time.thread_time() - cpu) / pacing.CPU_SHARE
        if taken:
            self.wake.set()

    def control_waiting(self) -> bool:
        """Whether a control message waits in an inbox for the loop to take it."""
        return any(not tail.inbox.empty() for tail in self.controls.values())

    def round(self, now: Now) -> None:
        lap = started = time.monotonic()  # the machine's clock, whatever ``now`` says (a test's)
        cpu = cpu_started = time.thread_time()
        process_started = time.process_time()
        # What the last round created existed by the time this one began: a discovery pass begun after the
        # last round's start but before the creation (the discovery thread runs beside the rounds) does not
        # list it, and must not be taken for a user's deletion.
        for key in self.created:
            created = self.subs.get(key)
            if created is not None and created.exists:
                created.confirmed_at = max(created.confirmed_at, now.mono)
        self.created.clear()
        # step -> (seconds, of which this thread's CPU): a step far above its CPU waited (on brokers, on the
        # interpreter's lock held by another thread, for one of the machine's CPUs)
        steps: dict[str, tuple[float, float]] = {}

        def timed(name: str, phase: Callable[[Now], None]) -> None:
            nonlocal lap, cpu
            # Each step within its budget (``tuning.STEP_BUDGET_S``): the index, receive, feed and poll steps
            # leave what they did not get to for their next turn, resumed where they stopped.
            self.step_until = now.since() + tuning.STEP_BUDGET_S
            try:
                phase(now)
            finally:
                self.step_until = math.inf
            began, lap = lap, self.phase_seconds.lap(name, lap)
            cpu_began, cpu = cpu, time.thread_time()
            took = steps.get(name, (0.0, 0.0))
            steps[name] = (round(took[0] + lap - began, 3), round(took[1] + cpu - cpu_began, 3))

        taken_at = 0.0  # seconds into the round control messages were last taken
        for name, phase in (
            ("own", self.own),
            ("adopt", self.adopt),
            ("reopen", self._reopen),
            ("revive", self._revive),
            ("index", self.index),
            ("receive", self.receive),
            ("writes", self.land_writes),
            ("feed", self.observe_feed),
            ("polls", self.poll),
            # Claims that came while the polls waited on brokers are applied now, not a round later.
            ("receive again", self.receive),
            ("apply", self.apply),
            ("bound", lambda _now: self.bound_entries()),
            ("snapshots", self.snapshot_round),
        ):
            timed(name, phase)
            if name in ("receive", "receive again"):
                taken_at = now.since()
            elif now.since() - taken_at >= tuning.CONTROL_EVERY_S and self.control_waiting():
                # Control messages are taken between the round's steps too, not only in its two receive
                # steps: a message that came as a long round began waited for all of it (issue 46.4).
                timed("receive between", self.receive)
                taken_at = now.since()
        self.timeline.add(
            "round",
            now.mono,
            lap - started,
            cpu_s=round(cpu - cpu_started, 3),
            # every thread's CPU meanwhile: near the round's seconds, the loop waited on the agent's other
            # threads (the interpreter's lock); far below them, on brokers or for the machine's CPUs
            process_cpu_s=round(time.process_time() - process_started, 3),
            steps={k: v for k, v in steps.items() if v[0] >= 0.05},
        )
        self.ready = True
        self.round_done_at = now.mono
        if self.checkpoint_path is not None and now.mono >= self.checkpoint_at:
            self.save_checkpoint(now, background=True)
            # Taking the state is the loop's, and encoding it holds the interpreter's lock: together they
            # get at most CHECKPOINT_SHARE of the time. (At 500,000 entries a soak's checkpoints took 19-28 s
            # each, one after the other, and the loop's rounds waited 20-50 s.)
            self.checkpoint_at = now.mono + max(
                self.config.checkpoint_interval_s,
                self.checkpoint_taken_s / tuning.CHECKPOINT_SHARE,
                self.checkpoint_cost_s / tuning.CHECKPOINT_SHARE,
            )

    def bound_entries(self) -> None:
        """Keep the entries held (origins, keys, batch sizes) within ``max_tracked_entries`` over all topics:
        the largest tails give up their oldest first (a subscription far behind holds their floor back; it is
        parked until it catches up)."""
        budget = self.config.max_tracked_entries
        total = sum(len(ts.tail.details) for ts in self.topics.values())
        if total <= budget:
            return
        excess = total - budget * 9 // 10
        for ts in sorted(self.topics.values(), key=lambda t: len(t.tail.details), reverse=True):
            if excess <= 0:
                break
            held = len(ts.tail.details)
            forgotten = ts.tail.forget_oldest(min(excess, held // 2 + 1))
            dropped = held - len(ts.tail.details)
            excess -= dropped
            self.stats.inc("entries_over_budget", dropped)
            log.warning(
                "%s: over the budget of %d tracked entries: forgot up to %s (%d entries); a subscription "
                "below them is parked until it catches up (a failover of it may deliver some messages again)",
                ts.tail.topic,
                budget,
                forgotten,
                dropped,
            )

    def readiness(self, now_mono: float) -> tuple[bool, str]:
        """Whether the agent is doing its work, and why not (``core.readiness``), for /readyz: Kubernetes
        then stops counting on this pod."""
        return readiness.readiness(
            now_mono,
            round_done_at=self.round_done_at if self.ready else None,
            failing_since=self.failing_since,
            last_error=self.last_error,
            publish_failing_since=self.publish_failing_since,
            parts_failing=self.parts_failing,
        )

    def close(self, now: Now) -> None:
        """Write a last checkpoint and close readers (producers and the client belong to the effector and
        the composition root)."""
        try:
            self.land_writes(now)
        except Exception as e:  # the checkpoint is written all the same: those writes are planned again
            log.warning("the last cursor writes' outcomes were not read: %s", e)
        self.save_checkpoint(now)
        for ts in self.topics.values():
            ts.tail.close()
        for tail in self.controls.values():
            tail.close()

    # -- checkpoints (``saving``) --------------------------------------------------------------------

    def save_checkpoint(self, now: Now, *, background: bool = False) -> None:
        """Write the checkpoint now (``saving.save_checkpoint``)."""
        saving.save_checkpoint(self, now, background=background)

    def checkpoint(self) -> dict[str, Any]:
        """The checkpoint's value, taken as written (``saving.take_checkpoint``)."""
        return saving.take_checkpoint(self)

    def restore(self, state: dict[str, Any], now: Now) -> None:
        """Take up a checkpoint before the first round (``saving.restore``)."""
        saving.restore(self, state, now)

    # -- introspection -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What /state shows (``reporting.status``)."""
        return reporting.status(self)


def read_now() -> Now:
    """The machine's time for a round, with the meters of the thread that reads it (the loop's): its CPU
    and the monotonic clock."""
    return Now(time.monotonic(), time.time(), cpu=time.thread_time, clock=time.monotonic)


__all__ = ["ROUND_ERRORS", "Agent", "Now", "Stats", "TopicState", "read_now"]
