"""Claims from another region through the core's entry (``core.stepping.step`` with ``ClaimsReceived``, round
steps 8-9): what is taken, held for a region's life not announced yet, dropped, and what is asked of the
shell, from values only: events in, values out. One test per invariant ``core.receiving`` states.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from geosync_agent.core import generations, receiving, sealing, stepping, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import Subscription, SubsTable
from geosync_core import envelopes
from geosync_core.ackstates import AckStateMessage
from geosync_core.incarnations import Incarnation, Known
from geosync_core.origins import OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState

from .fakes import KEYRING, KEYS
from .test_core_planning import SUB, TOPIC, Settings, Topic, copies

OTHER = "persistent://geo/ab/other"
A1, A2 = Incarnation(1_000, "one"), Incarnation(2_000, "two")


@dataclass
class State:
    """The agent's state as claims received read it (``receiving.Receiving``)."""

    topics: dict[str, Topic] = field(default_factory=lambda: {TOPIC: Topic(copies(6))})
    subs: SubsTable = field(default_factory=SubsTable)
    incarnations: Known = field(default_factory=lambda: Known({"a": A1}))
    waiting: receiving.Waiting = field(default_factory=dict)
    waiting_count: int = 0
    lookups: set[str] = field(default_factory=set)
    claimed_untracked: dict[str, tuple[float, float]] = field(default_factory=dict)
    config: Settings = field(default_factory=Settings)  # region b
    guards: dict[str, envelopes.ReplayGuard] = field(default_factory=dict)
    started_ms: int = 1_000_000


def claims(up_to: int, *, topic: str = TOPIC, generation: int = 0) -> AckStateMessage:
    """a's claims on ``topic``'s ``billing``: a's own messages up to ``5:up_to``."""
    return AckStateMessage(topic, SUB, "a", OriginAcks.of({"a": [Span(5, 0, up_to)]}), generation=generation)


def receive(
    state: State,
    message: AckStateMessage,
    *,
    tags: dict[str, Incarnation] | None = None,
    waited: bool = False,
    synced: bool = True,
    owned: bool = True,
    sidecar: bool = False,
    plugin_writes: bool = True,
    acknowledgements: bool = False,
    claims_known: bool = True,
) -> stepping.Stepped:
    event = stepping.ClaimsReceived(
        [message],
        tags,
        waited=waited,
        synced=lambda topic, subscription: synced,
        synced_topic=lambda topic: synced,
        owned=lambda topic: owned,
        sidecar=sidecar,
        plugin_writes=plugin_writes,
        acknowledgements=acknowledgements,
        claims_known=claims_known,
    )
    return stepping.step(state, event, Now(100.0, 1_100.0))


def test_claims_are_merged_into_the_subscription_they_name_made_if_unknown() -> None:
    state = State()
    out = receive(state, claims(3))
    sub = state.subs[(TOPIC, SUB)]
    assert not sub.exists  # known from claims only, until discovery or a consumer shows it here
    assert sub.received == OriginAcks.of({"a": [Span(5, 0, 3)]})
    assert out.counts["claims_received"] == 1
    assert out.poll_soon == []  # plugin writes answer the cursor: no poll needed
    assert receive(state, claims(3)).counts["claims_received"] == 0  # nothing new


def test_claims_about_a_subscription_not_synced_here_change_nothing() -> None:
    state = State()
    assert receive(state, claims(3), synced=False) == stepping.Stepped()
    assert (TOPIC, SUB) not in state.subs


def test_claims_of_an_older_generation_are_dropped() -> None:
    state = State()
    receive(state, claims(3, generation=2))
    out = receive(state, claims(5, generation=1))
    assert out.counts["claims_superseded"] == 1
    assert state.subs[(TOPIC, SUB)].received == OriginAcks.of({"a": [Span(5, 0, 3)]})


def test_a_newer_generation_is_a_rewind_followed_deferred_or_not_as_claims_here_are_made() -> None:
    for acknowledgements, claims_known, how in (
        (False, True, "followed"),
        (False, False, "deferred"),
        (True, True, "not followed"),
    ):
        state = State()
        state.subs[(TOPIC, SUB)] = Subscription(TOPIC, SUB, cursor=AckState.of(Position(9, 5)))
        receive(state, claims(5), acknowledgements=acknowledgements)
        out = receive(
            state, claims(2, generation=1), acknowledgements=acknowledgements, claims_known=claims_known
        )
        sub = state.subs[(TOPIC, SUB)]
        assert out.notices == [generations.RewoundElsewhere(sub, how)], how
        assert out.counts[f"rewinds_{how.replace(' ', '_')}"] == 1


def test_claims_about_a_life_not_announced_here_wait_for_it() -> None:
    state = State()
    out = receive(state, claims(3), tags={"a": A2})
    assert out.counts["claims_waiting_incarnation"] == 1
    assert state.waiting_count == 1
    assert list(state.waiting) == [("a", A2)]
    assert state.subs[(TOPIC, SUB)].received == OriginAcks.of({})  # not taken yet
    state.incarnations = Known({"a": A2})
    receive(state, state.waiting.pop(("a", A2)).popleft(), tags={"a": A2}, waited=True)
    assert state.subs[(TOPIC, SUB)].received == OriginAcks.of({"a": [Span(5, 0, 3)]})


def test_the_oldest_waiting_claims_go_first_above_the_bound() -> None:
    state = State(waiting_count=tuning.MAX_WAITING_CLAIMS)
    state.waiting[("c", A1)] = deque([claims(1)] * tuning.MAX_WAITING_CLAIMS)
    out = receive(state, claims(3), tags={"a": A2})
    assert out.counts["claims_waiting_dropped"] == 1
    assert state.waiting_count == tuning.MAX_WAITING_CLAIMS
    assert len(state.waiting[("c", A1)]) == tuning.MAX_WAITING_CLAIMS - 1


def test_claims_on_a_topic_not_tracked_ask_for_discovery_or_in_sidecar_mode_for_its_owner() -> None:
    state = State()
    out = receive(state, claims(3, topic=OTHER))
    assert out.rediscover == ["rediscover_for_claims"]
    assert state.claimed_untracked == {OTHER: (100.0, 100.0 + tuning.CLAIMED_LOOKUP_S)}
    sidecar = State()
    out = receive(sidecar, claims(3, topic=OTHER), owned=False, sidecar=True)
    assert (out.rediscover, sidecar.lookups, sidecar.claimed_untracked) == ([], {OTHER}, {})
    full = State(lookups={f"t{i}" for i in range(tuning.MAX_UNOBSERVED)})
    receive(full, claims(3, topic=OTHER), owned=False, sidecar=True)
    assert OTHER not in full.lookups


def test_new_claims_bring_the_poll_forward_where_plugin_writes_cannot_be_used() -> None:
    assert receive(State(), claims(3), plugin_writes=False).poll_soon == [TOPIC]
    assert receive(State(), claims(3, topic=OTHER), plugin_writes=False).poll_soon == []  # not tracked


def test_an_envelope_s_states_are_taken_in_one_event_each_asking_only_what_it_needs() -> None:
    """One ``ClaimsReceived`` per envelope: every state merged, their counters and asks in one ``Stepped``;
    the configuration is asked per claim, ownership and the topic's syncing only for a topic not tracked."""
    state, asked = State(), []

    def owned(topic: str) -> bool:
        asked.append(topic)
        return True

    other_sub = AckStateMessage(TOPIC, "audit", "a", OriginAcks.of({"a": [Span(5, 0, 1)]}))
    event = stepping.ClaimsReceived(
        [claims(3), other_sub, claims(2, topic=OTHER)],
        None,
        waited=False,
        synced=lambda topic, subscription: subscription != "audit",
        synced_topic=lambda topic: True,
        owned=owned,
        sidecar=False,
        plugin_writes=False,
        acknowledgements=False,
        claims_known=True,
    )
    out = stepping.step(state, event, Now(100.0, 1_100.0))
    assert state.subs[(TOPIC, SUB)].received == OriginAcks.of({"a": [Span(5, 0, 3)]})
    assert (TOPIC, "audit") not in state.subs  # not synced here
    assert state.subs[(OTHER, SUB)].received == OriginAcks.of({"a": [Span(5, 0, 2)]})
    assert out.counts["claims_received"] == 2
    assert (out.poll_soon, out.rediscover) == ([TOPIC], ["rediscover_for_claims"])
    assert asked == [OTHER]


CONTROL = "persistent://geo/ab/geosync-control"


def envelope(*states: AckStateMessage, sender: str = "a", seq: int = 0, sent_at_ms: int = 2_000_000) -> bytes:
    """``states`` sealed as ``sender``'s agent sends them, naming its life ``A1``."""
    sealed = sealing.seal(
        list(states),
        signer=KEYS[sender].signer,
        region=sender,
        seq=seq,
        now_ms=sent_at_ms,
        incarnations={"a": A1},
    )
    (data,) = sealed.messages
    return data


def read(state: State, data: bytes, *, topic: str = CONTROL) -> receiving.Opened:
    return stepping.step(state, stepping.EnvelopeRead(data, topic, KEYRING), Now(100.0, 1_100.0))


def test_an_envelope_read_gives_its_sender_lives_and_states_and_moves_the_replay_guard() -> None:
    state = State()
    opened = read(state, envelope(claims(3)))
    assert (opened.rejected, opened.sender, opened.tags) == (None, "a", {"a": A1})
    assert opened.states == [claims(3)]
    assert (opened.sent_at_ms, opened.history) == (2_000_000, False)
    assert CONTROL in state.guards
    history = read(State(started_ms=3_000_000), envelope(claims(3)))
    assert (history.sent_at_ms, history.history, len(history.states)) == (None, True, 1)


def test_an_envelope_replayed_altered_misplaced_or_own_yields_no_claim() -> None:
    state = State()
    data = envelope(claims(3))
    read(state, data)
    guard = state.guards[CONTROL]
    replayed = read(state, data)
    assert replayed.rejected is not None
    assert replayed.states == []
    assert replayed.sent_at_ms == 2_000_000  # a current envelope, valid whole: its transit counts
    altered = read(state, data[:-3] + b"xyz")
    assert (altered.rejected is not None, altered.states) == (True, [])
    elsewhere = "persistent://geo/other/geosync-control"
    misplaced = read(state, envelope(claims(3), seq=5_000_000_000), topic=elsewhere)
    assert misplaced.rejected == envelopes.Rejected(envelopes.Reason.MISPLACED)
    assert elsewhere not in state.guards  # refused before its guard moved
    assert state.guards[CONTROL] == guard
    own = read(state, envelope(AckStateMessage(TOPIC, SUB, "b", OriginAcks.of({})), sender="b"))
    assert own == receiving.Opened()
