"""The rules that keep a peer's deletion from destroying a region's data (``geosync_core.deletions``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from geosync_core import deletions
from geosync_core.clocks import Hlc
from geosync_core.deletions import Apply, Contents, Hold, Mark, Unmark
from geosync_core.policies import Record

NS = "/admin/policies/shop/orders"
TENANT = "/admin/policies/shop"
DOC = json.dumps({"replication_clusters": ["a", "b"], "message_ttl_in_seconds": 60}).encode()
MARKED = json.dumps({"replication_clusters": ["a", "b"], "deleted": True}).encode()
STAMP = Hlc(1_700_000_000_000, 0, "a")


def _record(path: str, value: bytes | None) -> Record:
    return Record(path, value, STAMP)


@pytest.mark.parametrize(
    ("path", "value", "current", "expected"),
    [
        (NS, None, DOC, True),  # a namespace deleted while it exists here
        (TENANT, None, b"{}", True),  # a tenant deleted while it exists here
        (NS, None, None, False),  # nothing here to delete
        (NS, DOC, DOC, False),  # an ordinary edit
        (NS, b'{"message_ttl_in_seconds": 5}', DOC, False),
        (NS, MARKED, DOC, True),  # Pulsar's mark, copied whole
        (NS, MARKED, MARKED, False),  # already marked here
        (NS, MARKED, None, False),  # a marked document where none exists destroys nothing
        (TENANT, MARKED, b"{}", False),  # the mark means nothing on a tenant
        ("/admin/local-policies/shop/orders", None, DOC, False),  # never mirrored
    ],
)
def test_only_deletions_and_marks_of_what_exists_destroy(
    path: str, value: bytes | None, current: bytes | None, expected: bool
) -> None:
    assert deletions.destroys(_record(path, value), current) is expected


def test_system_and_own_topics_never_hold_a_deletion() -> None:
    stored = [
        "__change_events",
        "__change_events-partition-0",
        "__transaction_buffer_snapshot",
        "orders-sub__transaction_pending_ack",
        "geosync-control",
        "orders-partition-0",
        "orders-partition-1",
        "caf%C3%A9",
        "__my_own_underscored_topic",
    ]
    assert deletions.user_topics(stored, own=frozenset({"geosync-control"})) == [
        "__my_own_underscored_topic",
        "café",
        "orders",
    ]


@given(st.text(alphabet=st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=30))
def test_any_other_name_holds(name: str) -> None:
    """Invariant 4: only the names Pulsar and GeoSync keep for themselves are left out."""
    assert deletions.user_topics([name, f"{name}-partition-3"]) == [name]


def test_a_namespace_that_holds_topics_is_held_with_a_reason_naming_them() -> None:
    step = deletions.next_step(_record(NS, None), DOC, Contents(topics=("orders",)), unmarked=None)
    assert isinstance(step, Hold)
    assert "1 topic(s): orders" in step.reason


def test_a_tenant_that_holds_namespaces_is_held() -> None:
    names = tuple(f"ns{i}" for i in range(7))
    step = deletions.next_step(_record(TENANT, None), b"{}", Contents(namespaces=names), unmarked=None)
    assert isinstance(step, Hold)
    assert "7 namespace(s)" in step.reason
    assert "and 2 more" in step.reason


def test_an_empty_namespace_is_marked_then_deleted() -> None:
    first = deletions.next_step(_record(NS, None), DOC, Contents(), unmarked=None)
    assert isinstance(first, Mark)
    marked = json.loads(first.doc)
    assert marked == {**json.loads(DOC), "deleted": True}
    second = deletions.next_step(_record(NS, None), first.doc, Contents(), unmarked=DOC)
    assert second == Apply()


def test_a_topic_found_after_the_mark_undoes_it() -> None:
    step = deletions.next_step(_record(NS, None), MARKED, Contents(topics=("late",)), unmarked=DOC)
    assert step == Unmark(DOC, "this region still holds 1 topic(s): late")


def test_an_empty_tenant_and_an_unreadable_document_are_deleted_without_a_mark() -> None:
    assert deletions.next_step(_record(TENANT, None), b"{}", Contents(), unmarked=None) == Apply()
    assert deletions.next_step(_record(NS, None), b"[1, 2]", Contents(), unmarked=None) == Apply()
    assert deletions.next_step(_record(NS, None), b"not json", Contents(), unmarked=None) == Apply()


def test_a_mark_arriving_for_an_empty_namespace_is_written_as_it_came() -> None:
    assert deletions.next_step(_record(NS, MARKED), DOC, Contents(), unmarked=None) == Apply()


@given(st.text(min_size=1, max_size=20))
def test_a_name_reads_back_from_its_url_encoded_form(name: str) -> None:
    """Managed-ledger children are URL-encoded local names (as the broker's ``Codec`` writes them)."""
    from urllib.parse import quote, quote_plus

    assume(deletions.local_name(name) == name)  # not a partition's name, nothing that decodes
    assert deletions.local_name(quote(name, safe="")) == name
    assert deletions.local_name(quote_plus(name, safe="")) == name
