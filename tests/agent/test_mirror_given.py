"""What the policy mirror's shell gives its parts (decision 0001): the wall clock (``wall_ms``), fresh ids
(``new_id``) and the way its tasks start (``spawn``). With a fixed clock and fixed ids every stamp, sequence
number, send time, identifier and checkpoint generation is known in advance, so a test or a replay can check
them; the parts themselves read no clock and draw no id (``test_shell_only``)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

from geosync_agent.config import AgentConfig
from geosync_agent.core import mirrorevents as ev
from geosync_agent.mirroring import Mirror
from geosync_agent.mirrorstate import StateNodes, decode_pointer
from geosync_agent.supervising import Supervisor
from geosync_core import envelopes, policies
from geosync_core.clocks import Hlc
from geosync_core.policies import Record
from tests.agent.fakes import KEYS
from tests.agent.fakezk import FakeStore, leading

T = 1_800_000_000_000
TENANT = "/admin/policies/geo"
NS = "/admin/policies/geo/orders"


class _Producer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


def _ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{next(counter):032x}"


def _mirror(wall_ms: Callable[[], int], **given: object) -> tuple[Mirror, FakeStore, _Producer]:
    config = AgentConfig(
        region="a",
        admin_url="http://fake",
        service_url="pulsar://fake",
        zookeeper="127.0.0.1:1",
        mirror_tenants=("geo",),
    )
    mirror = Mirror(config, KEYS["a"], wall_ms=wall_ms, new_id=_ids(), **given)  # type: ignore[arg-type]
    store = FakeStore()
    store.ensure_path(NS)
    producer = _Producer()
    leading(mirror, store, producer)
    return mirror, store, producer


def _published(producer: _Producer) -> list[tuple[int, int, Record]]:
    """Each sent event's sequence number, send time and record."""
    out = []
    for data in producer.sent:
        opened = envelopes.open_envelope(KEYS["a"].keyring, data)
        assert isinstance(opened, envelopes.Envelope)
        record = policies.event_from_payload(opened.payload)
        assert isinstance(record, Record)
        out.append((opened.seq, opened.sent_at_ms, record))
    return out


def _edits(mirror: Mirror, store: FakeStore) -> None:
    """The tenant made, its namespace made, the namespace edited: each found through its watch."""
    store.nodes[TENANT] = (b'{"allowed_clusters":["a"]}', 1)
    mirror.feed(ev.Fired(TENANT))
    store.nodes[NS] = (b'{"ttl":1}', 1)
    mirror.feed(ev.Fired(NS))
    store.nodes[NS] = (b'{"ttl":2}', 2)
    mirror.feed(ev.Fired(NS))


def test_a_fixed_clock_gives_fixed_stamps_sequence_numbers_and_send_times() -> None:
    mirror, store, producer = _mirror(lambda: T)
    _edits(mirror, store)
    assert [(seq, sent, r.path, r.stamp) for seq, sent, r in _published(producer)] == [
        (T * 1000, T, TENANT, Hlc(T, 0, "a")),
        (T * 1000 + 1, T, NS, Hlc(T, 1, "a")),
        (T * 1000 + 2, T, NS, Hlc(T, 2, "a")),
    ]
    assert mirror.cp.clock == Hlc(T, 2, "a")


def test_the_same_clock_readings_give_the_same_events() -> None:
    def run() -> list[tuple[int, int, Record]]:
        readings: Iterator[int] = iter(range(T, T + 1000, 7))
        mirror, store, producer = _mirror(lambda: next(readings))
        _edits(mirror, store)
        return _published(producer)

    assert run() == run()


def test_a_clock_that_goes_back_still_stamps_in_order() -> None:
    readings = iter([T, T, T - 5_000, T - 5_000, T + 3, T + 3, T + 3, T + 3])
    mirror, store, producer = _mirror(lambda: next(readings))
    _edits(mirror, store)
    published = _published(producer)
    stamps = [r.stamp for _, _, r in published]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 3
    seqs = [seq for seq, _, _ in published]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 3


def test_the_identifier_and_the_checkpoint_generations_are_the_given_ids() -> None:
    mirror, _, _ = _mirror(lambda: T)
    assert mirror.identifier == "a-00000000"
    store = FakeStore()
    store.ensure_path("/m")
    nodes = StateNodes(store, "/m", budget=10, fence=("/fence", 0), new_id=mirror.new_id)  # type: ignore[arg-type]
    pointer = decode_pointer(nodes.write(b"x" * 25, expected=None).value)
    assert pointer is not None
    assert pointer.generation == f"{1:032x}"
    assert store.children("/m/parts") == [pointer.generation]


def test_without_ids_a_generation_is_named_after_those_already_written() -> None:
    store = FakeStore()
    store.ensure_path("/m")
    nodes = StateNodes(store, "/m", budget=10, fence=("/fence", 0))  # type: ignore[arg-type]
    store.ensure_path("/m/parts/g0")  # an orphan of a write that crashed before its switch
    node = nodes.write(b"x" * 25, expected=None)
    first = decode_pointer(node.value)
    assert first is not None
    assert first.generation == "g1"
    assert store.children("/m/parts") == ["g1"]
    second = decode_pointer(nodes.write(b"y" * 25, expected=node).value)
    assert second is not None
    assert second.generation == "g0"
    assert nodes.read()[1] == b"y" * 25


def test_the_mirror_starts_its_task_through_the_given_spawn() -> None:
    spawned: list[tuple[str, Callable[[], None]]] = []

    def spawn(name: str, body: Callable[[], None]) -> threading.Thread:
        spawned.append((name, body))
        return threading.current_thread()

    mirror, _, _ = _mirror(lambda: T, spawn=spawn)
    mirror.start()
    assert spawned == [("policy-mirror-a", mirror.run)]


def test_a_scoped_task_is_named_and_left_to_its_owner() -> None:
    """The mirror's reader ends with its term: the supervisor neither restarts it nor counts it as a task."""
    supervisor = Supervisor(threading.Event())
    ran = threading.Event()
    thread = supervisor.scoped("policy-mirror-reader-a", ran.set)
    thread.join(timeout=5)
    assert ran.is_set()
    assert thread.name == "policy-mirror-reader-a"
    assert supervisor.threads == {}
    assert supervisor.alive()
