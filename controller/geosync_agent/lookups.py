"""What the brokers recorded of local entries' origins, asked for the origin resolver.

A replicated copy's stamp says where it came from, but a batched copy shows clients no stamp, and where the
GeoSync interceptor runs its record is trusted over a stamp. The core names entries from what is held
here (``records``: the interceptor's runs, given with each ``core.naming`` event) and asks for the rest as a
value (``Indexed.wanted``), which ``answer`` looks up: first the interceptor's origin index, one call
covering a whole stretch of a topic (its answers kept per topic, with the first entry it still records),
and otherwise the entry's own headers through the admin API, one call per entry. Every call goes through
the ``Effector``.

Only the loop's thread uses it, the pool's workers included while the loop waits on them (``prefetch``). It
reads no clock: the resolver's questions carry no time, so the round that drains the tails sets ``now``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from geosync_adapters import admin as adm
from geosync_adapters import adminhttp
from geosync_adapters import messaging as msg
from geosync_agent import calls
from geosync_agent import effects as fx
from geosync_agent.config import AgentConfig
from geosync_agent.core import naming, tuning
from geosync_agent.tailing import Tail
from geosync_core import drift
from geosync_core.capabilities import Capabilities, Capability
from geosync_core.indexing import OriginRun, covering
from geosync_core.origins import Origin
from geosync_core.positions import Position

log = logging.getLogger("geosync.agent")


class OriginLookups:
    """The brokers' records of entries' origins: the interceptor's runs per topic, and entry headers."""

    def __init__(
        self,
        config: AgentConfig,
        effector: fx.Effector,
        *,
        count: Callable[[str, int], None],
        caps: Callable[[], Capabilities],
        learn: Callable[[Capability, bool, float], None],
    ) -> None:
        self.config = config
        self.effector = effector
        self.count = count
        """Adds to one of the agent's counters."""
        self.caps = caps
        """The agent's capabilities as they are now."""
        self.learn = learn
        """Tells the agent a capability was learned (to be, or not to be, there) at a monotonic time."""
        self.runs: dict[str, list[OriginRun]] = {}
        """Per topic, the interceptor's last answer (disjoint runs, sorted: found by bisection)."""
        self.floor: dict[str, Position] = {}
        """Per topic, the first entry the interceptor's index still records (learned when asked below it)."""
        self.asked: dict[str, tuple[float, Position]] = {}
        """Per topic, when the interceptor's index was last asked and from which entry."""
        self.now = 0.0
        """The monotonic time of the round asking (set by the index step before it drains the tails)."""

    def forget(self, topic: str) -> None:
        """``topic`` is no longer read here: what was asked and answered for it goes."""
        for cache in (self.runs, self.floor, self.asked):
            cache.pop(topic, None)

    def lookup_origin(self, topic: str, local: Position) -> str | None:
        """The origin region the brokers recorded for ``local`` (the resolver's last resort)."""
        run = self._plugin_run(topic, local)
        if run is not None:
            return run.origin
        headers = self._entry_headers(topic, local)
        return None if headers is None else headers.replicated_from

    def recorded(self, topic: str, local: Position) -> tuple[str, Position | None] | None:
        """The broker's record of ``local`` (origin region, source position): the interceptor's index, or,
        where the interceptor runs but its answer lacks the entry (a failed or early question), the entry's
        own headers, so that a stamp is never trusted alone where the brokers can say better. None without
        the interceptor (stamps are then trusted as before)."""
        run = self._plugin_run(topic, local)
        if run is not None:
            return run.origin, run.origin_at(local.entry)
        if self.caps().get(Capability.PLUGIN_INDEX) is not True or not self.config.plugin_index:
            return None
        return self._headers_record(topic, local)

    def _headers_record(self, topic: str, local: Position) -> tuple[str, Position | None] | None:
        """(origin region, source position) from the entry's admin headers: this region and no source for an
        entry published here; None if the headers cannot be read."""
        headers = self._entry_headers(topic, local)
        if headers is None:
            return None
        if headers.replicated_from is None:
            return self.config.region, None
        origin = headers.origin(self.config.region, local)
        return headers.replicated_from, None if origin is None else origin.position

    def _entry_headers(self, topic: str, local: Position) -> adm.EntryHeaders | None:
        """The admin API's headers for one stored entry (one call), None if they cannot be read."""
        self.count("origin_lookups", 1)
        try:
            return self.effector.call(calls.ReadEntryHeaders(topic, local))
        except adminhttp.AdminError as e:
            log.warning("cannot read the origin of %s %s: %s", topic, local, e)
            return None

    def source_of(self, topic: str, local: Position) -> Origin | None:
        """Where the batched entry at ``local`` came from, region and position, as the brokers recorded it
        (a batched replicated copy shows clients no stamp): the interceptor's origin index, else the entry's
        headers from the admin API. None if neither can tell."""
        run = self._plugin_run(topic, local)
        record = None if run is None else (run.origin, run.origin_at(local.entry))
        if record is None or (record[0] != self.config.region and record[1] is None):
            record = self._headers_record(topic, local)
        if record is None:
            return None
        region, source = record
        if region == self.config.region:
            return Origin(region, local)
        return None if source is None else Origin(region, source)

    def _plugin_run(self, topic: str, local: Position) -> OriginRun | None:
        """The broker interceptor's run covering ``local``: one call covers a whole stretch of the topic,
        where the fallback costs one admin call per entry. None where it has no record or no plugin."""
        now = self.now
        if not self.config.plugin_index or not self.caps().usable(Capability.PLUGIN_INDEX, now=now):
            return None
        floor = self.floor.get(topic)
        if floor is not None and local < floor:
            return None  # below what the interceptor still records: never from its runs, even covered ones
        for attempt in range(2):
            run = covering(self.runs.get(topic, []), local)
            if run is not None:
                self.count("origin_plugin_hits", 1)
                return run
            if attempt or not self._may_ask_runs(topic, local, now):
                break
            self.asked[topic] = (now, local)
            try:
                runs = self.effector.call(calls.PluginOrigins(topic, local))
            except adminhttp.AdminError as e:
                self._runs_unavailable(e, now)
                return None
            self._take_runs(topic, local, runs, now)
        return None

    def _may_ask_runs(self, topic: str, local: Position, now: float) -> bool:
        """Whether the interceptor may be asked for ``topic``'s runs from ``local`` (not covered by the runs
        held): not below what it still records, and not just asked from there or answered empty."""
        floor = self.floor.get(topic)
        if floor is not None and local < floor:
            return False  # below what the interceptor still records (restarted broker, evicted runs)
        asked = self.asked.get(topic)
        if asked is not None and local <= asked[1] and now - asked[0] < tuning.PLUGIN_ASK_GAP_S:
            return False  # just asked from here on: what that answer lacks is not recorded
        # The last answer was empty: the index records nothing for it now.
        return not (
            asked is not None and not self.runs.get(topic) and now - asked[0] < tuning.PLUGIN_ASK_GAP_S
        )

    def _runs_unavailable(self, error: adminhttp.AdminError, now: float) -> None:
        if isinstance(error, adminhttp.AdminNotFound):
            if self.caps().get(Capability.PLUGIN_INDEX) is None:
                log.info("no GeoSync interceptor in this region: origins come from per-entry lookups")
            self.learn(Capability.PLUGIN_INDEX, False, now)
        else:
            log.warning("interceptor origin index unavailable: %s", error)

    def _take_runs(self, topic: str, local: Position, runs: list[OriginRun], now: float) -> None:
        """What the interceptor answered for ``topic`` asked from ``local``."""
        self.runs[topic] = sorted(runs, key=lambda run: run.start)  # disjoint: found by bisection
        if runs and Position(runs[0].ledger, runs[0].first) > local:
            # Asked from ``local``, answered from later: nothing at or below ``local`` is recorded.
            self.floor[topic] = Position(runs[0].ledger, runs[0].first)
        self.learn(Capability.PLUGIN_INDEX, True, now)

    def records(self, topic: str) -> naming.Records:
        """What the interceptor's index answered for ``topic``, as the core names entries from it."""
        usable = self.config.plugin_index and self.caps().usable(Capability.PLUGIN_INDEX, now=self.now)
        there = self.config.plugin_index and self.caps().get(Capability.PLUGIN_INDEX) is True
        return naming.Records(usable, there, self.runs.get(topic, ()), self.floor.get(topic))

    def answer(self, question: naming.Question) -> object:
        """Make the lookup the core asked for (``core.naming``): the calls the resolver's callbacks made."""
        if question.kind == "recorded":
            return self.recorded(question.topic, question.local)
        if question.kind == "source":
            return self.source_of(question.topic, question.local)
        return self.lookup_origin(question.topic, question.local)

    def prefetch(self, tails: Iterable[Tail]) -> None:
        """Ask the interceptor, all at once on the pool, for the runs of every topic whose queued entries
        begin with a replicated batched entry its runs do not cover. Draining asks topic after topic
        otherwise, the round waiting for each answer in turn: on a busy two-core region, a third of the
        round's time (py-spy, 1,000 acks/s over 10 topics, BENCHMARKS.md)."""
        now = self.now
        if not self.config.plugin_index or self.caps().get(Capability.PLUGIN_INDEX) is not True:
            return  # unknown yet: the first drain learns it, one call

        def replicated_batch(m: msg.Received) -> bool:
            return m.batch_index >= 0 and drift.producer_cluster(m.producer) != self.config.region

        asks: list[tuple[str, Position]] = []
        for tail in tails:
            topic = tail.topic
            first = tail.first_unread(replicated_batch)
            if first is None or covering(self.runs.get(topic, []), first) is not None:
                continue
            if self._may_ask_runs(topic, first, now):
                asks.append((topic, first))
        if len(asks) < 2:
            return  # draining asks for one as cheaply
        for topic, first in asks:
            self.asked[topic] = (now, first)

        def ask(item: tuple[str, Position]) -> list[OriginRun] | adminhttp.AdminError:
            topic, first = item
            try:
                return self.effector.call(calls.PluginOrigins(topic, first))
            except adminhttp.AdminError as e:
                return e

        self.count("origin_prefetches", len(asks))
        for (topic, first), answer in zip(asks, self.effector.map(ask, asks), strict=True):
            if isinstance(answer, adminhttp.AdminError):
                self._runs_unavailable(answer, now)
            else:
                self._take_runs(topic, first, answer, now)
