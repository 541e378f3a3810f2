"""Tables and properties for ``geosync_core.policies``: one test (at least) per invariant."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geosync_core import clocks
from geosync_core.clocks import Hlc
from geosync_core.policies import (
    NAMESPACE_ALLOWED_CLUSTERS,
    NAMESPACE_REPLICATION_CLUSTERS,
    TENANT_ADMIN_ROLES,
    TENANT_ALLOWED_CLUSTERS,
    Decision,
    Disagreement,
    Malformed,
    PathClass,
    Record,
    Replica,
    apply_remote,
    classify,
    collect_tombstones,
    diff,
    digest,
    event_from_payload,
    event_to_payload,
    local_change,
    merge,
    read_names,
    scan_store,
    stamp_found_change,
    write_names,
)

REGIONS = ("a", "b", "c")
PATHS = ("/admin/policies/t", "/admin/policies/t/ns", "/admin/policies/t/other")
VALUES = st.sampled_from([None, b"", b"{}", b'{"x":1}', b'{"x":2}'])
STAMPS = st.builds(
    Hlc, st.integers(0, 4), st.integers(0, 2), st.sampled_from(REGIONS)
)  # small ranges: equal stamps and equal values happen, which is what the tie rules are for
EVENTS = st.builds(Record, st.sampled_from(PATHS), VALUES, STAMPS)


def _fold(events: list[Record]) -> Replica:
    return reduce(lambda replica, event: apply_remote(replica, event)[0], events, {})


REPLICAS = st.lists(EVENTS, max_size=12).map(_fold)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/admin/policies/public", PathClass.TENANT),
        ("/admin/policies/public/default", PathClass.NAMESPACE),
        ("/admin/policies/my-t.1/ns=a:b_c", PathClass.NAMESPACE),
        ("/admin/local-policies/public/default", PathClass.REGION_LOCAL),
        ("/admin/local-policies", PathClass.REGION_LOCAL),
        ("/admin/clusters/a", PathClass.REGION_LOCAL),
        ("/admin/clusters/a/namespaceIsolationPolicies", PathClass.REGION_LOCAL),
        ("/admin/flags/policies-readonly", PathClass.REGION_LOCAL),
        ("/admin/configuration", PathClass.REGION_LOCAL),
        ("/namespace/public/default/0x00000000_0xffffffff", PathClass.REGION_LOCAL),
        ("/loadbalance/brokers/x:8080", PathClass.REGION_LOCAL),
        ("/managed-ledgers/public/default/persistent/t", PathClass.REGION_LOCAL),
        ("/ledgers/00/0000/L0001", PathClass.REGION_LOCAL),
        ("/schemas/public/default/t", PathClass.REGION_LOCAL),
        ("/admin/partitioned-topics/public/default/persistent/t", PathClass.NOT_MIRRORED),
        ("/admin/policies/public/global/legacy-v1", PathClass.NOT_MIRRORED),
        ("/admin/policies", PathClass.NOT_MIRRORED),
        ("/admin/policies/", PathClass.NOT_MIRRORED),
        ("/admin/policies/t/", PathClass.NOT_MIRRORED),
        ("/admin/policies//ns", PathClass.NOT_MIRRORED),
        ("/admin/policies/t/..", PathClass.NOT_MIRRORED),
        ("/admin/policies/..", PathClass.NOT_MIRRORED),
        ("/admin/policies/t/n s", PathClass.NOT_MIRRORED),
        ("/admin/policiesx/t", PathClass.NOT_MIRRORED),
        ("admin/policies/t", PathClass.NOT_MIRRORED),
        ("", PathClass.NOT_MIRRORED),
    ],
)
def test_classify(path: str, expected: PathClass) -> None:
    assert classify(path) is expected
    assert classify(path).mirrored == (expected in (PathClass.TENANT, PathClass.NAMESPACE))


@settings(max_examples=50, deadline=None)
@given(REPLICAS, REPLICAS, REPLICAS)
def test_merge_is_commutative_associative_idempotent(a: Replica, b: Replica, c: Replica) -> None:
    assert merge(a, b) == merge(b, a)
    assert merge(merge(a, b), c) == merge(a, merge(b, c))
    assert merge(a, a) == a
    assert merge(a, {}) == a


@settings(max_examples=50, deadline=None)
@given(st.lists(EVENTS, max_size=10), st.data())
def test_every_delivery_order_with_duplicates_converges(events: list[Record], data: st.DataObject) -> None:
    empty: Replica = {}
    expected = reduce(merge, ({e.path: e} for e in events), empty)
    for _ in range(3):
        duplicated = events + data.draw(
            st.lists(st.sampled_from(events), max_size=5) if events else st.just([])
        )
        delivered = data.draw(st.permutations(duplicated))
        assert _fold(delivered) == expected


@settings(deadline=None)
@given(REPLICAS, EVENTS)
def test_apply_remote_never_goes_back_and_says_what_it_did(replica: Replica, event: Record) -> None:
    after, decision = apply_remote(replica, event)
    held = replica.get(event.path)
    assert merge(after, replica) == after
    assert set(after) == set(replica) | {event.path}
    if decision in (Decision.APPLY_WRITE, Decision.APPLY_DELETE):
        assert after[event.path] == event != held
        assert (event.value is None) == (decision is Decision.APPLY_DELETE)
    else:
        assert after == replica
        assert decision is (Decision.IGNORE_SAME if held == event else Decision.IGNORE_OLDER)


def _stamp(wall: int, region: str, logical: int = 0) -> Hlc:
    return Hlc(wall, logical, region)


NS = "/admin/policies/t/ns"
HELD = {NS: Record(NS, b"old", _stamp(10, "b"))}


@pytest.mark.parametrize(
    ("event", "decision"),
    [
        (Record(NS, b"new", _stamp(11, "a")), Decision.APPLY_WRITE),
        (Record(NS, b"new", _stamp(10, "c")), Decision.APPLY_WRITE),  # tie on time: larger region wins
        (Record(NS, b"new", _stamp(10, "b", 1)), Decision.APPLY_WRITE),
        (Record(NS, None, _stamp(12, "a")), Decision.APPLY_DELETE),
        (Record(NS, b"new", _stamp(10, "a")), Decision.IGNORE_OLDER),
        (Record(NS, b"new", _stamp(9, "c", 5)), Decision.IGNORE_OLDER),
        (Record(NS, None, _stamp(9, "c")), Decision.IGNORE_OLDER),
        (Record(NS, b"old", _stamp(10, "b")), Decision.IGNORE_SAME),
        (Record("/admin/policies/t/fresh", None, _stamp(1, "a")), Decision.APPLY_DELETE),
        (Record("/admin/local-policies/t/ns", b"x", _stamp(99, "a")), Decision.IGNORE_UNMIRRORED),
        (Record("/managed-ledgers/t/ns/persistent/x", b"x", _stamp(99, "a")), Decision.IGNORE_UNMIRRORED),
    ],
)
def test_apply_remote_decisions(event: Record, decision: Decision) -> None:
    after, got = apply_remote(HELD, event)
    assert got is decision
    assert (after == HELD) == (decision.name.startswith("IGNORE"))


def test_a_tombstone_beats_an_older_write_that_arrives_later() -> None:
    deleted, _ = apply_remote(HELD, Record(NS, None, _stamp(20, "a")))
    after, decision = apply_remote(deleted, Record(NS, b"resurrect?", _stamp(15, "c")))
    assert decision is Decision.IGNORE_OLDER
    assert after[NS].value is None


@settings(deadline=None)
@given(REPLICAS, EVENTS)
def test_reporting_an_applied_record_as_a_local_change_makes_no_event(
    replica: Replica, event: Record
) -> None:
    applied, _ = apply_remote(replica, event)
    stamp = Hlc(99, 0, "a")
    assert local_change(applied, event.path, value=applied[event.path].value, stamp=stamp) == (applied, None)


@settings(deadline=None)
@given(REPLICAS, st.sampled_from(PATHS), VALUES)
def test_a_local_change_wins_everywhere(replica: Replica, path: str, value: bytes | None) -> None:
    held = replica.get(path)
    stamp = stamp_found_change(held, mtime_ms=2, region="a")
    after, event = local_change(replica, path, value=value, stamp=stamp)
    if value == (held.value if held else None):
        assert (after, event) == (replica, None)
        return
    assert event == Record(path, value, stamp)
    assert after[path] == event
    assert apply_remote(replica, event)[1] in (Decision.APPLY_WRITE, Decision.APPLY_DELETE)


def test_local_change_refuses_a_stamp_that_would_lose() -> None:
    with pytest.raises(ValueError, match="not above"):
        local_change(HELD, NS, value=b"mine", stamp=_stamp(10, "a"))


@pytest.mark.parametrize(
    "path", ["/admin/local-policies/t/ns", "/admin/clusters/a", "/loadbalance/x", "/admin/policies/t/n/x"]
)
def test_unmirrored_local_changes_make_no_event(path: str) -> None:
    assert local_change({}, path, value=b"x", stamp=_stamp(1, "a")) == ({}, None)


@settings(deadline=None)
@given(REPLICAS, st.integers(0, 10), st.sampled_from(PATHS), st.sampled_from(REGIONS))
def test_stamp_found_change_ranks_above_the_held_record(
    replica: Replica, mtime: int, path: str, region: str
) -> None:
    held = replica.get(path)
    stamp = stamp_found_change(held, mtime_ms=mtime, region=region)
    assert stamp.region == region
    assert held is None or stamp > held.stamp
    assert stamp.wall_ms >= mtime or (held is not None and stamp.wall_ms == held.stamp.wall_ms)


FOUND = st.dictionaries(
    st.sampled_from([*PATHS, "/admin/local-policies/t/ns"]),
    st.tuples(st.sampled_from([b"", b"{}", b'{"x":1}', b'{"x":3}']), st.integers(0, 6)),
)


@settings(deadline=None)
@given(REPLICAS, FOUND, st.integers(0, 6))
def test_scan_store_finds_each_change_once_and_each_wins(
    replica: Replica, found: dict[str, tuple[bytes, int]], now: int
) -> None:
    clock = clocks.start("b")
    after, clock, events = scan_store(replica, clock, found=found, now_ms=now)
    for path in PATHS:
        record = after.get(path)
        assert (record.value if record else None) == found.get(path, (None, 0))[0]
    assert "/admin/local-policies/t/ns" not in after
    for event in events:
        assert after[event.path] == event
        assert apply_remote(replica, event)[1] in (Decision.APPLY_WRITE, Decision.APPLY_DELETE)
        assert event.stamp < clocks.tick(clock, now_ms=0)[1]
    assert {e.path for e in events} == {p for p in PATHS if after.get(p) != replica.get(p)}
    assert scan_store(after, clock, found=found, now_ms=now)[2] == []


def test_scan_store_dates_a_found_change_by_its_mtime() -> None:
    held = {NS: Record(NS, b"old", _stamp(10, "a"))}
    found = {NS: (b"new", 50), "/admin/policies/t": (b"{}", 7)}
    _, clock, events = scan_store(held, clocks.start("b"), found=found, now_ms=20)
    assert events == [
        Record("/admin/policies/t", b"{}", _stamp(7, "b")),
        Record(NS, b"new", _stamp(50, "b")),
    ]
    assert clock > _stamp(50, "b")
    _, _, [deleted] = scan_store(held, clocks.start("b"), found={}, now_ms=20)
    assert deleted == Record(NS, None, _stamp(10, "b", 1))


class _Mirror:
    """One region's agent over a dict standing in for its store, driven the way the runtime will be."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.clock = clocks.start(region)
        self.replica: Replica = {}
        self.store: dict[str, bytes] = {}
        self.now = 0

    def edit(self, path: str, value: bytes | None) -> Record | None:
        if value is None:
            self.store.pop(path, None)
        else:
            self.store[path] = value
        return self.watch(path)

    def watch(self, path: str) -> Record | None:
        self.now += 1
        self.clock, stamp = clocks.tick(self.clock, now_ms=self.now)
        self.replica, event = local_change(self.replica, path, value=self.store.get(path), stamp=stamp)
        return event

    def deliver(self, event: Record) -> Record | None:
        self.now += 1
        self.replica, decision = apply_remote(self.replica, event)
        self.clock = clocks.receive(self.clock, event.stamp, now_ms=self.now)
        if decision is Decision.APPLY_WRITE:
            assert event.value is not None
            self.store[event.path] = event.value
        elif decision is Decision.APPLY_DELETE:
            self.store.pop(event.path, None)
        else:
            return None
        return self.watch(event.path)  # the store watch fires for our own write


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_mirrors_exchanging_events_quiesce_with_identical_stores(data: st.DataObject) -> None:
    mirrors = {r: _Mirror(r) for r in REGIONS}
    in_flight: list[tuple[str, Record]] = []  # (destination, event): the topic replicates to every peer
    published = 0
    for _ in range(data.draw(st.integers(0, 30))):
        if bool(in_flight) and data.draw(st.booleans()):
            destination, event = in_flight.pop(data.draw(st.integers(0, len(in_flight) - 1)))
            assert mirrors[destination].deliver(event) is None, "an applied remote record was echoed"
        else:
            region = data.draw(st.sampled_from(REGIONS))
            made = mirrors[region].edit(data.draw(st.sampled_from(PATHS)), data.draw(VALUES))
            if made is not None:
                published += 1
                in_flight += [(peer, made) for peer in REGIONS if peer != region]
    delivered = 0
    while in_flight:
        destination, event = in_flight.pop(data.draw(st.integers(0, len(in_flight) - 1)))
        assert mirrors[destination].deliver(event) is None, "an applied remote record was echoed"
        delivered += 1
    assert delivered <= published * (len(REGIONS) - 1)
    first = mirrors[REGIONS[0]]
    for mirror in mirrors.values():
        assert mirror.store == first.store
        assert mirror.replica == first.replica
    assert diff({r: m.replica for r, m in mirrors.items()}) == []


def test_diff_lists_paths_whose_values_differ() -> None:
    t, ns, gone = "/admin/policies/t", "/admin/policies/t/ns", "/admin/policies/t/gone"
    a = {
        t: Record(t, b"1", _stamp(1, "a")),
        ns: Record(ns, b"x", _stamp(1, "a")),
        gone: Record(gone, None, _stamp(3, "a")),
    }
    b = {t: Record(t, b"1", _stamp(2, "b")), ns: Record(ns, b"y", _stamp(2, "b"))}
    c: dict[str, Record] = {t: Record(t, b"1", _stamp(3, "c"))}
    assert diff({"c": c, "a": a, "b": b}) == [
        Disagreement(ns, {"a": digest(b"x"), "b": digest(b"y"), "c": None}),
    ]
    assert diff({"a": a}) == []
    assert diff({}) == []


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from(REGIONS), REPLICAS))
def test_diff_finds_exactly_the_disagreeing_paths(replicas: Mapping[str, Replica]) -> None:
    def value(replica: Replica, path: str) -> bytes | None:
        record = replica.get(path)
        return record.value if record else None

    paths = {p for r in replicas.values() for p in r}
    expected = sorted(p for p in paths if len({value(r, p) for r in replicas.values()}) > 1)
    assert [d.path for d in diff(replicas)] == expected


JSON_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
NAMES = st.lists(st.from_regex(r"(?a)[-=:.\w]{1,8}", fullmatch=True), max_size=4)


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=6),
    st.sampled_from(
        [
            NAMESPACE_ALLOWED_CLUSTERS,
            NAMESPACE_REPLICATION_CLUSTERS,
            TENANT_ALLOWED_CLUSTERS,
            TENANT_ADMIN_ROLES,
        ]
    ),
    NAMES,
)
def test_write_names_changes_only_its_field(doc: dict[str, object], field: str, names: list[str]) -> None:
    written = write_names(json.dumps(doc).encode(), field, names=names)
    assert isinstance(written, bytes)
    assert read_names(written, field) == frozenset(names)
    after = json.loads(written)
    assert {k: v for k, v in after.items() if k != field} == {k: v for k, v in doc.items() if k != field}
    assert list(after)[: len(doc)] == list(doc)
    assert write_names(written, field, names=names) == written


def test_write_names_keeps_a_pulsar_document_byte_identical_but_for_the_field() -> None:
    doc = (
        b'{"auth_policies":{"namespace_auth":{}},"replication_clusters":["b","a"],'
        b'"bundles":{"numBundles":4},"x":"\xc3\xa9"}'
    )
    assert write_names(doc, NAMESPACE_REPLICATION_CLUSTERS, names=["a", "b", "c"]) == doc.replace(
        b'["b","a"]', b'["a","b","c"]'
    )


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (b'{"allowed_clusters":["a","b","a"]}', frozenset({"a", "b"})),
        (b'{"allowed_clusters":null}', frozenset()),
        (b"{}", frozenset()),
        (b"[]", Malformed("not a JSON object")),
        (b'{"allowed_clusters":"a"}', Malformed("allowed_clusters is not a list of names")),
        (b'{"allowed_clusters":[1]}', Malformed("allowed_clusters is not a list of names")),
    ],
)
def test_read_names(doc: bytes, expected: object) -> None:
    assert read_names(doc, NAMESPACE_ALLOWED_CLUSTERS) == expected


@pytest.mark.parametrize("doc", [b"", b"{", b"\xff", b'{"a":NaN}', b'{"a":1e999}', b"[" * 100_000])
def test_unreadable_documents_are_malformed_not_exceptions(doc: bytes) -> None:
    assert isinstance(read_names(doc, NAMESPACE_ALLOWED_CLUSTERS), Malformed)
    assert isinstance(write_names(doc, NAMESPACE_ALLOWED_CLUSTERS, names=["a"]), Malformed)


PAYLOAD_EVENTS = st.builds(
    Record,
    st.text(max_size=30),
    st.none() | st.binary(max_size=40),
    st.builds(
        Hlc,
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.from_regex(r"(?a)[-=:.\w]{1,8}", fullmatch=True),
    ),
)


@settings(deadline=None)
@given(PAYLOAD_EVENTS)
def test_payload_round_trips_through_json(event: Record) -> None:
    payload = json.loads(json.dumps(event_to_payload(event)))
    assert event_from_payload(payload) == event


def test_payload_shape_is_stable() -> None:
    event = Record(NS, b'{"x":1}', _stamp(1732230000000, "eu-west", 2))
    assert event_to_payload(event) == {
        "v": 1,
        "path": NS,
        "stamp": "1732230000000.2.eu-west",
        "value": "eyJ4IjoxfQ==",
    }
    assert event_to_payload(Record(NS, None, _stamp(5, "a")))["value"] is None


VALID = {"v": 1, "path": NS, "stamp": "5.0.a", "value": "eA=="}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ([], "payload is not an object"),
        ({**VALID, "extra": 1}, "payload fields"),
        ({k: v for k, v in VALID.items() if k != "value"}, "payload fields"),
        ({**VALID, "v": 2}, "unsupported payload version"),
        ({**VALID, "v": True}, "unsupported payload version"),
        ({**VALID, "v": "1"}, "unsupported payload version"),
        ({**VALID, "path": None}, "path is not a string"),
        ({**VALID, "stamp": "5.0"}, "stamp"),
        ({**VALID, "stamp": 5}, "stamp"),
        ({**VALID, "value": 5}, "value is neither"),
        ({**VALID, "value": "eA="}, "value is not base64"),
        ({**VALID, "value": "é"}, "value is not base64"),
        ({**VALID, "value": "eB=="}, "value is not canonical base64"),
    ],
)
def test_malformed_payloads_say_why(payload: object, reason: str) -> None:
    result = event_from_payload(payload)
    assert isinstance(result, Malformed)
    assert result.reason.startswith(reason)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        JSON_VALUES,
        st.dictionaries(st.sampled_from(sorted(VALID)), JSON_VALUES | st.sampled_from(list(VALID.values()))),
        st.dictionaries(st.integers() | st.text(max_size=4), JSON_VALUES),
    )
)
def test_event_from_payload_never_raises(payload: object) -> None:
    result = event_from_payload(payload)
    assert isinstance(result, Record | Malformed)
    if isinstance(result, Record):
        assert event_to_payload(result) == payload


# -- 9. collected tombstones resurrect nothing ------------------------------------------------------------

DAY_MS = 86_400_000
TTL_MS = 7 * DAY_MS
T0 = 1_700_000_000_000
GONE = "/admin/policies/t/gone"


def _tomb(wall_ms: int, region: str = "a") -> Record:
    return Record(GONE, None, Hlc(wall_ms, 0, region))


def test_a_tombstone_goes_once_old_and_every_peer_is_past_it() -> None:
    live = Record("/admin/policies/t", b"{}", Hlc(T0, 0, "a"))
    replica = {GONE: _tomb(T0), live.path: live}
    seen = {"b": Hlc(T0 + 1, 0, "b"), "c": Hlc(T0 + 5, 0, "c")}
    kept, gone = collect_tombstones(
        replica, seen=seen, peers=("b", "c"), now_ms=T0 + TTL_MS + 1, ttl_ms=TTL_MS
    )
    assert gone == [GONE]
    assert kept == {live.path: live}


@pytest.mark.parametrize(
    ("seen", "now_ms", "keep", "why"),
    [
        ({"b": Hlc(T0 + 1, 0, "b")}, T0 + TTL_MS + 1, (), "c never sent anything"),
        ({"b": Hlc(T0 + 1, 0, "b"), "c": Hlc(T0 - 1, 0, "c")}, T0 + TTL_MS + 1, (), "c is not past it"),
        ({"b": Hlc(T0 + 1, 0, "b"), "c": Hlc(T0, 0, "a")}, T0 + TTL_MS + 1, (), "c's newest equals it"),
        ({"b": Hlc(T0 + 1, 0, "b"), "c": Hlc(T0 + 1, 0, "c")}, T0 + TTL_MS, (), "not older than the ttl"),
        (
            {"b": Hlc(T0 + 1, 0, "b"), "c": Hlc(T0 + 1, 0, "c")},
            T0 + TTL_MS + 1,
            (GONE,),
            "an event is parked",
        ),
    ],
)
def test_a_tombstone_stays_while_some_region_may_still_send_an_older_record(
    seen: dict[str, Hlc], now_ms: int, keep: tuple[str, ...], why: str
) -> None:
    replica = {GONE: _tomb(T0)}
    kept, gone = collect_tombstones(
        replica, seen=seen, peers=("b", "c"), now_ms=now_ms, ttl_ms=TTL_MS, keep=keep
    )
    assert (kept, gone) == (replica, []), why


def test_a_tombstone_kept_while_a_peer_lags_makes_its_late_older_edit_lose() -> None:
    """Region b edited the path before a deleted it, but b's event is late: b is not past the tombstone,
    so collection keeps it, and the late edit loses instead of resurrecting the deleted policy."""
    late = Record(GONE, b'{"late":true}', Hlc(T0 - 10, 0, "b"))
    replica: Replica = {GONE: _tomb(T0)}
    seen = {"b": Hlc(T0 - 20, 0, "b")}  # b's newest event so far is older than the tombstone
    replica, gone = collect_tombstones(
        replica, seen=seen, peers=("b",), now_ms=T0 + 30 * DAY_MS, ttl_ms=TTL_MS
    )
    assert gone == []
    assert apply_remote(replica, late) == (replica, Decision.IGNORE_OLDER)


@st.composite
def region_streams(draw: st.DrawFn) -> tuple[dict[str, list[Record]], list[str]]:
    """Per region, events stamped from one clock (strictly increasing stamps), and a delivery order that
    interleaves the regions but keeps each region's order, as the event topic does."""
    paths = [f"/admin/policies/t/n{i}" for i in range(3)]
    streams: dict[str, list[Record]] = {}
    for region in REGIONS:
        walls = sorted(draw(st.sets(st.integers(0, 60), max_size=8)))
        streams[region] = [
            Record(
                draw(st.sampled_from(paths)),
                draw(st.sampled_from([None, b"1", b"2"])),
                Hlc(T0 + w, 0, region),
            )
            for w in walls
        ]
    order = draw(st.permutations([r for r, events in streams.items() for _ in events]))
    return streams, list(order)


@given(region_streams(), st.lists(st.booleans(), min_size=30, max_size=30))
@settings(deadline=None, max_examples=200)
def test_collecting_tombstones_at_any_point_changes_no_outcome(
    streamed: tuple[dict[str, list[Record]], list[str]], collect_after: list[bool]
) -> None:
    streams, order = streamed
    cursor = dict.fromkeys(streams, 0)
    full: Replica = {}
    collected: Replica = {}
    seen: dict[str, Hlc] = {}
    for i, region in enumerate(order):
        event = streams[region][cursor[region]]
        cursor[region] += 1
        full = apply_remote(full, event)[0]
        collected = apply_remote(collected, event)[0]
        seen[region] = event.stamp
        if collect_after[i % len(collect_after)]:
            collected, _ = collect_tombstones(
                collected, seen=seen, peers=REGIONS, now_ms=T0 + TTL_MS + 61, ttl_ms=TTL_MS
            )
    values = {p: r.value for p, r in full.items() if r.value is not None}
    assert {p: r.value for p, r in collected.items() if r.value is not None} == values
