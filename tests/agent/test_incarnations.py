"""Issue 17.2 against fake ports: a region wiped and rebuilt under its name hands out its old ledger ids
again, so its new messages carry the origin coordinates of old ones. Claims about the old messages must not
acknowledge the new ones, in the rebuilt region or elsewhere. The lab test proves the same on real regions
(``integration_tests/test_region_rebuilt.py``)."""

from __future__ import annotations

import pytest

from geosync_agent.runtime import Now
from geosync_core import ackstates, envelopes
from geosync_core.incarnations import Incarnation
from geosync_core.indexing import OriginRun
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import KEYS, FakeRegion, Harness, message
from tests.agent.pairs import A_LOG, B_LOG, CONTROL, NS, SUB, TOPIC, carry, deliver_b_copies

OLD_A = Incarnation(1_000, "old")
NEW_A = Incarnation(2_000, "new")
B = Incarnation(500, "bee")
NEW_COPIES = [Position(12, e) for e in range(6)]
"""Region b's copies of the rebuilt a's first six messages, which a names 5:0..5 again."""


def region(name: str, log: list[Position]) -> FakeRegion:
    r = FakeRegion(name, {NS: ["a", "b"]}, topics={TOPIC: list(log)})
    r.cursors[(TOPIC, SUB)] = AckState.of(Position(log[0].ledger, -1))
    return r


def start(r: FakeRegion, incarnation: Incarnation | None, *, clock: float = 1000.0) -> Harness:
    h = Harness.build(r, incarnation=incarnation)
    h.clock = clock  # an agent started later numbers its messages from a later wall clock
    h.discover()
    h.step()
    return h


def started(a_inc: Incarnation | None, b_inc: Incarnation | None) -> tuple[Harness, Harness]:
    """Regions a and b with their agents, each with its own incarnation, every message indexed in both; no
    control message carried yet."""
    a, b = region("a", A_LOG), region("b", B_LOG)
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    b.origin_runs[TOPIC] = [OriginRun(9, 0, len(B_LOG), "a", A_LOG[0])]
    ha, hb = start(a, a_inc), start(b, b_inc)
    for p in A_LOG:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    deliver_b_copies(hb)
    for h in (ha, hb):
        h.step()
    return ha, hb


def pair(a_inc: Incarnation | None, b_inc: Incarnation | None) -> tuple[Harness, Harness]:
    """As ``pairs.pair``, each region with its own incarnation; a's consumer has acknowledged
    5:0..5:2 and b applied it."""
    ha, hb = started(a_inc, b_inc)
    carry(ha, hb)
    carry(hb, ha)
    ha.region.consumer_acks(TOPIC, SUB, A_LOG[:3])
    ha.step()
    carry(ha, hb)
    hb.step()
    assert hb.region.cursors[(TOPIC, SUB)] == AckState.of(B_LOG[2])
    carry(hb, ha)
    return ha, hb


def rebuild_a(hb: Harness, incarnation: Incarnation | None) -> Harness:
    """Region a wiped and rebuilt: an empty topic whose first messages are again 5:0..5:5, an agent without
    the old one's state. b's copies of them are not delivered yet (``new_copies_reach_b``)."""
    a = region("a", A_LOG)
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    ha = start(a, incarnation, clock=hb.clock)
    for p in A_LOG:
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    ha.step()
    ha.step(31.0)  # its first resync: its (empty) claims go out, with its incarnation
    return ha


def new_copies_reach_b(hb: Harness) -> None:
    hb.region.topics[TOPIC].extend(NEW_COPIES)
    hb.region.origin_runs[TOPIC].append(OriginRun(12, 0, len(NEW_COPIES), "a", A_LOG[0]))
    for p, origin in zip(NEW_COPIES, A_LOG, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        hb.messaging.deliver(TOPIC, message(TOPIC, p, properties=stamp, producer="a-1-0"))
    hb.step()
    hb.step()


def test_without_incarnations_claims_about_a_rebuilt_regions_old_messages_acknowledge_its_new_ones() -> None:
    """The hazard itself (what agents without a ZooKeeper still do): b applies a's old claims to copies of
    the rebuilt a's new messages, which no consumer received."""
    _, hb = pair(None, None)
    ha = rebuild_a(hb, None)
    carry(ha, hb)
    new_copies_reach_b(hb)
    assert NEW_COPIES[0] in hb.region.cursors[(TOPIC, SUB)]


def test_a_region_rebuilt_under_its_name_is_told_apart_from_what_it_was() -> None:
    _, hb = pair(OLD_A, B)
    assert hb.agent.incarnations.get("a") == OLD_A
    assert hb.agent.subs[(TOPIC, SUB)].received.spans("a")
    ha = rebuild_a(hb, NEW_A)
    carry(ha, hb)
    hb.step()
    assert hb.agent.incarnations.get("a") == NEW_A
    assert hb.agent.stats.counters["incarnations_changed"] == 1
    state = hb.agent.subs[(TOPIC, SUB)]
    assert not state.received.spans("a")
    assert state.received.spans("a#old") == (Span(5, 0, 2),)  # the old claims, about the old messages
    # b's entries of the old a are retired: named apart, never claimed.
    index = hb.agent.topics[TOPIC].tail.index
    assert index.origin_of(B_LOG[3]) == Origin("a#old", A_LOG[3])
    new_copies_reach_b(hb)
    assert index.origin_of(NEW_COPIES[0]) == Origin("a", A_LOG[0])
    cursor = hb.region.cursors[(TOPIC, SUB)]
    assert not any(p in cursor for p in NEW_COPIES)
    assert B_LOG[2] in cursor  # what was acknowledged before stays so
    # What b claims now says nothing about a's old messages, and is tagged with what b knows of a.
    hb.step(31.0)
    for data in hb.sent_on(CONTROL):
        opened = envelopes.open_envelope(hb.agent.keys.keyring, data)
        assert isinstance(opened, envelopes.Envelope)
        assert ackstates.incarnations_of(opened) == {"a": NEW_A, "b": B}
        decoded = ackstates.decode_ack_states(opened)
        assert not isinstance(decoded, envelopes.Rejected)
        assert all(not m.acks.spans("a") for m in decoded)
        assert any(m.acks.spans("a#old") for m in decoded)
    # The new a's consumer acknowledges its first new message: b follows that, and only that.
    ha.region.consumer_acks(TOPIC, SUB, A_LOG[:1])
    ha.step()
    carry(ha, hb)
    hb.step()
    cursor = hb.region.cursors[(TOPIC, SUB)]
    assert NEW_COPIES[0] in cursor
    assert not any(p in cursor for p in NEW_COPIES[1:])


def test_the_rebuilt_region_refuses_claims_made_before_the_rebuild() -> None:
    """b has not heard from the new a yet when it resyncs: its claims about a's origins are tagged with the
    old incarnation, and the new a takes none of them (they would acknowledge its new 5:0..5:2)."""
    _, hb = pair(OLD_A, B)
    ha = rebuild_a(hb, NEW_A)
    hb.step(31.0)  # b's resync, still believing the old a
    assert carry(hb, ha) >= 1
    ha.step()
    ha.step()
    assert ha.agent.stats.counters["claims_stale_incarnation"] >= 1
    assert ha.region.cursors[(TOPIC, SUB)] == AckState.of(Position(5, -1))


def test_a_peer_that_speaks_of_incarnations_but_not_of_a_region_has_its_claims_about_it_refused() -> None:
    """A sender that knows no incarnation of a holds claims made before it heard from a (a restart without
    its checkpoint, say): a receiver that knows a's refuses those, and takes the rest. A sender from before
    incarnations (no tags at all) is taken at its word."""
    claims = OriginAcks.of({"a": [Span(5, 0, 4)], "b": [Span(9, 0, 0)]})
    state = ackstates.AckStateMessage(TOPIC, SUB, "c", claims)
    for tags, taken in (
        ({"c": Incarnation(7, "cee"), "b": B}, (Span(5, 0, 2),)),  # a's own claim only
        (None, (Span(5, 0, 4),)),
    ):
        _, hb = pair(OLD_A, B)
        data = envelopes.seal(
            KEYS["c"].signer,
            envelopes.Envelope(
                kind=ackstates.ACK_STATES,
                region="c",
                seq=2**61,
                sent_at_ms=0,
                payload=ackstates.encode_ack_states([state], region="c", incarnations=tags),
            ),
        )
        hb.messaging.deliver(CONTROL, message(CONTROL, Position(79, 0), data=data))
        hb.step()
        assert hb.agent.subs[(TOPIC, SUB)].received.spans("a") == taken, tags


def test_a_region_speaks_only_for_its_own_incarnation() -> None:
    """Issue 47: what c says of a's incarnation changes nothing in b; what a says of itself does."""
    _, hb = pair(OLD_A, B)
    say(hb, "c", {"c": Incarnation(7, "cee"), "a": NEW_A})
    assert hb.agent.incarnations.get("a") == OLD_A
    assert hb.agent.incarnations.get("c") == Incarnation(7, "cee")
    say(hb, "a", {"a": NEW_A})
    assert hb.agent.incarnations.get("a") == NEW_A
    assert hb.agent.stats.counters["incarnations_changed"] == 1
    # An older one changes nothing, and this region's own is never taken from a peer.
    say(hb, "a", {"a": OLD_A, "b": Incarnation(9_999, "forged")})
    say(hb, "b", {"b": Incarnation(9_999, "forged")})
    assert hb.agent.incarnations.get("a") == NEW_A
    assert hb.agent.incarnations.get("b") == B
    assert hb.agent.stats.counters["incarnations_changed"] == 1


SAID = iter(range(1, 1_000))


def say(h: Harness, sender: str, tags: dict[str, Incarnation]) -> None:
    """``sender``'s agent names the regions' lives ``tags`` in an envelope with no news, and ``h`` reads it
    (each a sequence number and a control-topic entry above the last)."""
    n = next(SAID)
    data = _claim_from(sender, tags, OriginAcks.of({}), seq=2**61 + n)
    h.messaging.deliver(CONTROL, message(CONTROL, Position(80, n), data=data))
    h.step()


def _claim_from(sender: str, tags: dict[str, Incarnation], acks: OriginAcks, *, seq: int) -> bytes:
    envelope = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region=sender,
        seq=seq,
        sent_at_ms=0,
        payload=ackstates.encode_ack_states(
            [ackstates.AckStateMessage(TOPIC, SUB, sender, acks)], region=sender, incarnations=tags
        ),
    )
    return envelopes.seal(KEYS[sender].signer, envelope)


def test_a_validly_signed_envelope_announcing_a_new_incarnation_of_another_region_changes_nothing() -> None:
    """Issue 47's test: c, with its own valid key, says a was rebuilt (NEW_A) and claims a's first five
    messages of that new life. b renames nothing and applies nothing of it; once a announces NEW_A itself,
    the claims that waited for it are taken up."""
    _, hb = pair(OLD_A, B)
    before = hb.region.cursors[(TOPIC, SUB)]
    cee = Incarnation(7, "cee")
    claims = OriginAcks.of({"a": [Span(5, 0, 4)]})
    data = _claim_from("c", {"c": cee, "a": NEW_A}, claims, seq=2**61)
    hb.messaging.deliver(CONTROL, message(CONTROL, Position(79, 0), data=data))
    hb.step()
    hb.step(1.0)
    assert hb.agent.incarnations.get("a") == OLD_A
    assert hb.agent.stats.counters["incarnations_changed"] == 0
    assert hb.agent.stats.counters["claims_waiting_incarnation"] == 1
    assert hb.agent.topics[TOPIC].tail.index.origin_of(B_LOG[3]) == Origin("a", A_LOG[3])
    assert hb.region.cursors[(TOPIC, SUB)] == before
    # a itself announces its new life: b retires the old one, and c's waiting claims now speak of the new.
    announce = _claim_from("a", {"a": NEW_A}, OriginAcks.of({}), seq=2**61)
    hb.messaging.deliver(CONTROL, message(CONTROL, Position(79, 1), data=announce))
    hb.step()
    assert hb.agent.incarnations.get("a") == NEW_A
    assert hb.agent.topics[TOPIC].tail.index.origin_of(B_LOG[3]) == Origin("a#old", A_LOG[3])
    assert hb.agent.waiting == {}
    assert hb.agent.subs[(TOPIC, SUB)].received.spans("a") == (Span(5, 0, 4),)
    assert hb.region.cursors[(TOPIC, SUB)] == before  # no new-life copies here yet: nothing to move


def test_a_checkpoint_of_another_incarnation_of_this_region_is_refused_and_one_of_this_one_restored() -> None:
    _, hb = pair(OLD_A, B)
    say(hb, "a", {"a": NEW_A})
    state = hb.agent.checkpoint()
    again = start(region("b", B_LOG), B)
    again.agent.restore(state, Now(again.clock, again.clock))
    assert again.agent.incarnations.get("a") == NEW_A
    assert again.agent.topics[TOPIC].tail.index.origin_of(B_LOG[3]) == Origin("a#old", A_LOG[3])
    rebuilt = start(region("b", B_LOG), Incarnation(3_000, "bee2"))
    with pytest.raises(ValueError, match="rebuilt"):
        rebuilt.agent.restore(state, Now(rebuilt.clock, rebuilt.clock))


def test_a_topic_read_again_keeps_the_old_incarnations_messages_retired() -> None:
    _, hb = pair(OLD_A, B)
    say(hb, "a", {"a": NEW_A})
    ts = hb.agent.topics[TOPIC]
    ts.tail.stale, ts.tail.stale_reason = True, "test: read again"
    hb.step()
    deliver_b_copies(hb)
    hb.step()
    # (entries up to 9:2 every subscription acknowledged are forgotten, as before the rebuild)
    assert hb.agent.topics[TOPIC].tail.index.origin_of(B_LOG[3]) == Origin("a#old", A_LOG[3])


def test_a_region_with_nothing_to_claim_still_announces_its_incarnation_once_a_resync_interval() -> None:
    """A rebuilt region knows no subscription yet: it makes itself known anyway, so that its peers drop their
    claims about its old life before its new messages reach them."""
    a = region("a", A_LOG)
    del a.cursors[(TOPIC, SUB)]
    ha = start(a, NEW_A)

    def announcements() -> list[envelopes.Envelope]:
        out = []
        for data in ha.sent_on(CONTROL):
            opened = envelopes.open_envelope(ha.agent.keys.keyring, data)
            assert isinstance(opened, envelopes.Envelope)
            assert ackstates.decode_ack_states(opened) == []
            assert ackstates.incarnations_of(opened) == {"a": NEW_A}
            out.append(opened)
        ha.messaging.producers[CONTROL].sent.clear()
        return out

    assert len(announcements()) == 1
    ha.step(10.0)
    assert announcements() == []
    ha.step(25.0)
    assert len(announcements()) == 1
    _, hb = pair(OLD_A, B)
    ha.step(31.0)
    carry(ha, hb)
    hb.step()
    assert hb.agent.incarnations.get("a") == NEW_A
    assert not hb.agent.subs[(TOPIC, SUB)].received.spans("a")


def test_an_agent_without_an_incarnation_announces_nothing() -> None:
    a = region("a", A_LOG)
    del a.cursors[(TOPIC, SUB)]
    ha = start(a, None)
    ha.step(31.0)
    assert ha.sent_on(CONTROL) == []


def test_claims_made_before_a_region_was_heard_of_go_out_again_once_it_is() -> None:
    """b's consumer acknowledges the copies of a's messages before any envelope of a has reached b: b's claims
    about them go out without a's incarnation, and a, which knows its own, refuses them (of a life nobody can
    tell). Once a's announcement reaches b, b sends them again with it at once, not a resync period later
    (simulator seed 200245: a consumer that failed over meanwhile was given those messages again)."""
    ha, hb = started(OLD_A, B)
    hb.region.consumer_acks(TOPIC, SUB, B_LOG[:3])
    hb.step()
    carry(hb, ha)
    ha.step()
    assert ha.agent.stats.counters["claims_stale_incarnation"] >= 1
    assert ha.region.cursors[(TOPIC, SUB)] == AckState.of(Position(5, -1))  # refused: a's cursor stays
    carry(ha, hb)  # a's first envelope, with its incarnation
    hb.step()
    assert hb.agent.incarnations.get("a") == OLD_A
    carry(hb, ha)
    ha.step()
    assert ha.region.cursors[(TOPIC, SUB)] == AckState.of(A_LOG[2])
