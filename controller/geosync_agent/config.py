"""The agent's settings: one YAML file per region, checked at start-up with the bad key named.

Secrets never come from the command line: the region's signing key, the admin/broker token and the
ZooKeeper credentials are read from files (``signing_key_file``, ``token_file``, ``zookeeper_auth_file``) or
from the environment (``GEOSYNC_TOKEN``), and are never logged, nor shown in ``/state`` or the metrics.

Signing (docs/deployment/security.md, "Signing keys"): each region signs its control messages with its own
Ed25519 key (``signing_key_file``, ``signing_key_id``) and accepts each region's messages under the keys its
keyring lists for that region (``keyring_file``). The shared HMAC key of earlier releases (``key_file``,
``GEOSYNC_KEY``: whoever held it could speak for every region) is refused with the step to per-region keys
(``LEGACY_KEY_REFUSED``).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from geosync_adapters import adminhttp, messaging, routing, signing
from geosync_adapters import zookeeper as zk
from geosync_agent import settings_groups
from geosync_core import envelopes

ConfigError = settings_groups.ConfigError

CONTROL_TOPIC = "geosync-control"
PER_REGION_KEYS = (
    "create every region's key and the keyring in one step with 'geoctl keys init --region A --region B "
    "... --out DIR', then give each region's agent signing_key_file and signing_key_id (its own key) and "
    "keyring_file (docs/deployment/security.md, Signing keys)"
)
LEGACY_KEY_REFUSED = (
    "the shared HMAC key (key_file, GEOSYNC_KEY) is no longer supported: whoever held it could sign for "
    f"every region. Remove it and {PER_REGION_KEYS}"
)


@dataclass(frozen=True)
class AgentConfig:
    region: str
    """This agent's region (the Pulsar cluster name). An agent talks to this region only."""
    admin_url: str
    """The region's admin REST API, e.g. http://broker:8080."""
    service_url: str
    """The region's binary protocol URL, e.g. pulsar://broker:6650."""
    broker_admin_urls: tuple[str, ...] = ()
    """Further admin URLs of the region's brokers, asked when ``admin_url`` does not answer, until the
    region's list of active brokers (``/admin/v2/brokers/{region}``, every ``brokers_refresh_s``) does."""
    brokers_refresh_s: float = 30.0
    """How often the region's active brokers are listed (their acknowledgement feeds are all read)."""
    shard_by_ownership: bool = False
    """Sidecar mode: sync only the topics whose bundles the broker at ``admin_url`` owns (one agent per
    broker, next to it), taking topics over and handing them off as bundles move. Needs the broker plugin
    (its feed and cursor writes answer for the broker's own topics). False: one agent for the whole region."""
    broker_id: str = ""
    """With ``shard_by_ownership``: this broker's id as ``pulsar-admin brokers list REGION`` prints it
    (``host:webServicePort``; or env GEOSYNC_BROKER_ID, which the Helm chart's sidecar sets from the pod);
    "": read from the broker's runtime configuration."""
    ownership_refresh_s: float = 2.0
    """With ``shard_by_ownership``: how often the broker's bundles are asked (a moved topic waits about this
    long for its new owner's agent)."""
    signing_key_file: str = ""
    """This region's Ed25519 private key, PKCS#8 PEM (``geoctl keys generate``)."""
    signing_key_id: str = ""
    """The id of that key, as every keyring lists it under this region."""
    keyring_file: str = ""
    """YAML or JSON ``{region: {key_id: "ed25519:..." or public key file}}``: the keys whose signatures are
    accepted for each region's control messages (several per region while a key is rotated)."""
    token_file: str = ""
    """Optional file with a token for the region's brokers and admin API. Or env GEOSYNC_TOKEN."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to sync; empty means every namespace replicated to this region and at least one other."""
    include: tuple[str, ...] = ("*",)
    """fnmatch patterns over "topic/subscription" (topic without partition suffix) to sync."""
    exclude: tuple[str, ...] = ()
    """fnmatch patterns to leave alone; checked after ``include``."""
    poll_interval_s: float = 0.25
    """How often cursors are read and remote state applied. Sets the floor of the sync lag."""
    plugin_cursors: bool = True
    """Read cursors from the broker plugin's acknowledgement feed and move them with its cursor writes
    where the broker loads GeoSync's interceptor (detected; false: the admin API only)."""
    plugin_index: bool = True
    """Name replicated entries' origins from the interceptor's origin index where the brokers have it
    (detected); false: from each entry's admin headers, as with brokers without the plugin (one call per
    batched entry and per verified producer)."""
    tls_trust_certs_file: str = ""
    """CA bundle (PEM) that signed the brokers' certificates, for https:// admin and pulsar+ssl:// service
    URLs ("": the system's CAs). Certificates are always verified, host names included."""
    feed_interval_s: float = 0.1
    """Round interval while the broker plugin's acknowledgement feed answers (a round then costs one cheap
    call instead of a cursor poll per topic, so it can run more often)."""
    min_apply_interval_s: float = 0.5
    """Least time between two mark-delete moves of one subscription (batches moves under load)."""
    discover_interval_s: float = 10.0
    """How often namespaces, topics and subscriptions are listed."""
    resync_interval_s: float = 30.0
    """How often the full known state is republished, so a restarted peer catches up without history.
    Stretched with many subscriptions so that resyncs send at most 100 states a second on average (100 s at
    10,000 subscriptions: ``runtime.RESYNC_STATES_PER_S``); lost sends bring one forward."""
    replicator_stall_s: float = 300.0
    """A broker replicator (Pulsar's own geo-replication, out of this region) holding a backlog that sent
    nothing for this long is reported stalled in /state (``replicators_stalled``) and the metric
    ``geosync_replicators_stalled``: the other region is then missing messages
    (``geosync_core/replicators.py``). Judged at each discovery pass (``discover_interval_s``)."""
    replicator_unload_after_s: float = 0.0
    """Opt-in (0, the default: never): a topic whose replicator out of this region has been stalled *while
    connected* for this long is unloaded here, so that Pulsar starts a new replicator (4.0's can stay stuck
    for good after a failed send: apache/pulsar#25097). Not again for that topic until a doubling wait has
    passed (this, 2x, 4x, ... at most an hour) while it keeps getting stuck; its clients reconnect at each
    unload. At least ``replicator_stall_s``. Sidecars unload only the topics their broker owns
    (``geosync_core/replicators.py``, ``Unsticking``)."""
    control_topic: str = CONTROL_TOPIC
    """Local name of the replicated control topic created in every synced namespace."""
    metrics_port: int = 0
    """Port for Prometheus metrics, /healthz, /readyz and /state (0: none)."""
    stuck_after_s: float = 120.0
    """A loop (the sync rounds; the policy mirror's) that makes no progress for this long is stuck in a call
    that does not return: /healthz fails and the process exits with status 3, so that whatever supervises it
    restarts it (``geosync_agent.watching``). A round that ends and an outside call that ends are progress,
    failed or not: a region that is down fails /readyz, never this. Above /readyz's stall limit (60 s) and
    the longest rounds of an overloaded region (45 s seen)."""
    state_dir: str = ""
    """Directory for the agent's checkpoint (``checkpoint.json.z``), so a restart resumes where it stopped
    instead of re-reading every topic from its earliest message ("": no checkpoint). The sidecar's volume."""
    checkpoint_interval_s: float = 10.0
    """How often the checkpoint is written (and once more at shutdown)."""
    max_tracked_entries: int = 500_000
    """Budget of entries the agent keeps (origin, key, batch size: about 150 bytes each when both regions
    produce), over all topics. Entries every subscription acknowledged are forgotten anyway; this bounds what
    a subscription far behind (nobody consumes it) holds back: the largest topics forget their oldest, and a
    subscription below them is parked (neither planned nor claimed, counted and shown in /state) until it
    catches up: a failover of it may deliver again what it acknowledged there, never loses anything."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint binds (0.0.0.0 in a pod, so the kubelet and Prometheus reach it)."""
    zookeeper: str = ""
    """The region's ZooKeeper (policy mirror)."""
    zookeeper_auth_scheme: str = "digest"
    """How the mirror authenticates to ZooKeeper when ``zookeeper_auth_file`` is set (``digest`` only)."""
    zookeeper_auth_file: str = ""
    """A file holding ``user:password``: the mirror authenticates with it and creates its own nodes (under
    ``mirror_root``) with an ACL giving that identity every right and nobody else any ("": unauthenticated,
    world-open nodes). docs/deployment/security.md, "ZooKeeper authentication"."""
    zookeeper_world_read: bool = False
    """Let every ZooKeeper client read (never write) the mirror's own nodes (with ``zookeeper_auth_file``)."""
    snapshot_namespaces: tuple[str, ...] = ()
    """fnmatch patterns of namespaces synced in snapshot mode (PIP-33 markers; mark-delete only), for
    brokers that do not stamp __MSG_PROP_REPL_SOURCE_POSITION (before 3.0.11 / 3.3.6 / 4.0.4).
    Needs the broker plugins' entry filter."""
    claims_from: str = "acknowledgements"
    """What this region's claims are made of (decision 0015; ``geosync_agent.core.acknowledged``).
    ``acknowledgements`` (the default): only what consumers acknowledged, as the broker plugin's feed
    reports it (``acked``): the claim is the cursor's state limited to it, so a cursor move no consumer made
    (created at Latest, clear-backlog, skip, TTL expiry, a forward reset) is acknowledged nowhere else; a
    subscription first seen claims nothing it did not see acknowledged, and whatever the feed misses
    (``overflowed``, ``acked_lost``, a broker restart) is re-delivered after a failover, never lost. Where the
    plugin's feed carries no ``acked`` (no plugin, an older one) the claims are the cursor's whatever this
    says. ``cursor``: each subscription's whole cursor state, whoever moved it (the behaviour before
    decision 0015: a jump in one region is acknowledged in the others too)."""
    snapshot_interval_s: float = 1.0
    """How often a snapshot of a topic with new data is started (PIP-33's default frequency)."""
    snapshot_timeout_s: float = 30.0
    """A snapshot not complete by then is aborted (PIP-33's default): none completes while a region is
    down."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    mirror_policies: bool = True
    """Run the policy mirror (needs ``zookeeper``): tenant and namespace policies kept equal everywhere."""
    mirror_events_topic: str = "persistent://geo/abc/geosync-policy-events"
    """The replicated topic policy events travel on. Its namespace must be replicated to every region
    (the lab's ``geo/abc`` is); in production use a namespace created for GeoSync alone."""
    mirror_tenants: tuple[str, ...] = ("*",)
    """fnmatch patterns of tenants whose policies are mirrored."""
    mirror_exclude_tenants: tuple[str, ...] = ("public", "pulsar")
    """Tenants never mirrored: Pulsar creates ``public`` and ``pulsar`` in each cluster for that cluster."""
    incarnation_node: str = "/geosync/incarnation"
    """Node of the region's ZooKeeper (``zookeeper``: the metadata store, wiped with the region) holding its
    incarnation: a region rebuilt under its name is told apart from what it was (docs/agent.md, "A region
    rebuilt under its name"). Without ``zookeeper`` there is none, and claims made before a rebuild are not
    told apart from new ones."""
    mirror_root: str = "/geosync/policy-mirror"
    """Region-local ZooKeeper node under which the mirror keeps its leader lock and checkpoint."""
    mirror_session_timeout_s: float = 6.0
    """ZooKeeper session timeout of the mirror; a standby takes over about this long after a crash."""
    mirror_recheck_interval_s: float = 2.0
    """How often parked (rejected) events are re-checked and the checkpoint is written."""
    mirror_tombstone_ttl_s: float = 7 * 86400.0
    """A deletion's tombstone is kept at least this long, and until every peer region sent a newer event."""
    mirror_checkpoint_part_bytes: int = 512 * 1024
    """The mirror checkpoint is cut into ZooKeeper nodes of at most this many compressed bytes
    (ZooKeeper refuses nodes over ``jute.maxbuffer``, about 1 MB)."""

    def keys(self) -> envelopes.Keys:
        """The signer and keyring; a ``ConfigError`` saying what to do when they are missing or unusable."""
        if os.environ.get("GEOSYNC_KEY"):
            raise ConfigError(LEGACY_KEY_REFUSED)
        if bool(self.signing_key_file) != bool(self.signing_key_id):
            raise ConfigError("signing_key_file and signing_key_id go together: set both")
        if not self.signing_key_id:
            raise ConfigError(f"no signing key: {PER_REGION_KEYS}")
        if not self.keyring_file:
            raise ConfigError("signing_key_id needs keyring_file (the keys accepted for every region)")
        try:
            keyring = signing.load_keyring(self.keyring_file)
            signer = self._signer(keyring)
        except signing.KeyFileError as e:
            raise ConfigError(str(e)) from e
        return envelopes.Keys(signer, keyring)

    def _signer(self, keyring: envelopes.Keyring) -> envelopes.Signer:
        signer = signing.load_signer(self.signing_key_file, self.signing_key_id)
        if not signing.holds(keyring, self.region, signer):
            raise ConfigError(
                f"keyring_file does not list signing key {signer.key_id!r} under region {self.region!r} with "
                "this key's public key: add KEY_ID.pub to every region's keyring first, then sign with it"
            )
        return signer

    def zookeeper_auth(self) -> zk.ZkAuth | None:
        """The mirror's ZooKeeper credentials (None: unauthenticated); a ``ConfigError`` naming the file,
        never its content, when they are unusable."""
        if not self.zookeeper_auth_file:
            return None
        if self.zookeeper_auth_scheme not in zk.SCHEMES:
            raise ConfigError(
                f"zookeeper_auth_scheme {self.zookeeper_auth_scheme!r} is not supported; use "
                + " or ".join(zk.SCHEMES)
            )
        try:
            text = pathlib.Path(self.zookeeper_auth_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"zookeeper_auth_file {self.zookeeper_auth_file!r} cannot be read: {e}") from e
        user, colon, password = text.partition(":")
        if not (user and colon and password) or "\n" in text:
            raise ConfigError(
                f"zookeeper_auth_file {self.zookeeper_auth_file!r} must hold one line user:password"
            )
        return zk.ZkAuth(user, password, world_read=self.zookeeper_world_read)

    def admin_client(
        self, *, timeout: float, on_call: Callable[[str, float], None] | None = None
    ) -> routing.RegionAdmin:
        """An admin client for this region's brokers (``routing``: every broker's feed, plugin calls at the
        topic's owner, fail-over between brokers) with the configured token (a token file is read again
        when it changes) and CA bundle."""
        return routing.RegionAdmin(
            self.admin_url,
            token=self.token_source(),
            timeout=timeout,
            verify=self.tls_trust_certs_file or True,
            # A sidecar talks to its own broker only: its feed, its origin index, its cursor writes.
            region="" if self.shard_by_ownership else self.region,
            seeds=() if self.shard_by_ownership else self.broker_admin_urls,
            refresh_s=self.brokers_refresh_s,
            on_call=on_call,
        )

    def messaging(self) -> messaging.Messaging:
        """A long-lived client for this region's brokers with the configured token (a token file is read
        again at each authentication: connecting, and when brokers ask for a refresh) and CA bundle."""
        return messaging.Messaging(
            self.service_url,
            token=self.token_source(),
            tls_trust_certs_file=self.tls_trust_certs_file or None,
        )

    def token_source(self) -> adminhttp.Token:
        """The token as the clients use it: from ``GEOSYNC_TOKEN`` as given, from ``token_file`` as a
        ``TokenFile`` (rotations are picked up without a restart), else None."""
        env = os.environ.get("GEOSYNC_TOKEN")
        if env:
            return env
        if not self.token_file:
            return None
        source = adminhttp.TokenFile(self.token_file)
        source()  # an unreadable file is a configuration error now, not at the first call
        return source

    def pulsar_options(self) -> dict[str, Any]:
        """``pulsar.Client`` keyword arguments for the configured token and CA bundle."""
        return messaging.client_options(
            token=self.token_source(), tls_trust_certs_file=self.tls_trust_certs_file or None
        )

    def token(self) -> str | None:
        env = os.environ.get("GEOSYNC_TOKEN")
        if env:
            return env
        if not self.token_file:
            return None
        return pathlib.Path(self.token_file).read_text().strip() or None


def load(path: str | pathlib.Path) -> AgentConfig:
    try:
        raw = yaml.safe_load(pathlib.Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read agent config {path}: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    raw = settings_groups.ungrouped(raw, path)
    if "key_file" in raw:
        raise ConfigError(f"{path}: {LEGACY_KEY_REFUSED}")
    known = {f.name: f for f in fields(AgentConfig)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(
            f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    for required in ("region", "admin_url", "service_url"):
        if not raw.get(required):
            raise ConfigError(f"{path}: '{required}' is required")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name in (
            "namespaces",
            "include",
            "exclude",
            "mirror_tenants",
            "mirror_exclude_tenants",
            "snapshot_namespaces",
            "broker_admin_urls",
        ):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: '{name}' must be a list of strings")
            values[name] = tuple(value)
        elif name.endswith("_s"):
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{path}: '{name}' must be a positive number of seconds")
            values[name] = float(value)
        elif isinstance(known[name].default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{path}: '{name}' must be true or false, not {value!r}")
        else:
            values[name] = value
    if values.get("claims_from", "acknowledgements") not in ("cursor", "acknowledgements"):
        raise ConfigError(
            f"{path}: 'claims_from' must be 'cursor' or 'acknowledgements', not {values['claims_from']!r}"
        )
    unload_after = values.get("replicator_unload_after_s")
    stall = values.get("replicator_stall_s", known["replicator_stall_s"].default)
    if unload_after is not None and unload_after < stall:
        raise ConfigError(
            f"{path}: 'replicator_unload_after_s' ({unload_after:g}) is below 'replicator_stall_s' "
            f"({stall:g}): a replicator counts as stuck only once stalled that long; raise it or lower "
            "replicator_stall_s"
        )
    if values.get("shard_by_ownership"):
        if values.get("broker_admin_urls"):
            raise ConfigError(
                f"{path}: 'broker_admin_urls' does not go with 'shard_by_ownership': a sidecar agent talks "
                "to its own broker (admin_url) only; remove one of them"
            )
        if values.get("plugin_cursors") is False:
            raise ConfigError(
                f"{path}: 'shard_by_ownership' needs 'plugin_cursors' (the broker plugin's feed and cursor "
                "writes answer for the broker's own topics); set plugin_cursors: true or run one agent per "
                "region (shard_by_ownership: false)"
            )
        if not values.get("broker_id") and os.environ.get("GEOSYNC_BROKER_ID"):
            values["broker_id"] = os.environ["GEOSYNC_BROKER_ID"]  # the chart's sidecar sets it from the pod
    elif values.get("broker_id"):
        raise ConfigError(f"{path}: 'broker_id' is only used with 'shard_by_ownership: true'")
    return AgentConfig(**values)
