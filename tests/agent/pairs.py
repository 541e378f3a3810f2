"""Two regions' agents over fake ports, side by side: the fixture the agent's round tests share (region a
publishes six messages on one topic, region b holds their replicated copies), and the control topic carried
between them by hand."""

from __future__ import annotations

from geosync_core import ackstates, envelopes
from geosync_core.incarnations import Incarnation
from geosync_core.indexing import OriginRun
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from tests.agent.fakes import KEYS, FakeRegion, Harness, message

NS = "geo/ab"
TOPIC = f"persistent://{NS}/orders"
CONTROL = f"persistent://{NS}/geosync-control"
SUB = "billing"
A_LOG = [Position(5, e) for e in range(6)]
B_LOG = [Position(9, e) for e in range(6)]


def pair(*, a_reads: bool = True, **settings: object) -> tuple[Harness, Harness]:
    """Region a holds six messages published there; region b their replicated copies (other ledger ids).
    ``a_reads=False``: a's tail has read none of them yet."""
    a = FakeRegion("a", {NS: ["a", "b"]}, topics={TOPIC: list(A_LOG)})
    b = FakeRegion("b", {NS: ["a", "b"]}, topics={TOPIC: list(B_LOG)})
    for region in (a, b):
        region.cursors[(TOPIC, SUB)] = AckState.of(Position(region.topics[TOPIC][0].ledger, -1))
    # What the interceptors recorded as the entries were written.
    a.origin_runs[TOPIC] = [OriginRun(5, 0, len(A_LOG), "a")]
    b.origin_runs[TOPIC] = [OriginRun(9, 0, len(B_LOG), "a", A_LOG[0])]
    ha, hb = Harness.build(a, **settings), Harness.build(b, **settings)
    for h in (ha, hb):
        h.discover()
        h.step()
    for p in A_LOG if a_reads else ():
        ha.messaging.deliver(TOPIC, message(TOPIC, p))
    deliver_b_copies(hb)
    for h in (ha, hb):
        h.step()  # indexes; the first poll publishes each cursor once
    carry(ha, hb)
    carry(hb, ha)
    return ha, hb


def states_sent(sender: Harness) -> list[tuple[str, OriginAcks]]:
    """(subscription, claims) of every state the sender has sent on the control topic and not carried yet."""
    out: list[tuple[str, OriginAcks]] = []
    for data in sender.sent_on(CONTROL):
        opened = envelopes.open_envelope(sender.agent.keys.keyring, data)
        assert isinstance(opened, envelopes.Envelope)
        decoded = ackstates.decode_ack_states(opened)
        assert not isinstance(decoded, envelopes.Rejected)
        out.extend((m.subscription, m.acks) for m in decoded)
    return out


def carry(sender: Harness, receiver: Harness) -> int:
    """Replicate the sender's control messages to the receiver's control topic; how many."""
    sent = sender.sent_on(CONTROL)
    for i, data in enumerate(sent):
        receiver.messaging.deliver(CONTROL, message(CONTROL, Position(77, i), data=data))
    if CONTROL in sender.messaging.producers:
        sender.messaging.producers[CONTROL].sent.clear()
    return len(sent)


def deliver_b_copies(b: Harness) -> None:
    for p, origin in zip(B_LOG, A_LOG, strict=True):
        stamp = {"__MSG_PROP_REPL_SOURCE_POSITION": str(origin)}
        b.messaging.deliver(TOPIC, message(TOPIC, p, properties=stamp, producer="a-1-0"))


def acknowledge_on_a_new_subscription(a: Harness, name: str) -> None:
    """A subscription ``name`` appears in a and its consumer acknowledges a's first message."""
    a.region.cursors[(TOPIC, name)] = AckState.of(Position(5, -1))
    a.discover()
    a.step()
    a.region.consumer_acks(TOPIC, name, A_LOG[:1])
    a.step()


def sealed(
    sender: str,
    states: list[ackstates.AckStateMessage],
    *,
    seq: int,
    incarnations: dict[str, Incarnation] | None = None,
) -> bytes:
    """An envelope of ``states`` (``sender``'s own) as an agent of ``sender`` sends it, signed with its test
    key; ``incarnations``: the lives of regions it names (None: an agent from before incarnations)."""
    envelope = envelopes.Envelope(
        kind=ackstates.ACK_STATES,
        region=sender,
        seq=seq,
        sent_at_ms=0,
        payload=ackstates.encode_ack_states(states, region=sender, incarnations=incarnations),
    )
    return envelopes.seal(KEYS[sender].signer, envelope)
