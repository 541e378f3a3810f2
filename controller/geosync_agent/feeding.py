"""Feeding: the broker plugin's acknowledgement feed read, its cursor reports and ``acked`` blocks taken.

Round step 4's first half (``runtime``, through ``observing.Observing.observe_feed``): one read of the feed
(``calls.PluginFeed``, naming the broker run its ``since`` counts in), handed to the core as one event
(``core.stepping.step`` with ``FeedRead``, ``core.feeding``: what a broker restart means, the cursor reports
held until their topic is tracked and their batches read, repeats), whose ``Fed`` names the cursors to look
at and the topics to start tracking (their tails opened here); then what consumers acknowledged (``acked``,
decision 0015): journalled first (``checkpointing.Journal``), then handed to the core (``AckedRead``: added
per subscription, held for one not tracked yet). ``observing`` takes the cursors this returns.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from geosync_adapters import adminhttp
from geosync_agent import calls
from geosync_agent.agentstate import Now
from geosync_agent.controlling import Controlling
from geosync_agent.core import acknowledged, stepping
from geosync_agent.core.publishing import namespace_of
from geosync_agent.discovering import synced
from geosync_core import pluginapi
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
        namespaces, config = self.namespaces, self.config
        read = stepping.FeedRead(
            feed,
            in_scope=lambda topic, name: namespace_of(topic) in namespaces and synced(config, topic, name),
            owned=self.owns,
        )
        fed = stepping.step(self, read, now)
        for topic in fed.track:
            self._track_topic(topic, now)  # before the acked blocks: those of a topic tracked now are taken
        self.caps = self.caps.learned(Capability.PLUGIN_FEED, True, now=now.mono)
        out = fed.cursors
        if feed.acked is not None and self.config.claims_from == acknowledged.ACKNOWLEDGEMENTS:
            if feed.acked:
                # Kept until the next checkpoint is written: the next read confirms these blocks, and the
                # broker forgets them (checkpointing.Journal).
                self.journal.append(
                    {"epoch": feed.epoch, "seq": feed.seq, "acked": feed.acked_wire_or_encoded()}
                )
            replayed, self.feed.replay = self.feed.replay, ()
            self._take_acked((*replayed, *feed.acked), feed.acked_lost, out, now)
        self._carry_out(fed.out, now)
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
