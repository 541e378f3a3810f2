"""The sidecar agent's view of what its broker owns (``shard_by_ownership``): docs/agent.md, "Sidecar agents".

Why: with one agent per broker, each syncs the topics its broker owns and no other, so that N sidecars do
the work once, not N times, and their cursor writes go to the broker they sit next to. ``Ownership`` finds
which of the region's brokers this agent's ``admin_url`` is (``broker_id``, else the broker's runtime
configuration, checked against the region's active brokers), and refreshes that broker's bundles every
``ownership_refresh_s`` (one admin call; ``geosync_core.ownership`` places topics in them). The sync loop
hands topics off and takes them over on the differences (``Agent.own``).

Claimed topics that no broker owns (after a broker died, until someone looks them up) are looked up by the
agents that hold claims for them, at most every ``LOOKUP_S`` per topic: the look-up has a broker take the
bundle, and that broker's sidecar then applies the claims. Which bundles some broker owns is asked of every
active broker every ``LOOKUP_S`` (one call each), so topics owned elsewhere cost no look-up.
"""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from geosync_agent.ports import Admin
from geosync_core.errors import TemporaryError
from geosync_core.ownership import Owned, broker_id_from_runtime

log = logging.getLogger(__name__)

LOOKUP_S = 30.0
"""Least time between two look-ups of one claimed topic this agent's broker does not own."""
MAX_LOOKUPS = 10_000
"""Topics remembered as looked up; the memory starts over beyond."""


class OwnershipUnknown(TemporaryError):
    """Which broker this agent sits next to, or what it owns, cannot be told now (the message says why and
    what to set); the agent syncs nothing until it can, and tries again."""


@dataclass
class Ownership:
    region: str
    admin_url: str
    configured: str = ""
    """``broker_id`` from the configuration ("": find it)."""
    refresh_s: float = 2.0
    me: str = ""
    """This agent's broker, as the region lists its active brokers ("" until found)."""
    owned: Owned = field(default_factory=Owned.none)
    """What ``me`` owned at the last refresh (read by the discovery task too: replaced, never changed)."""
    refreshed_at: float | None = None
    due_at: float = 0.0
    looked_up: dict[str, float] = field(default_factory=dict)
    """Claimed topics owned elsewhere or nowhere -> monotonic time they may be looked up again."""
    region_owned: Owned = field(default_factory=Owned.none)
    """What every active broker of the region owned at the last ``refresh_region`` (merged)."""
    region_due_at: float = 0.0

    def owns(self, topic: str) -> bool:
        return self.owned.owns(topic)

    def refresh_now(self) -> None:
        """Refresh at the next round (a cursor write found a topic gone from this broker)."""
        self.due_at = 0.0

    def refresh(self, admin: Admin, now: float) -> tuple[Owned, Owned] | None:
        """Ask what this broker owns if due: (before, after), or None when not due. OwnershipUnknown or
        AdminError when it cannot be told (the previous answer stays)."""
        if now < self.due_at:
            return None
        self.due_at = now + self.refresh_s
        if not self.me:
            self.me = self.identify(admin)
            log.info("sharding by ownership: this agent syncs the topics broker %s owns", self.me)
        answer = admin.owned_bundles(self.region, self.me)
        before, self.owned = self.owned, Owned.from_owned_namespaces(answer)
        self.refreshed_at = now
        return before, self.owned

    def identify(self, admin: Admin) -> str:
        """This agent's broker id: ``broker_id`` if set, else what the broker's runtime configuration says
        (``advertisedAddress:webServicePort``), else the only active broker on ``admin_url``'s port."""
        active = admin.active_brokers(self.region)
        if self.configured:
            if self.configured not in active:
                raise OwnershipUnknown(
                    f"broker_id {self.configured} is not one of {self.region}'s active brokers "
                    f"({', '.join(active) or 'none'}): set it to this broker's id as "
                    f"'pulsar-admin brokers list {self.region}' prints it (or the broker is still starting)"
                )
            return self.configured
        runtime = admin.runtime_configuration()
        found = broker_id_from_runtime(runtime)
        if found in active:
            return str(found)
        port = str(urllib.parse.urlsplit(self.admin_url).port or "")
        same_port = [b for b in active if b.rsplit(":", 1)[-1] == port]
        if len(same_port) == 1:
            return same_port[0]
        raise OwnershipUnknown(
            f"cannot tell which of {self.region}'s active brokers ({', '.join(active) or 'none'}) this "
            f"agent's admin_url {self.admin_url} reaches (its runtime configuration names "
            f"{found or 'no address'}): set broker_id to that broker's id as 'pulsar-admin brokers list' "
            "prints it"
        )

    def refresh_region(self, admin: Admin, now: float) -> None:
        """Ask every active broker what it owns, at most every LOOKUP_S (for ``should_look_up``)."""
        if now < self.region_due_at:
            return
        self.region_due_at = now + LOOKUP_S
        merged: dict[str, tuple[tuple[int, int], ...]] = {}
        for broker in admin.active_brokers(self.region):
            owned = Owned.from_owned_namespaces(admin.owned_bundles(self.region, broker))
            for ns, ranges in owned.bundles.items():
                merged[ns] = tuple(sorted({*merged.get(ns, ()), *ranges}))
        self.region_owned = Owned(merged)

    def should_look_up(self, topic: str, now: float) -> bool:
        """Whether to look ``topic`` up now (claimed here, not owned by this broker): when no broker owned
        its bundle at the last ``refresh_region``, at most every LOOKUP_S."""
        if self.owned.owns(topic) or self.region_owned.owns(topic) or now < self.looked_up.get(topic, 0.0):
            return False
        if len(self.looked_up) >= MAX_LOOKUPS:
            self.looked_up.clear()
        self.looked_up[topic] = now + LOOKUP_S
        return True

    def is_me(self, lookup: dict[str, Any]) -> bool:
        """Whether a topic look-up's answer names this agent's broker."""
        for key in ("httpUrl", "httpUrlTls"):
            netloc = urllib.parse.urlsplit(str(lookup.get(key) or "")).netloc
            if netloc and netloc == self.me:
                return True
        return False

    def status(self, now: float) -> dict[str, Any]:
        """For /state: the broker, its bundles, and how old that answer is."""
        return {
            "broker": self.me,
            "bundles": self.owned.names(),
            "refreshed_s_ago": None if self.refreshed_at is None else round(now - self.refreshed_at, 1),
        }
