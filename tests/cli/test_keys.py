"""``geoctl keys``: generate, add and drop edit what agents load, and refuse what agents would refuse."""

from __future__ import annotations

import json
import pathlib

from click.testing import CliRunner

from geoctl.cli import main
from geosync_adapters import signing


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_a_rotation_through_the_cli(tmp_path: pathlib.Path) -> None:
    ring = tmp_path / "keyring.yaml"
    code, out = run(
        "keys", "generate", "--region", "a", "--key-id", "a-1", "--out", str(tmp_path), "-o", "json"
    )
    assert code == 0, out
    first = json.loads(out)
    assert first["public_key"].startswith("ed25519:")
    assert "PRIVATE" not in out
    assert (
        run("keys", "add", "--keyring", str(ring), "--region", "a", "--public", first["public_key_file"])[0]
        == 0
    )
    assert run("keys", "generate", "--region", "a", "--key-id", "a-2", "--out", str(tmp_path))[0] == 0
    assert (
        run("keys", "add", "--keyring", str(ring), "--region", "a", "--public", str(tmp_path / "a-2.pub"))[0]
        == 0
    )
    assert signing.load_keyring(ring).key_ids() == {"a": ["a-1", "a-2"]}
    assert run("keys", "drop", "--keyring", str(ring), "--region", "a", "--key-id", "a-1")[0] == 0
    keyring = signing.load_keyring(ring)
    assert keyring.key_ids() == {"a": ["a-2"]}
    assert signing.holds(keyring, "a", signing.load_signer(tmp_path / "a-2.key", "a-2"))


def test_refusals_say_what_to_do(tmp_path: pathlib.Path) -> None:
    ring = tmp_path / "keyring.yaml"
    run("keys", "generate", "--region", "a", "--key-id", "a-1", "--out", str(tmp_path))
    code, out = run("keys", "generate", "--region", "a", "--key-id", "a-1", "--out", str(tmp_path))
    assert code != 0
    assert "exists already" in out
    run("keys", "add", "--keyring", str(ring), "--region", "a", "--public", str(tmp_path / "a-1.pub"))
    code, out = run("keys", "drop", "--keyring", str(ring), "--region", "a", "--key-id", "a-1")
    assert code != 0
    assert "only key" in out
    bad = tmp_path / "x.pub"
    bad.write_text("ed25519:AAAA")
    code, out = run("keys", "add", "--keyring", str(ring), "--region", "b", "--public", str(bad))
    assert code != 0
    assert "not an Ed25519 public key" in out


def test_init_makes_every_regions_key_and_the_keyring_in_one_step(tmp_path: pathlib.Path) -> None:
    """The step the agent and the chart name when they refuse the shared HMAC key: what it writes is what
    each region's agent loads, and each region's key is accepted for that region only."""
    code, out = run("keys", "init", "--region", "a", "--region", "b", "--out", str(tmp_path), "-o", "json")
    assert code == 0, out
    made = json.loads(out)
    assert "PRIVATE" not in out
    keyring = signing.load_keyring(made["keyring_file"])
    assert set(keyring.key_ids()) == {"a", "b"}
    for region, key in made["regions"].items():
        signer = signing.load_signer(key["private_key_file"], key["key_id"])
        assert signing.holds(keyring, region, signer)
        other = "b" if region == "a" else "a"
        assert not signing.holds(keyring, other, signer)
        assert oct(pathlib.Path(key["private_key_file"]).stat().st_mode & 0o777) == "0o600"
    code, out = run("keys", "init", "--region", "c", "--out", str(tmp_path))
    assert code != 0
    assert "exists already" in out
    code, out = run("keys", "init", "--region", "a", "--region", "a", "--out", str(tmp_path / "again"))
    assert code != 0
    assert "named twice" in out
