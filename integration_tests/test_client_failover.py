"""Clients that fail over by themselves (PIP-121): a plain Java client follows ``geoctl failover serve``.

The Java client's ``ControlledClusterFailover`` polls the provider's ``/service-url``. A consumer on region
a acknowledges with holes; a switch to b is requested; the provider keeps answering a until ``failover
check`` says b is exact for the subscription, then answers b; the client closes its connections and
reconnects its consumer to b by itself (same process, no restart), where it is given exactly the messages
it had not acknowledged: 0 lost, 0 duplicates. The switch is in the provider's journal with reason
``exact``, and a restarted provider keeps serving b.

The Java program (``clients/ControlledFailoverConsumer.java``) is compiled once against the lab's Pulsar
distribution (its ``lib/``) and cached by source hash under GeoSync's cache directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
import requests
from click.testing import CliRunner

from geoctl import access, failover
from geoctl.cli import main
from geosync_adapters.admin import AdminClient
from geosync_adapters.clientfailover import ControlledFailover
from geosync_lab import distribution
from integration_tests.helpers import Lab, produce, read_all, wait_for

pytestmark = pytest.mark.lab

SOURCE = pathlib.Path(__file__).with_name("clients") / "ControlledFailoverConsumer.java"
CHECK_INTERVAL_MS = 500


def _java_classes() -> pathlib.Path:
    """The compiled Java client, cached by its source and the Pulsar version it is compiled against."""
    home = distribution.pulsar_home()
    key = hashlib.sha256(SOURCE.read_bytes() + home.name.encode()).hexdigest()[:16]
    out = distribution.cache_dir() / "java-clients" / key
    if (out / "ControlledFailoverConsumer.class").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        pytest.fail("no javac on PATH: install a JDK (scripts/setup.sh installs openjdk-17-jdk-headless)")
    staging = out.with_name(f"{key}.tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [javac, "-d", str(staging), "-cp", f"{home}/lib/*", str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
    )
    with contextlib.suppress(OSError):  # another session compiled it meanwhile: keep theirs
        staging.rename(out)
    shutil.rmtree(staging, ignore_errors=True)
    return out


class JavaConsumer:
    """The Java program as a child process: one command a line, one ``GEOSYNC {json}`` answer each."""

    def __init__(self, args: list[str]) -> None:
        classpath = f"{_java_classes()}:{distribution.pulsar_home()}/lib/*"
        self.lines: list[str] = []
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.proc = subprocess.Popen(
            ["java", "-Xmx192m", "-cp", classpath, "ControlledFailoverConsumer", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, name="java-client-output", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("GEOSYNC "):
                self._answers.put(json.loads(line[len("GEOSYNC ") :]))

    def answer(self, timeout_s: float = 90.0) -> dict[str, Any]:
        try:
            return self._answers.get(timeout=timeout_s)
        except queue.Empty:
            tail = "\n".join(self.lines[-40:])
            raise AssertionError(f"the Java client did not answer within {timeout_s} s:\n{tail}") from None

    def ask(self, command: str, timeout_s: float = 90.0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answer(timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, AssertionError):
                self.ask("quit", timeout_s=20)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def provider(lab: Lab, state_dir: pathlib.Path, subscription: str, initial: str = "a") -> Iterator[str]:
    """``geoctl failover serve`` as its own process (as operators run it); yields its base URL."""
    cmd = [
        sys.executable, "-m", "geoctl", "failover", "serve", "--topology", str(lab.dir),
        "--namespace", "geo/ab", "--subscription", subscription, "--initial-region", initial,
        "--state-dir", str(state_dir), "--port", "0", "--max-check-interval", "2s",
    ]  # fmt: skip
    log = (state_dir.parent / f"{state_dir.name}.log").open("a")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("serving on "), f"provider did not start: {first!r} (see {log.name})"
        yield first.split()[2].removesuffix("/service-url:").removesuffix("/service-url")
    finally:
        proc.terminate()  # SIGTERM: the provider stops serving and exits
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, f"the provider exited with {proc.returncode} (see {log.name})"


def consumers(admin: AdminClient, topic: str, subscription: str) -> set[str]:
    subs = admin.topic_stats(topic).get("subscriptions") or {}
    return {str(c.get("consumerName")) for c in (subs.get(subscription) or {}).get("consumers") or []}


def test_java_client_moves_to_b_by_itself_once_b_is_exact(
    lab: Lab, unique: str, tmp_path: pathlib.Path
) -> None:
    started = time.monotonic()
    topic = f"persistent://geo/ab/pip121-{unique}"
    sub, name = f"pip121-{unique}", f"java-{unique}"
    a, b = lab.admin("a"), lab.admin("b")
    url_a, url_b = lab.service_url("a"), lab.service_url("b")
    a.create_subscription(topic, sub)  # only in a: b's agent creates it there (the provider waits for it)
    payloads = [f"m{i}" for i in range(40)]
    produce(url_a, topic, [p.encode() for p in payloads])
    assert len(read_all(url_b, topic, expect=40)) == 40
    state_dir = tmp_path / "provider"

    with provider(lab, state_dir, sub) as base:
        assert requests.get(f"{base}/service-url", timeout=5).json() == {"serviceUrl": url_a}
        java = JavaConsumer([f"{base}/service-url", url_a, topic, sub, name, str(CHECK_INTERVAL_MS)])
        try:
            assert java.answer()["serviceUrl"] == url_a
            took = java.ask("consume 30 4")  # m3, m7, ... m27 held: holes below the highest acknowledged
            acked, held = set(took["acked"]), set(took["held"])
            assert (len(acked), len(held)) == (23, 7), took
            assert consumers(a, topic, sub) == {name}

            result = CliRunner().invoke(
                main,
                ["failover", "switch", "--provider", base, "--to", "b", "--max-wait", "120", "--wait",
                 "--timeout", "150", "-o", "json"],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            switch = json.loads(result.output)["switch"]
            assert (switch["from"], switch["to"], switch["reason"]) == ("a", "b", "exact")
            assert switch["predicted_duplicates"] == 0
            assert switch["check"]["subscriptions"] == 1
            assert requests.get(f"{base}/service-url", timeout=5).json() == {"serviceUrl": url_b}

            # The client moves by itself: its provider poll, then its consumer reconnects in b.
            wait_for(lambda: java.ask("where") == {"serviceUrl": url_b, "connected": True}, timeout_s=30)
            wait_for(
                lambda: consumers(b, topic, sub) == {name} and name not in consumers(a, topic, sub),
                timeout_s=30,
                what="the Java consumer connected in b and gone from a",
            )
            got = java.ask("drain 5000")["got"]
        finally:
            java.close()

    assert len(got) == len(set(got)), f"delivered twice in b: {sorted(m for m in got if got.count(m) > 1)}"
    duplicates = sorted(set(got) & acked)
    lost = sorted(set(payloads) - acked - set(got))
    assert (duplicates, lost) == ([], []), f"duplicates {duplicates}, lost {lost}"
    assert set(got) == set(payloads) - acked  # the 7 holes and the 10 never received

    journal = [json.loads(line) for line in (state_dir / "switches.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("reason")) for e in journal] == [("requested", None), ("switched", "exact")]

    # A restarted provider serves the region it last switched to, whatever --initial-region says.
    with provider(lab, state_dir, sub, initial="a") as base:
        assert requests.get(f"{base}/service-url", timeout=5).json() == {"serviceUrl": url_b}
        status = requests.get(f"{base}/status", timeout=5).json()
        assert status["active"] == "b"
        assert status["switches"][-1]["reason"] == "exact"
    print(f"\nPIP-121 client failover test took {time.monotonic() - started:.1f} s")


def test_a_switch_that_is_never_exact_is_forced_after_max_wait_with_the_predicted_duplicates(
    lab: Lab, unique: str, tmp_path: pathlib.Path
) -> None:
    # unsynced-* subscriptions are left alone by the lab's agents: b never applies a's acknowledgements.
    topic = f"persistent://geo/ab/pip121-forced-{unique}"
    sub, name = f"unsynced-pip121-{unique}", f"java-{unique}"
    url_a, url_b = lab.service_url("a"), lab.service_url("b")
    for region in ("a", "b"):
        lab.admin(region).create_subscription(topic, sub)
    payloads = [f"m{i}" for i in range(20)]
    produce(url_a, topic, [p.encode() for p in payloads])
    assert len(read_all(url_b, topic, expect=20)) == 20
    state_dir = tmp_path / "provider"

    with provider(lab, state_dir, sub) as base:
        java = JavaConsumer([f"{base}/service-url", url_a, topic, sub, name, str(CHECK_INTERVAL_MS)])
        try:
            java.answer()
            acked = set(java.ask("consume 20 5")["acked"])  # m4, m9, m14, m19 held
            assert len(acked) == 16
            requested = time.monotonic()
            result = CliRunner().invoke(
                main,
                ["failover", "switch", "--provider", base, "--to", "b", "--max-wait", "4s", "-o", "json"],
            )
            assert result.exit_code == 0, result.output
            # Not exact: the provider keeps answering a, and the client stays there, until the wait is over.
            status = requests.get(f"{base}/status", timeout=5).json()
            assert status["active"] == "a"
            assert status["pending"]["to"] == "b"
            assert java.ask("where")["serviceUrl"] == url_a
            wait_for(
                lambda: requests.get(f"{base}/status", timeout=5).json()["active"] == "b",
                timeout_s=60,
                what="the forced switch",
            )
            assert time.monotonic() - requested >= 4.0
            switch = requests.get(f"{base}/status", timeout=5).json()["switches"][-1]
            assert switch["reason"] == "forced-after-max-wait"
            assert switch["predicted_duplicates"] == 16
            assert any("has not applied 16" in w for w in switch["check"]["wait_for"])
            wait_for(lambda: java.ask("where") == {"serviceUrl": url_b, "connected": True}, timeout_s=30)
            got = java.ask("drain 4000")["got"]
        finally:
            java.close()

    # What the provider predicted is what the client was given again.
    assert sorted(set(got) & acked) == sorted(acked)
    assert set(got) == set(payloads)


def test_python_client_follows_the_provider_through_a_service_info_provider(
    lab: Lab, unique: str, tmp_path: pathlib.Path
) -> None:
    """The Python client (C++ underneath) has no HTTP poller but takes a ServiceInfoProvider; GeoSync's
    ``ControlledFailover`` polls the same /service-url, and the consumer moves to b by itself."""
    topic = f"persistent://geo/ab/pip121-py-{unique}"
    sub = f"pip121-py-{unique}"
    url_a, url_b = lab.service_url("a"), lab.service_url("b")
    lab.admin("a").create_subscription(topic, sub)
    payloads = [f"m{i}" for i in range(20)]
    produce(url_a, topic, [p.encode() for p in payloads])
    assert len(read_all(url_b, topic, expect=20)) == 20

    with provider(lab, tmp_path / "provider", sub) as base:
        follower = ControlledFailover(f"{base}/service-url", url_a, interval_s=0.5)
        client = pulsar.Client(follower, operation_timeout_seconds=15)
        try:
            consumer = client.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared)
            acked = set()
            for i in range(15):
                msg = consumer.receive(timeout_millis=20_000)
                if i % 4 != 3:
                    consumer.acknowledge(msg)
                    acked.add(msg.data().decode())
            assert client.get_service_info().service_url == url_a
            result = CliRunner().invoke(
                main, ["failover", "switch", "--provider", base, "--to", "b", "--wait", "--timeout", "120"]
            )
            assert result.exit_code == 0, result.output
            assert "(exact)" in result.output
            wait_for(lambda: client.get_service_info().service_url == url_b, timeout_s=20)
            wait_for(
                lambda: consumers(lab.admin("b"), topic, sub) != set(), timeout_s=30, what="consumer in b"
            )
            got = []
            while True:
                try:
                    msg = consumer.receive(timeout_millis=4000)
                except pulsar.Timeout:
                    break
                got.append(msg.data().decode())
                consumer.acknowledge(msg)
        finally:
            client.close()
    assert len(got) == len(set(got))
    assert set(got) == set(payloads) - acked  # the holes and the never received: 0 lost, 0 duplicates


def test_with_the_source_region_unreachable_the_check_is_not_exact(lab: Lab, unique: str) -> None:
    """What a check could read of b alone may look in step; a switch on it would be recorded exact without
    proof. The provider counts such a check as not exact (a switch is then forced after the maximum wait)."""
    topic = f"persistent://geo/ab/pip121-down-{unique}"
    sub = f"pip121-down-{unique}"
    lab.admin("a").create_subscription(topic, sub)
    produce(lab.service_url("a"), topic, [b"m0", b"m1"])
    wait_for(lambda: sub in (lab.admin("b").topic_stats(topic).get("subscriptions") or {}), timeout_s=30)
    sites = access.load(lab.dir / "topology.json", None)
    gone = dataclasses.replace(
        sites["a"].region, admin_url="http://127.0.0.1:9", service_url="pulsar://127.0.0.1:9"
    )
    sites["a"] = dataclasses.replace(sites["a"], region=gone)
    verdict = failover.check(sites, "a", "b", ["geo/ab"], subscriptions=[sub])
    assert verdict.errors, verdict
    said = failover.figures(verdict)
    assert not said.exact
    assert said.error is not None
    assert "region a" in said.error
