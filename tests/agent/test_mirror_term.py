"""The policy mirror's leadership term through its front door (``geosync_agent.core.mirroring``): events
in, effects out, no store, no topic, no clock. Tests name the invariant (module docstring) they check."""

from __future__ import annotations

import json

from geosync_adapters import signing
from geosync_agent.core import mirror as core
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core import mirroring as m
from geosync_core import deletions, envelopes, policies
from geosync_core.clocks import Hlc
from geosync_core.policies import Record

T = 1_800_000_000_000
NS = "/admin/policies/shop/orders"
TENANT = "/admin/policies/shop"
DOC = json.dumps({"replication_clusters": ["a", "b"], "allowed_clusters": ["a", "b"]}).encode()
TENANT_DOC = b'{"allowedClusters": ["a", "b", "c"]}'
OLD = Hlc(1_600_000_000_000, 0, "b")
SIGNERS = {r: signing.generate(f"{r}-1") for r in "abc"}
RING = envelopes.Keyring.of(
    {r: {s.key_id: signing.parse_public(s.public(), where=r)} for r, s in SIGNERS.items()}
)
REGISTERED = {r: frozenset[str]() for r in "abc"}


def _received(record: Record, seq: int = 1) -> ev.Received:
    sender = record.stamp.region
    envelope = envelopes.Envelope(
        kind=core.EVENT_KIND, region=sender, seq=seq, sent_at_ms=0, payload=policies.event_to_payload(record)
    )
    return ev.Received(envelopes.open_envelope(RING, envelopes.seal(SIGNERS[sender], envelope)), b"p%d" % seq)


def _leading(*, checkpoint: bool = True) -> m.Term:
    """Region b's term, led through its start: clusters read, the store walked (tenant and namespace)."""
    cp = core.Checkpoint(replica={TENANT: Record(TENANT, TENANT_DOC, OLD), NS: Record(NS, DOC, OLD)})
    term, effects = m.begin(ev.Settings("b"), core.encode_checkpoint(cp) if checkpoint else None, T)
    assert effects == [ev.OpenReader(None), ev.ReadClusters()]
    _, effects = m.step(term, ev.ClustersRead(REGISTERED), T)
    assert effects == [ev.Walk(ev.Scope())]
    found = {TENANT: ev.Node(TENANT_DOC, 0, 1), NS: ev.Node(DOC, 0, 1)}
    _, effects = m.step(term, ev.Walked(found), T)
    assert effects == [ev.Lead()]
    return term


def _only(effects: list[ev.Effect]) -> ev.Effect:
    asked = [e for e in effects if not isinstance(e, ev.Note)]
    assert len(asked) == 1, effects
    return asked[0]


def test_a_term_without_checkpoint_drains_the_topic_before_it_walks_the_store() -> None:
    term, effects = m.begin(ev.Settings("b"), None, T)
    _, effects = m.step(term, ev.ClustersRead(REGISTERED), T)
    assert effects == [ev.Drain()]
    _, effects = m.step(term, ev.CaughtUp(), T)
    assert effects == [ev.Walk(ev.Scope())]
    assert term.phase == "walking"


def test_a_newer_remote_edit_is_read_then_written_with_compare_and_set_and_kept_once_written() -> None:
    """Invariant 2."""
    term = _leading()
    edit = Record(NS, DOC.replace(b"}", b',"message_ttl_in_seconds":5}'), Hlc(T, 0, "a"))
    _, effects = m.step(term, _received(edit), T)
    assert effects == [ev.ReadNode(NS)]
    node = ev.Node(DOC, 3)
    _, effects = m.step(term, ev.NodeRead(NS, node), T)
    assert effects == [ev.WriteNode(NS, edit.value, node)]
    assert term.cp.replica[NS].value == DOC  # not before it is written
    _, effects = m.step(term, ev.Wrote(NS), T)
    assert effects == []
    assert term.cp.replica[NS] == edit


def test_a_stale_write_reads_again_and_a_fenced_one_ends_the_term() -> None:
    """Invariants 2 and 5."""
    term = _leading()
    edit = Record(NS, DOC.replace(b"}", b',"message_ttl_in_seconds":5}'), Hlc(T, 0, "a"))
    m.step(term, _received(edit), T)
    m.step(term, ev.NodeRead(NS, ev.Node(DOC, 3)), T)
    _, effects = m.step(term, ev.WriteFailed(NS, ev.Failure.STALE), T)
    assert effects == [ev.ReadNode(NS)]
    m.step(term, ev.NodeRead(NS, ev.Node(DOC, 4)), T)
    _, effects = m.step(term, ev.WriteFailed(NS, ev.Failure.FENCED, "lock gone"), T)
    assert isinstance(_only(effects), ev.StepDown)
    assert m.step(term, ev.Tick(), T + 60_000)[1] == []


def test_events_that_come_while_an_answer_is_awaited_wait_their_turn() -> None:
    """Invariant 1: the watch fired during the write is read only after the write's answer."""
    term = _leading()
    edit = Record(NS, DOC.replace(b"}", b',"message_ttl_in_seconds":5}'), Hlc(T, 0, "a"))
    m.step(term, _received(edit), T)
    _, effects = m.step(term, ev.Fired(TENANT), T)
    assert effects == []
    _, effects = m.step(term, ev.NodeRead(NS, ev.Node(DOC, 3)), T)
    assert effects == [ev.WriteNode(NS, edit.value, ev.Node(DOC, 3))]
    _, effects = m.step(term, ev.Wrote(NS), T)
    assert effects == [ev.ReadNode(TENANT)]
    assert m.step(term, ev.Wrote(NS), T)[1] == []  # an answer nobody waits for changes nothing
    assert term.counters["stray_answers"] == 1


def test_a_local_change_is_published_stamped_above_the_replica() -> None:
    """Invariant 4."""
    term = _leading()
    _, effects = m.step(term, ev.Fired(NS), T + 5)
    assert effects == [ev.ReadNode(NS)]
    edited = DOC.replace(b"}", b',"message_ttl_in_seconds":9}')
    _, effects = m.step(term, ev.NodeRead(NS, ev.Node(edited, 1)), T + 5)
    publish = _only(effects)
    assert isinstance(publish, ev.Publish)
    assert publish.record.value == edited
    assert publish.record.stamp > OLD
    assert (publish.seq, publish.sent_at_ms) == ((T + 5) * 1000, T + 5)
    assert term.cp.replica[NS] == publish.record


def _deletion_held(term: m.Term, contents: deletions.Contents) -> list[ev.Effect]:
    deletion = Record(NS, None, Hlc(T, 0, "a"))
    node = ev.Node(DOC, 2)
    assert m.step(term, _received(deletion), T)[1] == [ev.ReadNode(NS)]
    assert m.step(term, ev.NodeRead(NS, node), T)[1] == [ev.ReadNode(NS)]  # held: the release reads it
    assert term.cp.replica[NS] == deletion  # the policy everywhere, not yet written here
    assert m.step(term, ev.NodeRead(NS, node), T)[1] == [ev.ListContents(NS)]
    return m.step(term, ev.ContentsListed(NS, contents), T)[1]


def test_a_namespace_that_holds_topics_here_is_not_deleted() -> None:
    """Invariant 3: nothing is written while the region holds a topic in the namespace."""
    term = _leading()
    effects = _deletion_held(term, deletions.Contents(topics=("keep",)))
    assert not any(isinstance(e, ev.WriteNode) for e in effects)
    assert "keep" in term.holds[NS]
    # A recheck asks again; once drained, the namespace is marked, looked at again, then deleted.
    assert m.step(term, ev.Tick(), T + 60_000)[1] == [ev.ReadClusters()]
    assert m.step(term, ev.ClustersRead(REGISTERED), T + 60_000)[1] == [ev.ReadNode(NS)]
    node = ev.Node(DOC, 2)
    assert m.step(term, ev.NodeRead(NS, node), T + 60_000)[1] == [ev.ListContents(NS)]
    mark = _only(m.step(term, ev.ContentsListed(NS, deletions.Contents()), T + 60_000)[1])
    assert isinstance(mark, ev.WriteNode)
    assert deletions.is_marked_deleted(mark.value)
    assert m.step(term, ev.Wrote(NS), T + 60_000)[1] == [ev.ReadNode(NS)]
    marked = ev.Node(mark.value or b"", 3)
    assert m.step(term, ev.NodeRead(NS, marked), T + 60_000)[1] == [ev.ListContents(NS)]
    delete = m.step(term, ev.ContentsListed(NS, deletions.Contents()), T + 60_000)[1]
    assert delete == [ev.WriteNode(NS, None, marked)]
    effects = m.step(term, ev.Wrote(NS), T + 60_000)[1]
    assert NS not in term.holds
    assert NS not in term.cp.parked
    assert any(isinstance(e, ev.SaveCheckpoint) for e in effects)


def test_a_topic_found_after_the_mark_unmarks_the_namespace() -> None:
    """Invariant 3."""
    term = _leading()
    mark = _only(_deletion_held(term, deletions.Contents()))
    assert isinstance(mark, ev.WriteNode)
    m.step(term, ev.Wrote(NS), T)
    m.step(term, ev.NodeRead(NS, ev.Node(mark.value or b"", 3)), T)
    unmark = _only(m.step(term, ev.ContentsListed(NS, deletions.Contents(topics=("late",))), T)[1])
    assert unmark == ev.WriteNode(NS, DOC, ev.Node(mark.value or b"", 3))
    m.step(term, ev.Wrote(NS), T)
    assert "late" in term.holds[NS]


def test_a_region_whose_holdings_cannot_be_listed_holds_the_deletion() -> None:
    term = _leading()
    deletion = Record(NS, None, Hlc(T, 0, "a"))
    m.step(term, _received(deletion), T)
    m.step(term, ev.NodeRead(NS, ev.Node(DOC, 2)), T)
    m.step(term, ev.NodeRead(NS, ev.Node(DOC, 2)), T)
    effects = m.step(term, ev.ContentsListed(NS, None, "cannot list what this region holds"), T)[1]
    assert not any(isinstance(e, ev.WriteNode) for e in effects)
    assert term.holds[NS] == "cannot list what this region holds"


def test_a_checkpoint_goes_to_the_next_term_with_its_holds() -> None:
    term = _leading()
    _deletion_held(term, deletions.Contents(topics=("keep",)))
    m.step(term, ev.Tick(), T + 60_000)
    m.step(term, ev.ClustersRead(REGISTERED), T + 60_000)
    m.step(term, ev.NodeRead(NS, ev.Node(DOC, 2)), T + 60_000)
    effects = m.step(term, ev.ContentsListed(NS, deletions.Contents(topics=("keep",))), T + 60_000)[1]
    saved = [e for e in effects if isinstance(e, ev.SaveCheckpoint)]
    assert len(saved) == 1
    after, _ = m.begin(ev.Settings("b"), saved[0].data, T + 70_000)
    assert (after.cp.replica, after.cp.parked, after.cp.seen) == (
        term.cp.replica,
        term.cp.parked,
        term.cp.seen,
    )
    assert set(after.holds) == {NS}


def test_a_recheck_comes_every_interval_and_after_the_wall_clock_was_set_back() -> None:
    term = _leading()
    assert m.step(term, ev.Tick(), T + 9_999)[1] == []  # Settings' recheck_ms is 10 s
    assert m.step(term, ev.Tick(), T + 10_000)[1] == [ev.ReadClusters()]
    m.step(term, ev.ClustersRead(REGISTERED), T + 10_000)
    assert m.step(term, ev.Tick(), T + 15_000)[1] == []
    assert m.step(term, ev.Tick(), T - 3_600_000)[1] == [ev.ReadClusters()]  # set back an hour
