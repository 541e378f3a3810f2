"""A policy mirror term's held deletions, released (``core.mirroring``'s invariant 3).

A remote record that would destroy this region's data (a namespace deleted, its clusters narrowed away from
this region) is not written at once: the term holds it (``hold``: the replica takes it as the policy, the
checkpoint parks it) and releases it step by step (``release``): read the node, ask the shell what the region
still holds under the path (``ListContents``), then mark the namespace ``deleted``, look again, and delete
(``geosync_core.deletions.next_step`` decides each step). A topic found after the mark undoes the mark; a
write refused because Pulsar keeps children puts back what was there. Whatever stops a release leaves the
deletion held, with the reason, for the next recheck. A fenced write ends the term (invariant 5).
"""

from __future__ import annotations

from geosync_agent.core import mirrorevents as ev
from geosync_agent.core.mirrorterm import Job, Step, clock_of
from geosync_core import clocks, deletions, policies
from geosync_core.policies import Record

MAX_RELEASE_STEPS = 4  # mark, look again, delete: anything more means the store keeps changing under us


class Releasing(Step):
    """The steps of a held deletion's release; ``core.mirroring``'s term steps are built on them."""

    def hold(self, record: Record, replica: policies.Replica) -> None:
        """Take a destroying change as the policy, not yet written here."""
        self.cp.replica = dict(replica)
        self.cp.parked[record.path] = record
        self.term.holds[record.path] = "not yet checked"
        self.cp.clock = clocks.receive(clock_of(self.term), record.stamp, now_ms=self.now_ms)
        self.term.dirty = True

    def release(self, path: str) -> None:
        """Apply the change held for ``path`` if the region now holds nothing it would destroy: read the
        node, ask what the region holds, then mark, look again and delete (``deletions.next_step``)."""
        self.ask(Job("release", (ev.NodeRead,), path, self.cp.parked[path], then="node"), ev.ReadNode(path))

    def release_answered(self, job: Job, answer: ev.Event) -> None:
        path, record = job.path, job.record
        assert record is not None
        if isinstance(answer, ev.WriteFailed):
            if answer.failure is ev.Failure.FENCED:
                self.end(f"no longer the leader: {answer.detail}")
            elif job.then == "apply" and answer.failure is ev.Failure.NOT_EMPTY and job.unmarked is not None:
                job.then, job.reason = "reread", answer.detail  # children Pulsar keeps: leave it as it was
                self.ask(job, ev.ReadNode(path), ev.NodeRead)
            elif job.then == "apply" and answer.failure is ev.Failure.NOT_EMPTY:
                self.held(path, answer.detail)
            elif job.then in ("unmark", "restore"):
                self.held(path, job.reason)
            else:
                self.term.holds[path] = f"not applied yet: {answer.failure.value}: {answer.detail}"
        elif isinstance(answer, ev.NodeRead) and job.then == "reread":
            job.then = "restore"
            self.ask(job, ev.WriteNode(path, job.unmarked, answer.node), ev.Wrote, ev.WriteFailed)
        elif isinstance(answer, ev.NodeRead):
            job.node, job.then = answer.node, "contents"
            self.ask(job, ev.ListContents(path), ev.ContentsListed)
        elif isinstance(answer, ev.ContentsListed):
            if answer.contents is None:
                self.held(path, answer.reason)
            elif job.attempt >= MAX_RELEASE_STEPS:
                self.term.holds[path] = f"not applied yet: {path} kept changing while being deleted"
            else:
                job.attempt += 1
                self.next_release_step(job, answer.contents)
        elif isinstance(answer, ev.Wrote) and job.then == "mark":
            job.then = "marked"
            self.ask(job, ev.ReadNode(path), ev.NodeRead)
        elif isinstance(answer, ev.Wrote) and job.then in ("unmark", "restore"):
            self.held(path, job.reason)
        elif isinstance(answer, ev.Wrote):
            self.cp.parked.pop(path, None)
            self.term.holds.pop(path, None)
            self.effects.append(ev.Note("info", f"applied the held {path}"))
            self.term.dirty = True
            self.term.counters["held_applied"] += 1

    def next_release_step(self, job: Job, contents: deletions.Contents) -> None:
        path, record = job.path, job.record
        assert record is not None
        current = None if job.node is None else job.node.value
        action = deletions.next_step(record, current, contents, unmarked=job.unmarked)
        if isinstance(action, deletions.Hold):
            self.held(path, action.reason)
        elif isinstance(action, deletions.Unmark):
            job.then, job.reason = "unmark", action.reason
            self.effects.append(ev.Note("info", f"{path}: a topic appeared after the mark; mark undone"))
            self.ask(job, ev.WriteNode(path, action.doc, job.node), ev.Wrote, ev.WriteFailed)
        elif isinstance(action, deletions.Mark):
            job.unmarked, job.then = current, "mark"
            self.ask(job, ev.WriteNode(path, action.doc, job.node), ev.Wrote, ev.WriteFailed)
        else:
            job.then = "apply"
            self.ask(job, ev.WriteNode(path, record.value, job.node), ev.Wrote, ev.WriteFailed)

    def held(self, path: str, reason: str) -> None:
        if self.term.holds.get(path) != reason:
            self.effects.append(ev.Note("warning", f"holding {path}: {reason}"))
            self.term.counters["held"] += 1
        self.term.holds[path] = reason
