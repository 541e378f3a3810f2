"""PIP-33 snapshots built from outside the brokers, as pure values: the snapshot mode of subscription sync.

For brokers that do not stamp ``__MSG_PROP_REPL_SOURCE_POSITION``, positions of different regions can only
be related through messages that travel the same ordered replication path as the data. The source region's
agent writes a *request* marker into its topic; every other region's agent, on reading the replicated
request at position Q in its own log, writes a *response* naming Q, replicated back to the source only. Where
that response lands in the source's log (L), everything the responder had before Q is already present, so:
a subscription in the source whose mark-delete reached L may move to Q in the responder (PIP-33's
reasoning). With three or more regions a second round of requests follows the first (a third region's
messages may have reached the responder, but not yet the source, when it answered); the positions kept are
those of the first round, and L is where the last second-round response landed.

``Builder`` is one snapshot in progress: ``start`` makes it and the first request, ``step`` consumes
responses and time. ``SnapshotCache`` holds completed snapshots of one topic partition; ``advanced`` hands
out the highest one a mark-delete has passed, like Pulsar's cache. Pulsar bounds its cache by dropping the
oldest, which starves a slowly moving mark-delete; ``thinned`` bounds it by dropping the snapshots whose
neighbours are closest relative to their age, so recent snapshots stay dense and older ones sparse
(roughly geometric spacing): a lagging subscription still finds one not far below its mark-delete.

Invariants:

* a snapshot completes only when every remote region responded (in both rounds when there are two);
  responses for other snapshots, from unknown regions or from regions not yet asked in the current round,
  change nothing;
* a builder older than the timeout aborts and never completes (no snapshot while a region is down);
* a completed snapshot's positions are the first response of each region, its local position the latest
  response seen;
* ``advanced`` returns the highest snapshot at or below the mark-delete and never one above it; cached
  snapshots come back in increasing order, each at most once;
* ``thinned(limit)`` keeps at most ``limit`` snapshots, always the newest and the oldest, in order.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from geosync_core.markers import Snapshot, SnapshotRequest, SnapshotResponse
from geosync_core.positions import Position


@dataclass(frozen=True, slots=True)
class Builder:
    snapshot_id: str
    source: str
    remotes: frozenset[str]
    started_ms: int
    round: int = 1
    missing: frozenset[str] = frozenset()
    responses: tuple[tuple[str, Position], ...] = ()
    last_local: Position | None = None

    @property
    def rounds(self) -> int:
        return 2 if len(self.remotes) > 1 else 1


@dataclass(frozen=True, slots=True)
class Completed:
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class Aborted:
    snapshot_id: str
    reason: str


Effect = SnapshotRequest | Snapshot | Completed | Aborted
"""What the runtime must do: publish a request marker into the topic, publish (and cache) a snapshot
marker locally, or record an outcome."""


def start(
    snapshot_id: str, *, source: str, remotes: frozenset[str], now_ms: int
) -> tuple[Builder, list[Effect]]:
    if not remotes or source in remotes:
        raise ValueError(f"remotes must be other regions than {source!r}: {sorted(remotes)}")
    builder = Builder(snapshot_id, source, remotes, started_ms=now_ms, missing=remotes)
    return builder, [SnapshotRequest(snapshot_id=snapshot_id, source_region=source, round=1)]


def on_response(
    builder: Builder, response: SnapshotResponse, *, local: Position, now_ms: int, timeout_ms: int
) -> tuple[Builder | None, list[Effect]]:
    """A response read in the source's own log at ``local``. Returns None as builder once finished."""
    timed_out = expire(builder, now_ms=now_ms, timeout_ms=timeout_ms)
    if timed_out is not None:
        return timed_out
    if (
        response.snapshot_id != builder.snapshot_id
        or response.source_region != builder.source
        or response.region not in builder.missing
    ):
        return builder, []
    responses = dict(builder.responses)
    responses.setdefault(response.region, response.position)
    last = local if builder.last_local is None else max(builder.last_local, local)
    updated = replace(
        builder,
        missing=builder.missing - {response.region},
        responses=tuple(sorted(responses.items())),
        last_local=last,
    )
    if updated.missing:
        return updated, []
    if updated.round < updated.rounds:
        second = replace(updated, round=updated.round + 1, missing=updated.remotes)
        return second, [
            SnapshotRequest(snapshot_id=builder.snapshot_id, source_region=builder.source, round=second.round)
        ]
    snapshot = Snapshot(
        snapshot_id=builder.snapshot_id,
        region=builder.source,
        local_position=last,
        positions=updated.responses,
    )
    return None, [snapshot, Completed(snapshot)]


def expire(builder: Builder, *, now_ms: int, timeout_ms: int) -> tuple[None, list[Effect]] | None:
    """``(None, [Aborted])`` when the builder is older than the timeout, else None."""
    if now_ms - builder.started_ms > timeout_ms:
        missing = ",".join(sorted(builder.missing))
        return None, [
            Aborted(builder.snapshot_id, f"timed out in round {builder.round} waiting for {missing}")
        ]
    return None


def respond(request: SnapshotRequest, *, region: str, at: Position) -> SnapshotResponse:
    """The responder's answer: the request was read at ``at`` in ``region``'s own log."""
    return SnapshotResponse(
        snapshot_id=request.snapshot_id, source_region=request.source_region, region=region, position=at
    )


@dataclass(frozen=True, slots=True)
class SnapshotCache:
    """Completed snapshots of one topic partition, ordered by local position."""

    snapshots: tuple[Snapshot, ...] = ()
    ordinals: tuple[int, ...] = ()
    """Per snapshot, how many had been added before it: its age in snapshots, for ``thinned``."""
    added: int = 0

    def add(self, snapshot: Snapshot) -> SnapshotCache:
        keys = [s.local_position for s in self.snapshots]
        if snapshot.local_position in keys:
            return self
        i = bisect.bisect_left(keys, snapshot.local_position)
        snaps = (*self.snapshots[:i], snapshot, *self.snapshots[i:])
        return SnapshotCache(snaps, (*self.ordinals[:i], self.added, *self.ordinals[i:]), self.added + 1)

    def _from(self, i: int) -> SnapshotCache:
        return SnapshotCache(self.snapshots[i:], self.ordinals[i:], self.added)

    def advanced(self, mark_delete: Position) -> tuple[SnapshotCache, Snapshot | None]:
        """Consume every snapshot at or below ``mark_delete``; return the highest of them."""
        i = bisect.bisect_right([s.local_position for s in self.snapshots], mark_delete)
        if i == 0:
            return self, None
        return self._from(i), self.snapshots[i - 1]

    def latest_at_or_below(self, position: Position) -> Snapshot | None:
        """The highest snapshot at or below ``position``, without consuming anything (one cache per topic
        partition can then serve every subscription, each remembering what it was last given)."""
        i = bisect.bisect_right([s.local_position for s in self.snapshots], position)
        return self.snapshots[i - 1] if i else None

    def without_below(self, position: Position) -> SnapshotCache:
        """Drop snapshots below the highest one at or below ``position`` (every subscription passed them)."""
        i = bisect.bisect_right([s.local_position for s in self.snapshots], position)
        return self._from(max(0, i - 1))

    def thinned(self, limit: int) -> SnapshotCache:
        """At most ``limit`` (2 or more) snapshots, the newest and the oldest always among them. While over,
        the inner snapshot whose neighbours are closest (in snapshots added), relative to its age, goes:
        recent ones stay dense, older ones sparse, so a subscription that lags still gets one not far below
        its mark-delete, and one whose cursor never moves no longer holds every snapshot taken since."""
        if limit < 2:
            raise ValueError(f"a snapshot cache keeps at least 2, not {limit}")
        snaps = list(self.snapshots)
        if len(snaps) <= limit:
            return self
        # A cache built from snapshots alone (not by ``add``) counts them as added in order.
        ords = list(self.ordinals) if len(self.ordinals) == len(snaps) else list(range(len(snaps)))
        added = max(self.added, max(ords) + 1)
        while len(snaps) > limit:
            i = min(
                range(1, len(snaps) - 1),
                key=lambda i: ((ords[i + 1] - ords[i - 1]) / (added - ords[i]), i),
            )
            del snaps[i], ords[i]
        return SnapshotCache(tuple(snaps), tuple(ords), added)

    def __len__(self) -> int:
        return len(self.snapshots)
