"""The policy mirror of one region as a state machine: ``step(term, event, now_ms) -> (term, effects)``.

A leadership term of the mirror (``geosync_agent.mirroring`` holds the leadership and runs the terms) is a
``Term``, made by ``begin`` from the checkpoint the last term saved. Everything the term learns comes in as an
event: an envelope read from the event topic (``Received``), a ZooKeeper watch fired (``Fired``), the session
back (``Reconnected``), the shell's timer (``Tick``), and the answer to each read or write it asked for
(``NodeRead``, ``Wrote``, ``WriteFailed``, ``ContentsListed``...). Everything it does goes out as an effect:
store reads and compare-and-set writes, what the region holds under a path, the store walk, events published,
the checkpoint saved, leadership given up. The shell (``geosync_agent.mirroring`` over ZooKeeper, the
admin API and Pulsar; ``geosync_sim.policies`` over a simulated region) performs them in order and feeds each
answer back. No thread, clock, randomness or I/O here: ``now_ms`` is the wall clock the shell read (the
hybrid logical clock's physical input, sequence numbers, send times, tombstones' ages, the recheck timer).

A term does one thing at a time. An effect that needs an answer (``ReadNode``, ``ListChildren``,
``WriteNode``, ``ListContents``, ``Walk``, ``ReadClusters``) leaves the term waiting for it; other
events meanwhile wait in ``inbox``, in order, and are taken once the answer came. Effects that need none
(``Publish``, ``SaveCheckpoint``, ``Lead``, ``StepDown``, ``Note``, ``OpenReader``, ``Drain``) succeed or end
the term: a publish or checkpoint the shell cannot make ends it, and the next term starts again from the last
checkpoint and the store (``mirroring``'s docstring: nothing lost). The term counts an effect as made when it
asks for it, so a shell saves the state of a term none of whose effects failed, never of one that did.

The term's state is ``core.mirrorterm``'s values; its held deletions are released by
``core.mirrorreleasing`` (invariant 3). The decisions themselves are ``geosync_agent.core.mirror`` (events
taken, remote records judged, local changes found) and ``geosync_core.deletions`` (held deletions: mark,
check, then delete).

Invariants (tests in ``tests/agent/test_mirror_term.py``, driving ``step`` with events):

1. A term waits for at most one answer; every other event is handled in the order it came, after it.
2. A remote record is written only with compare-and-set against the node last read, and kept in the
   replica only once written (or held, for a deletion that would destroy this region's data).
3. A destroying record is written only after ``ListContents`` answered that the region holds nothing it
   would destroy, after the namespace was marked ``deleted``; a topic found after the mark unmarks it.
4. A change found in the store is published before the replica holds it, stamped above the replica's.
5. A ``WriteFailed`` of kind ``fenced`` ends the term (``StepDown``), whatever asked for the write.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from geosync_agent.core import mirror as core
from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirror import Checkpoint
from geosync_agent.core.mirrorreleasing import Releasing
from geosync_agent.core.mirrorterm import Internal, Job, Term, clock_of
from geosync_core import clocks, policies
from geosync_core.policies import Record

__all__ = ["MAX_ATTEMPTS", "Internal", "Job", "Term", "begin", "step"]

MAX_ATTEMPTS = 5  # compare-and-set rounds for one remote record before it is parked


def begin(
    settings: ev.Settings, data: bytes | None, now_ms: int, *, counters: Counter[str] | None = None
) -> tuple[Term, list[ev.Effect]]:
    """A new term from the checkpoint's bytes (``None``: none saved). It opens the reader, reads the clusters,
    drains the topic (no checkpoint) and walks the store before it leads (``Lead``)."""
    cp = core.decode_checkpoint(data) if data is not None else None
    term = Term(settings, cp or Checkpoint(), have_checkpoint=cp is not None)
    if counters is not None:
        term.counters = counters
    effects: list[ev.Effect] = []
    if data is not None and cp is None:
        effects.append(ev.Note("warning", "checkpoint unreadable, starting afresh"))
    term.holds = dict.fromkeys(term.cp.held(), "not yet checked")
    if term.cp.clock is not None and term.cp.clock.region != settings.region:
        term.cp.clock = None
    clock_of(term)
    term.next_recheck_ms = now_ms + settings.recheck_ms
    term.job = Job("clusters", (ev.ClustersRead,))
    return term, [*effects, ev.OpenReader(term.cp.reader), ev.ReadClusters()]


def step(term: Term, event: ev.Event, now_ms: int) -> tuple[Term, list[ev.Effect]]:
    """Feed ``event`` to the term; the effects to carry out, in order (invariant 1)."""
    if term.phase == "ended":
        return term, []
    run = _Run(term, now_ms)
    job = term.job
    if job is not None and isinstance(event, job.waiting) and getattr(event, "path", job.path) == job.path:
        term.job = None
        run.resume(job, event)
    elif isinstance(event, ev.Answer):
        term.counters["stray_answers"] += 1
    else:
        term.inbox.append(event)
    while term.job is None and term.inbox and term.phase != "ended":
        run.take(term.inbox.pop(0))
    return term, run.effects


class _Run(Releasing):
    """One ``step`` of the term: what it takes from the inbox, local changes, remote records, the recheck."""

    # -- what comes out of the inbox ----------------------------------------------------------------

    def take(self, event: ev.Event | Internal) -> None:
        term = self.term
        if isinstance(event, tuple):
            kind, path = event
            if kind == "observe":
                self.ask(Job("observe", (ev.NodeRead,), path), ev.ReadNode(path))
            elif kind == "children":
                self.ask(Job("children", (ev.ChildrenListed,), path), ev.ListChildren(path))
            elif kind == "recheck":
                self.recheck(path)
            else:
                self.finish_recheck()
        elif isinstance(event, ev.Received):
            self.received(event)
        elif isinstance(event, ev.CaughtUp) and term.phase == "draining":
            term.counters["drained"] += term.drained
            term.dirty = True
            term.phase = "walking"
            self.ask(Job("walk", (ev.Walked,)), ev.Walk(term.settings.scope))
        elif isinstance(event, ev.Fired):
            if event.children:
                self.ask(Job("children", (ev.ChildrenListed,), event.path), ev.ListChildren(event.path))
            elif term.settings.scope(event.path):
                self.ask(Job("observe", (ev.NodeRead,), event.path), ev.ReadNode(event.path))
        elif isinstance(event, ev.Reconnected):
            if term.phase == "leading":
                self.ask(Job("walk", (ev.Walked,)), ev.Walk(term.settings.scope))
        elif isinstance(event, ev.Tick) and self.recheck_due():
            term.rechecking = True
            self.ask(Job("recheck", (ev.ClustersRead,)), ev.ReadClusters())

    def recheck_due(self) -> bool:
        term = self.term
        if term.phase != "leading" or term.rechecking:
            return False
        # A wall clock set back more than an interval would delay the recheck as long: recheck then too.
        return not term.next_recheck_ms - term.settings.recheck_ms <= self.now_ms < term.next_recheck_ms

    def resume(self, job: Job, answer: ev.Event) -> None:
        term = self.term
        if isinstance(answer, ev.ClustersRead):
            term.registered = dict(answer.registered)
            if job.kind == "recheck":
                parked: list[ev.Event | Internal] = [("recheck", p) for p in sorted(self.cp.parked)]
                term.inbox[:0] = [*parked, ("finish", "")]
            elif term.have_checkpoint:
                term.phase = "walking"
                self.ask(Job("walk", (ev.Walked,)), ev.Walk(term.settings.scope))
            else:
                term.phase = "draining"
                self.effects.append(ev.Drain())
        elif isinstance(answer, ev.Walked):
            self.rescan(answer.found)
            if term.phase == "walking":
                term.phase = "leading"
                self.effects.append(ev.Lead())
        elif isinstance(answer, ev.ChildrenListed):
            self.children(job.path, answer.names)
        elif job.kind == "observe":
            assert isinstance(answer, ev.NodeRead)
            self.observe(job.path, answer.node)
        elif job.kind == "apply":
            self.apply_answered(job, answer)
        else:
            self.release_answered(job, answer)

    # -- local changes ------------------------------------------------------------------------------

    def children(self, path: str, names: tuple[str, ...]) -> None:
        scope = self.term.settings.scope
        if path == ev.POLICIES_ROOT:
            paths = [f"{path}/{n}" for n in names if scope.tenant(n)]
        else:
            paths = [f"{path}/{n}" for n in names]
        gone = [p for p, r in self.cp.replica.items() if p.startswith(path + "/") and r.value is not None]
        work: list[ev.Event | Internal] = []
        for p in sorted(set(paths) | set(gone)):
            if scope(p) and p.count("/") <= path.count("/") + 1:
                work.append(("observe", p))
                if path == ev.POLICIES_ROOT:
                    work.append(("children", p))
        self.term.inbox[:0] = work

    def observe(self, path: str, node: ev.Node | None) -> None:
        """Publish the store's bytes at ``path`` if they changed (``core.found_locally``; invariant 4)."""
        value = None if node is None else node.value
        replica, event, counter = core.found_locally(
            self.cp, path, value, held=path in self.term.holds, tick=self.tick
        )
        self.term.counters[counter] += 1
        if replica is None or event is None:
            return
        self.publish(event)
        self.cp.replica = dict(replica)
        self.term.dirty = True

    def tick(self) -> clocks.Hlc:
        self.cp.clock, stamp = clocks.tick(clock_of(self.term), now_ms=self.now_ms)
        return stamp

    def publish(self, record: Record) -> None:
        seq = max(self.cp.seq + 1, self.now_ms * 1000)
        self.effects.append(ev.Publish(record, seq, self.now_ms))
        self.cp.seq = seq
        self.term.counters["published"] += 1

    def rescan(self, found: Mapping[str, ev.Node]) -> None:
        """Publish what changed in the store while no watch covered it (``scan_store``, mtime-dated)."""
        term = self.term
        nodes = {p: n for p, n in found.items() if term.settings.scope(p) and p not in term.holds}
        held = {p: r for p, r in self.cp.replica.items() if term.settings.scope(p) and p not in term.holds}
        if changes := self.scan(held, nodes):
            term.counters["scan_changes"] += changes

    def scan(self, held: policies.Replica, found: Mapping[str, ev.Node]) -> int:
        replica, clock, events = policies.scan_store(
            held,
            clock_of(self.term),
            found={p: (n.value, n.mtime_ms) for p, n in found.items()},
            now_ms=self.now_ms,
        )
        for event in events:
            self.publish(event)
        self.cp.replica = {**self.cp.replica, **replica}
        self.cp.clock = clock
        if events:
            self.term.dirty = True
        return len(events)

    # -- remote records (invariant 2) ---------------------------------------------------------------

    def received(self, event: ev.Received) -> None:
        term = self.term
        self.cp.reader = event.position
        term.dirty = True
        if term.phase == "draining":
            term.drained += 1
        taken = core.receive(self.cp, event.opened, in_scope=term.settings.scope)
        if isinstance(taken, core.Dropped):
            term.counters[taken.counter] += 1
            return
        self.apply(taken.record, bootstrap=term.phase == "draining")

    def apply(self, record: Record, *, bootstrap: bool = False, attempt: int = 0) -> None:
        if attempt >= MAX_ATTEMPTS:
            self.park(record, f"store kept changing ({MAX_ATTEMPTS} attempts)")
            return
        job = Job("apply", (ev.NodeRead,), record.path, record, attempt=attempt, bootstrap=bootstrap)
        self.ask(job, ev.ReadNode(record.path))

    def apply_answered(self, job: Job, answer: ev.Event) -> None:
        record = job.record
        assert record is not None
        if isinstance(answer, ev.NodeRead):
            self.judge(job, answer.node)
        elif isinstance(answer, ev.Wrote):
            assert job.replica is not None
            self.applied(record, job.replica)
        elif isinstance(answer, ev.WriteFailed):
            if answer.failure is ev.Failure.STALE:
                self.term.counters["cas_conflicts"] += 1
                self.apply(record, bootstrap=job.bootstrap, attempt=job.attempt + 1)
            elif answer.failure in (ev.Failure.NO_PARENT, ev.Failure.NOT_EMPTY):
                self.park(record, answer.detail or answer.failure.value)
            else:
                self.end(f"writing {record.path}: {answer.failure.value}: {answer.detail}")

    def judge(self, job: Job, node: ev.Node | None) -> None:
        record = job.record
        assert record is not None
        term = self.term
        current = None if node is None else node.value
        for _ in range(2):  # a change reported first is judged again, against the same bytes
            verdict = core.judge(
                self.cp,
                record,
                current=current,
                held=record.path in term.holds,
                local_region=term.settings.region,
                registered=term.registered,
            )
            if not isinstance(verdict, core.ReportFirst):
                break
            if job.bootstrap and node is not None:  # a change found while bootstrapping is dated by mtime
                held = self.cp.replica.get(record.path)
                self.scan({record.path: held} if held else {}, {record.path: node})
                term.dirty = True
            else:
                self.observe(record.path, node)
        if isinstance(verdict, core.Ignore):
            self.unpark_if_beaten(record)
            term.counters[verdict.decision.value] += 1
        elif isinstance(verdict, core.Refuse):
            self.park(record, verdict.reason)
        elif isinstance(verdict, core.ReportFirst):
            self.apply(record, bootstrap=job.bootstrap, attempt=job.attempt + 1)
        elif isinstance(verdict, core.Hold):
            self.hold(record, verdict.replica)
            self.release(record.path)
        elif current == record.value:
            self.applied(record, verdict.replica)
        else:
            job.node, job.replica = node, verdict.replica
            self.ask(job, ev.WriteNode(record.path, record.value, node), ev.Wrote, ev.WriteFailed)

    def applied(self, record: Record, replica: policies.Replica) -> None:
        self.cp.replica = dict(replica)
        self.cp.parked.pop(record.path, None)
        self.term.holds.pop(record.path, None)
        self.cp.clock = clocks.receive(clock_of(self.term), record.stamp, now_ms=self.now_ms)
        self.term.dirty = True
        self.term.counters["applied"] += 1

    def park(self, record: Record, reason: str) -> None:
        term = self.term
        if record.path in term.holds:  # the held deletion stays the one to apply
            self.effects.append(
                ev.Note("warning", f"{record.path} refused while its deletion is held: {reason}")
            )
            term.counters["refused_while_held"] += 1
            return
        parked = self.cp.parked.get(record.path)
        if (
            parked is None
            or policies.merge({record.path: parked}, {record.path: record})[record.path] == record
        ):
            self.cp.parked[record.path] = record
            term.dirty = True
        self.effects.append(ev.Note("info", f"parked {record.path}: {reason}"))
        term.counters["parked"] += 1

    def unpark_if_beaten(self, record: Record) -> None:
        if self.cp.parked.get(record.path) == record and record.path not in self.term.holds:
            self.cp.parked.pop(record.path, None)
            self.term.dirty = True

    # -- the recheck --------------------------------------------------------------------------------

    def recheck(self, path: str) -> None:
        record = self.cp.parked.get(path)
        if record is None:
            return
        if path in self.term.holds:
            self.release(path)
        else:
            self.apply(record)

    def finish_recheck(self) -> None:
        """Forget the tombstones every peer region is past; save the checkpoint if it changed."""
        term, cp = self.term, self.cp
        peers = (set(term.registered) | set(cp.seen)) - {term.settings.region}
        replica, gone = policies.collect_tombstones(
            cp.replica,
            seen=cp.seen,
            peers=peers,
            now_ms=self.now_ms,
            ttl_ms=term.settings.tombstone_ttl_ms,
            keep=cp.parked,
        )
        if gone:
            cp.replica = replica
            term.dirty = True
            term.counters["tombstones_collected"] += len(gone)
        if term.dirty:
            self.save()
        term.rechecking = False
        term.next_recheck_ms = self.now_ms + term.settings.recheck_ms

    def save(self) -> None:
        self.effects.append(ev.SaveCheckpoint(core.encode_checkpoint(self.cp)))
        self.term.dirty = False
        self.term.counters["checkpoints"] += 1
