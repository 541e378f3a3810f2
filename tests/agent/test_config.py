"""The agent's settings file: validation that says what is wrong, and the client options it yields."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from geosync_agent import config as cfg
from geosync_agent.recent import Recent


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
