"""What signing costs per control envelope (Ed25519, each region's own key).

    python bench/signing.py [--states 20] [--spans 8] [--rounds 2000]

An agent seals one ``ack-states`` envelope per namespace and round (about 4 to 15 a second per agent) and
opens every peer's; this times ``seal`` and ``open_envelope`` on such an envelope (``--states``
subscriptions, each with ``--spans`` acknowledged spans per origin region of three), so the cost of the
signature can be read against the JSON encoding both pay, and ``open_envelope`` on the same fields spelled
otherwise (the signature first: encoded again to be verified, as every envelope was before session 30).
Median of ``--rounds``, in microseconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable

import record

from geosync_adapters import signing
from geosync_core import ackstates, envelopes
from geosync_core.origins import OriginAcks, Span


def envelope(states: int, spans: int) -> envelopes.Envelope:
    acks = OriginAcks.of({r: [Span(100 + i, 0, 5) for i in range(spans)] for r in "abc"})
    batch = [
        ackstates.AckStateMessage(f"persistent://t/ns/topic-{i}", "sub", "a", acks) for i in range(states)
    ]
    payload = ackstates.encode_ack_states(batch, region="a")
    return envelopes.Envelope(kind=ackstates.ACK_STATES, region="a", seq=1, sent_at_ms=0, payload=payload)


def median_us(work: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        work()
        samples.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--states", type=int, default=20)
    parser.add_argument("--spans", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2000)
    record.add_argument(parser)
    args = parser.parse_args()
    env = envelope(args.states, args.spans)
    ed = signing.generate("a-1")
    ring = envelopes.Keyring.of({"a": {"a-1": signing.parse_public(ed.public(), where="bench")}})
    results: dict[str, float] = {"envelope_bytes": len(envelopes.seal(ed, env))}
    cases: list[tuple[str, envelopes.Signer, envelopes.Keyring]] = [("ed25519", ed, ring)]
    for name, signer, keyring in cases:
        wire = envelopes.seal(signer, env)
        assert isinstance(envelopes.open_envelope(keyring, wire), envelopes.Envelope)
        results[f"{name}_seal_us"] = round(
            median_us(functools.partial(envelopes.seal, signer, env), args.rounds), 1
        )
        opening = functools.partial(envelopes.open_envelope, keyring, wire)
        results[f"{name}_open_us"] = round(median_us(opening, args.rounds), 1)
        # the same fields spelled otherwise (the signature first): parsed, encoded again, then verified
        message = json.loads(wire)
        respelled = json.dumps({"sig": message.pop("sig"), **message}, ensure_ascii=False).encode()
        assert envelopes.open_envelope(keyring, respelled) == envelopes.open_envelope(keyring, wire)
        reopening = functools.partial(envelopes.open_envelope, keyring, respelled)
        results[f"{name}_open_other_spelling_us"] = round(median_us(reopening, args.rounds), 1)
    body = envelopes.canonical(env.fields())
    results["ed25519_sign_only_us"] = round(median_us(lambda: ed.sign(body), args.rounds), 1)
    verifier = ring.regions["a"]["a-1"]
    sig = ed.sign(body)
    results["ed25519_verify_only_us"] = round(median_us(lambda: verifier.verify(body, sig), args.rounds), 1)
    print(json.dumps(results, indent=2))
    record.write(
        args.record,
        record.make(
            f"Signing a control envelope of {results['envelope_bytes'] / 1000:.0f} kB",
            f"Ed25519 seal {results['ed25519_seal_us'] / 1000:.2f} ms, "
            f"open {results['ed25519_open_us'] / 1000:.2f} ms",
            figures=results,
        ),
    )


if __name__ == "__main__":
    main()
