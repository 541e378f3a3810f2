"""Pulsar's own geo-replicators, watched: which ones hold a backlog and have sent nothing for a while.

Why: GeoSync can only be exact about messages a region holds. When a broker's replicator to another region
stops moving (seen after an hour-long outage: connected, 78,279 entries of backlog, rate 0, for good, on one
topic of four), that region never gets the messages and the agents have nothing to report: every subscription
looks in step with what is there. Pulsar shows it only topic by topic (``topics stats``: ``replication``).

Each discovery pass reads every synced topic's stats anyway; their ``replication`` section gives, per remote
region, the backlog (entries not replicated yet), the messages sent out so far (``msgOutCount``), the rate
out over the broker's last stats interval, and whether the replicator's producer is connected. A link made
progress at a pass when its backlog is empty, fell, or anything went out since the previous pass (count grew,
or a rate above 0 where the count is missing). A link is **stalled** when it has made no progress for
``after_s`` (the agent's ``replicator_stall_s``): a region cut off, a replicator stuck after a reconnection,
a remote region refusing writes. The first pass that sees a link counts as progress (its past is unknown).

The values come from the broker's JSON and are checked: a missing or malformed one makes that link unknown
(skipped), never an error.

**Unsticking** (opt-in: the agent's ``replicator_unload_after_s``). Pulsar 4.0's replicator can stay stuck
while connected: when a send to the remote region fails, it rewinds its cursor but the failed entries keep
their read permits, so once the permits are used up it never reads again (apache/pulsar#25097, fixed by
#26002 after 4.0.8). Only a new replicator frees it, and unloading the topic in the sending region makes one
(seen in BENCHMARKS 17.8: two stuck replicators drained within 20 s of an unload). ``Unsticking`` decides
which topics to unload: a link stalled *while connected* for ``after_s`` (a disconnected one is a region
out of reach, which an unload cannot cure), at most one unload per topic at a time, and again only after a
doubling wait (``after_s``, then 2, 4, ... times it, at most ``max_wait_s``) as long as the topic keeps
getting stuck without draining. A topic whose links all drained starts over.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One replicator as a topic's stats showed it."""

    backlog: int
    sent: int | None
    """``msgOutCount`` (None: the broker does not report it)"""
    rate_out: float
    connected: bool


@dataclass(frozen=True)
class Stall:
    topic: str
    remote: str
    backlog: int
    connected: bool
    since: float
    """Monotonic time of the link's last progress."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def samples_of(stats: Mapping[str, Any]) -> dict[str, Sample]:
    """remote region -> its replicator, from a topic's stats (``/admin/v2/persistent/.../stats``); entries
    that are not the documented shape are left out."""
    section = stats.get("replication")
    if not isinstance(section, Mapping):
        return {}
    out: dict[str, Sample] = {}
    for remote, raw in section.items():
        if not isinstance(remote, str) or not isinstance(raw, Mapping):
            continue
        backlog = _int(raw.get("replicationBacklog"))
        rate = raw.get("msgRateOut", 0.0)
        if backlog is None or not isinstance(rate, int | float) or isinstance(rate, bool):
            continue
        out[remote] = Sample(
            backlog=backlog,
            sent=_int(raw.get("msgOutCount")),
            rate_out=float(rate),
            connected=raw.get("connected") is True,
        )
    return out


@dataclass(frozen=True)
class _Link:
    sample: Sample
    progress_at: float


def _progressed(before: Sample, now: Sample) -> bool:
    if now.backlog == 0 or now.backlog < before.backlog:
        return True
    if now.sent is not None and before.sent is not None:
        return now.sent != before.sent
    return now.rate_out > 0


@dataclass
class Watch:
    """The replicators of the topics an agent syncs, pass after pass."""

    links: dict[str, dict[str, _Link]] = field(default_factory=dict)
    """topic -> remote region -> what was last seen of its replicator"""

    def observe(self, topic: str, samples: Mapping[str, Sample], at: float) -> None:
        """A pass at monotonic time ``at`` read ``topic``'s replicators (a remote region it no longer
        replicates to is forgotten)."""
        before = self.links.get(topic, {})
        now: dict[str, _Link] = {}
        for remote, sample in samples.items():
            link = before.get(remote)
            stuck = link is not None and not _progressed(link.sample, sample)
            now[remote] = _Link(sample, link.progress_at if link is not None and stuck else at)
        self.links[topic] = now

    def retain(self, topics: Iterable[str]) -> None:
        """Forget the links of topics not in ``topics`` (deleted, no longer synced, owned elsewhere)."""
        keep = set(topics)
        for topic in [t for t in self.links if t not in keep]:
            del self.links[topic]

    def stalled(self, now: float, after_s: float) -> list[Stall]:
        """The links without progress for ``after_s`` at monotonic time ``now``, longest stalled first."""
        out = [
            Stall(topic, remote, link.sample.backlog, link.sample.connected, link.progress_at)
            for topic, remotes in self.links.items()
            for remote, link in remotes.items()
            if link.sample.backlog > 0 and now - link.progress_at >= after_s
        ]
        return sorted(out, key=lambda s: (s.since, s.topic, s.remote))


@dataclass
class Unsticking:
    """Which topics with a replicator stuck while connected to unload, and when (see the module docstring)."""

    after_s: float
    """A connected link stalled this long (since its last progress) is unloaded; 0 or less: never."""
    max_wait_s: float = 3600.0
    tries: dict[str, int] = field(default_factory=dict)
    """topic -> unloads since its links last drained"""
    next_at: dict[str, float] = field(default_factory=dict)
    """topic -> monotonic time before which it is not unloaded again"""

    def due(self, stalled: Iterable[Stall], now: float) -> list[Stall]:
        """The stalls (one per topic, the longest) whose topic to unload now; each is counted as tried."""
        if self.after_s <= 0:
            return []
        out: dict[str, Stall] = {}
        for stall in sorted(stalled, key=lambda s: s.since):
            if (
                stall.connected
                and stall.topic not in out
                and now - stall.since >= self.after_s
                and now >= self.next_at.get(stall.topic, 0.0)
            ):
                out[stall.topic] = stall
        for topic in out:
            tries = self.tries.get(topic, 0) + 1
            self.tries[topic] = tries
            self.next_at[topic] = now + min(self.after_s * 2 ** (tries - 1), self.max_wait_s)
        return list(out.values())

    def settle(self, watch: Watch) -> None:
        """Start over for topics whose links all drained, and forget topics no longer watched."""
        for topic in list(self.tries):
            links = watch.links.get(topic)
            if links is None or all(link.sample.backlog == 0 for link in links.values()):
                self.tries.pop(topic, None)
                self.next_at.pop(topic, None)
