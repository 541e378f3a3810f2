"""The agent's checkpoint: the file is trusted only whole, and a restarted agent resumes without history."""

from __future__ import annotations

import json
import pathlib
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geosync_agent import checkpointing, saving, supervising
from geosync_agent.core import tuning
from geosync_agent.runtime import Now
from geosync_agent.tracking import Tracking
from geosync_core import ackstates, pacing
from geosync_core.positions import Position
from tests.agent.fakes import Harness, message
from tests.agent.pairs import A_LOG, B_LOG, SUB, TOPIC, carry, pair

STATE = {"topics": {"t": {"last": [1, 2]}}, "n": [1, 2.5, None, "x"]}


def wait_for_writer(h: Harness) -> None:
    """Do the write the agent's checkpoint writer holds, if any (the composition root's task does it in the
    process; the harness runs no task, so the test says when)."""
    h.agent.checkpoint_writer.drain()


def written_by(h: Harness) -> int:
    """The checkpoints the agent has written, once its writer has finished."""
    wait_for_writer(h)
    return h.agent.stats.counters["checkpoints_written"]


def test_a_checkpoint_reads_back_as_written(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "state" / checkpointing.FILE
    size = checkpointing.save(path, region="b", state=STATE)
    assert size == path.stat().st_size
    assert checkpointing.load(path, region="b") == STATE
    assert checkpointing.load(tmp_path / "none", region="b") is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


@given(value=JSON, depth=st.integers(0, 4))
def test_the_pieces_are_the_same_text_as_one_encoding(value: Any, depth: int) -> None:
    assert "".join(checkpointing.pieces(value, depth)) == json.dumps(value, separators=(",", ":"))


def test_a_large_state_is_encoded_in_pieces_compressed_as_one_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpointing, "CHUNK_CHARS", 100)  # many chunks through the compressor
    state = {
        "topics": {f"t{i}": {"runs": [[i, 0, 5]] * 3, "read": i} for i in range(50)},
        "subscriptions": [{"topic": "t1", "name": f"s{i}", "acks": {"1:2": [0, 1]}} for i in range(300)],
        "controls": {},
    }
    parts = list(checkpointing.pieces(state))
    assert len(parts) > 350  # a piece per topic and per subscription: the lock can pass between them
    assert max(len(p) for p in parts) < 100
    whole = json.dumps(state, separators=(",", ":")).encode()
    assert zlib.decompress(checkpointing.compressed(state)) == whole


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: d[:-1], "checksum"),
        (lambda d: d[:-5] + bytes([d[-5] ^ 1]) + d[-4:], "checksum"),
        (lambda d: d.replace(b'"region": "b"', b'"region": "c"'), "region"),
        (lambda d: d.replace(b'"version": 1', b'"version": 9'), "version"),
        (lambda d: b"garbage", "header"),
        (lambda d: b"{}\n" + d.split(b"\n", 1)[1], "not a GeoSync"),
    ],
)
def test_a_damaged_or_foreign_checkpoint_is_refused(
    tmp_path: pathlib.Path, damage: object, reason: str
) -> None:
    path = tmp_path / checkpointing.FILE
    checkpointing.save(path, region="b", state=STATE)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(checkpointing.CheckpointError, match=reason):
        checkpointing.load(path, region="b")


def restarted(h: Harness, tmp_path: pathlib.Path) -> Harness:
    """``h``'s region with a new agent that resumed from the checkpoint ``h``'s agent wrote at shutdown."""
    h.agent.close(h.now())
    again = Harness.build(h.region, state_dir=str(tmp_path))
    assert supervising.resume(again.agent)
    again.clock = h.clock
    return again


def test_a_restarted_agent_spreads_its_first_resyncs_over_the_period_of_what_it_restored(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The period stretches with the subscriptions (RESYNC_STATES_PER_S): reckoned before the restored ones
    were counted, it was ``resync_interval_s``, and at 10,000 subscriptions every topic was republished whole
    within 30 s of a restart, while the agent was catching up."""
    _, b = pair(state_dir=str(tmp_path))
    assert len(b.agent.subs) == 1
    monkeypatch.setattr(tuning, "RESYNC_STATES_PER_S", 1 / 1000)  # one subscription: a 1,000 s period
    periods: list[float] = []
    first_resync = pacing.first_resync

    def recorded(now: float, *, period_s: float, phase: float) -> float:
        periods.append(period_s)
        return first_resync(now, period_s=period_s, phase=phase)

    monkeypatch.setattr(pacing, "first_resync", recorded)
    b2 = restarted(b, tmp_path)
    assert periods == [1000.0] * len(b2.agent.topics)
    assert b2.agent.resync_period() == 1000.0


def test_a_restarted_agent_resumes_without_reading_history(tmp_path: pathlib.Path) -> None:
    a, b = pair(state_dir=str(tmp_path / "a"))
    b.agent.checkpoint_path = checkpointing.path_in(str(tmp_path / "b"))
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])
    a.step()
    carry(a, b)
    b.step()
    b.step()
    assert b.region.cursors[(TOPIC, SUB)].mark_delete == B_LOG[0]
    b2 = restarted(b, tmp_path / "b")
    b2.discover()
    b2.step()
    assert b2.messaging.starts[TOPIC] == B_LOG[-1]  # resumes at the last entry read, not the earliest
    assert b2.agent.topics[TOPIC].tail.index.origin_of(B_LOG[3]) is not None  # no history re-read
    # The reader resumes with the entry it stopped at; then a acknowledges more while b restarted.
    b2.messaging.deliver(TOPIC, message(TOPIC, B_LOG[-1], properties=stamp(A_LOG[-1]), producer="a-1-0"))
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[1], A_LOG[4]])
    a.step()
    carry(a, b2)
    b2.step()
    b2.step()
    cursor = b2.region.cursors[(TOPIC, SUB)]
    assert cursor.mark_delete == B_LOG[2]
    assert B_LOG[4] in cursor
    assert B_LOG[3] not in cursor
    assert b2.agent.stats.counters["checkpoint_restored"] == 1
    assert b2.agent.stats.counters.get("control_rejected_replayed", 0) == 0


def test_a_checkpoint_that_no_longer_matches_its_topic_rebuilds_that_topic(tmp_path: pathlib.Path) -> None:
    _, b = pair(state_dir=str(tmp_path))
    b2 = restarted(b, tmp_path)
    b2.discover()
    b2.step()
    # The topic was deleted and re-created with lower positions (a rebuilt region): the reader's first
    # message lies below where the checkpoint stopped.
    b2.messaging.deliver(TOPIC, message(TOPIC, Position(3, 0), properties=stamp(A_LOG[0]), producer="a-1-0"))
    b2.step()
    assert b2.agent.stats.counters["checkpoint_topics_rebuilt"] == 1
    assert b2.messaging.starts[TOPIC] is None  # read again from the earliest message
    assert b2.agent.topics[TOPIC].tail.index.origin_of(B_LOG[0]) is None


def test_a_corrupted_checkpoint_is_refused_loudly_and_the_agent_rebuilds(tmp_path: pathlib.Path) -> None:
    _, b = pair(state_dir=str(tmp_path))
    b.agent.close(b.now())
    path = checkpointing.path_in(str(tmp_path))
    path.write_bytes(path.read_bytes()[:-3])
    again = Harness.build(b.region, state_dir=str(tmp_path))
    assert not supervising.resume(again.agent)
    assert again.agent.stats.counters["checkpoint_rejected"] == 1
    again.discover()
    again.agent.round(Now(again.clock, again.clock))
    assert again.messaging.starts[TOPIC] is None


def stamp(origin: Position) -> dict[str, str]:
    return {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}


def test_rounds_hand_the_checkpoint_to_the_writer(tmp_path: pathlib.Path) -> None:
    """A round takes the state and hands the writing over to the checkpoint writer (the composition root's
    task; here the test does the writes); while one is waiting or being written the next round's is skipped
    (counted); close() writes the waiting one, then the newest state."""
    _, b = pair(state_dir=str(tmp_path))
    path = checkpointing.path_in(str(tmp_path))
    writer = b.agent.checkpoint_writer
    writer.drain()
    written = b.agent.stats.counters["checkpoints_written"]
    skipped = b.agent.stats.counters["checkpoints_skipped"]
    b.step(b.config.checkpoint_interval_s + 1)
    assert writer.busy()  # the round did not write the file
    assert b.agent.stats.counters["checkpoints_written"] == written
    b.step(b.config.checkpoint_interval_s + 1)
    assert b.agent.stats.counters["checkpoints_skipped"] == skipped + 1
    writer.drain()
    assert not writer.busy()
    assert b.agent.stats.counters["checkpoints_written"] == written + 1
    assert checkpointing.load(path, region="b") is not None
    b.region.consumer_acks(TOPIC, SUB, [B_LOG[0]])
    b.step(b.config.checkpoint_interval_s + 1)  # a cursor moved: a new state, waiting
    assert writer.busy()
    b.agent.close(b.now())
    assert not writer.busy()
    assert b.agent.stats.counters["checkpoints_written"] == written + 3
    assert checkpointing.load(path, region="b") == b.agent.checkpoint()


def test_the_writer_task_does_each_write_offered_once_and_ends_on_stop() -> None:
    """The composition root's ``checkpoint-writer`` task: one write at a time (another is refused meanwhile),
    each done once; after ``stop`` a write offered is done by whoever waits for it (the last checkpoint)."""
    writer = checkpointing.Writer()
    stop, release = threading.Event(), threading.Event()
    done: list[int] = []

    def first() -> None:
        release.wait(10)
        done.append(1)

    task = threading.Thread(target=writer.run, args=(stop,))
    task.start()
    assert writer.offer(first)
    assert not writer.offer(lambda: done.append(2))
    assert writer.busy()
    release.set()
    writer.wait()
    assert done == [1]
    assert not writer.busy()
    stop.set()
    task.join(10)
    assert not task.is_alive()
    assert writer.offer(lambda: done.append(3))
    writer.wait()
    assert done == [1, 3]


def test_claims_are_encoded_once_while_they_do_not_change(tmp_path: pathlib.Path) -> None:
    a, b = pair(state_dir=str(tmp_path))
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])
    a.step()
    carry(a, b)
    b.step()
    state = b.agent.subs[(TOPIC, SUB)]
    b.agent.save_checkpoint(b.now())
    first = b.agent.checkpoint()["subscriptions"]
    (item,) = [s for s in first if s["name"] == SUB]
    assert item["received"] == ackstates.acks_to_json(state.received)
    assert item["received"] is b.agent.acks_wire[id(state.received)][1]  # from the last checkpoint
    b.agent.save_checkpoint(b.now())
    assert b.agent.checkpoint()["subscriptions"] == first
    assert len(b.agent.acks_wire) <= 2 * len(b.agent.subs)  # only what the last checkpoint held
    assert checkpointing.load(checkpointing.path_in(str(tmp_path)), region="b") is not None


def test_a_checkpoint_slow_to_take_is_taken_less_often(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taking the state is the loop's time: the next checkpoint waits at least 1 / CHECKPOINT_SHARE times as
    long as the last one took (at least checkpoint_interval_s)."""
    _, b = pair(state_dir=str(tmp_path), checkpoint_interval_s=0.01)
    b.metered = True  # the loop's time, as the machine's clock tells it
    real = saving.checkpoint_later

    def slow(agent: Tracking) -> Callable[[], dict[str, Any]]:
        time.sleep(0.05)
        return real(agent)

    monkeypatch.setattr(saving, "checkpoint_later", slow)
    b.agent.checkpoint_writer.drain()  # else this round's checkpoint is skipped, not taken
    assert not b.agent.checkpoint_writer.busy()
    b.step(1.0)
    taken = b.agent.checkpoint_taken_s
    assert taken >= 0.05
    # At least: the previous checkpoint's whole cost (its encoding, on a loaded machine) may ask for longer.
    assert b.agent.checkpoint_at >= b.clock + taken / tuning.CHECKPOINT_SHARE - 1e-9
    b.agent.close(b.now())


def test_a_checkpoint_slow_to_encode_and_write_is_taken_less_often(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Encoding on the checkpoint's thread holds the interpreter's lock: the loop waits on it as on its own
    work, so its whole time counts (a soak's checkpoints at 500,000 entries took 19-28 s, back to back)."""
    _, b = pair(state_dir=str(tmp_path), checkpoint_interval_s=0.01)
    b.metered = True  # the whole cost, as the machine's clock tells it
    wait_for_writer(b)  # the pair's last checkpoint, written at full speed
    real = checkpointing.save

    def slow(*args: Any, **kwargs: Any) -> int:
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpointing, "save", slow)
    for _ in range(2):
        wait_for_writer(b)
        b.step(1.0)  # the first writes slowly; the second is due after its whole cost
    cost = b.agent.checkpoint_cost_s
    assert cost >= 0.2
    assert b.agent.checkpoint_at >= b.clock + cost / tuning.CHECKPOINT_SHARE - 1e-6
    b.agent.close(b.now())


def test_a_restart_keeps_what_the_budget_forgot_and_does_not_read_the_topic_again(
    tmp_path: pathlib.Path,
) -> None:
    """Entries forgotten over the budget stay forgotten across a restart, and a subscription parked below them
    stays parked: it is not taken for one below entries every subscription acknowledged (which re-reads the
    topic from its earliest message, the whole retention)."""
    a, b = pair(state_dir=str(tmp_path), max_tracked_entries=4)
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[1], A_LOG[4]])
    a.step()
    carry(a, b)
    b.step()
    b.step()
    assert b.agent.subs[(TOPIC, SUB)].parked
    floor = b.agent.topics[TOPIC].tail.budget_floor
    assert floor is not None
    b.agent.close(b.now())
    again = Harness.build(b.region, state_dir=str(tmp_path), max_tracked_entries=4)
    assert supervising.resume(again.agent)
    again.clock = b.clock
    again.step()
    again.step()
    assert again.agent.topics[TOPIC].tail.budget_floor == floor
    assert "topics_reread" not in again.agent.stats.counters
    assert again.messaging.starts[TOPIC] is not None  # resumed where it stopped, not from the earliest
    assert again.agent.subs[(TOPIC, SUB)].parked
    assert again.region.cursors[(TOPIC, SUB)] == b.region.cursors[(TOPIC, SUB)]


def test_close_writes_the_checkpoint_even_when_the_last_writes_outcomes_fail(tmp_path: pathlib.Path) -> None:
    a, b = pair(state_dir=str(tmp_path))

    def broken() -> list[Any]:
        raise RuntimeError("the pool broke")

    b.agent.writes_in_flight = (broken, {})
    for h in (a, b):  # both agents write into tmp_path: none may be writing while b closes
        wait_for_writer(h)
    written = b.agent.stats.counters["checkpoints_written"]
    b.agent.close(b.now())
    assert b.agent.writes_in_flight is None
    assert b.agent.stats.counters["checkpoints_written"] == written + 1


def test_an_unchanged_state_is_not_written_again_until_it_changes_or_ages(tmp_path: pathlib.Path) -> None:
    """An idle agent does not write the same checkpoint every interval; a change is written at the next one,
    and an unchanged one again after CHECKPOINT_UNCHANGED_MAX_AGE_S (a fingerprint may miss a change)."""
    a, b = pair()
    b.agent.checkpoint_path = checkpointing.path_in(str(tmp_path))  # b's alone
    interval = b.config.checkpoint_interval_s + 1

    b.step(interval)
    b.step(interval)
    written, unchanged = written_by(b), b.agent.stats.counters["checkpoints_unchanged"]
    b.step(interval)
    b.step(interval)
    assert written_by(b) == written
    assert b.agent.stats.counters["checkpoints_unchanged"] == unchanged + 2
    a.region.consumer_acks(TOPIC, SUB, [A_LOG[0], A_LOG[2]])  # news: b's claims received change
    a.step()
    carry(a, b)
    b.step(interval)
    assert written_by(b) == written + 1
    path = checkpointing.path_in(str(tmp_path))
    assert checkpointing.load(path, region="b") == b.agent.checkpoint()
    b.step(interval)  # what followed from the claims (b's cursor, its tail's floor): written too
    b.step(interval)
    written = written_by(b)
    steps = int(tuning.CHECKPOINT_UNCHANGED_MAX_AGE_S // interval)
    for _ in range(steps - 1):
        b.step(interval)
    assert written_by(b) == written  # unchanged: nothing written for nearly a minute
    b.step(interval)
    b.step(interval)
    assert written_by(b) == written + 1  # then once, however unchanged


def test_a_learned_batch_size_is_written_at_the_next_checkpoint(tmp_path: pathlib.Path) -> None:
    """A size learned for an entry already held changes the checkpoint without adding an entry: the
    fingerprint sees it, so it is not left out for up to CHECKPOINT_UNCHANGED_MAX_AGE_S."""
    _a, b = pair()
    b.agent.checkpoint_path = checkpointing.path_in(str(tmp_path))
    interval = b.config.checkpoint_interval_s + 1

    b.step(interval)
    b.step(interval)
    b.step(interval)
    written = written_by(b)
    b.step(interval)
    assert written_by(b) == written  # idle: skipped
    details = b.agent.topics[TOPIC].tail.details
    entry = details.lowest()
    assert entry is not None
    assert details.grow(entry, (details.size(entry) or 1) + 3)
    b.step(interval)
    assert written_by(b) == written + 1
    path = checkpointing.path_in(str(tmp_path))
    assert checkpointing.load(path, region="b") == b.agent.checkpoint()


@pytest.mark.parametrize("on_disk", [True, False], ids=["file", "memory"])
def test_the_journal_keeps_what_no_written_checkpoint_holds(tmp_path: pathlib.Path, on_disk: bool) -> None:
    journal = checkpointing.Journal(tmp_path if on_disk else None)
    journal.append({"seq": 1})
    segment = journal.rotate()  # a checkpoint takes the state: seq 1 is in it
    journal.append({"seq": 2})
    assert [r["seq"] for r in journal.records()] == [1, 2]  # until that checkpoint is written
    journal.drop_before(segment)
    journal.append({"seq": 3})
    assert [r["seq"] for r in journal.records()] == [2, 3]
    if on_disk:  # a restarted agent's journal finds the same records, and appends after them
        journal.close()
        again = checkpointing.Journal(tmp_path)
        assert [r["seq"] for r in again.records()] == [2, 3]
        again.append({"seq": 4})
        assert [r["seq"] for r in again.records()] == [2, 3, 4]


def test_a_journal_line_cut_short_by_a_crash_is_skipped(tmp_path: pathlib.Path) -> None:
    journal = checkpointing.Journal(tmp_path)
    journal.append({"seq": 1})
    journal.close()
    with next(tmp_path.glob(checkpointing.JOURNAL_GLOB)).open("a") as f:
        f.write('{"seq": 2, "ack')  # the process died in the middle of a write
    again = checkpointing.Journal(tmp_path)
    assert [r["seq"] for r in again.records()] == [1]
    assert again.torn == 1


def test_an_agent_without_a_state_dir_journals_nothing() -> None:
    """It writes no checkpoint, so nothing would ever drop what a journal kept: it would only grow."""
    a, _b = pair()
    a.agent.journal.append({"seq": 1})
    assert a.agent.journal.records() == []
