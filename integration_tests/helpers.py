"""Small, bounded helpers for producing and reading in the lab's regions."""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
import requests

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_core import topology as topo
from geosync_core.positions import Position
from geosync_lab import labs, regions


@dataclass
class Lab:
    dir: pathlib.Path
    owned: bool

    @property
    def topology(self) -> topo.Topology:
        return labs.load(self.dir)

    def admin(self, region: str) -> AdminClient:
        return AdminClient(self.topology.region(region).admin_url)

    def service_url(self, region: str) -> str:
        return self.topology.region(region).service_url

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every region's log (less its access log) and of every agent's log."""
        out = []
        for region in self.topology.regions.values():
            out.append(regions.log_tail(labs.region_process(self.dir, region), lines))
        for name in self.topology.agents:
            tail = regions.file_tail(labs.agent_log(self.dir, name), lines)
            out.append(tail or f"(agent {name}: no log)")
        return "\n\n".join(out)


@contextlib.contextmanager
def given_or_booted(
    env: str,
    reusable: Callable[[pathlib.Path], bool],
    boot: Callable[[pathlib.Path], object],
    lab_dir: pathlib.Path,
) -> Iterator[Lab]:
    """The running lab the environment variable ``env`` names, if ``reusable`` accepts it (left running);
    else one ``boot`` starts in ``lab_dir``, stopped after the block."""
    given = os.environ.get(env)
    if given and reusable(pathlib.Path(given)):
        yield Lab(dir=pathlib.Path(given).resolve(), owned=False)
        return
    boot(lab_dir)
    try:
        yield Lab(dir=lab_dir.resolve(), owned=True)
    finally:
        labs.down(lab_dir)


def produce(
    service_url: str,
    topic: str,
    payloads: list[bytes],
    *,
    key: Callable[[int], str] | None = None,
) -> list[tuple[int, Position]]:
    """Send each payload synchronously; return (partition, position) per message, in order."""
    out = []
    with messaging.client(service_url) as c:
        producer = c.create_producer(topic, batching_enabled=False)
        for i, data in enumerate(payloads):
            kwargs = {"partition_key": key(i)} if key else {}
            mid = producer.send(data, **kwargs)
            out.append((mid.partition(), messaging.position_of(mid)))
        producer.close()
    return out


def read_all(
    service_url: str,
    topic: str,
    *,
    expect: int,
    timeout_s: float = 45.0,
    match: Callable[[messaging.Received], bool] = lambda _m: True,
) -> list[messaging.Received]:
    """Read ``topic`` from the earliest message until ``expect`` matching messages arrived (or time out)."""
    return read_until(service_url, topic, lambda got: len(got) >= expect, timeout_s=timeout_s, match=match)


def read_every(service_url: str, topic: str, want: set[str], *, timeout_s: float = 45.0) -> list[str]:
    """The payloads read from ``topic``'s earliest message until every one of ``want`` came (or time out),
    repeats included: Pulsar's replication delivers at least once, so a replicator that restarts may send
    again what it sent."""

    def every(found: list[messaging.Received]) -> bool:
        return want <= {m.data.decode() for m in found}

    return [m.data.decode() for m in read_until(service_url, topic, every, timeout_s=timeout_s)]


def read_until(
    service_url: str,
    topic: str,
    done: Callable[[list[messaging.Received]], bool],
    *,
    timeout_s: float = 45.0,
    match: Callable[[messaging.Received], bool] = lambda _m: True,
) -> list[messaging.Received]:
    """Read ``topic`` from the earliest message, keeping those that ``match``, until ``done`` says the kept
    ones are enough (or time out)."""
    found: list[messaging.Received] = []
    deadline = time.monotonic() + timeout_s
    with messaging.client(service_url) as c:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        try:
            while not done(found) and time.monotonic() < deadline:
                try:
                    msg = reader.read_next(timeout_millis=500)
                except pulsar.Timeout:
                    continue
                got = messaging.received(msg)
                if match(got):
                    found.append(got)
        finally:
            reader.close()
    return found


def cursor(admin: AdminClient, topic: str, subscription: str) -> tuple[str, str] | None:
    """(markDeletePosition, individuallyDeletedMessages) of a subscription, or None if it does not exist."""
    try:
        raw = admin.internal_stats(topic)["cursors"].get(subscription)
    except Exception:
        return None
    return None if raw is None else (raw["markDeletePosition"], raw["individuallyDeletedMessages"])


def agent_state(lab: Lab, region: str) -> dict[str, Any]:
    """The ``/state`` of the lab's agent ``region``."""
    state: dict[str, Any] = requests.get(labs.agent_metrics_url(lab.dir, region) + "/state", timeout=5).json()
    return state


def wait_for(
    predicate: Callable[[], bool], *, timeout_s: float = 30.0, what: str | Callable[[], str] = "condition"
) -> float:
    """Poll ``predicate`` until true; return seconds waited; fail the test with ``what`` on timeout (a
    callable is asked then: it can say how things stood at the end, not at the start)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {said}")
        time.sleep(0.2)
    return time.monotonic() - started


def replicated(lab: Lab, source: str, target: str, topics: list[str], *, timeout_s: float = 120.0) -> None:
    """Until ``source``'s replicator to ``target`` is connected with nothing left to send on every one of
    ``topics``."""

    def none_left() -> bool:
        for topic in topics:
            stats = lab.admin(source).topic_stats(topic)
            link = (stats.get("replication") or {}).get(target)
            if link is None or int(link.get("replicationBacklog") or 0) > 0 or not link.get("connected"):
                return False
        return True

    wait_for(none_left, timeout_s=timeout_s, what=f"{source} to finish replicating {topics} to {target}")


def consume_all(
    service_url: str,
    topic: str,
    subscription: str,
    *,
    consumer_type: Any = None,
    quiet_s: float = 3.0,
    limit_s: float = 60.0,
    batch_index_acks: bool = False,
    acknowledge: bool = True,
) -> list[str]:
    """Connect a consumer and receive (and acknowledge, unless not ``acknowledge``: then the cursor stays and
    what comes is what the broker holds unacknowledged) until nothing arrives for ``quiet_s``. Without
    ``batch_index_acks`` the client acknowledges an entry only once every message in it is acknowledged
    (README): the messages of a batch partly acknowledged before are delivered, but their acknowledgements
    never reach the broker (seen on the WAN lab: b's cursor stayed where the agent had put it)."""
    got: list[str] = []
    with messaging.client(service_url) as c:
        consumer = c.subscribe(
            topic,
            subscription,
            consumer_type=consumer_type or pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=batch_index_acks,
        )
        deadline = time.monotonic() + limit_s
        try:
            while time.monotonic() < deadline:
                try:
                    msg = consumer.receive(timeout_millis=int(quiet_s * 1000))
                except pulsar.Timeout:
                    break
                got.append(msg.data().decode())
                if acknowledge:
                    consumer.acknowledge(msg)
        finally:
            consumer.close()
    return got


def ack_some(
    service_url: str, topic: str, sub: str, *, total: int, share: float, rng: random.Random
) -> set[str]:
    """A Shared consumer with batch-index acknowledgements receives ``total`` messages and acknowledges each
    with probability ``share`` (holes at random); the payloads acknowledged."""
    acked: set[str] = set()
    with messaging.client(service_url) as c:
        consumer = c.subscribe(
            topic, sub, consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        for _ in range(total):
            msg = consumer.receive(timeout_millis=30000)
            if rng.random() < share:
                consumer.acknowledge(msg)
                acked.add(msg.data().decode())
        time.sleep(0.5)  # the client's grouped acknowledgements go out
        consumer.close()
    return acked


def produce_batched(service_url: str, topic: str, payloads: list[str], *, batch: int = 20) -> None:
    """Publish through a producer with batching on (the Java client's default; the Python client's is off),
    in bursts of up to ``batch`` per entry; a full queue waits rather than drops."""
    with messaging.client(service_url) as c:
        producer = c.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=batch,
            batching_max_publish_delay_ms=20,
            block_if_queue_full=True,
        )
        for data in payloads:
            producer.send_async(data.encode(), None)
        producer.flush()
        producer.close()


def produce_in_both(lab: Lab, topic: str, count: int, *, tag: str = "", batch: int = 20) -> set[str]:
    """Both regions publish ``count`` messages on ``topic`` through batching producers (``produce_batched``),
    named ``a{tag}{i}`` and ``b{tag}{i}``: every message sent."""
    payloads = {r: [f"{r}{tag}{i}" for i in range(count)] for r in ("a", "b")}
    for region, sent in payloads.items():
        produce_batched(lab.service_url(region), topic, sent, batch=batch)
    return set(payloads["a"]) | set(payloads["b"])


def assert_exact(
    got: list[str], everything: set[str], acked: set[str], where: str, *, copies: bool = False
) -> None:
    """A failover delivered ``got``: exactly the messages of ``everything`` not in ``acked``, nothing lost,
    nothing acknowledged again. ``copies``: a message Pulsar stored twice may come twice (a producer's or
    the replicator's resend across a bundle unload, without broker deduplication), as at the source."""
    lost = (everything - acked) - set(got)
    again = set(got) & acked
    assert not lost, f"{where}: lost {len(lost)}: {sorted(lost)[:10]}"
    assert not again, f"{where}: {len(again)} acknowledged messages delivered again: {sorted(again)[:10]}"
    assert set(got) == everything - acked
    if copies:
        print(f"{where}: {len(got) - len(set(got))} stored copies of unacknowledged messages delivered")
    else:
        assert len(got) == len(set(got)), f"{where}: a message arrived twice"
