"""What explains a duplicate in a chaos history: the faults' windows, failovers, Key_Shared holes, resends.

The checker (``chaos_checker``) calls a delivery of a message some consumer of the same subscription had
already acknowledged a duplicate, and asks this module for its cause. Like the checker, it reads only the
history (JSON events with their times), nothing of the agent's code:

* ``failover_cause``: a failover between the acknowledgement and the delivery again, not quiescent
  (``failover-not-quiescent``), leaving an earlier message of the same key unacknowledged (``key-order``,
  judged by ``KeyHoles``), or never judged safe (``failover-not-settled``);
* ``crashed``: a broker kill or freeze of either region from shortly before the acknowledgement to
  ``CRASH_REACH_S`` after it (``broker-crash``);
* ``written_twice``: a message stored twice in a region's topic (``written-twice``).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]

CRASH_KINDS = frozenset({"broker-kill", "freeze"})
CRASH_MARGIN_S = 2.0
"""An acknowledgement this long before a crash may still have been in flight when it hit."""
CRASH_REACH_S = 30.0
"""A crash this long after an acknowledgement may still lose it: sync applies it in the other region
seconds later (more under faults), and a cursor persists what it is given asynchronously."""


@dataclass(frozen=True)
class Window:
    kind: str
    regions: frozenset[str]
    start: float
    end: float


def faults(events: list[Event]) -> list[Window]:
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
            out.append(Window(str(s["kind"]), frozenset(s.get("regions") or ()), s["t"], e["t"]))
    for s in open_.values():
        out.append(Window(str(s["kind"]), frozenset(s.get("regions") or ()), s["t"], last))
    return out


def _position(msg_id: object) -> tuple[int, ...] | None:
    """A delivered message's place in its region's log, from the client's ``(ledger,entry,partition,batch)``
    id."""
    try:
        ledger, entry, _partition, batch = (int(x) for x in str(msg_id).strip("()").split(","))
    except ValueError:
        return None
    return (ledger, entry, batch)


class KeyHoles:
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

    def __init__(self, events: list[Event], subs: dict[str, str], windows: list[Window]) -> None:
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


def failover_cause(failovers: list[Event], holes: KeyHoles, acked: Event, seen: Event) -> str | None:
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


def crashed(windows: list[Window], regions: set[str], acked_at: float, seen_at: float) -> bool:
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


def written_twice(events: list[Event]) -> set[str]:
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
