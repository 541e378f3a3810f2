"""The simulation of regions (``geosync_sim``): a fixed set of seeds runs the real agents and holds every
invariant the checker judges; the same seed replays the same trace; and the checker fails a run whose agent is
broken on purpose, so a green simulation means something."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from geosync_core import envelopes, pluginwrites
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from geosync_sim import harness, ports, running, schedules, shrinking
from geosync_sim.checking import Checker
from geosync_sim.logs import Cursor, Subscription, Topic
from geosync_sim.world import Ident, Msg

SEEDS = range(1, 9)
SMALL = {"regions": 3, "topics": 3, "duration": 40.0}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fixed_seed_holds_every_invariant(seed: int) -> None:
    result = running.run(schedules.draw(seed, profile="faults", **SMALL))  # type: ignore[arg-type]
    assert result.failovers > 0
    assert result.acks > 0
    assert not result.violations, "\n".join(map(str, result.violations))
    assert "unexplained" not in result.duplicates


def test_the_same_seed_replays_the_same_trace() -> None:
    schedule = schedules.draw(3, profile="faults", **SMALL)  # type: ignore[arg-type]
    first, second = running.run(schedule, trace=True), running.run(schedule, trace=True)
    assert first.trace == second.trace
    assert first.digest == second.digest
    assert (first.acks, first.failovers, first.duplicates) == (
        second.acks,
        second.failovers,
        second.duplicates,
    )
    other = running.run(schedules.draw(4, profile="faults", **SMALL))  # type: ignore[arg-type]
    assert other.digest != first.digest


def overreach(life: running.Life) -> None:
    """A broken agent: every mark-delete it writes goes two entries further than it planned."""

    def further(items: list[pluginwrites.AckItem]) -> list[pluginwrites.AckItem]:
        return [
            item
            if item.mark_delete is None
            else replace(item, mark_delete=Position(item.mark_delete.ledger, item.mark_delete.entry + 2))
            for item in items
        ]

    life.admin.tamper = further


def test_the_checker_fails_an_agent_that_acknowledges_too_much() -> None:
    schedule = schedules.draw(2, profile="clean", **SMALL)  # type: ignore[arg-type]
    schedule = replace(schedule, plugin=(True,) * len(schedule.regions))
    result = running.run(schedule, hook=overreach)
    assert "loss" in result.kinds()


def test_the_checker_fails_agents_that_do_not_sync() -> None:
    def asleep(life: running.Life) -> None:
        life.agent.round = lambda now: None  # type: ignore[method-assign]

    result = running.run(schedules.draw(2, profile="clean", **SMALL), hook=asleep)  # type: ignore[arg-type]
    assert "unexplained-duplicate" in result.kinds()
    assert result.duplicates["unexplained"] > 0


def test_a_failing_schedule_shrinks_to_fewer_steps_that_still_fail() -> None:
    schedule = schedules.draw(2, profile="clean", regions=2, topics=1, duration=30.0)
    schedule = replace(schedule, plugin=(True, True))
    failed = running.run(schedule, hook=overreach)
    assert failed.failed
    small = shrinking.shrink(failed, budget=30, hook=overreach)
    assert small.kinds() & failed.kinds()
    assert len(small.schedule.steps) < len(schedule.steps)


def test_key_shared_order_is_judged_against_what_the_new_region_still_holds() -> None:
    """Y (after X, same key and origin) was delivered and acknowledged in a; X is given for the first time in
    b. If b's cursor holds Y, b will never deliver Y after X: invariant 6 is broken. If b does not hold it, Y
    follows X again. X given in a before Y and given again in b is a redelivery, as Pulsar makes one."""
    x: Ident = ("a", 10, 1, 0)
    y: Ident = ("a", 10, 2, 0)
    m = Msg("k1", "a-0-0", 1)
    for held, x_seen_first, broken in ((True, False, True), (False, False, False), (True, True, False)):

        def holds(region: str, topic: str, sub: str, ident: Ident, held: bool = held) -> bool:
            return held and ident == y

        checker = Checker(cursor_has=holds)
        if x_seen_first:
            checker.delivered(0.5, "a", "t", "s", ident=x, msg=m, kind="Key_Shared")
        checker.delivered(1.0, "a", "t", "s", ident=y, msg=m, kind="Key_Shared")
        checker.acked(1.5, "a", "t", "s", idents=[y], cause="consumer")
        checker.failover(2.0, "t", "s")
        checker.delivered(3.0, "b", "t", "s", ident=x, msg=m, kind="Key_Shared")
        assert ("key-order" in {v.kind for v in checker.violations}) is broken


def test_the_simulators_keys_refuse_what_ed25519_refuses() -> None:
    """The simulator signs with a keyed hash (``harness.HashSigner``), not Ed25519: an envelope altered after
    signing, signed by one region's key for another or by a key no region lists is still refused."""
    keys = harness.keys_for(("a", "b", "c"))
    envelope = envelopes.Envelope(kind="k", region="a", seq=1, sent_at_ms=0, payload={"n": 1})
    wire = envelopes.seal(keys["a"].signer, envelope)
    opened = envelopes.open_envelope(keys["b"].keyring, wire)
    assert isinstance(opened, envelopes.Envelope)
    assert opened.payload == {"n": 1}
    assert len(keys["a"].signer.sign(b"x")) == 128  # as long as an Ed25519 signature in hex
    altered = wire.replace(b'"n":1', b'"n":2')
    assert altered != wire
    assert envelopes.open_envelope(keys["b"].keyring, altered) == envelopes.Rejected(
        envelopes.Reason.BAD_SIGNATURE
    )
    as_other = envelopes.seal(keys["c"].signer, envelope)  # c's key, declaring region a
    assert envelopes.open_envelope(keys["b"].keyring, as_other) == envelopes.Rejected(
        envelopes.Reason.FOREIGN_KEY
    )
    stranger = harness.HashSigner("a-test", b"not a's secret")
    assert envelopes.open_envelope(keys["b"].keyring, envelopes.seal(stranger, envelope)) == (
        envelopes.Rejected(envelopes.Reason.BAD_SIGNATURE)
    )


def test_a_cursor_is_printed_as_its_entries_acknowledged_one_by_one() -> None:
    # ``ports.ack_state`` makes a range per run of deleted entries and keeps it on the cursor until the
    # cursor changes: the same value as the mark-delete with each deleted entry acknowledged one by one,
    # whenever it is read.
    rng = random.Random(45)
    for _ in range(300):
        topic = Topic("t", rng.randint(1, 3))
        cursor = Cursor()
        sub = Subscription("s", "Shared", cursor)
        for _ in range(30):
            ports.ack_state(topic, sub)  # printed before it changes
            if rng.random() < 0.1:
                cursor.reset(rng.randint(-1, 20))
            else:
                cursor.acked.add(rng.randint(0, 40))
            entries = map(topic.position, sorted(cursor.acked))
            assert ports.ack_state(topic, sub) == AckState.of(topic.position(cursor.md)).ack(*entries)
