"""Feeding: a read of the broker plugin's acknowledgement feed taken, through the core's entry
(``core.stepping.step`` with ``FeedRead``, round step 1).

The shell makes the read (``calls.PluginFeed``), learns the capability and hands the answer here in one
event; what comes back is ``Fed``: the cursors to look at per topic, the topics to start tracking (the shell
opens their tails), and in its ``Stepped`` the polls a broker restart asks for, the discovery pass a report
of something not tracked asks for, and the counters. The answer's ``acked`` blocks go on to ``AckedRead``
(``core.absorbing``) once the shell has journalled them and tracked those topics.

Invariants (tests in ``tests/agent/test_core_feeding.py``, through ``step``):

* a new feed epoch after an earlier one (a broker restart) has every tracked topic polled again, drops the
  reports still waiting and what the last feed step left (``feed_left``), and applies this region's own
  claims again as claims received; at the agent's first read nothing is dropped, polled or applied again,
  and at either every subscription's feed memory (``seen_feed``, ``seen_any``, ``fed``) is forgotten;
* a report waits (``unobserved``) while its subscription's publish is paused, or while its topic's tail has
  not read the batches it names (their sizes); one of a topic this agent does not own is dropped;
* a report that repeats the last one taken, read the same way, while the cursor is still the one it gave,
  is not looked at again;
* a report naming a topic or subscription not tracked here starts its tracking (the topic in ``Fed.track``,
  once, in the order first named; the subscription made and confirmed) and asks for a discovery pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from geosync_agent.core import reports, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Tracked
from geosync_agent.core.stepped import Stepped
from geosync_agent.core.subscriptions import SubKey
from geosync_core import pacing, pluginapi
from geosync_core.rangesets import AckState


class Feeding(Tracked, Protocol):
    """What of the agent's state taking a feed read reads and changes."""

    @property
    def unobserved(self) -> dict[SubKey, pluginapi.CursorReport]: ...

    @property
    def feed_left(self) -> dict[str, dict[str, tuple[AckState, AckState | None, bool]]]: ...


@dataclass(frozen=True, slots=True)
class FeedRead:
    """Round step 1: the feed's ``answer``; ``in_scope``, whether a (topic, subscription) is synced here
    (its namespace discovered, the configuration's filters); ``owned``, whether this agent syncs a topic
    (sidecar mode: its broker owns it)."""

    answer: pluginapi.Feed
    in_scope: Callable[[str, str], bool]
    owned: Callable[[str], bool]


@dataclass(slots=True)
class Fed:
    """What a feed read asks: ``cursors``, per topic (in the order first reported) the cursors to look at;
    ``track``, topics to start tracking (their tails opened) before anything else reads them; ``out``, the
    polls a restart asks for (``poll_soon``), a discovery pass (``rediscover``), counters."""

    cursors: dict[str, dict[str, AckState]] = field(default_factory=dict)
    track: list[str] = field(default_factory=list)
    out: Stepped = field(default_factory=Stepped)


def take_feed(state: Feeding, event: FeedRead, now: Now) -> Fed:
    """Step 1 (see the module docstring)."""
    fed, feed, answer = Fed(), state.feed, event.answer
    counts = fed.out.counts
    if answer.epoch != feed.epoch:
        _new_epoch(state, answer.epoch, fed)
    feed.read_at = now.mono
    feed.write_version = answer.write_version
    feed.seq = answer.seq
    counts["feed_reads"] += 1
    if answer.cursors:
        feed.busy_until = now.mono + pacing.ACTIVE_FEED_S
    waiting = state.unobserved
    dropped = reports.hold(waiting, answer.cursors, in_scope=event.in_scope, cap=tuning.MAX_UNOBSERVED)
    if dropped:
        counts["feed_reports_dropped"] += dropped
    topics, subs, track = state.topics, state.subs, fed.track
    tracking: set[str] = set()
    out = fed.cursors
    for key, report in list(waiting.items()):
        topic, name = key
        if not event.owned(topic):
            del waiting[key]  # moved off this broker: its new owner's agent reads the cursor
            continue
        sub = subs.get(key)
        ts = topics.get(topic)
        if (ts is None and topic not in tracking) or sub is None or not sub.exists:
            if not fed.out.rediscover:
                fed.out.rediscover.append("rediscover_for_feed")
            counts["tracked_from_feed"] += 1
            sub = subs.made(topic, name)
            sub.confirm(now.mono)
            if ts is None and topic not in tracking:
                tracking.add(topic)
                track.append(topic)
        if now.mono < sub.publish_after:
            # Its claims are large and their publish is paused: the report (the newest, replacing the one
            # before) waits here until the pause ends, instead of being read, checked for a rewind and
            # translated at every round for a publish that cannot go out yet (what a's agent spent its time
            # on while b was cut off, with tens of thousands of holes kept for good).
            counts["feed_reports_deferred"] += 1
            continue
        tail = None if ts is None else ts.tail  # a tail opened now has read nothing
        if report.batches and (tail is None or not tail.has_read(max(b.position for b in report.batches))):
            continue  # the batch sizes are not known yet: the report waits for the tail
        del waiting[key]
        read = reports.as_read(report, tail)
        if sub.fed is not None and sub.fed[0] == read and sub.cursor == sub.fed[1]:
            # The plugin's repeat within its settle time (at 10,000 subscriptions more than half of what the
            # feed reported): the same cursor read the same way again, and its topic looked at again. Not
            # once a write or a poll has set another cursor since: the report is news against that.
            counts["feed_repeats_skipped"] += 1
            continue
        if report.batches_truncated:
            counts["feed_batches_truncated"] += 1
        cursor = reports.cursor_of(report, tail)  # batch sizes from the tail
        sub.fed = (read, cursor)
        out.setdefault(topic, {})[name] = cursor
    return fed


def _new_epoch(state: Feeding, epoch: str, fed: Fed) -> None:
    """The feed answers from a new broker run (``epoch``)."""
    feed, counts = state.feed, fed.out.counts
    # The broker (re)started: what was acknowledged before it is only known to a poll, and a cursor that lost
    # its last acknowledgements in a crash moved back without a rewind. Not at the agent's own first read:
    # every topic is polled at its first round already (a second poll of them all, a round later, was most of
    # a restarted agent's rounds at 10,000 subscriptions).
    restarted = bool(feed.epoch)
    if restarted:
        fed.out.poll_soon.extend(state.topics)
        # Reports of the broker's earlier run still waiting here (a publish paused, batches the tail had not
        # read) show cursors ahead of what it came back with: taken after the restart they made its first
        # report look like a rewind. The polls just asked for read the cursors anew.
        counts["feed_reports_dropped"] += len(state.unobserved)
        state.unobserved.clear()
        state.feed_left.clear()  # and so do those the last feed step read and left for this one
    feed.epoch = epoch
    feed.acked_lost = 0  # counted since the broker started
    reapplied = 0
    for sub in state.subs.values():
        # What consumers were seen acknowledging (``acked``) is kept: it happened. What the broker held
        # unread when it stopped is gone: re-delivered after a failover, never lost.
        sub.seen_feed = sub.seen_any = sub.fed = None
        if restarted and sub.published is not None:
            # What this region claimed was acknowledged here, but a broker that died before it persisted its
            # cursor (at most once a second) forgot the last of it; with claims made of acknowledgements no
            # other region claims it back here. Applied as a claim received (a no-op where the cursor still
            # holds it; a rewind starts a new generation, which drops it).
            sub.received = sub.received.merge(sub.published)
            reapplied += 1
    if reapplied:
        counts["own_claims_reapplied"] += reapplied
