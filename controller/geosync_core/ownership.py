"""Which topics a broker owns, from the bundles it owns: how a sidecar agent shards a region's work.

Why: with one agent per broker (the sidecar mode), each agent syncs exactly the topics its broker owns. Pulsar
assigns topics to brokers by namespace bundle: a bundle is a range of a 32-bit hash space, and a topic belongs
to the bundle whose range holds the CRC-32 of its full name (``persistent://tenant/ns/topic-partition-N``; the
lab's integration test checks this against the broker's own ``/lookup/v2/topic/.../bundle`` answer). A
broker's bundles are one admin call (``/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``), so the agent
asks that every ``ownership_refresh_s`` and decides ownership of every topic locally: no call per topic,
and a bundle split (the halves keep the topics of the whole) needs nothing special.

Ranges are ``[lower, upper)``, except the namespace's last bundle, which holds ``0xffffffff`` too.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FULL_UPPER = 0xFFFFFFFF
_BUNDLE = re.compile(r"^(?P<ns>[^/]+/(?:[^/]+/)?[^/]+)/0x(?P<lo>[0-9a-fA-F]{8})_0x(?P<hi>[0-9a-fA-F]{8})$")
_OPTIONAL = re.compile(r"^Optional\[(?P<v>[^\]]*)\]$")


def topic_hash(topic: str) -> int:
    """The 32-bit hash Pulsar places ``topic`` by (CRC-32 of its full name, UTF-8)."""
    return zlib.crc32(topic.encode("utf-8"))


def namespace_of(topic: str) -> str:
    """``tenant/ns`` of ``persistent://tenant/ns/topic`` (``tenant/cluster/ns`` for v1 names)."""
    parts = topic.split("://", 1)[-1].split("/")
    return "/".join(parts[:-1])


def _contains(bundle: tuple[int, int], h: int) -> bool:
    lo, hi = bundle
    return lo <= h < hi or (hi == FULL_UPPER and h == FULL_UPPER)


@dataclass(frozen=True)
class Owned:
    """The bundles one broker owns, per namespace (an immutable snapshot: the sync loop refreshes it and the
    discovery task reads it)."""

    bundles: Mapping[str, tuple[tuple[int, int], ...]]

    @classmethod
    def none(cls) -> Owned:
        return cls({})

    @classmethod
    def from_owned_namespaces(cls, answer: Mapping[str, Any]) -> Owned:
        """From ``ownedNamespaces``'s answer (``{"tenant/ns/0xLO_0xHI": {"is_active": ...}}``): every active
        bundle; keys that name no bundle range are ignored."""
        out: dict[str, list[tuple[int, int]]] = {}
        for key, status in answer.items():
            match = _BUNDLE.match(str(key))
            if match is None:
                continue
            if isinstance(status, Mapping) and status.get("is_active") is False:
                continue
            out.setdefault(match["ns"], []).append((int(match["lo"], 16), int(match["hi"], 16)))
        return cls({ns: tuple(sorted(ranges)) for ns, ranges in out.items()})

    def owns(self, topic: str) -> bool:
        ranges = self.bundles.get(namespace_of(topic))
        if not ranges:
            return False
        h = topic_hash(topic)
        return any(_contains(r, h) for r in ranges)

    def count(self) -> int:
        return sum(len(r) for r in self.bundles.values())

    def names(self) -> list[str]:
        """The bundles as Pulsar names them, for /state."""
        return [
            f"{ns}/0x{lo:08x}_0x{hi:08x}" for ns, ranges in sorted(self.bundles.items()) for lo, hi in ranges
        ]


def moved(before: Owned, after: Owned, topics: Iterable[str]) -> tuple[list[str], list[str]]:
    """Of ``topics``, those ``after`` no longer owns and those it owns that ``before`` did not."""
    lost, gained = [], []
    for topic in topics:
        was, now = before.owns(topic), after.owns(topic)
        if was and not now:
            lost.append(topic)
        elif now and not was:
            gained.append(topic)
    return lost, gained


def broker_id_from_runtime(config: Mapping[str, Any]) -> str | None:
    """The id a broker lists itself under (``advertisedAddress:webServicePort``, the TLS port when it serves
    only TLS), from ``/admin/v2/brokers/configuration/runtime`` (which prints optional ports as
    ``Optional[8080]``); None when the answer does not say."""
    address = str(config.get("advertisedAddress") or "").strip()
    port = _optional(config.get("webServicePort")) or _optional(config.get("webServicePortTls"))
    if not address or not port:
        return None
    return f"{address}:{port}"


def _optional(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    match = _OPTIONAL.match(text)
    if match is not None:
        text = match["v"].strip()
    if text in ("", "Optional.empty", "null", "None"):
        return None
    return text if text.isdigit() else None
