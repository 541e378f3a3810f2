"""The outside calls the agent's round makes, as values the ``Effector`` carries out.

Each value names one call to the region's admin API (or to the broker plugin's endpoints behind it) with its
arguments; ``Effector.call`` performs it on the calling thread, through that thread's admin client, and
returns its answer or raises its error as the adapter does. The round holds no client of its own: every
outside call it makes is one of these, performed in one place, and each is what the core will return as an
effect once the decisions move there (``docs/decisions/0001-sans-io-agent.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from geosync_adapters.admin import EntryHeaders
from geosync_agent.owning import Ownership
from geosync_agent.ports import Admin
from geosync_core import pluginapi
from geosync_core.indexing import OriginRun
from geosync_core.ownership import Owned
from geosync_core.positions import Position

T_co = TypeVar("T_co", covariant=True)


class Call(Protocol[T_co]):
    """One outside call: ``run`` makes it through ``admin``."""

    def run(self, admin: Admin) -> T_co: ...


@dataclass(frozen=True, slots=True)
class InternalStats:
    """A topic's cursors and ledgers (``internalStats``): the poll of its subscriptions' cursors."""

    topic: str

    def run(self, admin: Admin) -> dict[str, Any]:
        return admin.internal_stats(self.topic)


@dataclass(frozen=True, slots=True)
class TopicStats:
    """A topic's stats: its subscriptions with their consumers and type."""

    topic: str

    def run(self, admin: Admin) -> dict[str, Any]:
        return admin.topic_stats(self.topic)


@dataclass(frozen=True, slots=True)
class LookupTopic:
    """Which broker serves a topic (a look-up also has some broker take a bundle nobody owns)."""

    topic: str

    def run(self, admin: Admin) -> dict[str, Any]:
        return admin.lookup_topic(self.topic)


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """Create a topic (a control topic where auto topic creation is off); True if it was created now."""

    topic: str

    def run(self, admin: Admin) -> bool:
        return admin.create_topic(self.topic)


@dataclass(frozen=True, slots=True)
class ReadEntryHeaders:
    """The headers brokers stored with one entry: where a replicated copy came from."""

    topic: str
    local: Position

    def run(self, admin: Admin) -> EntryHeaders:
        return admin.entry_headers(self.topic, ledger=self.local.ledger, entry=self.local.entry)


@dataclass(frozen=True, slots=True)
class PluginOrigins:
    """The broker interceptor's origin runs of a topic from ``start`` on."""

    topic: str
    start: Position

    def run(self, admin: Admin) -> list[OriginRun]:
        return admin.plugin_origins(self.topic, start=(self.start.ledger, self.start.entry))


@dataclass(frozen=True, slots=True)
class PluginFeed:
    """The broker plugin's acknowledgement feed after sequence number ``since``; its ``acked`` blocks read
    only if ``acked`` (claims_from: acknowledgements: in cursor mode nothing uses them)."""

    since: int
    epoch: str = ""
    """The broker run ``since`` counts in (the previous answer's ``epoch``): a restarted broker then
    confirms nothing by a sequence number of its earlier run."""
    acked: bool = True

    def run(self, admin: Admin) -> pluginapi.Feed:
        return admin.plugin_feed(since=self.since, epoch=self.epoch, acked=self.acked)


@dataclass(frozen=True, slots=True)
class RuntimeConfiguration:
    """The brokers' runtime configuration (whether the entry filter that hides markers is loaded)."""

    def run(self, admin: Admin) -> dict[str, Any]:
        return admin.runtime_configuration()


@dataclass(frozen=True, slots=True)
class RefreshOwnership:
    """Sidecar mode: the bundles this agent's broker owns, when due (``owning.Ownership.refresh``: the
    answer before and after, None when not due)."""

    ownership: Ownership
    now: float

    def run(self, admin: Admin) -> tuple[Owned, Owned] | None:
        return self.ownership.refresh(admin, self.now)


@dataclass(frozen=True, slots=True)
class RefreshRegionOwnership:
    """Sidecar mode: what every active broker owns, when due (for the claimed topics to look up)."""

    ownership: Ownership
    now: float

    def run(self, admin: Admin) -> None:
        self.ownership.refresh_region(admin, self.now)
