"""The tail (the shell's part of a partition's log): its reader's inbox, filled on the client's thread and
drained into the core's ``LogView`` (tested on its own in ``test_core_logview``)."""

from __future__ import annotations

import threading

import pytest

from geosync_agent import tailing
from geosync_agent.core import checkpoint
from geosync_agent.tailing import Tail
from geosync_core import resolving
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.positions import Position

from .fakes import message
from .test_core_logview import FlakyHeaders

TOPIC = "persistent://geo/ab/t"
STAMP = resolving.REPL_SOURCE_POSITION


def test_a_full_inbox_holds_the_listener_back_until_the_runtime_drains_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Backpressure, not memory growing with the lag: the listener waits while the inbox is full (the
    reader's receive queue then fills and the broker stops dispatching); a tail closed meanwhile drops."""
    monkeypatch.setattr(tailing, "INBOX_MAX", 2)
    monkeypatch.setattr(tailing, "PUT_WAIT_S", 0.02)
    tail = Tail(TOPIC, -1)
    tail.reader = object()  # type: ignore[assignment]  # open
    tail.listener(message(TOPIC, Position(7, 0)))
    tail.listener(message(TOPIC, Position(7, 1)))
    third = threading.Thread(target=tail.listener, args=(message(TOPIC, Position(7, 2)),))
    third.start()
    third.join(0.2)
    assert third.is_alive()  # waiting for room
    resolver = resolving.OriginResolver(local="a", lookup=lambda topic, local: None)
    assert tail.drain(resolver, limit=1) == 1
    third.join(1.0)
    assert not third.is_alive()
    assert tail.drain(resolver) == 2
    assert tail.last == Position(7, 2)
    tail.listener(message(TOPIC, Position(7, 3)))
    tail.listener(message(TOPIC, Position(7, 4)))
    tail.reader = None  # closed: a listener still waiting gives up instead of blocking the client's thread
    fourth = threading.Thread(target=tail.listener, args=(message(TOPIC, Position(7, 5)),))
    fourth.start()
    fourth.join(1.0)
    assert not fourth.is_alive()
    assert tail.inbox.qsize() == 2


def test_a_data_topics_payloads_are_not_held_but_counted_control_and_marker_payloads_are() -> None:
    data = Tail(TOPIC, -1)
    data.listener(message(TOPIC, Position(7, 0), data=b"x" * 1000))
    data.listener(message(TOPIC, Position(7, 1), data=b"m", properties={MARKER_PROPERTY: "snapshot"}))
    assert [m.data for m in (data.inbox.get_nowait(), data.inbox.get_nowait())] == [b"", b"m"]
    assert data.bytes_read == 1001
    control = Tail("persistent://geo/ab/geosync-control", -1, wake=threading.Event())
    control.listener(message(TOPIC, Position(8, 0), data=b"envelope"))
    assert control.inbox.get_nowait().data == b"envelope"


def test_drain_hands_the_inbox_to_the_view_a_limited_number_at_a_time() -> None:
    resolver = resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures=0))
    tail = Tail(TOPIC, -1)
    for e in range(5):
        tail.listener(message(TOPIC, Position(7, e), key=f"k{e}"))
    assert tail.drain(resolver, limit=3) == 3
    assert tail.last == Position(7, 2)
    assert tail.inbox.qsize() == 2
    assert tail.drain(resolver) == 2
    assert tail.drain(resolver) == 0
    assert [tail.key_of(Position(7, e)) for e in range(5)] == [f"k{e}" for e in range(5)]
    assert tail.version == 2  # bumped once per drain that appended


def test_a_batch_is_read_only_once_no_more_of_it_waits_in_the_inbox() -> None:
    """``has_read``: the last entry taken may be a batch whose further messages still wait in the inbox."""
    resolver = resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures=0))
    tail = Tail(TOPIC, -1)
    for i in range(3):
        tail.listener(message(TOPIC, Position(7, 0), batch_index=i, producer="a-0-1"))
    tail.drain(resolver, limit=1)
    assert not tail.has_read(Position(7, 0))  # two more of it wait
    assert not tail.has_read(Position(7, 1))
    tail.drain(resolver)
    assert tail.has_read(Position(7, 0))
    assert tail.first_unread(lambda _m: True) is None
    tail.listener(message(TOPIC, Position(7, 1)))
    assert tail.first_unread(lambda _m: True) == Position(7, 1)
    assert tail.has_read(Position(6, 9))


def test_a_restored_tail_reopens_its_reader_where_it_stopped_and_spots_a_new_topic() -> None:
    resolver = resolving.OriginResolver(local="a", lookup=FlakyHeaders(failures=0))
    tail = Tail(TOPIC, -1)
    for e in range(3):
        tail.listener(message(TOPIC, Position(7, e)))
    tail.drain(resolver)
    again = checkpoint.view_from_wire(Tail, TOPIC, -1, checkpoint.view_to_wire(tail))
    assert isinstance(again, Tail)
    assert checkpoint.view_to_wire(again) == checkpoint.view_to_wire(tail)

    class Opened:
        def close(self) -> None:
            pass

    class Messaging:
        started: Position | None = None

        def reader(self, topic: str, listener: object, *, start: Position | None = None) -> Opened:
            Messaging.started = start
            return Opened()

    again.open(Messaging())  # type: ignore[arg-type]
    assert Messaging.started == Position(7, 2)
    again.listener(message(TOPIC, Position(2, 0)))  # the topic was deleted and created again
    again.listener(message(TOPIC, Position(2, 1)))
    assert again.drain(resolver) == 0
    assert again.stale
    again.close()
    assert again.reader is None
