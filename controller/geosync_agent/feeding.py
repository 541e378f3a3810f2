"""Feeding: the broker plugin's acknowledgement feed read, its cursor reports and ``acked`` blocks taken.

Round step 4's first half (``runtime``, through ``observing.Observing.observe_feed``): one read of the feed
(``calls.PluginFeed``, naming the broker run its ``since`` counts in), what a broker restart means (every
topic polled again, this region's own claims applied again), the cursor reports held until their topic is
tracked and their batches read, and what consumers acknowledged (``acked``, decision 0015): journalled
first (``checkpointing.Journal``), then handed to the core (``core.stepping.step`` with ``AckedRead``:
added per subscription, held for one not tracked yet). ``observing`` takes the cursors this returns.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_adapters import adminhttp
from geosync_agent import calls
from geosync_agent.agentstate import Now
from geosync_agent.controlling import Controlling
from geosync_agent.core import acknowledged, reports, stepping, tuning
from geosync_agent.core.publishing import namespace_of
from geosync_agent.discovering import synced
from geosync_core import pacing, pluginapi
from geosync_core.capabilities import Capability
from geosync_core.rangesets import AckState

log = logging.getLogger("geosync.agent")


class Feeding(Controlling):
    """Reading the broker plugin's acknowledgement feed."""

    def _read_feed(self, now: Now) -> dict[str, dict[str, AckState]]:
        """Cursor states of the subscriptions consumers acknowledged on since the last read, from the broker
        plugin's feed, with partly acknowledged batches (empty where the plugin is absent: polling then does
        all the work). A report naming a topic or subscription discovery has not found yet starts its
        tracking at once (a subscription created with its traffic); discovery is asked for a pass too, for
        what the feed does not tell (consumers, type)."""
        if not self.caps.usable(Capability.PLUGIN_FEED, now=now.mono):
            return {}
        if not self.namespaces:
            # Before discovery's first pass every report would be dropped as out of scope, and the feed
            # names each acknowledgement once: batch indexes acknowledged while the agent was down would
            # then be known to no poll (a poll cannot see them) and never claimed.
            return {}
        self.feed.held_looks.clear()
        try:
            acked = self.config.claims_from == acknowledged.ACKNOWLEDGEMENTS
            feed = self.effector.call(calls.PluginFeed(self.feed.seq, self.feed.epoch, acked=acked))
        except (adminhttp.AdminNotFound, adminhttp.AdminForbidden) as e:
            if self.caps.get(Capability.PLUGIN_FEED) is not False:
                for ts in self.topics.values():
                    ts.poll = replace(ts.poll, next_at=0.0)  # their polls were paced for a feed
            self.caps = self.caps.learned(Capability.PLUGIN_FEED, False, now=now.mono)
            self.feed.write_version = 1  # nothing tells what the plugin's writes take now
            log.info("no acknowledgement feed from the broker plugin (%s); polling cursors instead", e)
            return {}
        except (adminhttp.AdminError, pluginapi.PluginApiError) as e:
            self.stats.inc("feed_errors")
            self.part_outcome("acknowledgement feed", e, now.mono)
            log.warning("acknowledgement feed failed, polling meanwhile: %s", e)
            return {}
        self.part_outcome("acknowledgement feed", None, now.mono)
        if feed.epoch != self.feed.epoch:
            # The broker (re)started: what was acknowledged before it is only known to a poll, and a
            # cursor that lost its last acknowledgements in a crash moved back without a rewind. Not at the
            # agent's own first read: every topic is polled at its first round already (a second poll of
            # them all, a round later, was most of a restarted agent's rounds at 10,000 subscriptions).
            restarted = bool(self.feed.epoch)
            if restarted:
                for ts in self.topics.values():
                    ts.poll = replace(ts.poll, next_at=0.0)
                # Reports of the broker's earlier run still waiting here (a publish paused, batches the tail
                # had not read) show cursors ahead of what it came back with: taken after the restart they
                # made its first report look like a rewind. The polls just asked for read the cursors anew.
                self.stats.inc("feed_reports_dropped", len(self.unobserved))
                self.unobserved.clear()
                self.feed_left.clear()  # and so do those the last feed step read and left for this one
            self.feed.epoch = feed.epoch
            self.feed.acked_lost = 0  # counted since the broker started
            reapplied = 0
            for sub in self.subs.values():
                # What consumers were seen acknowledging (``acked``) is kept: it happened. What the broker
                # held unread when it stopped is gone: re-delivered after a failover, never lost.
                sub.seen_feed = sub.seen_any = sub.fed = None
                if restarted and sub.published is not None:
                    # What this region claimed was acknowledged here, but a broker that died before it
                    # persisted its cursor (at most once a second) forgot the last of it; with claims made
                    # of acknowledgements no other region claims it back here. Applied as a claim received
                    # (a no-op where the cursor still holds it; a rewind starts a new generation, which
                    # drops it).
                    sub.received = sub.received.merge(sub.published)
                    reapplied += 1
            if reapplied:
                self.stats.inc("own_claims_reapplied", reapplied)
        self.caps = self.caps.learned(Capability.PLUGIN_FEED, True, now=now.mono)
        self.feed.read_at = now.mono
        self.feed.write_version = feed.write_version
        self.feed.seq = feed.seq
        self.stats.inc("feed_reads")
        if feed.cursors:
            self.feed.busy_until = now.mono + pacing.ACTIVE_FEED_S
        namespaces, config = self.namespaces, self.config
        dropped = reports.hold(
            self.unobserved,
            feed.cursors,
            in_scope=lambda topic, name: namespace_of(topic) in namespaces and synced(config, topic, name),
            cap=tuning.MAX_UNOBSERVED,
        )
        if dropped:
            self.stats.inc("feed_reports_dropped", dropped)
        out: dict[str, dict[str, AckState]] = {}
        unknown = False
        for key, report in list(self.unobserved.items()):
            topic, name = key
            if not self.owns(topic):
                del self.unobserved[key]  # moved off this broker: its new owner's agent reads the cursor
                continue
            state = self.subs.get(key)
            if topic not in self.topics or state is None or not state.exists:
                unknown = True
                self.stats.inc("tracked_from_feed")
                state = self._subscription(topic, name)
                state.confirm(now.mono)
            tracked = self._track_topic(topic, now)
            if now.mono < state.publish_after:
                # Its claims are large and their publish is paused: the report (the newest, replacing the one
                # before) waits here until the pause ends, instead of being read, checked for a rewind and
                # translated at every round for a publish that cannot go out yet (what a's agent spent its
                # time on while b was cut off, with tens of thousands of holes kept for good).
                self.stats.inc("feed_reports_deferred")
                continue
            if report.batches and not tracked.tail.has_read(max(b.position for b in report.batches)):
                continue  # the batch sizes are not known yet: the report waits for the tail
            del self.unobserved[key]
            fed = reports.as_read(report, tracked.tail)
            if state.fed is not None and state.fed[0] == fed and state.cursor == state.fed[1]:
                # The plugin's repeat within its settle time (at 10,000 subscriptions more than half of what
                # the feed reported): the same cursor read the same way again, and its topic looked at again.
                # Not once a write or a poll has set another cursor since: the report is news against that.
                self.stats.inc("feed_repeats_skipped")
                continue
            if report.batches_truncated:
                self.stats.inc("feed_batches_truncated")
            cursor = reports.cursor_of(report, tracked.tail)  # batch sizes from the tail
            state.fed = (fed, cursor)
            out.setdefault(topic, {})[name] = cursor
        if feed.acked is not None and self.config.claims_from == acknowledged.ACKNOWLEDGEMENTS:
            if feed.acked:
                # Kept until the next checkpoint is written: the next read confirms these blocks, and the
                # broker forgets them (checkpointing.Journal).
                self.journal.append(
                    {"epoch": feed.epoch, "seq": feed.seq, "acked": feed.acked_wire_or_encoded()}
                )
            replayed, self.feed.replay = self.feed.replay, ()
            self._take_acked((*replayed, *feed.acked), feed.acked_lost, out, now)
        if unknown:
            self._rediscover_soon(now, "rediscover_for_feed")
        return out

    def _take_acked(
        self,
        blocks: tuple[pluginapi.AckedSet, ...],
        lost: int,
        out: dict[str, dict[str, AckState]],
        now: Now,
    ) -> None:
        """Have the core add the answer's ``acked`` blocks to what consumers were seen acknowledging
        (``stepping.AckedRead``, ``core.absorbing``), and look again at those whose set grew (into ``out``,
        with the cursor held here where the answer reported none)."""
        absorbed = stepping.step(self, stepping.AckedRead(blocks, lost, out, owned=self.owns), now)
        if absorbed.lost is not None:
            log.warning(
                "the plugin dropped %d acknowledged blocks: those acknowledgements are not claimed "
                "(re-delivery possible after a failover)",
                absorbed.lost.blocks,
            )
        self._carry_out(absorbed.out, now)
        for topic, name, cursor in absorbed.looks:
            out.setdefault(topic, {})[name] = cursor
