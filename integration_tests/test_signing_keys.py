"""Per-region signing keys against the real lab (issue 14): region a's key is rotated while its consumers
acknowledge and the agents sync, without a single claim refused, and a failover afterwards is exact; no
agent shows key or token bytes in its log, ``/state`` or ``/metrics``.

Agents read their control topics from the start at every restart, so a restarted agent refuses whatever
the history holds that its keyring no longer accepts (the old key's messages once it is dropped, other
tests' forgeries). Rejections are therefore counted while agents are live and caught up: from when a
(re)started agent's counters have settled to when it is stopped.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from collections import Counter

import pulsar
import pytest
import requests
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from geoctl.cli import main
from geosync_adapters import signing
from geosync_core import ackstates, envelopes
from geosync_lab import labs
from integration_tests.helpers import Lab, consume_all, produce, wait_for
from integration_tests.helpers import agent_state as _agent_state
from integration_tests.test_exact_sync import (
    _agent_ready,
    _everything,
    consume_some,
    subscribe_first,
    wait_backlog,
)

REJECTED = "control_rejected_"


class LiveRejections:
    """Control messages each region's agents refused while live, summed over restarts."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.live: dict[str, Counter[str]] = {r: Counter() for r in lab.topology.regions}
        self.baseline = {r: self._settled(r) for r in lab.topology.regions}

    def now(self, region: str) -> Counter[str]:
        counters = _agent_state(self.lab, region)["counters"]
        return Counter({k[len(REJECTED) :]: int(v) for k, v in counters.items() if k.startswith(REJECTED)})

    def _settled(self, region: str) -> Counter[str]:
        """The counters once a (re)started agent has read its control topics' history (stable for 3 s)."""
        wait_for(
            functools.partial(_agent_ready, self.lab, region), timeout_s=60, what=f"agent {region} ready"
        )
        last, stable_since = self.now(region), time.monotonic()
        deadline = stable_since + 90
        while time.monotonic() - stable_since < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.now(region)
            if now != last:
                last, stable_since = now, time.monotonic()
        return last

    def collect(self, region: str) -> None:
        self.live[region] += self.now(region) - self.baseline[region]

    def restart(self, region: str, *, key_id: str | None = None) -> None:
        self.collect(region)
        labs.stop_agent(self.lab.dir, region)
        labs.start_agent(self.lab.dir, region, key_id=key_id)
        self.baseline[region] = self._settled(region)

    def total(self) -> dict[str, dict[str, int]]:
        for region in self.live:
            self.collect(region)
            self.baseline[region] = self.now(region)
        return {r: dict(c) for r, c in self.live.items() if c}


def keyring_edit(*args: str) -> None:
    result = CliRunner().invoke(main, ["keys", *args])
    assert result.exit_code == 0, result.output


def test_rotating_a_regions_key_while_syncing_keeps_failover_exact(lab: Lab, unique: str) -> None:
    topic, sub = f"persistent://geo/ab/rotate-{unique}", f"rotate-{unique}"
    keys_dir, keyring = lab.dir / "agents" / "keys", str(lab.dir / "agents" / "keyring.yaml")
    old_id, new_id = labs.signing_key_id(lab.dir, "a"), f"a-{unique}"
    subscribe_first(lab, "a", topic, sub, pulsar.ConsumerType.Shared)
    produce(lab.service_url("a"), topic, [f"m{i:03d}".encode() for i in range(120)])
    wait_backlog(lab, "b", topic, sub, 120)
    rejections = LiveRejections(lab)
    acked: set[str] = set()

    def ack_in_a(choose: int) -> None:
        """Acknowledge another slice in a (out of order, holes left) and wait until b applied it."""
        acked.update(
            consume_some(
                lab,
                "a",
                topic,
                sub,
                total=120 - len(acked),
                consumer_type=pulsar.ConsumerType.Shared,
                choose=lambda i: i % 4 == choose,
            )
        )
        wait_backlog(lab, "b", topic, sub, 120 - len(acked))

    ack_in_a(0)
    # 1. A new key for a, accepted everywhere before anyone signs with it; agents restarted one by one.
    signing.write_key_pair(keys_dir, signing.generate(new_id))
    keyring_edit("add", "--keyring", keyring, "--region", "a", "--public", str(keys_dir / f"{new_id}.pub"))
    for region in ("b", "c", "a"):
        rejections.restart(region)
        assert _agent_state(lab, region)["signing"]["accepts"]["a"] == sorted([old_id, new_id])
        if region == "b":
            ack_in_a(1)  # b accepts both keys, a still signs with the old one
    # 2. a signs with the new key.
    rejections.restart("a", key_id=new_id)
    assert labs.signing_key_id(lab.dir, "a") == new_id
    assert _agent_state(lab, "a")["signing"]["key_id"] == new_id
    ack_in_a(2)
    # 3. The old key is dropped from every keyring; agents restarted one by one.
    keyring_edit("drop", "--keyring", keyring, "--region", "a", "--key-id", old_id)
    for region in ("b", "c", "a"):
        rejections.restart(region)
    ack_in_a(3)
    # A genuine claim signed with the dropped key now changes nothing: the one refusal expected.
    old = signing.load_signer(keys_dir / f"{old_id}.key", old_id)
    claim = envelopes.Envelope(
        kind=ackstates.ACK_STATE,
        region="a",
        seq=time.time_ns() // 1000 + 10**9,
        sent_at_ms=0,
        payload=ackstates.encode_ack_state(topic, sub, region="a", acks=_everything()),
    )
    produce(lab.service_url("a"), f"persistent://geo/ab/{labs.CONTROL_TOPIC}", [envelopes.seal(old, claim)])
    wait_for(
        lambda: (
            rejections.now("b")[envelopes.Reason.UNKNOWN_KEY.value]
            > rejections.baseline["b"][envelopes.Reason.UNKNOWN_KEY.value]
        ),
        what="b's agent to refuse the dropped key's claim",
    )
    time.sleep(1)
    # Counted where it was published (a's agent reads its own control topic too) and where it was replicated.
    refused = {envelopes.Reason.UNKNOWN_KEY.value: 1}
    assert rejections.total() == {"a": refused, "b": refused}
    # Fail over to b: exactly what a left unacknowledged arrives, once.
    remaining = consume_all(lab.service_url("b"), topic, sub, consumer_type=pulsar.ConsumerType.Shared)
    got = Counter(remaining)
    expected = {f"m{i:03d}" for i in range(120)} - acked
    assert set(got) == expected, (
        f"lost {sorted(expected - set(got))}, duplicates {sorted(set(got) - expected)}"
    )
    assert max(got.values()) == 1


def test_no_key_or_token_bytes_in_an_agents_log_state_or_metrics(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """c's agent restarted with a token (the lab's brokers ignore it); neither its bytes nor the agent's
    private key may show where operators and scrapers look."""
    token = f"tok-{time.time_ns()}-SECRET"
    monkeypatch.setenv("GEOSYNC_TOKEN", token)
    labs.stop_agent(lab.dir, "c")
    log = labs.agent_log(lab.dir, "c")
    start = log.stat().st_size if log.exists() else 0
    try:
        labs.start_agent(lab.dir, "c")
        wait_for(functools.partial(_agent_ready, lab, "c"), timeout_s=60, what="agent c ready")
        base = labs.agent_metrics_url(lab.dir, "c")
        wait_for(lambda: "signing as key" in log.read_text(errors="replace")[start:], what="c's key log line")
        pages = {
            "log": log.read_bytes()[start:],
            "/state": requests.get(base + "/state", timeout=5).content,
            "/metrics": requests.get(base + "/metrics", timeout=5).content,
        }
    finally:
        monkeypatch.delenv("GEOSYNC_TOKEN")
        labs.stop_agent(lab.dir, "c")
        labs.start_agent(lab.dir, "c")
    signing_state = json.loads(pages["/state"])["signing"]
    assert signing_state["key_id"] == labs.signing_key_id(lab.dir, "c")
    private = labs.signer(lab.dir, "c").private
    raw = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    secrets = {
        "token": token.encode(),
        "private key (hex)": raw.hex().encode(),
        "private key (base64)": base64.b64encode(raw),
        "private key (PEM body)": pem.splitlines()[1],
    }
    for page, content in pages.items():
        assert content, f"{page} is empty"
        for what, secret in secrets.items():
            assert secret not in content, f"{what} shows in {page}"
    wait_for(functools.partial(_agent_ready, lab, "c"), timeout_s=60, what="agent c ready again")
