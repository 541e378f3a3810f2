"""The agent's settings in groups: the sections of its YAML file and of the settings reference.

``AgentConfig`` keeps one flat field per setting (the code reads ``config.poll_interval_s``); operators see
them grouped by what they are for. A file may name a setting at the top level or inside its group's
section, and the agent reads both the same way::

    region: a
    connection: {admin_url: http://broker:8080, service_url: pulsar://broker:6650}
    sync: {poll_interval_s: 0.5, claims_from: acknowledgements}

A test holds ``GROUPS`` to ``AgentConfig``: every setting in exactly one group.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from geosync_core.errors import PermanentError


class ConfigError(PermanentError):
    """The agent's configuration is invalid; the message names the key and what to do."""


@dataclass(frozen=True)
class Group:
    """Settings an operator thinks of together: a section of the YAML file and of the settings reference.
    A file may name a setting at the top level or inside its group's section (``sync: {poll_interval_s: 1}``);
    the agent reads both the same way (``load``)."""

    name: str
    title: str
    doc: str
    settings: tuple[str, ...]


GROUPS: tuple[Group, ...] = (
    Group(
        "connection",
        "Region and connection",
        "Which region this agent serves and how it reaches the region's brokers.",
        (
            "region",
            "admin_url",
            "service_url",
            "broker_admin_urls",
            "brokers_refresh_s",
            "tls_trust_certs_file",
            "token_file",
        ),
    ),
    Group(
        "sidecar",
        "Sidecar mode",
        "One agent per broker, syncing the topics its broker owns (docs/deployment/kubernetes.md).",
        ("shard_by_ownership", "broker_id", "ownership_refresh_s"),
    ),
    Group(
        "signing",
        "Control messages and their keys",
        "The control topic the regions' agents talk on, and the Ed25519 keys they sign and check with.",
        ("control_topic", "signing_key_file", "signing_key_id", "keyring_file"),
    ),
    Group(
        "scope",
        "What is synced",
        "The namespaces, topics and subscriptions whose acknowledgements this agent syncs.",
        ("namespaces", "include", "exclude"),
    ),
    Group(
        "sync",
        "Acknowledgement sync",
        "How often the agent reads cursors and the broker plugin's feed, writes what other regions "
        "claimed, and what its own claims are made of.",
        (
            "poll_interval_s",
            "feed_interval_s",
            "min_apply_interval_s",
            "discover_interval_s",
            "resync_interval_s",
            "plugin_cursors",
            "plugin_index",
            "claims_from",
            "max_tracked_entries",
        ),
    ),
    Group(
        "snapshots",
        "Pulsar's replicated subscriptions (PIP-33)",
        "Namespaces synced through Pulsar's own snapshot markers instead of GeoSync's claims.",
        ("snapshot_namespaces", "snapshot_interval_s", "snapshot_timeout_s"),
    ),
    Group(
        "replicators",
        "Stuck replicators",
        "When a geo-replicator that stopped moving is reported, and unloaded to restart it.",
        ("replicator_stall_s", "replicator_unload_after_s"),
    ),
    Group(
        "state",
        "Local state",
        "Where the agent's checkpoint lives and how often it is written (decision 0012).",
        ("state_dir", "checkpoint_interval_s"),
    ),
    Group(
        "metrics",
        "Metrics and health",
        "The HTTP endpoint for Prometheus, /state and the probes, and when the agent calls itself stuck.",
        ("metrics_port", "metrics_host", "stuck_after_s"),
    ),
    Group(
        "metadata_store",
        "The region's ZooKeeper",
        "The region's metadata store: the policy mirror's state and the region's incarnation live there.",
        (
            "zookeeper",
            "zookeeper_auth_scheme",
            "zookeeper_auth_file",
            "zookeeper_world_read",
            "incarnation_node",
        ),
    ),
    Group(
        "mirror",
        "Policy mirror",
        "Tenant and namespace policies kept the same in every region (PIP-136 isolated metadata stores).",
        (
            "mirror_policies",
            "mirror_events_topic",
            "mirror_tenants",
            "mirror_exclude_tenants",
            "mirror_root",
            "mirror_session_timeout_s",
            "mirror_recheck_interval_s",
            "mirror_tombstone_ttl_s",
            "mirror_checkpoint_part_bytes",
        ),
    ),
)
GROUP_OF = {name: group.name for group in GROUPS for name in group.settings}
"""Each setting's group."""


def ungrouped(raw: dict[str, Any], path: str | pathlib.Path) -> dict[str, Any]:
    """``raw`` with every group's section (``GROUPS``) lifted to the top level; a ``ConfigError`` for a
    setting in another group's section, or given twice."""
    sections = {group.name: group for group in GROUPS}
    flat = {name: value for name, value in raw.items() if name not in sections}
    for name, section in raw.items():
        group = sections.get(name)
        if group is None:
            continue
        if not isinstance(section, dict):
            raise ConfigError(
                f"{path}: '{name}' is a group of settings: expected a mapping, e.g. {name}: "
                f"{{{group.settings[0]}: ...}}"
            )
        for key, value in section.items():
            if key not in group.settings:
                home = GROUP_OF.get(key)
                where = f"it belongs in '{home}'" if home else f"'{name}' holds {', '.join(group.settings)}"
                raise ConfigError(f"{path}: '{key}' is not a setting of '{name}': {where}")
            if key in flat:
                raise ConfigError(
                    f"{path}: '{key}' is given twice, at the top level and in '{name}': keep one"
                )
            flat[key] = value
    return flat
