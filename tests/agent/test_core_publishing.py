"""A subscription's claim (``core.publishing``): decided from its cursor, what its consumers acknowledged and
the topic's log as this region read it, with values only (a ``LogView`` fed messages, a ``Subscription``).

One test per invariant the module states.
"""

from __future__ import annotations

from geosync_agent.core import publishing, tuning
from geosync_agent.core.logview import LogView
from geosync_agent.core.subscriptions import Subscription
from geosync_core import resolving
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

from .fakes import message

TOPIC = "persistent://geo/ab/orders"
STAMP = resolving.REPL_SOURCE_POSITION


def log_of(*entries: tuple[str, str]) -> LogView:
    """Entries 7:0, 7:1, ... as region a read them: (origin, key) each; an origin b entry is b's copy of its
    entry 3:N, N counting b's entries."""
    view = LogView(TOPIC, -1)
    fed = []
    b = 0
    for e, (origin, key) in enumerate(entries):
        props = {STAMP: f"3:{b}"} if origin == "b" else {}
        b += origin == "b"
        fed.append(message(TOPIC, Position(7, e), properties=props, key=key))
    view.take(fed, resolving.OriginResolver(local="a", lookup=lambda _t, _p: "b"), now=0.0)
    return view


def sub(md: int, *ranges: tuple[int, int], kind: str = "Shared") -> Subscription:
    state = Subscription(
        TOPIC,
        "billing",
        cursor=AckState.of(Position(7, md), [Range(Position(7, lo), Position(7, hi)) for lo, hi in ranges]),
    )
    state.learn_kind(kind)
    return state


def claim(
    state: Subscription, log: LogView, *, exact: bool = False, force: bool = False
) -> publishing.Send | str:
    return publishing.claim(state, log, exact=exact, force=force, local="a", sendable=True)


def spans(acks: OriginAcks) -> dict[str, list[tuple[int, int, int]]]:
    return {region: [(s.ledger, s.first, s.last) for s in ss] for region, ss in acks.by_region}


def test_a_cursor_is_claimed_in_origin_coordinates_and_recorded_as_published() -> None:
    log = log_of(("a", "k"), ("b", "k"), ("a", "k"), ("a", "k"))
    state = sub(1)  # 7:0 and b's 3:0 acknowledged
    sent = claim(state, log)
    assert isinstance(sent, publishing.Send)
    assert spans(sent.message.acks) == {"a": [(7, 0, 0)], "b": [(3, 0, 0)]}
    assert (sent.message.topic, sent.message.subscription, sent.message.region) == (TOPIC, "billing", "a")
    assert state.published == sent.message.acks
    assert not sent.as_news


def test_with_acknowledgements_only_what_consumers_acknowledged_is_claimed_never_the_whole_cursor() -> None:
    log = log_of(("a", "k"), ("a", "k"), ("a", "k"))
    state = sub(2)  # the cursor jumped to 7:2 (a skip, say) ...
    state.acked = AckState.of(Position(7, 0))  # ... but consumers acknowledged 7:0 only
    sent = claim(state, log, exact=True)
    assert isinstance(sent, publishing.Send)
    assert spans(sent.message.acks) == {"a": [(7, 0, 0)]}
    nothing = claim(sub(2), log, exact=True)  # no consumer acknowledged anything: the claim names nothing
    assert isinstance(nothing, publishing.Send)
    assert spans(nothing.message.acks) == {}


def test_a_key_shared_claim_keeps_per_key_order() -> None:
    # k1's first message (7:1) is not acknowledged: k1's later one (7:3) is held back, k2's (7:2) is not
    log = log_of(("a", "k0"), ("a", "k1"), ("a", "k2"), ("a", "k1"))
    shared = claim(sub(0, (1, 3)), log)
    keyed = claim(sub(0, (1, 3), kind="Key_Shared"), log)
    assert isinstance(shared, publishing.Send)
    assert isinstance(keyed, publishing.Send)
    assert spans(shared.message.acks) == {"a": [(7, 0, 0), (7, 2, 3)]}
    assert spans(keyed.message.acks) == {"a": [(7, 0, 0), (7, 2, 2)]}
    assert keyed.message.key_shared


def test_the_same_claim_is_not_decided_twice_unless_forced() -> None:
    log = log_of(("a", "k"), ("a", "k"))
    state = sub(0)
    assert isinstance(claim(state, log), publishing.Send)
    assert claim(state, log) == "same"
    assert isinstance(claim(state, log, force=True), publishing.Send)


def test_a_large_claim_already_published_goes_out_as_its_news_and_whole_at_a_resync() -> None:
    n = tuning.NEWS_FROM_SPANS + 2
    log = log_of(*(("a", "k") for _ in range(2 * n + 4)))
    holes = [(2 * i, 2 * i + 1) for i in range(1, n)]  # every other entry: n spans
    state = sub(0, *holes)
    first = claim(state, log)
    assert isinstance(first, publishing.Send)
    assert not first.as_news
    assert first.size > tuning.NEWS_FROM_SPANS
    state.cursor = AckState.of(
        Position(7, 0),
        [
            *(Range(Position(7, lo), Position(7, hi)) for lo, hi in holes),
            Range(Position(7, 2 * n), Position(7, 2 * n + 1)),
        ],
    )
    news = claim(state, log)
    assert isinstance(news, publishing.Send)
    assert news.as_news
    assert spans(news.message.acks) == {"a": [(7, 2 * n + 1, 2 * n + 1)]}
    assert state.published is not None
    assert Span(7, 2 * n + 1, 2 * n + 1) in dict(state.published.by_region)["a"]
    whole = claim(state, log, force=True)
    assert isinstance(whole, publishing.Send)
    assert not whole.as_news
    assert whole.message.acks == state.published


def test_a_namespace_not_synced_here_sends_nothing_but_records_what_was_decided() -> None:
    log = log_of(("a", "k"), ("a", "k"))
    state = sub(1)
    assert publishing.claim(state, log, exact=False, force=False, local="a", sendable=False) == "kept"
    assert state.translated == state.cursor
