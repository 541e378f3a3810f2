"""Reports read as the core's values (``core.reports``): the plugin's cursors, and peers' claims made about
the incarnations known here. One test per invariant the module states."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from geosync_agent.core import reports
from geosync_core import ackstates, incarnations, pluginapi
from geosync_core.incarnations import Incarnation, Known
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

TOPIC = "persistent://geo/ab/orders"


class Sizes:
    def __init__(self, sizes: dict[Position, int]) -> None:
        self.sizes = sizes

    def size_of(self, position: Position) -> int | None:
        return self.sizes.get(position)


MARK_DELETE = Position(5, 1)


def report(*batches: pluginapi.BatchState) -> pluginapi.CursorReport:
    return pluginapi.CursorReport(TOPIC, "billing", MARK_DELETE, "[(5:3..5:4]]", batches)


def acked(cursor: AckState, position: Position) -> tuple[int, ...] | None:
    batch = cursor.batch(position)
    return None if batch is None else batch.indexes()


def test_a_reported_batch_is_read_with_its_size_from_the_tail() -> None:
    cursor = reports.cursor_of(
        report(pluginapi.BatchState(Position(5, 6), (1, 3))), Sizes({Position(5, 6): 6})
    )
    assert cursor.mark_delete == Position(5, 1)
    assert Position(5, 4) in cursor
    assert acked(cursor, Position(5, 6)) == (0, 2, 4, 5)


def test_a_batch_of_unknown_size_never_claims_more_indexes_than_the_report_shows() -> None:
    batch = pluginapi.BatchState(Position(5, 6), (1, 3))
    for sizes in (None, Sizes({})):
        cursor = reports.cursor_of(report(batch), sizes)
        assert acked(cursor, Position(5, 6)) == (0, 2)  # as if the batch ended after its last unacked index
    whole = reports.cursor_of(report(pluginapi.BatchState(Position(5, 6), (0,))), Sizes({Position(5, 6): 1}))
    assert acked(whole, Position(5, 6)) is None  # nothing acknowledged in it
    below = reports.cursor_of(report(pluginapi.BatchState(Position(5, 1), (1,))), Sizes({Position(5, 1): 4}))
    assert below.batches == ()  # at or below the mark-delete: acknowledged whole already


OLD, NEW = Incarnation(1_000, "old"), Incarnation(2_000, "new")
KNOWN = Known({"b": NEW})
CLAIMS = OriginAcks.of({"a": [Span(5, 0, 3)], "b": [Span(9, 0, 1)]})
MESSAGE = ackstates.AckStateMessage(TOPIC, "billing", "c", CLAIMS)


def test_claims_about_a_region_the_sender_knows_in_an_older_life_go_by_that_lifes_retired_name() -> None:
    taken = reports.of_known_incarnations(MESSAGE, {"b": OLD}, KNOWN)
    assert taken.acks == OriginAcks.of(
        {"a": [Span(5, 0, 3)], incarnations.retired("b", OLD): [Span(9, 0, 1)]}
    )
    assert (taken.topic, taken.subscription, taken.region) == (MESSAGE.topic, MESSAGE.subscription, "c")


def test_claims_about_a_region_whose_life_the_sender_cannot_tell_are_dropped() -> None:
    taken = reports.of_known_incarnations(MESSAGE, {}, KNOWN)  # it sends incarnations, and none of b's
    assert taken.acks == OriginAcks.of({"a": [Span(5, 0, 3)]})


def test_claims_about_the_newest_lives_or_from_an_agent_before_incarnations_are_the_very_message() -> None:
    assert reports.of_known_incarnations(MESSAGE, {"b": NEW}, KNOWN) is MESSAGE
    assert reports.of_known_incarnations(MESSAGE, None, KNOWN) is MESSAGE
    assert reports.of_known_incarnations(MESSAGE, {"b": OLD}, Known({})) is MESSAGE  # nothing known of b


def test_a_topic_is_reloaded_only_when_two_readable_polls_name_different_ledgers() -> None:
    def stats(*ledgers: object) -> dict[str, object]:
        return {"ledgers": [{"ledgerId": ledger} for ledger in ledgers]}

    assert reports.last_ledger(stats(3, 7)) == 7
    assert reports.last_ledger(stats("8")) == 8
    unreadable: list[dict[str, Any]] = [{}, {"ledgers": None}, stats("x"), {"ledgers": [{}]}]
    unreadable.append({"ledgers": [7]})
    for internal in unreadable:
        assert reports.last_ledger(internal) is None
    assert reports.reloaded(7, 8)
    assert not reports.reloaded(7, 7)
    assert not reports.reloaded(None, 8)  # the first poll
    assert not reports.reloaded(7, None)  # not readable this time


def test_the_feeds_reports_wait_one_per_subscription_newest_last_and_the_oldest_go_over_the_cap() -> None:
    def at(name: str, entry: int) -> pluginapi.CursorReport:
        return pluginapi.CursorReport(TOPIC, name, Position(5, entry), "[]")

    waiting: dict[tuple[str, str], pluginapi.CursorReport] = {}
    in_scope = lambda topic, name: name != "excluded"  # noqa: E731
    assert reports.hold(waiting, [at("s1", 1), at("s2", 1), at("excluded", 1)], in_scope=in_scope, cap=3) == 0
    assert list(waiting) == [(TOPIC, "s1"), (TOPIC, "s2")]
    assert reports.hold(waiting, [at("s1", 2), at("s3", 1), at("s4", 1)], in_scope=in_scope, cap=3) == 1
    assert list(waiting) == [(TOPIC, "s1"), (TOPIC, "s3"), (TOPIC, "s4")]  # s2, the oldest, dropped
    assert waiting[(TOPIC, "s1")].mark_delete == Position(5, 2)  # the newest report


def test_a_report_read_again_is_the_same_only_with_the_same_batch_sizes() -> None:
    batched = report(pluginapi.BatchState(Position(5, 5), (0, 1)))
    known = Sizes({Position(5, 5): 4})
    assert reports.as_read(batched, known) == reports.as_read(batched, Sizes({Position(5, 5): 4}))
    assert reports.as_read(batched, known) != reports.as_read(batched, Sizes({}))
    holes_gone = replace(report(), individually_deleted="[]")
    assert reports.as_read(report(), known) != reports.as_read(holes_gone, known)


@pytest.mark.parametrize(
    ("last_read", "ledgers", "gone"),
    [
        (Position(11, 7), [12], True),  # deleted and created again: only a newer ledger
        (Position(11, 7), [11, 12], False),  # rolled over: the ledger read last is still there
        (Position(12, 0), [12], False),
        (Position(11, 7), [12, 13], True),
        (None, [12], False),  # nothing read yet
        (Position(11, 7), [], False),  # no ledger listed: not known
    ],
)
def test_a_tail_whose_ledger_the_topic_no_longer_holds_has_read_a_topic_that_is_gone(
    last_read: Position | None, ledgers: list[int], gone: bool
) -> None:
    internal: dict[str, Any] = {"ledgers": [{"ledgerId": ledger} for ledger in ledgers]}
    assert reports.read_gone(last_read, internal) is gone
    assert reports.first_ledger(internal) == (ledgers[0] if ledgers else None)
    assert reports.first_ledger({"ledgers": [{"ledgerId": "x"}]}) is None
