"""``geoctl keys``: create region signing keys and edit keyrings, the operator's side of key rotation.

Thin commands over ``geosync_adapters.signing``; the procedure itself is in the README ("Signing keys").
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
