"""The agent's settings file: validation that says what is wrong, and the client options it yields."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from geosync_adapters import signing
from geosync_agent import config as cfg
from geosync_agent.recent import Recent
from geosync_core import envelopes


def write(tmp_path: pathlib.Path, **settings: object) -> pathlib.Path:
    path = tmp_path / "agent.yaml"
    base = {"region": "a", "admin_url": "https://broker:8443", "service_url": "pulsar+ssl://broker:6651"}
    path.write_text(yaml.safe_dump({**base, **settings}))
    return path


def test_tls_and_plugin_settings_are_read(tmp_path: pathlib.Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not used here")
    loaded = cfg.load(
        write(tmp_path, tls_trust_certs_file=str(ca), plugin_cursors=False, feed_interval_s=0.2)
    )
    assert (loaded.plugin_cursors, loaded.feed_interval_s) == (False, 0.2)
    assert loaded.admin_client(timeout=3.0).verify == str(ca)
    options = loaded.pulsar_options()
    assert options["tls_trust_certs_file_path"] == str(ca)
    assert options["tls_validate_hostname"] is True
    assert options["authentication"] is None


def test_a_sidecar_talks_to_its_own_broker_only(tmp_path: pathlib.Path) -> None:
    loaded = cfg.load(write(tmp_path, shard_by_ownership=True, broker_id="b-0:8443"))
    admin = loaded.admin_client(timeout=3.0)
    assert admin.brokers() == ["https://broker:8443"]  # no region listing: its feed and writes stay local
    assert (loaded.broker_id, loaded.ownership_refresh_s) == ("b-0:8443", 2.0)


def test_a_sidecar_takes_its_broker_id_from_the_environment_unless_configured(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart's sidecar sets GEOSYNC_BROKER_ID from the pod: read when the configuration is loaded (the
    agent itself reads no environment), a configured broker_id wins, and without sidecar mode it is unused."""
    monkeypatch.setenv("GEOSYNC_BROKER_ID", "b-1:8443")
    assert cfg.load(write(tmp_path, shard_by_ownership=True)).broker_id == "b-1:8443"
    assert cfg.load(write(tmp_path, shard_by_ownership=True, broker_id="b-0:8443")).broker_id == "b-0:8443"
    assert cfg.load(write(tmp_path)).broker_id == ""


def test_without_a_ca_the_system_cas_verify(tmp_path: pathlib.Path) -> None:
    loaded = cfg.load(write(tmp_path))
    assert loaded.admin_client(timeout=3.0).verify is True
    assert "tls_trust_certs_file_path" not in loaded.pulsar_options()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"plugin_cursors": "yes"}, "'plugin_cursors' must be true or false"),
        ({"feed_interval_s": 0}, "'feed_interval_s' must be a positive number of seconds"),
        ({"tls_ca": "x"}, "unknown setting(s) tls_ca"),
        (
            {"shard_by_ownership": True, "broker_admin_urls": ["https://b2:8443"]},
            "'broker_admin_urls' does not go with 'shard_by_ownership'",
        ),
        (
            {"shard_by_ownership": True, "plugin_cursors": False},
            "'shard_by_ownership' needs 'plugin_cursors'",
        ),
        ({"broker_id": "b-0:8080"}, "'broker_id' is only used with 'shard_by_ownership: true'"),
        ({"replicator_unload_after_s": 0}, "'replicator_unload_after_s' must be a positive number"),
        (
            {"replicator_stall_s": 60, "replicator_unload_after_s": 30},
            "'replicator_unload_after_s' (30) is below 'replicator_stall_s' (60)",
        ),
    ],
)
def test_bad_settings_say_what_is_wrong(
    tmp_path: pathlib.Path, settings: dict[str, object], message: str
) -> None:
    with pytest.raises(cfg.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg.load(write(tmp_path, **settings))


def test_recent_keeps_the_last_samples_and_their_percentiles() -> None:
    recent = Recent(keep=100)
    assert recent.percentiles() == {}
    for v in range(1000):
        recent.add(v)
    assert recent.percentiles() == {"p50": 950, "p90": 990, "p99": 999}


# --- signing keys (issue 14) ----------------------------------------------------------------------------


def keyring_files(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """a's private key a-1 and a keyring listing a-1 and b-1."""
    a1, b1 = signing.generate("a-1"), signing.generate("b-1")
    private, _ = signing.write_key_pair(tmp_path / "keys", a1)
    keyring = tmp_path / "keyring.yaml"
    keyring.write_text(signing.dump_keyring({"a": {"a-1": a1.public()}, "b": {"b-1": b1.public()}}))
    return private, keyring


def test_per_region_keys_are_read(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEOSYNC_KEY", raising=False)
    private, keyring = keyring_files(tmp_path)
    loaded = cfg.load(
        write(tmp_path, signing_key_file=str(private), signing_key_id="a-1", keyring_file=str(keyring))
    )
    keys = loaded.keys()
    assert keys.signer.key_id == "a-1"
    assert keys.keyring.key_ids() == {"a": ["a-1"], "b": ["b-1"]}
    wire = envelopes.seal(
        keys.signer, envelopes.Envelope(kind="k", region="a", seq=1, sent_at_ms=0, payload={})
    )
    assert isinstance(envelopes.open_envelope(keys.keyring, wire), envelopes.Envelope)


def test_the_shared_hmac_key_is_refused_with_the_step_to_per_region_keys(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: key_file (alone, or next to a keyring during the old rolling upgrade) and GEOSYNC_KEY were
    the shared-HMAC mode, in which whoever held the key spoke for every region; each is refused now, and the
    message names the one step to per-region keys and never the key."""
    monkeypatch.delenv("GEOSYNC_KEY", raising=False)
    private, keyring = keyring_files(tmp_path)
    key = tmp_path / "hmac.key"
    key.write_text("k" * 32)
    per_region = {"signing_key_file": str(private), "signing_key_id": "a-1", "keyring_file": str(keyring)}
    for settings in ({"key_file": str(key)}, {"key_file": str(key), **per_region}):
        with pytest.raises(cfg.ConfigError, match="no longer supported") as raised:
            cfg.load(write(tmp_path, **settings))
        assert "geoctl keys init --region A --region B" in str(raised.value)
        assert "k" * 32 not in str(raised.value)
    monkeypatch.setenv("GEOSYNC_KEY", "e" * 40)
    loaded = cfg.load(write(tmp_path, **per_region))
    with pytest.raises(
        cfg.ConfigError, match=r"GEOSYNC_KEY.*no longer supported.*geoctl keys init"
    ) as raised:
        loaded.keys()
    assert "e" * 40 not in str(raised.value)


def test_signing_settings_that_cannot_work_say_what_to_do(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEOSYNC_KEY", raising=False)
    private, keyring = keyring_files(tmp_path)
    other, _ = signing.write_key_pair(tmp_path / "other", signing.generate("a-9"))
    cases: list[tuple[dict[str, object], str]] = [
        ({}, "no signing key: create every region's key and the keyring in one step with 'geoctl keys init"),
        ({"signing_key_file": str(private), "signing_key_id": "a-1"}, "needs keyring_file"),
        ({"signing_key_file": str(private), "keyring_file": str(keyring)}, "go together"),
        # a key not (yet) in the keyring, and a's key under another id: signing with them would be refused
        ({"signing_key_file": str(other), "signing_key_id": "a-9", "keyring_file": str(keyring)}, "first"),
        ({"signing_key_file": str(other), "signing_key_id": "a-1", "keyring_file": str(keyring)}, "first"),
        (
            {
                "signing_key_file": str(tmp_path / "nope"),
                "signing_key_id": "a-1",
                "keyring_file": str(keyring),
            },
            "read",
        ),
    ]
    for settings, match in cases:
        with pytest.raises(cfg.ConfigError, match=match):
            cfg.load(write(tmp_path, **settings)).keys()


def test_zookeeper_credentials_are_read_from_their_file(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "zk.auth"
    secret.write_text("geosync-agent:s3cret-pass\n")
    auth = cfg.load(
        write(tmp_path, zookeeper_auth_file=str(secret), zookeeper_world_read=True)
    ).zookeeper_auth()
    assert auth is not None
    assert (auth.user, auth.password, auth.world_read) == ("geosync-agent", "s3cret-pass", True)
    assert "s3cret-pass" not in repr(auth)
    assert [a.id.scheme for a in auth.acl()] == ["digest", "world"]
    assert cfg.load(write(tmp_path)).zookeeper_auth() is None


@pytest.mark.parametrize(
    ("content", "settings", "message"),
    [
        ("no-colon-s3cret", {}, "one line user:password"),
        (":s3cret", {}, "one line user:password"),
        ("user:s3cret\nmore:s3cret", {}, "one line user:password"),
        ("user:s3cret", {"zookeeper_auth_scheme": "sasl"}, "not supported"),
    ],
)
def test_unusable_zookeeper_credentials_are_named_never_shown(
    tmp_path: pathlib.Path, content: str, settings: dict[str, str], message: str
) -> None:
    secret = tmp_path / "zk.auth"
    secret.write_text(content)
    loaded = cfg.load(write(tmp_path, zookeeper_auth_file=str(secret), **settings))
    with pytest.raises(cfg.ConfigError, match=message) as refused:
        loaded.zookeeper_auth()
    assert "s3cret" not in str(refused.value)
    missing = cfg.load(write(tmp_path, zookeeper_auth_file=str(tmp_path / "absent")))
    with pytest.raises(cfg.ConfigError, match="cannot be read"):
        missing.zookeeper_auth()


def test_the_mirrors_events_topic_and_control_topics_are_not_synced_as_data(tmp_path: pathlib.Path) -> None:
    from geosync_agent import discovering

    loaded = cfg.load(write(tmp_path, mirror_events_topic="persistent://geo/abc/geosync-policy-events"))
    assert not discovering.synced_topic(loaded, "persistent://geo/abc/geosync-policy-events")
    assert not discovering.synced_topic(loaded, "persistent://geo/abc/geosync-policy-events-partition-0")
    assert not discovering.synced_topic(loaded, f"persistent://geo/abc/{loaded.control_topic}")
    assert discovering.synced_topic(loaded, "persistent://geo/abc/orders")
    assert discovering.synced_topic(
        loaded, "persistent://geo/ab/geosync-policy-events"
    )  # another namespace's


def test_the_brokers_own_subscriptions_are_not_synced(tmp_path: pathlib.Path) -> None:
    from geosync_agent import discovering

    loaded = cfg.load(write(tmp_path))
    topic = "persistent://geo/abc/pulsar-config-sync"
    for own in ("metadata-syncer", "__compaction", "pulsar.repl.b", "geosync-shadow-a"):
        assert not discovering.synced(loaded, topic, own), own
    for application in ("orders", "metadata-syncer-app", "compaction"):
        assert discovering.synced(loaded, topic, application), application
