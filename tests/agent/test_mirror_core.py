"""The policy mirror's decisions as values (``geosync_agent.core.mirror``): which events are taken, what a
remote record does to the store, which local changes are published. No store, no topic, no clock."""

from __future__ import annotations

import json

import pytest

from geosync_adapters import signing
from geosync_agent.core import mirror as core
from geosync_agent.core.mirror import Checkpoint
from geosync_core import envelopes, policies
from geosync_core.clocks import Hlc
from geosync_core.policies import Decision, Record

NS = "/admin/policies/shop/orders"
TENANT = "/admin/policies/shop"
DOC = json.dumps({"replication_clusters": ["a", "b"], "allowed_clusters": ["a", "b"]}).encode()
TENANT_DOC = b'{"allowedClusters": ["a", "b", "c"]}'
REGISTERED = {r: frozenset[str]() for r in "abc"}
OLD = Hlc(1_600_000_000_000, 0, "b")
NEW = Hlc(1_700_000_000_000, 0, "a")
SIGNERS = {r: signing.generate(f"{r}-1") for r in "abc"}
RING = envelopes.Keyring.of(
    {r: {s.key_id: signing.parse_public(s.public(), where=r)} for r, s in SIGNERS.items()}
)


def _cp() -> Checkpoint:
    return Checkpoint(replica={TENANT: Record(TENANT, TENANT_DOC, OLD), NS: Record(NS, DOC, OLD)})


def _opened(sender: str, record: Record, *, kind: str = core.EVENT_KIND, seq: int = 1) -> envelopes.Envelope:
    envelope = envelopes.Envelope(
        kind=kind, region=sender, seq=seq, sent_at_ms=0, payload=policies.event_to_payload(record)
    )
    opened = envelopes.open_envelope(RING, envelopes.seal(SIGNERS[sender], envelope))
    assert isinstance(opened, envelopes.Envelope)
    return opened


def _everything(_path: str) -> bool:
    return True


def test_an_event_is_taken_once_from_the_region_that_stamped_it() -> None:
    cp = _cp()
    record = Record(NS, None, NEW)
    assert core.receive(cp, _opened("a", record), in_scope=_everything) == core.Taken(record)
    assert cp.seen["a"] == NEW
    assert core.receive(cp, _opened("a", record), in_scope=_everything) == core.Dropped("rejected_replayed")


@pytest.mark.parametrize(
    ("sender", "kind", "scope", "counter"),
    [
        ("b", core.EVENT_KIND, True, "rejected_malformed"),  # b signs a record stamped by a
        ("a", "ack-states", True, "other_kinds"),
        ("a", core.EVENT_KIND, False, "out_of_scope"),
    ],
)
def test_events_that_are_not_taken_say_why(sender: str, kind: str, scope: bool, counter: str) -> None:
    cp = _cp()
    opened = _opened(sender, Record(NS, None, NEW), kind=kind)
    assert core.receive(cp, opened, in_scope=lambda _p: scope) == core.Dropped(counter)
    assert "b" not in cp.seen


def test_a_rejected_envelope_is_counted_by_its_reason() -> None:
    dropped = core.receive(_cp(), envelopes.Rejected(envelopes.Reason.UNKNOWN_KEY), in_scope=_everything)
    assert dropped == core.Dropped("rejected_unknown-key")


def _judge(cp: Checkpoint, event: Record, current: bytes | None, *, held: bool = False) -> core.Verdict:
    return core.judge(cp, event, current=current, held=held, local_region="b", registered=REGISTERED)


def test_a_newer_edit_is_written_and_an_older_one_ignored() -> None:
    edit = Record(NS, DOC.replace(b"}", b',"message_ttl_in_seconds":5}'), NEW)
    verdict = _judge(_cp(), edit, DOC)
    assert isinstance(verdict, core.Write)
    assert verdict.replica[NS] == edit
    assert _judge(_cp(), Record(NS, b"{}", Hlc(1, 0, "a")), DOC) == core.Ignore(Decision.IGNORE_OLDER)


def test_a_deletion_of_a_namespace_that_exists_here_is_held_not_written() -> None:
    verdict = _judge(_cp(), Record(NS, None, NEW), DOC)
    assert isinstance(verdict, core.Hold)
    assert verdict.replica[NS].value is None


def test_a_store_that_changed_unseen_is_reported_first_unless_the_path_is_held() -> None:
    edited = b'{"replication_clusters": ["a", "b"], "message_ttl_in_seconds": 9}'
    assert _judge(_cp(), Record(NS, None, NEW), edited) == core.ReportFirst()
    assert isinstance(_judge(_cp(), Record(NS, DOC, NEW), edited, held=True), core.Write)


def test_a_policy_that_takes_the_namespace_away_from_this_region_is_refused() -> None:
    narrowed = json.dumps({"replication_clusters": ["a"], "allowed_clusters": ["a"]}).encode()
    verdict = _judge(_cp(), Record(NS, narrowed, NEW), DOC)
    assert isinstance(verdict, core.Refuse)
    assert "would remove b" in verdict.reason


def test_local_changes_are_published_unless_echoed_or_held() -> None:
    ticks: list[Hlc] = []

    def tick() -> Hlc:
        ticks.append(NEW)
        return NEW

    cp = _cp()
    assert core.found_locally(cp, NS, DOC, held=False, tick=tick) == (None, None, "echo_or_unchanged")
    assert core.found_locally(cp, NS, b"{}", held=True, tick=tick) == (None, None, "held_local_edits")
    assert ticks == []  # no stamp spent on what is not published
    replica, event, counter = core.found_locally(cp, NS, b"{}", held=False, tick=tick)
    assert (event, counter) == (Record(NS, b"{}", NEW), "local_changes")
    assert replica is not None
    assert replica[NS] == event
    assert cp.replica[NS].value == DOC  # the caller keeps it once published


def test_the_held_paths_are_the_parked_records_the_replica_holds() -> None:
    deletion = Record(NS, None, NEW)
    refused = Record("/admin/policies/shop/other", b"{}", NEW)
    cp = Checkpoint(replica={NS: deletion}, parked={NS: deletion, refused.path: refused})
    assert cp.held() == {NS}


def test_a_newer_policy_that_takes_a_held_namespace_away_from_this_region_is_held_in_its_place() -> None:
    """b holds a's deletion (its topics are still here); a then creates the namespace again without b. Written
    over b's own document, that would make b's brokers delete the topics the hold keeps: it is held instead,
    and written once b has drained. Refused, it was dropped when the hold ended (found by the simulator,
    tests/sim/test_policies.py). One that breaks PIP-321 here is still refused."""
    cp = _cp()
    deletion = Record(NS, None, NEW)
    cp.replica[NS] = cp.parked[NS] = deletion
    assert cp.held() == {NS}
    without_b = json.dumps({"replication_clusters": ["a"], "allowed_clusters": ["a"]}).encode()
    again = Record(NS, without_b, Hlc(NEW.wall_ms + 1, 0, "a"))
    verdict = _judge(cp, again, DOC, held=True)
    assert isinstance(verdict, core.Hold)
    assert verdict.replica[NS] == again
    unknown = json.dumps({"replication_clusters": ["x"], "allowed_clusters": ["x"]}).encode()
    assert isinstance(_judge(cp, Record(NS, unknown, again.stamp), DOC, held=True), core.Refuse)
    assert isinstance(_judge(cp, Record(NS, DOC, again.stamp), DOC, held=True), core.Write)
