"""Discovery: which namespaces this region syncs, their topic partitions and wanted durable subscriptions.

Admin calls only (per namespace the broker plugin's list of its loaded topics where it answers, each other
topic's stats), on its own task with its own admin client; each pass is handed to the sync loop as one
``Discovered`` value through a ``Latest`` mailbox (the loop takes the newest pass, older ones are dropped),
so the loop never waits on per-topic admin calls and nothing is shared but the mailbox. The task itself, its
clock and its waits, is the shell's (``supervising.discover``): a pass is given the time it starts at, so the
simulator runs passes as they are.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from geosync_adapters import adminhttp
from geosync_agent.config import AgentConfig
from geosync_agent.effects import app_consumers
from geosync_agent.ports import Admin
from geosync_core import replicators
from geosync_core.capabilities import REPROBE_S

log = logging.getLogger(__name__)
PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<n>\d+)$")
INTERNAL_CURSORS = ("pulsar.repl.", "pulsar.dedup", "geosync-")
BROKER_SUBSCRIPTIONS = frozenset({"metadata-syncer", "__compaction"})
"""Durable subscriptions brokers keep for themselves: Pulsar's PIP-136 synchronizer consumes its sync topic
as ``metadata-syncer`` (each region must apply every event it has not seen; claims from a region whose
synchronizer went further would skip events here), and compaction keeps its cursor as ``__compaction``."""
T = TypeVar("T")
DISCOVERY_SHARE = 0.2
"""The most of the time discovery passes take (see ``pass_wait``)."""


@dataclass(frozen=True)
class Discovered:
    """One discovery pass: synced namespaces (with their replication clusters), topic partitions, and per
    topic the wanted durable subscriptions with their number of application consumers and type."""

    namespaces: dict[str, frozenset[str]]
    topics: tuple[str, ...]
    subscriptions: dict[str, dict[str, tuple[int, str]]]
    """topic -> subscription -> (application consumers, subscription type as the broker reports it)"""
    scanned_at: float | None = None
    """Monotonic time the pass started: what the agent learned after it is newer than the pass's absences
    (None: unknown, absences then delete nothing)."""
    listed: tuple[str, ...] | None = None
    """Every synced topic the namespaces listed, owned by this agent's broker or not (sharding by ownership:
    ``topics`` holds the owned ones); None: ``topics``."""
    replicators: dict[str, dict[str, replicators.Sample]] = field(default_factory=dict)
    """topic -> remote region -> its broker replicator (from the same stats as ``subscriptions``)"""
    unretained: tuple[str, ...] = ()
    """Synced namespaces that retain no acknowledged message here (``retains``)."""
    took_s: float = 0.0
    """Seconds the pass took (its admin calls and their parsing, on the discovery task)."""


class Latest(Generic[T]):
    """A one-slot mailbox between two tasks: ``put`` replaces, ``take`` empties."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: T | None = None

    def put(self, item: T) -> None:
        with self._lock:
            self._item = item

    def take(self) -> T | None:
        with self._lock:
            item, self._item = self._item, None
        return item


def partition_of(topic: str) -> int:
    match = PARTITION.match(topic)
    return int(match["n"]) if match else -1


def wanted(config: AgentConfig, topic: str, subscription: str) -> bool:
    """Whether ``subscription`` on ``topic`` is synced (the include/exclude patterns on ``topic/sub``)."""
    return _wanted(config.include, config.exclude, topic, subscription)


@functools.lru_cache(maxsize=65_536)
def _wanted(include: tuple[str, ...], exclude: tuple[str, ...], topic: str, subscription: str) -> bool:
    # Asked for every claim received and every cursor seen: remembered (fnmatch per pattern was a tenth of
    # handling a control message at 1,000 acks/s).
    match = PARTITION.match(topic)
    base = match["base"] if match else topic
    name = f"{base}/{subscription}"
    included = any(fnmatch.fnmatchcase(name, p) for p in include)
    return included and not any(fnmatch.fnmatchcase(name, p) for p in exclude)


def synced_topic(config: AgentConfig, topic: str) -> bool:
    """Whether ``topic`` (of a synced namespace) is one whose subscriptions are synced: persistent, not a
    control topic, not the policy mirror's events topic (GeoSync's own traffic: read by the mirror, never
    consumed by applications; tailing it only cost lookups)."""
    return _synced_topic(config.control_topic, config.mirror_events_topic, topic)


@functools.lru_cache(maxsize=65_536)
def _synced_topic(control_topic: str, mirror_events_topic: str, topic: str) -> bool:
    """``synced_topic``, remembered: asked for every claim received."""
    match = PARTITION.match(topic)
    base = match["base"] if match else topic
    return (
        topic.startswith("persistent://")
        and topic.rsplit("/", maxsplit=1)[-1] != control_topic
        and base != mirror_events_topic
    )


def synced(config: AgentConfig, topic: str, subscription: str) -> bool:
    """Whether ``subscription`` on ``topic`` (of a synced namespace) is synced: a durable application
    subscription (not a broker's or GeoSync's own cursor) the patterns want, on a synced topic."""
    return (
        synced_topic(config, topic)
        and not subscription.startswith(INTERNAL_CURSORS)
        and subscription not in BROKER_SUBSCRIPTIONS
        and wanted(config, topic, subscription)
    )


def synced_namespaces(admin: Admin, config: AgentConfig) -> dict[str, frozenset[str]]:
    if config.namespaces:
        names = list(config.namespaces)
    else:
        names = [ns for t in admin.tenants() if t != "pulsar" for ns in admin.namespaces(t)]
    out: dict[str, frozenset[str]] = {}
    for ns in names:
        try:
            clusters = frozenset(admin.replication_clusters(ns))
        except adminhttp.AdminNotFound:
            continue
        if config.region in clusters and len(clusters) > 1:
            out[ns] = clusters
    return out


def _amount(value: Any) -> int | None:
    """A retention limit from a policy (int) or the runtime configuration (string); None if malformed."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def retains(policy: Mapping[str, Any] | None, broker_defaults: Mapping[str, Any]) -> bool:
    """Whether a namespace keeps acknowledged messages: its own retention policy, or without one the brokers'
    ``defaultRetentionTimeInMinutes`` and ``defaultRetentionSizeInMB``. Either limit at 0 retains nothing.

    Why GeoSync cares: a message replicated into this region before the agent has created its subscription
    here is held by no cursor here (only the replicator's, which is done with it). Without retention Pulsar
    deletes its ledger as soon as it is closed: at a ledger rollover, a bundle unload, a broker restart. The
    subscription created afterwards at the earliest message does not have it, and a failover here loses it
    (seen in CI: a broker killed seconds after the traffic began)."""
    if policy is None:
        minutes = _amount(broker_defaults.get("defaultRetentionTimeInMinutes", 0))
        size = _amount(broker_defaults.get("defaultRetentionSizeInMB", 0))
    else:
        minutes = _amount(policy.get("retentionTimeInMinutes", 0))
        size = _amount(policy.get("retentionSizeInMB", 0))
    return minutes is not None and size is not None and minutes != 0 and size != 0


def unretained(admin: Admin, namespaces: Iterable[str]) -> tuple[str, ...]:
    """The ``namespaces`` that retain nothing (see ``retains``); one that cannot be read is left out."""
    out: list[str] = []
    defaults: Mapping[str, Any] | None = None
    for ns in namespaces:
        try:
            policy = admin.retention(ns)
            if policy is None and defaults is None:
                defaults = admin.runtime_configuration()
        except adminhttp.AdminError:
            continue
        if not retains(policy, defaults or {}):
            out.append(ns)
    return tuple(out)


TopicViews = Callable[[str], Mapping[str, Mapping[str, Any]]]
"""namespace -> topic -> its subscriptions and replicators as a subset of its stats (the plugin's list)."""


@dataclass
class PluginTopics:
    """The broker plugin's topic lists (``Admin.plugin_topics``) as discovery reads them: one call per
    namespace instead of one stats read per topic. A broker without the endpoint (an older plugin, or none)
    or refusing it is not asked again for REPROBE_S (on ``clock``, monotonic seconds); any other failure
    answers nothing for this pass. An empty answer only means every topic is read from its stats."""

    admin: Admin
    clock: Callable[[], float]
    refused_at: float | None = None

    def __call__(self, namespace: str) -> Mapping[str, Mapping[str, Any]]:
        if self.refused_at is not None and self.clock() - self.refused_at < REPROBE_S:
            return {}
        try:
            found = self.admin.plugin_topics(namespace)
        except (adminhttp.AdminNotFound, adminhttp.AdminForbidden) as e:
            if self.refused_at is None:
                log.info("the broker plugin lists no topics (%s): discovery reads every topic's stats", e)
            self.refused_at = self.clock()
            return {}
        except adminhttp.AdminError as e:
            log.warning("the broker plugin's topic list of %s is unavailable this pass: %s", namespace, e)
            return {}
        self.refused_at = None
        return found


def scan(
    admin: Admin,
    config: AgentConfig,
    *,
    now: float | None = None,
    owns: Callable[[str], bool] | None = None,
    views: TopicViews | None = None,
) -> Discovered:
    """One discovery pass (see the module docstring), started at monotonic time ``now`` (None: unknown, and
    its absences delete nothing: see ``Discovered.scanned_at``). ``owns``: sharding by ownership, only the
    topics it names are read and reported in ``topics`` (``listed`` has them all). ``views``: the plugin's
    topic lists (``PluginTopics``); a topic they list is not read from its stats."""
    namespaces = synced_namespaces(admin, config)
    topics: list[str] = []
    listed: list[str] = []
    subscriptions: dict[str, dict[str, tuple[int, str]]] = {}
    links: dict[str, dict[str, replicators.Sample]] = {}
    for ns in namespaces:
        known = views(ns) if views is not None else {}
        control = f"persistent://{ns}/{config.control_topic}"
        if owns is None or owns(control):
            # Its replicators carry the claims: one stuck leaves the other regions without them.
            with contextlib.suppress(adminhttp.AdminError):
                links[control] = replicators.samples_of(known.get(control) or admin.topic_stats(control))
        for topic in admin.topics(ns):
            if not synced_topic(config, topic):
                continue
            listed.append(topic)
            if owns is not None and not owns(topic):
                continue
            topics.append(topic)
            stats = known.get(topic)
            if stats is None:
                try:
                    stats = admin.topic_stats(topic)
                except adminhttp.AdminNotFound:
                    continue
            subscriptions[topic] = subscriptions_of(config, topic, stats)
            links[topic] = replicators.samples_of(stats)
    return Discovered(
        namespaces=namespaces,
        topics=tuple(topics),
        subscriptions=subscriptions,
        scanned_at=now,
        listed=None if owns is None else tuple(listed),
        replicators=links,
        unretained=unretained(admin, namespaces),
    )


def subscriptions_of(config: AgentConfig, topic: str, stats: Mapping[str, Any]) -> dict[str, tuple[int, str]]:
    """The synced subscriptions in ``topic``'s stats: name -> (application consumers, type)."""
    return {
        name: (app_consumers(sub), str(sub.get("type") or ""))
        for name, sub in (stats.get("subscriptions") or {}).items()
        if sub.get("isDurable", True) and synced(config, topic, name)
    }


def pass_wait(interval_s: float, took_s: float) -> float:
    """Seconds until the next discovery pass after one that took ``took_s``: ``interval_s``, or longer when
    passes are slow, so that discovery is busy at most DISCOVERY_SHARE of the time. A pass reads every
    topic's stats: at 10,000 subscriptions on 100 topics that is ~14 MB of JSON for the broker to build and
    the agent to parse, and a pass took 6.5 s on a loaded lab with 5 s between passes, so discovery never
    rested. What needs to be seen at once does not wait for it: the plugin's feed and other regions' claims
    start tracking a new subscription, and ask for a pass (``again``)."""
    return max(interval_s, took_s * (1 - DISCOVERY_SHARE) / DISCOVERY_SHARE)
