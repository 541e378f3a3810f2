"""Per-region signing keys (issue 14): a region's Ed25519 key speaks for that region only, keyrings accept
several keys per region so keys rotate, a dropped key is refused, and envelopes of the shared-key mode
of earlier releases are refused whatever they carry (issue 47)."""

from __future__ import annotations

import hashlib
import hmac
import json
import pathlib
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_adapters import signing
from geosync_core import envelopes
from geosync_core.envelopes import (
    KEYED_VERSION,
    LEGACY_VERSION,
    Envelope,
    Keyring,
    Reason,
    Rejected,
    open_envelope,
    seal,
)

A1, A2, B1 = signing.generate("a-1"), signing.generate("a-2"), signing.generate("b-1")


def verifier(signer: signing.Ed25519Signer) -> signing.Ed25519Verifier:
    return signing.parse_public(signer.public(), where="test")


def ring(a: tuple[signing.Ed25519Signer, ...] = (A1,)) -> Keyring:
    return Keyring.of({"a": {s.key_id: verifier(s) for s in a}, "b": {B1.key_id: verifier(B1)}})


def claim(region: str = "a", seq: int = 1) -> Envelope:
    return Envelope(kind="ack-states", region=region, seq=seq, sent_at_ms=0, payload={"x": [1, "é"]})


def test_a_region_key_cannot_sign_for_another_region() -> None:
    assert open_envelope(ring(), seal(A1, claim(region="b"))) == Rejected(Reason.FOREIGN_KEY)
    assert open_envelope(ring(), seal(B1, claim(region="a"))) == Rejected(Reason.FOREIGN_KEY)


def test_a_region_key_signs_for_its_region() -> None:
    opened = open_envelope(ring(), seal(A1, claim()))
    assert opened == Envelope(
        kind="ack-states", region="a", seq=1, sent_at_ms=0, payload={"x": [1, "é"]}, version=2, key_id="a-1"
    )


def test_a_keyring_with_two_keys_for_a_region_accepts_both() -> None:
    both = ring((A1, A2))
    assert isinstance(open_envelope(both, seal(A1, claim())), Envelope)
    assert isinstance(open_envelope(both, seal(A2, claim())), Envelope)


def test_a_dropped_key_is_refused() -> None:
    assert open_envelope(ring((A2,)), seal(A1, claim())) == Rejected(Reason.UNKNOWN_KEY)


def test_a_key_id_naming_another_key_is_a_bad_signature() -> None:
    """Someone who relabels their own key with a's key id gains nothing."""
    impostor = signing.Ed25519Signer("a-1", signing.generate("x").private)
    assert open_envelope(ring(), seal(impostor, claim())) == Rejected(Reason.BAD_SIGNATURE)


def shared_key_envelope(envelope: Envelope, secret: bytes = b"s" * 32) -> bytes:
    """``envelope`` as the shared-HMAC mode sealed it: version 1, no key id, HMAC-SHA256 of the canonical
    fields."""
    fields = {**envelope.fields(), "version": LEGACY_VERSION}
    fields.pop("key_id", None)
    return envelopes.canonical(
        {**fields, "sig": hmac.new(secret, envelopes.canonical(fields), hashlib.sha256).hexdigest()}
    )


def test_shared_key_envelopes_are_refused_whatever_they_carry() -> None:
    assert open_envelope(ring(), shared_key_envelope(claim())) == Rejected(Reason.UNKNOWN_KEY)
    # with a region's key id added, or its signature under the key id of a region's key: still refused
    fields = json.loads(shared_key_envelope(claim()))
    relabelled = envelopes.canonical({**fields, "key_id": "a-1"})
    assert open_envelope(ring(), relabelled) == Rejected(Reason.UNKNOWN_KEY)
    keyed = json.loads(seal(A1, claim()))
    assert open_envelope(ring(), envelopes.canonical({**keyed, "version": LEGACY_VERSION})) == Rejected(
        Reason.UNKNOWN_KEY
    )
    # ... and a region's envelope without its key id is no shared-key envelope
    unnamed = seal(A1, claim()).replace(b'"key_id":"a-1",', b"")
    assert open_envelope(ring(), unnamed) == Rejected(Reason.MALFORMED)


def test_in_memory_keys_speak_each_for_its_own_region() -> None:
    keys = signing.in_memory(["a", "b"])
    assert keys["a"].keyring is keys["b"].keyring
    assert isinstance(open_envelope(keys["b"].keyring, seal(keys["a"].signer, claim())), Envelope)
    assert open_envelope(keys["a"].keyring, seal(keys["b"].signer, claim())) == Rejected(Reason.FOREIGN_KEY)


def test_a_key_id_belongs_to_one_region() -> None:
    with pytest.raises(ValueError, match="both a and b"):
        Keyring.of({"a": {"k": verifier(A1)}, "b": {"k": verifier(B1)}})


@settings(max_examples=40, deadline=None)
@given(
    region=st.sampled_from(["a", "b"]),
    seq=st.integers(0, 2**63 - 1),
    payload=st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3),
    flip=st.integers(0, 10_000),
)
def test_keyed_envelopes_round_trip_and_any_altered_byte_is_refused(
    region: str, seq: int, payload: dict[str, object], flip: int
) -> None:
    signer = A1 if region == "a" else B1
    envelope = Envelope(kind="k", region=region, seq=seq, sent_at_ms=seq // 2, payload=payload)
    wire = seal(signer, envelope)
    opened = open_envelope(ring(), wire)
    assert isinstance(opened, Envelope)
    assert (opened.version, opened.key_id, opened.fields()["payload"]) == (
        KEYED_VERSION,
        signer.key_id,
        payload,
    )
    assert seal(signer, opened) == wire  # canonical
    assert wire == envelopes.canonical({**json.loads(wire)})  # the signature where canonical order puts it
    with pytest.MonkeyPatch.context() as patch:  # verified as it came, not encoded again
        patch.setattr(envelopes, "canonical", lambda value: pytest.fail("encoded again"))
        assert open_envelope(ring(), wire) == opened
    i = flip % len(wire)
    altered = wire[:i] + bytes([wire[i] ^ 0x01]) + wire[i + 1 :]
    assert isinstance(open_envelope(ring(), altered), Rejected)


def test_keyring_file_inline_and_file_entries(tmp_path: pathlib.Path) -> None:
    private, _public = signing.write_key_pair(tmp_path / "keys", A2)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    path = tmp_path / "keyring.yaml"
    path.write_text(
        signing.dump_keyring({"a": {"a-1": A1.public(), "a-2": "keys/a-2.pub"}, "b": {"b-1": B1.public()}})
    )
    keyring = signing.load_keyring(path)
    assert keyring.key_ids() == {"a": ["a-1", "a-2"], "b": ["b-1"]}
    loaded = signing.load_signer(private, "a-2")
    assert isinstance(open_envelope(keyring, seal(loaded, claim())), Envelope)
    assert signing.holds(keyring, "a", loaded)
    assert not signing.holds(keyring, "b", loaded)
    with pytest.raises(signing.KeyFileError, match="exists already"):
        signing.write_key_pair(tmp_path / "keys", A2)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a: {a-1: 'ed25519:AAAA'}", "not an Ed25519 public key"),
        ("a: {a-1: missing.pub}", "cannot be read"),
        ("a: {'bad id!': 'ed25519:AAAA'}", "not valid"),
        ("[1, 2]", "expected a mapping"),
        ("a: {}", "must map key ids"),
        ("a: {k: PUB}\nb: {k: PUB}", "both a and b"),
    ],
)
def test_bad_keyrings_say_what_is_wrong(tmp_path: pathlib.Path, text: str, match: str) -> None:
    path = tmp_path / "keyring.yaml"
    path.write_text(text.replace("PUB", A1.public()))
    with pytest.raises(signing.KeyFileError, match=match):
        signing.load_keyring(path)


def test_a_bad_signing_key_file_is_named_without_its_content(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.key"
    path.write_text("SECRET-NOT-A-KEY " * 4)
    with pytest.raises(signing.KeyFileError) as raised:
        signing.load_signer(path, "a-1")
    assert "SECRET" not in str(raised.value)
    assert "geoctl keys generate" in str(raised.value)


def test_signers_and_keys_do_not_show_their_secrets() -> None:
    assert repr(A1) == "Ed25519Signer(key_id='a-1')"
