"""The chaos run's checker: judges a history (JSON lines) by itself, without any of the agent's code.

A chaos run (``geosync_lab.chaos``) records every send, receive, acknowledgement, failover, fault and
policy read with its time. This module reads only that record, so it stays independent of what it
judges: it imports nothing of the agent, its translation of positions, or its control messages. Messages
are named by the ``uid`` their producer wrote into the payload; positions never enter the verdict. What
explains a duplicate (failovers, Key_Shared holes, crashes, resends) is ``chaos_causes``, which reads the
same record.

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
  unacknowledged when consumers moved, and such claims are never carried; see ``chaos_causes.KeyHoles``),
  ``failover-not-settled`` (it waited, but the move was never judged safe in time),
  ``broker-crash`` (a broker of either region was killed or frozen from shortly before the
  acknowledgement to ``chaos_causes.CRASH_REACH_S`` after it: Pulsar persists cursors asynchronously, an
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

import json
import pathlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from geosync_lab import chaos_causes

Event = dict[str, Any]

ALLOWED_CAUSES = (
    "failover-not-quiescent",
    "key-order",
    "failover-not-settled",
    "broker-crash",
    "written-twice",
)
UNEXPLAINED = "unexplained"
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


def _duplicates(
    events: list[Event], subs: dict[str, str], summary: Summary
) -> list[tuple[str, float, str, str]]:
    """Classify every duplicate; each one's (subscription, time, cause, message)."""
    failovers = [e for e in events if e.get("ev") == "failover"]
    windows = chaos_causes.faults(events)
    holes = chaos_causes.KeyHoles(events, subs, windows)
    found: list[tuple[str, float, str, str]] = []
    twice = chaos_causes.written_twice(events)
    first_ack: dict[tuple[str, str], Event] = {}
    causes: Counter[str] = Counter()
    examples: list[str] = []
    for e in events:
        ev = e.get("ev")
        if ev == "ack":
            first_ack.setdefault((e["sub"], e["uid"]), e)
        elif ev == "recv" and (e["sub"], e["uid"]) in first_ack:
            acked = first_ack[(e["sub"], e["uid"])]
            cause = chaos_causes.failover_cause(failovers, holes, acked, e)
            crashed = chaos_causes.crashed(
                windows, {acked["region"], e["region"]}, float(acked["t"]), float(e["t"])
            )
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
