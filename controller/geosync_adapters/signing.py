"""Region signing keys: Ed25519 key files and keyrings, shared by the agent, geoctl and the lab.

Why Ed25519 rather than one HMAC key per region: an HMAC key verifies only for whoever can also sign with
it, so every verifier would hold every region's key, and one compromised agent could forge every region.
With Ed25519 a verifier holds public keys only; a region's private key never leaves that region's agent,
and a compromised agent can speak for its own region only (``geosync_core.envelopes``, version 2).

Files (none of their key material ever appears in a message, log line or exception):

* private key: PKCS#8 PEM, unencrypted (``geoctl keys generate`` writes it with mode 0600);
* public key: one line ``ed25519:`` + base64 of the 32 raw bytes, in a file or inline in a keyring;
* keyring, YAML or JSON: ``{region: {key_id: "ed25519:..." or a public key file}}``; a relative path is
  relative to the keyring file. A key id belongs to one region, and names a file: ``KEY_ID_PATTERN``.
"""

from __future__ import annotations

import base64
import binascii
import os
import pathlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from geosync_core import envelopes
from geosync_core.errors import PermanentError

PUBLIC_PREFIX = "ed25519:"
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class KeyFileError(PermanentError):
    """A key or keyring file is missing or not what it should be; the message names the file, never key
    material."""


@dataclass(frozen=True, slots=True)
class Ed25519Signer:
    """One region's private key, named by its key id."""

    key_id: str
    private: Ed25519PrivateKey = field(repr=False)

    def sign(self, message: bytes) -> str:
        return self.private.sign(message).hex()

    def public(self) -> str:
        """The public key as a keyring holds it."""
        return public_text(self.private.public_key())


@dataclass(frozen=True, slots=True)
class Ed25519Verifier:
    public: Ed25519PublicKey = field(repr=False)

    def verify(self, message: bytes, sig: str) -> bool:
        try:
            self.public.verify(bytes.fromhex(sig), message)
        except (ValueError, InvalidSignature):
            return False
        return True

    def text(self) -> str:
        return public_text(self.public)


def public_text(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PUBLIC_PREFIX + base64.b64encode(raw).decode()


def check_key_id(key_id: str) -> str:
    if not KEY_ID_PATTERN.fullmatch(key_id):
        raise KeyFileError(
            f"key id {key_id!r} is not valid: 1-64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit"
        )
    return key_id


def generate(key_id: str) -> Ed25519Signer:
    return Ed25519Signer(check_key_id(key_id), Ed25519PrivateKey.generate())


def write_key_pair(directory: pathlib.Path, signer: Ed25519Signer) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``KEY_ID.key`` (private, mode 0600, never overwritten) and ``KEY_ID.pub`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / f"{signer.key_id}.key", directory / f"{signer.key_id}.pub"
    pem = signer.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as e:
        raise KeyFileError(f"{private} exists already; choose another key id or directory") from e
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public.write_text(signer.public() + "\n")
    return private, public


def load_signer(path: str | pathlib.Path, key_id: str) -> Ed25519Signer:
    """The private key in ``path`` (PKCS#8 PEM, as ``geoctl keys generate`` writes it)."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as e:
        raise KeyFileError(f"signing key file {str(path)!r} cannot be read: {e.strerror}") from e
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None  # the parser's message may quote the file: never pass it on
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"signing key file {str(path)!r} is not an unencrypted Ed25519 private key (PKCS#8 PEM); "
            "create one with: geoctl keys generate --region REGION --out DIR"
        )
    return Ed25519Signer(check_key_id(key_id), key)


def parse_public(text: str, *, where: str) -> Ed25519Verifier:
    """A public key in its one-line form; ``where`` names it in errors."""
    text = text.strip()
    raw = b""
    if text.startswith(PUBLIC_PREFIX):
        try:
            raw = base64.b64decode(text[len(PUBLIC_PREFIX) :], validate=True)
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) != 32:
        raise KeyFileError(
            f"{where} is not an Ed25519 public key: expected '{PUBLIC_PREFIX}' and the base64 of 32 bytes, "
            "as geoctl keys generate writes it in KEY_ID.pub"
        )
    return Ed25519Verifier(Ed25519PublicKey.from_public_bytes(raw))


def load_keyring(path: str | pathlib.Path) -> envelopes.Keyring:
    """The keyring in ``path``."""
    path = pathlib.Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise KeyFileError(f"keyring file {str(path)!r} cannot be read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise KeyFileError(f"keyring file {str(path)!r} is not YAML or JSON") from e
    if not isinstance(raw, dict) or not raw:
        raise KeyFileError(
            f"keyring file {str(path)!r}: expected a mapping {{region: {{key_id: public key}}}}"
        )
    regions: dict[str, dict[str, envelopes.Verifier]] = {}
    for region, keys in raw.items():
        if not isinstance(region, str) or not isinstance(keys, dict) or not keys:
            raise KeyFileError(
                f"keyring file {str(path)!r}: region {region!r} must map key ids to public keys"
            )
        regions[region] = {
            check_key_id(str(key_id)): _public_entry(path, region, str(key_id), value)
            for key_id, value in keys.items()
        }
    try:
        return envelopes.Keyring.of(regions)
    except ValueError as e:
        raise KeyFileError(f"keyring file {str(path)!r}: {e}") from e


def _public_entry(keyring: pathlib.Path, region: str, key_id: str, value: object) -> Ed25519Verifier:
    where = f"keyring {str(keyring)!r}, {region}/{key_id}"
    if not isinstance(value, str):
        raise KeyFileError(f"{where}: expected '{PUBLIC_PREFIX}...' or a public key file")
    if value.startswith(PUBLIC_PREFIX):
        return parse_public(value, where=where)
    file = keyring.parent / value
    try:
        return parse_public(file.read_text(), where=f"{where} ({file})")
    except OSError as e:
        raise KeyFileError(f"{where}: public key file {str(file)!r} cannot be read: {e.strerror}") from e


def dump_keyring(regions: Mapping[str, Mapping[str, str]]) -> str:
    """A keyring file's text from ``{region: {key_id: public key text or file}}``."""
    return yaml.safe_dump({r: dict(k) for r, k in regions.items()}, sort_keys=True)


def in_memory(regions: Iterable[str]) -> dict[str, envelopes.Keys]:
    """A new key for each region and one keyring listing them all, never written anywhere: each region's
    agent keys for tests, benchmarks and throwaway processes. Key ids are ``REGION-test``."""
    signers = {region: generate(f"{region}-test") for region in regions}
    keyring = envelopes.Keyring.of(
        {region: {s.key_id: Ed25519Verifier(s.private.public_key())} for region, s in signers.items()}
    )
    return {region: envelopes.Keys(signer, keyring) for region, signer in signers.items()}


def holds(keyring: envelopes.Keyring, region: str, signer: Ed25519Signer) -> bool:
    """Whether ``keyring`` accepts ``signer``'s key for ``region`` (the same public key under its id)."""
    verifier = keyring.regions.get(region, {}).get(signer.key_id)
    return isinstance(verifier, Ed25519Verifier) and verifier.text() == signer.public()
