"""``geoctl keys``: create region signing keys and edit keyrings, the operator's side of key rotation.

Thin commands over ``geosync_adapters.signing``; the procedure itself is in docs/deployment/security.md
("Signing keys").
``keys init`` is the one step from nothing (or from the shared HMAC key of earlier releases, which agents and
the chart now refuse) to per-region keys: every region's key and the keyring that lists them all.
"""

from __future__ import annotations

import datetime
import pathlib
import secrets
from typing import Any

import click
import yaml

from geoctl.errors import GeoctlError
from geoctl.output import emit, output_option
from geosync_adapters import signing

ROTATION = """
Each region signs its control messages with its own Ed25519 private key (agent settings signing_key_file
and signing_key_id); every agent accepts a region's messages under the public keys its keyring
(keyring_file) lists for that region. To rotate region a's key without downtime:

\b
  1. geoctl keys generate --region a --out DIR        (writes KEY_ID.key, private, and KEY_ID.pub)
  2. geoctl keys add --keyring FILE --region a --public DIR/KEY_ID.pub, for every region's keyring;
     restart (or roll) every agent: all now accept both of a's keys
  3. point a's agent at the new key (signing_key_file, signing_key_id) and restart it
  4. geoctl keys drop --keyring FILE --region a --key-id OLD_ID, for every keyring; restart the agents,
     then destroy the old private key
"""


@click.group("keys", help="Region signing keys and keyrings.\n" + ROTATION)
def keys_group() -> None:
    pass


@keys_group.command("generate", help="Create a signing key for a region.\n" + ROTATION)
@click.option("--region", required=True, help="The region the key signs for.")
@click.option("--key-id", default=None, help="Key id (default: REGION-YYYYMMDD-XXXX). Names the files.")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="Directory for KEY_ID.key (private, mode 0600, never overwritten) and KEY_ID.pub.",
)
@output_option
def generate(region: str, key_id: str | None, out: pathlib.Path, output: str) -> None:
    key_id = key_id or f"{region}-{datetime.date.today():%Y%m%d}-{secrets.token_hex(2)}"
    try:
        private, public = signing.write_key_pair(out, signing.generate(key_id))
    except signing.KeyFileError as e:
        raise GeoctlError(str(e)) from e
    data = {
        "region": region,
        "key_id": key_id,
        "private_key_file": str(private),
        "public_key_file": str(public),
        "public_key": public.read_text().strip(),
    }

    def text(d: dict[str, Any]) -> None:
        click.echo(f"private key {d['private_key_file']} (keep it on {region}'s agent only)")
        click.echo(f"public key  {d['public_key_file']}")
        click.echo(f"keyring entry:\n  {region}:\n    {key_id}: {d['public_key']}")

    emit(data, output, text)


INIT = """
Writes DIR/KEY_ID.key (private, mode 0600) for each region and DIR/keyring.yaml listing every region's
public key. Then, for each region: its KEY_ID.key goes to that region's agent only (agent settings
signing_key_file and signing_key_id; chart: the Secret signing.secretName and signing.keyId), and
keyring.yaml to every agent (keyring_file; chart: signing.keyring). Replaces the shared HMAC key of earlier
releases (key_file, GEOSYNC_KEY, signing.acceptLegacy), which is refused now: whoever held it could sign for
every region.
"""


@keys_group.command("init", help="Create every region's signing key and the keyring, in one step.\n" + INIT)
@click.option("--region", "regions", required=True, multiple=True, help="A region (repeat for each one).")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="Directory for the private keys and keyring.yaml (nothing in it is overwritten).",
)
@output_option
def init(regions: tuple[str, ...], out: pathlib.Path, output: str) -> None:
    ring = out / "keyring.yaml"
    if ring.exists():
        raise GeoctlError(f"{ring} exists already: choose another directory (keys add edits a keyring)")
    if len(set(regions)) != len(regions):
        raise GeoctlError("a region is named twice: one --region per region")
    today = f"{datetime.date.today():%Y%m%d}"
    keys: dict[str, dict[str, str]] = {}
    try:
        for region in regions:
            signer = signing.generate(f"{region}-{today}-{secrets.token_hex(2)}")
            private, _ = signing.write_key_pair(out, signer)
            keys[region] = {
                "key_id": signer.key_id,
                "private_key_file": str(private),
                "public": signer.public(),
            }
    except signing.KeyFileError as e:
        raise GeoctlError(str(e)) from e
    _write(ring, {region: {k["key_id"]: k["public"]} for region, k in keys.items()})
    data = {
        "keyring_file": str(ring),
        "regions": {
            r: {"key_id": k["key_id"], "private_key_file": k["private_key_file"]} for r, k in keys.items()
        },
    }

    def text(d: dict[str, Any]) -> None:
        click.echo(f"keyring {d['keyring_file']}: give it to every region's agent (keyring_file)")
        for region, k in d["regions"].items():
            click.echo(
                f"{region}: private key {k['private_key_file']} (on {region}'s agent only): "
                f"signing_key_file, signing_key_id: {k['key_id']}"
            )

    emit(data, output, text)


@keys_group.command("add", help="Accept a public key for a region in a keyring file (created if absent).")
@click.option("--keyring", required=True, type=click.Path(dir_okay=False, path_type=pathlib.Path))
@click.option("--region", required=True)
@click.option(
    "--public",
    "public",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path),
    help="KEY_ID.pub as 'keys generate' wrote it; the key id is its name without .pub.",
)
@output_option
def add(keyring: pathlib.Path, region: str, public: pathlib.Path, output: str) -> None:
    key_id = public.name.removesuffix(".pub")
    text = public.read_text().strip()
    try:
        signing.parse_public(text, where=str(public))
        signing.check_key_id(key_id)
    except signing.KeyFileError as e:
        raise GeoctlError(str(e)) from e
    ring = _read(keyring) if keyring.exists() else {}
    ring.setdefault(region, {})[key_id] = text
    _write(keyring, ring)
    emit({"keyring": str(keyring), "region": region, "key_ids": sorted(ring[region])}, output, _show)


@keys_group.command("drop", help="Stop accepting a region's key in a keyring file.")
@click.option(
    "--keyring", required=True, type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path)
)
@click.option("--region", required=True)
@click.option("--key-id", required=True)
@output_option
def drop(keyring: pathlib.Path, region: str, key_id: str, output: str) -> None:
    ring = _read(keyring)
    if key_id not in ring.get(region, {}):
        raise GeoctlError(f"{keyring} lists no key {key_id!r} for region {region!r}")
    if len(ring[region]) == 1:
        raise GeoctlError(
            f"{key_id!r} is {region}'s only key in {keyring}: add its new key first (keys add), or the "
            "region's messages would all be refused"
        )
    del ring[region][key_id]
    _write(keyring, ring)
    emit({"keyring": str(keyring), "region": region, "key_ids": sorted(ring[region])}, output, _show)


def _show(d: dict[str, Any]) -> None:
    click.echo(f"{d['keyring']}: {d['region']} accepts {', '.join(d['key_ids'])}")


def _read(path: pathlib.Path) -> dict[str, dict[str, str]]:
    try:
        signing.load_keyring(path)  # refuses what an agent would refuse
    except signing.KeyFileError as e:
        raise GeoctlError(str(e)) from e
    raw: dict[str, dict[str, str]] = yaml.safe_load(path.read_text())
    return raw


def _write(path: pathlib.Path, ring: dict[str, dict[str, str]]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(signing.dump_keyring(ring))
    temporary.replace(path)
