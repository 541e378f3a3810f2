"""keyorder.key_ordered_plan: a Key_Shared subscription's per-key order kept where claims are applied.

The claiming region keeps per-key order over its own log (``key_ordered``); a rebuilt region's log lacks what
its old life had received, and its claims may pass a key's earlier message that the receiving region still
holds (the simulator's seeds 5043 and 5430 of the rebuilds profile, ``tests/sim/test_rebuilt_key_order.py``).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core.batches import BatchAcks
from geosync_core.indexing import OriginIndex
from geosync_core.keyorder import key_ordered_plan
from geosync_core.origins import Origin, OriginAcks, Span
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from geosync_core.syncing import ApplyPlan, applied, plan_apply

from .strategies import fast


def P(text: str) -> Position:
    return Position.parse(text)


def test_claims_past_a_keys_earlier_unacknowledged_message_are_held_back() -> None:
    """The seed 5043 shape: c's 14:14 batch (keys k2, k3 among them) reached the old a and b; the new a never
    got it, its consumers acknowledged c's next messages of k2 and k3 (14:18) and a claims them. b's log holds
    both; b applies 14:18's k2 and k3 only once 14:14's are acknowledged here."""
    log = [P("7:1"), P("7:2"), P("7:3"), P("7:4"), P("7:5")]
    keys = {P("7:1"): "k2", P("7:2"): "k3", P("7:3"): "k2", P("7:4"): "k3", P("7:5"): "k9"}
    origin = dict.fromkeys(log, "c")
    local = AckState.of(P("7:0"))
    plan = ApplyPlan(None, (P("7:3"), P("7:4"), P("7:5")))
    kept = key_ordered_plan(plan, local, log, keys.__getitem__, origin_of=origin.__getitem__)
    assert kept == ApplyPlan(None, (P("7:5"),), held=2)
    # consumers here acknowledged 14:14's k2: its later k2 may go, k3 still waits
    local = local.ack(P("7:1"))
    kept = key_ordered_plan(plan, local, log, keys.__getitem__, origin_of=origin.__getitem__)
    assert kept == ApplyPlan(None, (P("7:3"), P("7:5")), held=1)


def test_a_plan_that_keeps_order_is_returned_as_it_is() -> None:
    log = [P("7:1"), P("7:2"), P("7:3")]
    keys = dict.fromkeys(log, "k")
    plan = ApplyPlan(P("7:2"), (), P("7:3"))
    assert key_ordered_plan(plan, AckState.of(P("7:0")), log, keys.__getitem__) is plan
    # another origin's earlier message of the key holds nothing back (decision 0016)
    origins = {P("7:1"): "b", P("7:2"): "c", P("7:3"): "c"}
    plan = ApplyPlan(None, (P("7:2"), P("7:3")))
    local = AckState.of(P("7:0"))
    assert key_ordered_plan(plan, local, log, keys.__getitem__, origin_of=origins.__getitem__) is plan


def test_a_batch_index_behind_an_earlier_message_of_its_key_is_held_back() -> None:
    log = [P("7:1"), P("7:2")]
    keys = {(P("7:1"), 0): "k", (P("7:1"), 1): "j", (P("7:2"), 0): "j", (P("7:2"), 1): "x"}
    sizes = dict.fromkeys(log, 2)
    # 7:1's j (index 1) stays unacknowledged: 7:2's j (index 0) waits, its x goes
    plan = ApplyPlan(None, (P("7:2"),), batch_acks=((P("7:1"), BatchAcks.of(2, [0])),))
    kept = key_ordered_plan(
        plan,
        AckState.of(P("7:0")),
        log,
        lambda p: keys[(p, 0)],
        size_of=sizes.__getitem__,
        key_of_message=lambda p, i: keys[(p, i)],
    )
    assert kept.individual_acks == ()
    assert kept.batch_acks == ((P("7:1"), BatchAcks.of(2, [0])), (P("7:2"), BatchAcks.of(2, [1])))
    assert kept.held == 1


def test_a_plan_beyond_the_log_given_is_cut_there_and_not_complete() -> None:
    """The agent gives the first entries above the mark-delete (a window): what the plan writes beyond them is
    not judged, so it is left for the next plan."""
    keys = dict.fromkeys([P("7:1"), P("7:2"), P("7:3")], "k")
    plan = ApplyPlan(None, (P("7:2"), P("7:3")))
    kept = key_ordered_plan(plan, AckState.of(P("7:0")), [P("7:1"), P("7:2")], keys.__getitem__)
    assert kept == ApplyPlan(None, (), complete=False, held=1)


@settings(fast, max_examples=150)
@given(
    st.lists(
        st.tuples(st.sampled_from(["b", "c", None]), st.sampled_from(["x", "y", None]), st.booleans()),
        min_size=1,
        max_size=16,
    ),
    st.data(),
)
def test_a_guarded_plan_writes_a_part_of_the_plan_and_keeps_per_key_order(
    shape: list[tuple[str | None, str | None, bool]], data: st.DataObject
) -> None:
    """Any log (origins and keys, some unknown), any cursor here, any claims: the guarded plan writes only
    what the plan did, keeps the cursor, and leaves no message it acknowledges behind an earlier
    unacknowledged one of the same key and origin (unknown: could be any)."""
    log = [Position(5, e) for e in range(len(shape))]
    index = OriginIndex()
    for p, (origin, _, indexed) in zip(log, shape, strict=True):
        if indexed:
            index.append(p, Origin(origin or "b", Position(9, p.entry)))
    origin_of = {p: o if i else None for p, (o, _, i) in zip(log, shape, strict=True)}.__getitem__
    key_of = {p: k for p, (_, k, _) in zip(log, shape, strict=True)}.__getitem__
    local = AckState.of(Position(5, data.draw(st.integers(-1, 2)))).ack(
        *(p for p in log if data.draw(st.booleans()))
    )
    claimed = [Span(9, p.entry, p.entry) for p in log if data.draw(st.booleans())]
    remote = OriginAcks.of({"b": claimed, "c": claimed})
    plan = plan_apply(index, local, remote=remote, log=log)
    kept = key_ordered_plan(plan, local, log, key_of, origin_of=origin_of)
    before, full, after = local, applied(local, plan), applied(local, kept)
    assert all(p in after for p in log if p in before)  # the cursor is kept
    assert all(p in full for p in log if p in after)  # nothing the plan did not write
    if kept.held == 0:
        assert kept is plan

    def same(x: str | None, y: str | None) -> bool:
        return x is None or y is None or x == y

    for i, p in enumerate(log):
        if p <= before.mark_delete or p in before or p not in after:
            continue
        for q in log[:i]:
            if q > before.mark_delete and q not in after:
                assert not (same(origin_of(q), origin_of(p)) and same(key_of(q), key_of(p))), (p, q)
    assert (after == full) == (kept.held == 0)
