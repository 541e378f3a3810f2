"""The simulator held to the real lab (issue 45): scripted traces run on both end with the same cursors.

``controller/geosync_sim`` judges the agents against a model of Pulsar (``geosync_sim.world``); a rule the
model gets wrong would hide a loss or invent one. Each trace here runs twice: as a scripted schedule in the
simulator (real agents on virtual time) and on the lab (real regions, real agents), with the same entries
published and the same messages acknowledged by the same consumers, and then every region's final cursor of
the subscription is compared. Cursors are compared in origin coordinates: the entry's place in a's log
(every message is published in a) and its batch index, so the mark-delete, the individually deleted entries
and the acknowledged indexes of partly acknowledged batches all count; ledger ids, which differ, do not.

The traces share their start: a publishes ``ENTRIES`` (batches and single messages) on a topic of
``geo/abc``, the subscription exists in every region (as ``Apps.add`` creates it in the simulator), a's
Shared consumers acknowledge ``A_ACKS`` (holes, and batches partly acknowledged) and the agents sync it to b
and c. Then:

* ``synced``: nothing more;
* ``clear-backlog``: an operator clears the backlog in b. With ``claims_from: acknowledgements`` (the
  default, decision 0015) b keeps its jump to itself; with ``cursor`` b claims its cursor and a and c
  acknowledge everything (the loss issue 45 describes, ``jump-replicated`` in the simulator's checker). The
  simulator runs the setting the lab's agents report in their ``/state``, so both must agree either way;
* ``failover``: the consumers move to b, a publishes ``LATER``, and b's consumers acknowledge ``B_ACKS``.

The lab side waits until its cursors are the simulator's (up to ``SETTLE_S``) and fails with both when they
differ. Pulsar's own dispatch is not compared: only what each region's cursor holds at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pulsar
import pytest

from geosync_adapters import messaging
from geosync_core.positions import Position
from geosync_lab.probes import acknowledged
from geosync_sim import running
from geosync_sim.schedules import Schedule, Step
from integration_tests.helpers import Lab, agent_state, read_all

pytestmark = pytest.mark.lab

REGIONS = ("a", "b", "c")
ENTRIES: tuple[tuple[int, bool], ...] = (
    (4, True),
    (1, False),
    (4, True),
    (1, False),
    (3, True),
    (4, True),
    (1, False),
    (3, True),
)
"""What a publishes first, entry by entry: (messages, batched)."""
LATER: tuple[tuple[int, bool], ...] = ((3, True), (1, False))
"""What a publishes after the consumers moved to b (``failover``)."""
Message = tuple[int, int]
"""(entry's place in a's log, batch index; 0 for a single message)"""
A_ACKS: frozenset[Message] = frozenset(
    {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (2, 2), (4, 0), (4, 1), (4, 2), (5, 3), (6, 0)}
)
"""What a's consumers acknowledge: entry 0 and 1 whole, 2 in part, 3 a hole, 4 whole, 5 in part, 6, and 7 not
at all."""
B_ACKS: frozenset[Message] = frozenset(
    {(e, i) for e, (n, _) in enumerate(ENTRIES + LATER) for i in range(n)} - {(7, 1), (8, 2)}
)
"""What b's consumers acknowledge after the failover: all they are given but two messages of batches."""
SETTLE_S = 30.0


@dataclass(frozen=True)
class Cursor:
    """A cursor in origin coordinates: mark-delete (the last entry of the acknowledged prefix, -1 for none),
    the entries deleted above it, and the acknowledged indexes of the entries acknowledged in part."""

    mark_delete: int
    deleted: tuple[int, ...]
    partial: tuple[tuple[int, tuple[int, ...]], ...]

    @classmethod
    def of(cls, acked: set[Message], sizes: list[int]) -> Cursor:
        whole = [all((e, i) in acked for i in range(n)) for e, n in enumerate(sizes)]
        md = -1
        while md + 1 < len(sizes) and whole[md + 1]:
            md += 1
        deleted = tuple(e for e in range(md + 1, len(sizes)) if whole[e])
        partial = tuple(
            (e, tuple(i for i in range(n) if (e, i) in acked))
            for e, n in enumerate(sizes)
            if e > md and not whole[e] and any((e, i) in acked for i in range(n))
        )
        return cls(md, deleted, partial)

    def __str__(self) -> str:
        parts = ", ".join(f"{e}:{list(i)}" for e, i in self.partial)
        return f"mark-delete {self.mark_delete}, deleted {list(self.deleted)}, batch indexes {{{parts}}}"


Cursors = dict[str, Cursor]


def _sizes(trace: str) -> list[int]:
    return [n for n, _ in ENTRIES + (LATER if trace == "failover" else ())]


# -- the simulator -----------------------------------------------------------------------------------------


def simulate(trace: str, claims_from: str) -> Cursors:
    steps = [Step(1.0 + 0.3 * e, "produce", ("a", 0, n, batched)) for e, (n, batched) in enumerate(ENTRIES)]
    if trace == "clear-backlog":
        steps.append(Step(10.0, "admin", ("b", 0, "clear-backlog", 0)))
    elif trace == "failover":
        steps.append(Step(10.0, "failover", (0, "b", 0.5)))
        steps += [
            Step(12.0 + 0.3 * k, "produce", ("a", 0, n, batched)) for k, (n, batched) in enumerate(LATER)
        ]
    schedule = Schedule(
        45, REGIONS, 1, ("Shared",), (True, True, True), 20.0, tuple(steps), ("a",), claims_from=claims_from
    )
    sim = running.Simulation(schedule)
    topic = sim.topics[0]
    app = sim.apps.apps[(topic, "sub")]
    app.script = lambda ident: (ident[2], ident[3]) in (A_ACKS if app.region == "a" else B_ACKS)
    sim.run()
    out = {}
    for region in REGIONS:
        r = sim.world.regions[region]
        cursor = r.subs[(topic, "sub")].cursor
        entries = r.topics[topic].entries
        acked = {(e.source.entry, i) for e in entries for i in range(len(e.msgs)) if cursor.has(e.eid, i)}
        out[region] = Cursor.of(acked, _sizes(trace))
    return out


# -- the lab -----------------------------------------------------------------------------------------------


def _publish(lab: Lab, topic: str, entries: tuple[tuple[int, bool], ...], first: int) -> None:
    """One entry each: a batch of exactly ``n`` messages (the producer sends it when full or flushed) or a
    single message; payloads ``a-{entry}-{index}``."""
    with messaging.client(lab.service_url("a")) as c:
        batching = c.create_producer(
            topic, batching_enabled=True, batching_max_messages=8, batching_max_publish_delay_ms=60_000
        )
        single = c.create_producer(topic, batching_enabled=False)
        for e, (n, batched) in enumerate(entries, first):
            if batched:
                for i in range(n):
                    batching.send_async(f"a-{e}-{i}".encode(), None)
                batching.flush()
            else:
                single.send(f"a-{e}-0".encode())
        batching.close()
        single.close()


def _message(data: bytes) -> Message:
    _, e, i = data.decode().split("-")
    return int(e), int(i)


def _receive(consumer: pulsar.Consumer, acks: frozenset[Message], want: set[Message]) -> None:
    """Receive until every message of ``want`` came (at most ``SETTLE_S``), acknowledging those of ``acks``:
    a consumer that stopped at a quiet moment would miss a copy still in flight, and leave it unacknowledged
    where the simulator's consumers acknowledged it."""
    got: set[Message] = set()
    deadline = time.monotonic() + SETTLE_S
    while not want <= got and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=500)
        except pulsar.Timeout:
            continue
        got.add(_message(msg.data()))
        if _message(msg.data()) in acks:
            consumer.acknowledge(msg)
    assert want <= got, f"never given {sorted(want - got)}"
    time.sleep(0.5)  # the client's grouped acknowledgements go out


def _all(entries: tuple[tuple[int, bool], ...], first: int = 0) -> set[Message]:
    return {(e, i) for e, (n, _) in enumerate(entries, first) for i in range(n)}


class LabCursors:
    """Every region's cursor of the subscription, read in origin coordinates."""

    def __init__(self, lab: Lab, topic: str, sub: str, sizes: list[int]) -> None:
        self.lab, self.topic, self.sub, self.sizes = lab, topic, sub, sizes
        self.logs: dict[str, dict[tuple[Position, int], Message]] = {}

    def _log(self, region: str) -> dict[tuple[Position, int], Message]:
        """(local entry, batch index as the broker counts it) -> message, for every message a published."""
        if region not in self.logs:
            read = read_all(self.lab.service_url(region), self.topic, expect=sum(self.sizes))
            self.logs[region] = {(m.position, m.batch_index): _message(m.data) for m in read}
        return self.logs[region]

    def read(self) -> Cursors:
        out = {}
        for region in REGIONS:
            log = self._log(region)
            acked = acknowledged(self.lab.admin(region), self.topic, self.sub, list(log))
            out[region] = Cursor.of({log[m] for m in acked}, self.sizes)
        return out

    def wait_for(self, want: Cursors | Callable[[Cursors], bool]) -> Cursors:
        """The cursors once they are ``want`` (or pass it), or as they are after ``SETTLE_S``."""
        ok = want if callable(want) else lambda got: got == want
        deadline = time.monotonic() + SETTLE_S
        got = self.read()
        while not ok(got) and time.monotonic() < deadline:
            time.sleep(0.5)
            got = self.read()
        return got


def _synced(got: Cursors) -> bool:
    return got["b"] == got["a"] and got["c"] == got["a"]


def on_the_lab(lab: Lab, unique: str, trace: str, model: Cursors) -> tuple[Cursors, Cursors]:
    """The trace on the lab: the cursors once b and c synced a's consumers' acknowledgements (before the
    trace's own step), and at the end (once they are ``model``'s, or after ``SETTLE_S``)."""
    topic, sub = f"persistent://geo/abc/sim-vs-lab-{unique}", f"sim-vs-lab-{unique}"
    for region in REGIONS:  # in every region before any traffic, as the simulator's applications do
        with messaging.client(lab.service_url(region)) as c:
            c.subscribe(topic, sub, consumer_type=pulsar.ConsumerType.Shared).close()
    _publish(lab, topic, ENTRIES, 0)
    cursors = LabCursors(lab, topic, sub, _sizes("synced"))
    with messaging.client(lab.service_url("a")) as ca, messaging.client(lab.service_url("b")) as cb:
        consumer = ca.subscribe(
            topic, sub, consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
        )
        _receive(consumer, A_ACKS, _all(ENTRIES))
        synced = cursors.wait_for(_synced)
        if trace == "clear-backlog":
            admin = lab.admin("b")
            admin.post(f"/admin/v2/{admin.topic_path(topic)}/subscription/{sub}/skip_all")
        elif trace == "failover":
            consumer.close()
            consumer = cb.subscribe(
                topic, sub, consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
            )
            _receive(consumer, B_ACKS, _all(ENTRIES) - A_ACKS)
            _publish(lab, topic, LATER, len(ENTRIES))
            _receive(consumer, B_ACKS, _all(LATER, len(ENTRIES)))
            cursors = LabCursors(lab, topic, sub, _sizes(trace))
        final = cursors.wait_for(model)
        consumer.close()
    return synced, final


@pytest.mark.parametrize("trace", ["synced", "clear-backlog", "failover"])
def test_the_lab_ends_with_the_simulators_cursors(lab: Lab, unique: str, trace: str) -> None:
    settings = {agent_state(lab, region)["claims"]["setting"] for region in REGIONS}
    assert len(settings) == 1, f"the lab's agents claim from different things: {settings}"
    model = simulate(trace, settings.pop())
    synced, final = on_the_lab(lab, unique, trace, model)
    expected_a = Cursor.of(set(A_ACKS), _sizes("synced"))
    assert synced == dict.fromkeys(REGIONS, expected_a), "the lab did not sync a's acknowledgements: " + str(
        {r: str(c) for r, c in synced.items()}
    )
    differ = [f"{r}: simulator {model[r]}; lab {final[r]}" for r in REGIONS if model[r] != final[r]]
    assert not differ, "the simulator and the lab end with different cursors:\n" + "\n".join(differ)
