"""The chaos run's checker: judges a history (JSON lines) by itself, without any of the agent's code.

A chaos run (``geosync_lab.chaos``) records every send, receive, acknowledgement, failover, fault and
policy read with its time. This module reads only that record, so it stays independent of what it
judges: it imports nothing of the agent, its translation of positions, or its control messages. Messages
are named by the ``uid`` their producer wrote into the payload; positions never enter the verdict.

Invariants (each a violation when broken):

- **No loss.** Every message whose send was confirmed is acknowledged, for every subscription, by some
  consumer of that subscription in some region. The run ends with a quiescent failover and a drain that
  acknowledges everything delivered, so a message no consumer acknowledged was never delivered after the
  final failover: acknowledged somewhere (by an agent) although no consumer acknowledged it.
- **Per-key order (Key_Shared).** For each producer and key, the first deliveries of its messages follow
  the order they were sent in. Redeliveries (holes, duplicates) are not first deliveries.
- **Duplicates only where the model allows them.** A delivery of a message some consumer of the same
  subscription had already acknowledged is a duplicate. Allowed, and counted by cause:
  ``failover-not-quiescent`` (a failover between the acknowledgement and the delivery moved consumers
  without waiting), ``key-order`` (Key_Shared: an earlier message of the same key was still
  unacknowledged when consumers moved, and such claims are never carried; see ``_KeyHoles``),
  ``failover-not-settled`` (it waited, but the move was never judged safe in time),
  ``broker-crash`` (a broker of either region was killed or frozen from shortly before the
  acknowledgement to ``CRASH_REACH_S`` after it: Pulsar persists cursors asynchronously, an
  acknowledgement in flight, or one sync applied just before, can be lost; counted before the per-key and
  settle rules) and
  ``written-twice`` (the producer's client resent a message the broker had already stored: two copies
  in one region). Any other is ``unexplained``: a violation.
- **Sync settles once the faults are healed.** Every subscription's final failover (after every fault
  was healed and the producers stopped) must be judged safe within its wait: one that never is means
  acknowledgements that are never carried over (its duplicates are then counted as
  ``failover-not-settled`` and the run fails on this rule instead). ``failover check`` judges a Key_Shared
  subscription safe once only the per-key minimum is left, and its ``key-order`` duplicates after the
  final move must be no more than that minimum (``key_order_duplicates`` in the move's check).
- **Policies identical everywhere at the end** of the run.
"""

from __future__ import annotations

import bisect
import json
import pathlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

Event = dict[str, Any]

CRASH_KINDS = frozenset({"broker-kill", "freeze"})
ALLOWED_CAUSES = (
    "failover-not-quiescent",
    "key-order",
    "failover-not-settled",
    "broker-crash",
    "written-twice",
)
UNEXPLAINED = "unexplained"
CRASH_MARGIN_S = 2.0
"""An acknowledgement this long before a crash may still have been in flight when it hit."""
CRASH_REACH_S = 30.0
"""A crash this long after an acknowledgement may still lose it: sync applies it in the other region
seconds later (more under faults), and a cursor persists what it is given asynchronously."""
EXAMPLES = 5


def read_history(path: pathlib.Path) -> list[Event]:
    """The events of a history file, in the order written (lines that are not JSON objects are refused)."""
    events = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}:{n}: not a JSON object")
        events.append(value)
    return events


@dataclass
class Summary:
    seed: int | None
    operations: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    failovers: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    undrained: dict[str, int] = field(default_factory=dict)
    """Per subscription whose planned final move never came: messages left unacknowledged, not judged."""
    duplicates: dict[str, int] = field(default_factory=dict)
    order_violations: int = 0
    final_moves: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "ok": self.ok,
            "operations": self.operations,
            "faults": self.faults,
            "unavailable": self.unavailable,
            "failovers": self.failovers,
            "lost": self.lost,
            "lost_total": sum(self.lost.values()),
            "undrained": self.undrained,
            "duplicates": self.duplicates,
            "order_violations": self.order_violations,
            "final_moves": self.final_moves,
            "policies": self.policies,
            "violations": self.violations,
        }


@dataclass(frozen=True)
class _Window:
    kind: str
    regions: frozenset[str]
    start: float
    end: float


def _faults(events: list[Event]) -> list[_Window]:
    """Each fault as the span of time it held, with the regions it hit (open ones last to the end)."""
    open_: dict[str, Event] = {}
    out = []
    last = max((float(e["t"]) for e in events), default=0.0)
    for e in events:
        if e.get("ev") != "fault":
            continue
        if e.get("phase") == "start":
            open_[str(e["id"])] = e
        elif e.get("phase") == "end" and str(e["id"]) in open_:
            s = open_.pop(str(e["id"]))
            out.append(_Window(str(s["kind"]), frozenset(s.get("regions") or ()), s["t"], e["t"]))
    for s in open_.values():
        out.append(_Window(str(s["kind"]), frozenset(s.get("regions") or ()), s["t"], last))
    return out


def _position(msg_id: object) -> tuple[int, ...] | None:
    """A delivered message's place in its region's log, from the client's ``(ledger,entry,partition,batch)``
    id."""
    try:
        ledger, entry, _partition, batch = (int(x) for x in str(msg_id).strip("()").split(","))
    except ValueError:
        return None
    return (ledger, entry, batch)


class _KeyHoles:
    """Key_Shared subscriptions claim only per-key prefixes of each origin (docs/agent.md, "The agent";
    decision 0016): an acknowledgement that follows an unacknowledged message of the same key and the same
    origin region is not carried to another region, so that the region taking over never delivers a key's
    earlier message after a later one. Its duplicate is allowed (``key-order``) when such an earlier message
    was still unacknowledged when consumers moved.

    "Earlier" is the order of the region consumers left: the positions its consumers were given both
    messages at. A message its consumers were never given is not earlier there (a Key_Shared consumer gets
    a key's messages in log order). Without the later message's position there (it was acknowledged
    elsewhere), the order of first deliveries on the subscription stands in.

    "Unacknowledged when consumers moved" is judged per entry of that region's log, at that time:

    - A message written twice there (a replicator resending after its broker's crash) is two entries, each
      acknowledged or not by itself: a copy left unacknowledged holds its key back although the other copy
      was acknowledged.
    - An entry is acknowledged there from the acknowledgement that followed a delivery of it until it is
      delivered there again; an acknowledgement it was delivered again after was lost, at the first crash
      (kill or freeze) of the region since just before it, if any (so an entry acknowledged, lost in a
      crash, and left a hole when delivered again is unacknowledged).
    - It also counts as acknowledged while the message is acknowledged in another region and that region
      would claim it (sync carries that): not while an earlier entry of the key there is a hole there (that
      region's agent holds its claim back too). Judged one level deep: that region's holes by its own
      consumers' acknowledgements."""

    def __init__(self, events: list[Event], subs: dict[str, str], windows: list[_Window]) -> None:
        # A key's messages are ordered within their origin only: two origins' copies interleave differently
        # in each region's log.
        self.key = {e["uid"]: (e.get("key"), e.get("region")) for e in events if e.get("ev") == "send"}
        self.first: dict[tuple[str, str], float] = {}
        self.pos: dict[tuple[str, str, str], tuple[int, ...]] = {}
        acked: dict[tuple[str, str], float] = {}
        # Each entry's deliveries in a region, in order: [delivered at, acknowledged at (None: a hole)].
        deliveries: dict[tuple[str, str, tuple[int, ...]], list[list[Any]]] = defaultdict(list)
        entries: dict[tuple[str, str, str], set[tuple[int, ...]]] = defaultdict(set)
        last: dict[tuple[str, str, str], tuple[int, ...] | None] = {}
        for e in events:
            if e.get("ev") not in {"recv", "ack"} or subs.get(e["sub"]) != "Key_Shared":
                continue
            at = (e["sub"], e["uid"])
            here = (e["sub"], e["region"], e["uid"])
            if e.get("ev") == "ack":
                acked.setdefault(at, float(e["t"]))
                where = last.get(here)
                if where is not None and deliveries[(e["sub"], e["region"], where)][-1][1] is None:
                    deliveries[(e["sub"], e["region"], where)][-1][1] = float(e["t"])
                continue
            where = _position(e.get("msg_id"))
            last[here] = where
            if where is not None:
                self.pos.setdefault(here, where)
                entries[here].add(where)
                deliveries[(e["sub"], e["region"], where)].append([float(e["t"]), None])
            self.first.setdefault(at, float(e["t"]))
        never = float("inf")
        crashes: dict[str, list[float]] = defaultdict(list)
        for w in windows:
            if w.kind in CRASH_KINDS:
                for region in w.regions:
                    crashes[region].append(w.start)
        # Per (sub, region, entry): the spans of time it was acknowledged there.
        self.spans: dict[tuple[str, str, tuple[int, ...]], list[tuple[float, float]]] = {}
        for (sub, region, where), seen in deliveries.items():
            spans = []
            for i, (_, ack_t) in enumerate(seen):
                if ack_t is None:
                    continue
                until = seen[i + 1][0] if i + 1 < len(seen) else never
                lost = [c for c in crashes[region] if ack_t - CRASH_MARGIN_S <= c <= until]
                spans.append((ack_t, min([until, *lost])))
            self.spans[(sub, region, where)] = spans
        self.entries = entries
        self.regions_of: dict[tuple[str, str], set[str]] = defaultdict(set)
        for sub, region, uid in entries:
            self.regions_of[(sub, uid)].add(region)
        # Per (sub, region, key): the entries in log order, each with its message.
        by_pos: dict[tuple[str, str, Any], list[tuple[tuple[int, ...], str]]] = defaultdict(list)
        for (sub, region, uid), found in entries.items():
            for where in found:
                by_pos[(sub, region, self.key.get(uid))].append((where, uid))
        self.by_pos = {k: sorted(v) for k, v in by_pos.items()}
        self._earliest_hole: dict[tuple[str, str, Any, float, bool], tuple[int, ...] | None] = {}
        # Per key, messages in order of first delivery, each with the latest first-acknowledgement time among
        # those before it: a key is blocked at time T before message m when that maximum exceeds T.
        by_first: dict[tuple[str, Any], list[tuple[Any, str]]] = defaultdict(list)
        for (sub, uid), t in self.first.items():
            by_first[(sub, self.key.get(uid))].append(((t, uid), uid))
        self.first_order = {k: _running(sorted(v), k[0], acked, never) for k, v in by_first.items()}

    def _acked_here(self, sub: str, region: str, where: tuple[int, ...], at: float) -> bool:
        """Whether ``region``'s consumers had the entry ``where`` acknowledged there at ``at``."""
        return any(s <= at < e for s, e in self.spans.get((sub, region, where), ()))

    def _acked(self, sub: str, region: str, where: tuple[int, ...], uid: str, at: float) -> bool:
        """Whether the entry ``where`` of ``uid`` in ``region`` counted as acknowledged there at ``at``."""
        if self._acked_here(sub, region, where, at):
            return True
        key = self.key.get(uid)
        for other in self.regions_of[(sub, uid)] - {region}:
            for copy in self.entries[(sub, other, uid)]:
                if self._acked_here(sub, other, copy, at):
                    hole = self._hole(sub, other, key, at, here_only=True)
                    if hole is None or hole > copy:  # that region claims it
                        return True
        return False

    def _hole(
        self, sub: str, region: str, key: Any, at: float, *, here_only: bool = False
    ) -> tuple[int, ...] | None:
        """The first entry of ``key`` in ``region``'s log that was unacknowledged there at ``at``
        (``here_only``: by ``region``'s own consumers' acknowledgements alone)."""
        found = self._earliest_hole.get((sub, region, key, at, here_only), ())
        if found == ():
            found = next(
                (
                    w
                    for w, uid in self.by_pos.get((sub, region, key), ())
                    if not (
                        self._acked_here(sub, region, w, at)
                        if here_only
                        else self._acked(sub, region, w, uid, at)
                    )
                ),
                None,
            )
            self._earliest_hole[(sub, region, key, at, here_only)] = found
        return found

    def blocked(self, sub: str, uid: str, source: str, moved_at: float) -> bool:
        """Whether an earlier message of ``uid``'s key was unacknowledged when consumers left ``source``
        at ``moved_at``."""
        key = self.key.get(uid)
        here = self.pos.get((sub, source, uid))
        if here is not None:
            hole = self._hole(sub, source, key, moved_at)
            return hole is not None and hole < here
        mine = self.first.get((sub, uid))
        if mine is None:
            return False
        order, peaks = self.first_order[(sub, key)]
        return peaks[bisect.bisect_left(order, (mine, uid))] > moved_at


def _running(
    ordered: list[tuple[Any, str]], sub: str, acked: dict[tuple[str, str], float], never: float
) -> tuple[list[Any], list[float]]:
    """The order keys, and for each message the latest acknowledgement time of those strictly before it
    (``never`` for one never acknowledged)."""
    keys, peaks, peak = [], [], float("-inf")
    for order, uid in ordered:
        keys.append(order)
        peaks.append(peak)
        peak = max(peak, acked.get((sub, uid), never))
    return keys, peaks


def _failover_cause(failovers: list[Event], holes: _KeyHoles, acked: Event, seen: Event) -> str | None:
    """The cause a failover between a message's acknowledgement and its delivery again gives, if any."""
    sub, uid, acked_at, seen_at = seen["sub"], seen["uid"], float(acked["t"]), float(seen["t"])
    # The old consumer acknowledged, then closed (``closed_at``), then the new one opened (``t``).
    moved = [
        f
        for f in failovers
        if f["sub"] == sub and acked_at <= float(f.get("closed_at") or f["t"]) and f["t"] <= seen_at
    ]
    if any(not f["quiescent"] for f in moved):
        return "failover-not-quiescent"
    if any(holes.blocked(sub, uid, f["from"], float(f.get("closed_at") or f["t"])) for f in moved):
        return "key-order"
    if any(not f["settled"] for f in moved):
        return "failover-not-settled"
    return None


def _crashed(windows: list[_Window], regions: set[str], acked_at: float, seen_at: float) -> bool:
    """A kill or freeze of either region that held between shortly before the acknowledgement and
    ``CRASH_REACH_S`` after it (and before the delivery again): the acknowledgement may not have been
    persisted, where it was made or where sync applied it."""
    until = min(acked_at + CRASH_REACH_S, seen_at)
    return any(
        w.kind in CRASH_KINDS
        and w.regions & regions
        and w.start <= until
        and w.end >= acked_at - CRASH_MARGIN_S
        for w in windows
    )


def _written_twice(events: list[Event]) -> set[str]:
    """Messages stored twice in a region's topic: seen there under two message ids, or seen at a position
    after a later message of the same producer. Geo-replication and the producer keep a producer's order in
    every region's log, so only a second copy (a replicator's or the producer's resend after a crash) comes
    after a later message; its first copy may never have been delivered there, being acknowledged already."""
    sent = {e["uid"]: (e.get("producer"), e.get("seq")) for e in events if e.get("ev") == "send"}
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    seen_at: dict[tuple[str, Any], set[tuple[tuple[int, ...], int, str]]] = defaultdict(set)
    for e in events:
        if e.get("ev") == "recv" and e.get("msg_id"):
            ids[(str(e["uid"]), str(e["region"]))].add(str(e["msg_id"]))
            producer, seq = sent.get(e["uid"], (None, None))
            where = _position(e["msg_id"])
            if where is not None and producer is not None and seq is not None:
                seen_at[(str(e["region"]), producer)].add((where, int(seq), str(e["uid"])))
    twice = {uid for (uid, _), found in ids.items() if len(found) > 1}
    for found in seen_at.values():
        highest = -1
        for _, seq, uid in sorted(found):
            if seq < highest:
                twice.add(uid)
            highest = max(highest, seq)
    return twice


def _duplicates(
    events: list[Event], subs: dict[str, str], summary: Summary
) -> list[tuple[str, float, str, str]]:
    """Classify every duplicate; each one's (subscription, time, cause, message)."""
    failovers = [e for e in events if e.get("ev") == "failover"]
    windows = _faults(events)
    holes = _KeyHoles(events, subs, windows)
    found: list[tuple[str, float, str, str]] = []
    twice = _written_twice(events)
    first_ack: dict[tuple[str, str], Event] = {}
    causes: Counter[str] = Counter()
    examples: list[str] = []
    for e in events:
        ev = e.get("ev")
        if ev == "ack":
            first_ack.setdefault((e["sub"], e["uid"]), e)
        elif ev == "recv" and (e["sub"], e["uid"]) in first_ack:
            acked = first_ack[(e["sub"], e["uid"])]
            cause = _failover_cause(failovers, holes, acked, e)
            crashed = _crashed(windows, {acked["region"], e["region"]}, float(acked["t"]), float(e["t"]))
            if crashed and cause != "failover-not-quiescent":
                # Before the per-key and settle rules: an acknowledgement a crash lost is no claim that
                # sync could carry (or failover check predict).
                cause = "broker-crash"
            if cause is None and e["uid"] in twice:
                cause = "written-twice"
            cause = cause or UNEXPLAINED
            causes[cause] += 1
            found.append((e["sub"], float(e["t"]), cause, e["uid"]))
            if cause == UNEXPLAINED and len(examples) < EXAMPLES:
                examples.append(
                    f"{e['uid']} on {e['sub']}: acknowledged in {acked['region']} at {acked['t']:.1f} s, "
                    f"delivered again in {e['region']} at {e['t']:.1f} s"
                )
    summary.duplicates = dict(sorted(causes.items()))
    if causes[UNEXPLAINED]:
        summary.violations.append(
            f"{causes[UNEXPLAINED]} duplicate(s) no failover or crash explains, e.g. " + "; ".join(examples)
        )
    return found


def _final_moves(
    failovers: list[Event],
    subs: dict[str, str],
    found: list[tuple[str, float, str, str]],
    summary: Summary,
    acked_in: dict[tuple[str, str, str], float],
) -> None:
    """Once every fault is healed and producers stopped, each final move must be judged safe. A Key_Shared
    move is judged safe once only the per-key minimum is left (``failover check``'s
    ``key_order_duplicates``: what invariant 6 forbids carrying of what the region left acknowledged); its
    ``key-order`` duplicates after it of messages acknowledged in that region must then be no more than that
    minimum. Others may follow, of messages acknowledged only in a region left before and held back there
    (an earlier move's minimum, when the region in between delivered nothing before the final move). A
    check that gave no such figure (before it judged Key_Shared by it) may have left a Key_Shared move not
    safe by the per-key rule alone: that move passes when the duplicates it caused (``key-order`` or
    ``failover-not-settled`` after it) are no more than the check predicted, or all ``key-order``."""
    for f in failovers:
        if f.get("phase") != "final":
            continue
        after = [cause for sub, t, cause, _ in found if sub == f["sub"] and t >= f["t"]]
        from_source = sum(
            1
            for sub, t, cause, uid in found
            if sub == f["sub"]
            and t >= f["t"]
            and cause == "key-order"
            and acked_in.get((sub, f["from"], uid), float("inf")) <= float(f.get("closed_at") or f["t"])
        )
        caused = sum(1 for c in after if c in {"key-order", "failover-not-settled"})
        check = f.get("check") or {}
        predicted = check.get("duplicates")
        minimum = check.get("key_order_duplicates")
        key_order = sum(1 for c in after if c == "key-order")
        summary.final_moves[f["sub"]] = {
            "verdict": f.get("verdict"),
            "predicted": predicted,
            "seen": len(after),
            "caused": caused,
            "key_order": key_order,
            "key_order_from_source": from_source,
            "key_order_minimum": minimum,
        }
        if isinstance(minimum, int) and from_source > minimum:
            summary.violations.append(
                f"{f['sub']}: {from_source} key-order duplicate(s) after the final failover from {f['from']} "
                f"to {f['to']} of messages acknowledged in {f['from']}, more than the per-key minimum "
                f"failover check computed ({minimum})"
            )
        if f["settled"] or (
            subs.get(f["sub"]) == "Key_Shared"
            and not isinstance(minimum, int)
            and (all(c == "key-order" for c in after) or (isinstance(predicted, int) and caused <= predicted))
        ):
            continue
        summary.violations.append(
            f"{f['sub']}: the final failover from {f['from']} to {f['to']} was never judged safe "
            f"({f.get('verdict')}, {f.get('check') or {}}) although every fault was healed and the "
            f"producers had stopped: sync did not settle; it caused {caused} duplicate(s) "
            f"(predicted {predicted})"
        )


def _losses(events: list[Event], subs: dict[str, str], summary: Summary) -> None:
    """Messages sent but never acknowledged on a subscription are lost, unless the run planned a final move
    for it that never came (its drain did not run): then they are ``undrained``, still a violation (the run
    proved nothing about them) but not a loss."""
    confirmed = {e["uid"] for e in events if e.get("ev") == "send" and e.get("ok")}
    acked: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.get("ev") == "ack":
            acked[e["sub"]].add(e["uid"])
    run = next((e for e in events if e.get("ev") == "run"), {})
    planned = set((run.get("plan") or {}).get("final") or {})
    moved = {e["sub"] for e in events if e.get("ev") == "failover" and e.get("phase") == "final"}
    for sub in subs:
        missing = sorted(confirmed - acked[sub])
        if sub in planned and sub not in moved:
            summary.undrained[sub] = len(missing)
            summary.violations.append(
                f"{sub} never reached its final move (its drain did not run): {len(missing)} message(s) "
                "not acknowledged there are undrained, not judged; the run proves nothing about them"
            )
            continue
        summary.lost[sub] = len(missing)
        if missing:
            summary.violations.append(
                f"{len(missing)} message(s) sent but never acknowledged on {sub} (lost), e.g. "
                + ", ".join(missing[:EXAMPLES])
            )


def _order(events: list[Event], subs: dict[str, str], summary: Summary) -> None:
    seq = {e["uid"]: (e["producer"], e["key"], int(e["seq"])) for e in events if e.get("ev") == "send"}
    for sub, kind in subs.items():
        if kind != "Key_Shared":
            continue
        seen: set[str] = set()
        last: dict[tuple[str, str], int] = {}
        for e in events:
            if e.get("ev") != "recv" or e["sub"] != sub or e["uid"] in seen or e["uid"] not in seq:
                continue
            seen.add(e["uid"])
            producer, key, n = seq[e["uid"]]
            if n < last.get((producer, key), -1):
                summary.order_violations += 1
                if summary.order_violations <= EXAMPLES:
                    summary.violations.append(
                        f"{sub}: key {key} of {producer} delivered #{n} after #{last[(producer, key)]} "
                        f"(in {e['region']} at {e['t']:.1f} s)"
                    )
            last[(producer, key)] = max(n, last.get((producer, key), -1))


def _policies(events: list[Event], summary: Summary) -> None:
    edits = [e for e in events if e.get("ev") == "policy-edit"]
    rounds: dict[Any, set[str]] = defaultdict(set)
    for e in edits:
        if e.get("ok"):
            rounds[e["round"]].add(json.dumps(e["value"], sort_keys=True))
    finals = [e for e in events if e.get("ev") == "policies"]
    final = finals[-1] if finals else None
    equal = bool(final and final.get("equal"))
    summary.policies = {
        "edits": len(edits),
        "conflicting_rounds": sum(1 for values in rounds.values() if len(values) > 1),
        "converged": equal,
        "differing": final.get("differing", []) if final else [],
    }
    if edits and not equal:
        summary.violations.append(
            "policies differ between regions at the end: "
            + (", ".join(final.get("differing", [])) if final else "never read")
        )


def _count(events: Iterable[Event]) -> Iterator[tuple[str, int]]:
    kinds: Counter[str] = Counter(str(e.get("ev")) for e in events)
    yield from sorted(kinds.items())


def check(events: list[Event]) -> Summary:
    """Judge a whole history; ``Summary.violations`` is empty when every invariant held."""
    run = next((e for e in events if e.get("ev") == "run"), {})
    subs: dict[str, str] = dict(run.get("subscriptions") or {})
    summary = Summary(seed=run.get("seed"))
    sends = [e for e in events if e.get("ev") == "send"]
    summary.operations = {
        **dict(_count(e for e in events if e.get("ev") in {"recv", "ack", "hole"})),
        "send_ok": sum(1 for e in sends if e.get("ok")),
        "send_failed": sum(1 for e in sends if not e.get("ok")),
    }
    starts = [e for e in events if e.get("ev") == "fault" and e.get("phase") == "start"]
    summary.faults = dict(sorted(Counter(str(e["kind"]) for e in starts).items()))
    summary.unavailable = dict(run.get("unavailable") or {})
    failovers = [e for e in events if e.get("ev") == "failover"]
    summary.failovers = {
        "total": len(failovers),
        "quiescent": sum(1 for f in failovers if f["quiescent"]),
        "settled": sum(1 for f in failovers if f["settled"]),
        "final": sum(1 for f in failovers if f.get("phase") == "final"),
    }
    if not any(e.get("ev") == "end" for e in events):
        summary.violations.append("the history has no end: the run did not finish its final drain")
    _losses(events, subs, summary)
    _order(events, subs, summary)
    acked_in: dict[tuple[str, str, str], float] = {}
    for e in events:
        if e.get("ev") == "ack":
            acked_in.setdefault((e["sub"], e["region"], e["uid"]), float(e["t"]))
    _final_moves(failovers, subs, _duplicates(events, subs, summary), summary, acked_in)
    _policies(events, summary)
    return summary
