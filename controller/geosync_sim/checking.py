"""The invariants, judged from what the world saw: which consumer acknowledged what, which cursor moved, why.

Why independent: a checker that asked the agent's own code whether a claim was right would share its bugs.
This one knows only the world's facts, in message identities (origin region, origin position, batch index):
what the applications were delivered and acknowledged, every cursor change with its cause (a consumer, an
operator's or the broker's own operation, or the agent through one of its ports), and when failovers, crashes
and faults happened. It imports nothing from ``geosync_agent``.

Invariants (DESIGN.md numbering):

1. no loss: a cursor change the agent makes in any region acknowledges only messages some consumer of the same
   subscription acknowledged, in any region, before that change (``loss``); a message acknowledged by a
   cursor jump no consumer made (creation at Latest, clear-backlog, skip, TTL expiry) and then acknowledged
   in another region by the agent is ``jump-replicated`` (invariant 7); the agent's own shadow consumer
   re-creating a subscription at Latest is ``shadow-created-at-latest``. A jump made where the claims are
   the cursor (no plugin there, its plugin refusing every call, or ``claims_from: cursor``) and so replicated
   is ``jump-replicated-by-cursor-claims``: the documented limit of that mode (docs/limits.md, decision
   0015), counted but not a failure (``LIMITS``);
2. monotone: the agent never moves a cursor back over messages consumers acknowledged after the last
   operator's rewind (``rewind``); following an operator's rewind made in another region, over messages no
   consumer acknowledged since, is ``rewind-replicated`` (invariant 7: a reset is never replicated
   implicitly), and ``rewind-replicated-by-cursor-claims`` in a region whose claims are its cursor, which
   follows rewinds by design (decision 0015; a limit, ``LIMITS``), ``rewind-by-cursor-claims`` when such a
   region's following takes back what its consumers acknowledged since the rewind (a limit too);
6. Key_Shared order: a message given to consumers for the first time is never given in a region whose
   cursor already holds a later message of the same key and origin that a consumer acknowledged (that later
   message will not come again after it: ``key-order``). A message given before and not acknowledged is
   given again on a reconnect in any region, as Pulsar does without GeoSync: not a violation.

Every duplicate (a delivery of a message a consumer of the subscription had acknowledged before) is classified
by cause: ``in-flight`` (acknowledged less than ``settle_s`` before the failover), ``agent-down`` (an agent of
either region crashed meanwhile), ``control-fault``, ``admin-path`` (a region without the plugin applies holes
only while no consumer is connected; or, Key_Shared, an earlier message of the same key and origin was
acknowledged before the failover only as a batch index in regions whose agents poll cursors, whose polls
cannot see it: nobody claimed it, so the per-key minimum held this one back everywhere, docs/limits.md),
``key-order-held`` (Key_Shared: an earlier message of the same key and origin was still unacknowledged, or
acknowledged less than ``settle_s`` before the failover, so the per-key minimum held it back), ``recreated``
(an operator deleted the subscription in this region: what was acknowledged before the application subscribed
again was never applied to it), ``rewound`` (an operator moved the cursor back), ``topic-deleted`` (the topic
was deleted in the acknowledging region before its agent read the acknowledgement: its cursor went with it,
docs/limits.md); anything else is ``unexplained``, a violation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_sim.world import Ident, Msg

AllowedCause = ("consumer", "setup")
JUMPS = ("admin:clear-backlog", "admin:skip", "admin:ttl", "admin:create-latest", "agent:shadow-latest")
LOSS = frozenset(
    {
        "loss",
        "jump-replicated",
        "shadow-created-at-latest",
        "rewind",
        "rewind-replicated",
        "hostile-undelivered",
    }
)
"""The violations that take from consumers a message they did not acknowledge (invariants 1, 2 and 7)."""
LIMITS = frozenset(
    {"jump-replicated-by-cursor-claims", "rewind-replicated-by-cursor-claims", "rewind-by-cursor-claims"}
)
"""What the checker records where a mode's documented limit is reached: a run with only these passes."""


@dataclass(frozen=True)
class Violation:
    kind: str
    at: float
    region: str
    topic: str
    subscription: str
    detail: str

    def __str__(self) -> str:
        short = self.topic.rsplit("/", 1)[-1]
        return f"{self.at:8.2f}s {self.kind:<24} {self.region}: {short}/{self.subscription} {self.detail}"


@dataclass
class Checker:
    settle_s: float = 10.0
    cursor_has: Callable[[str, str, str, Ident], bool] = lambda *_: False
    """Whether a region's cursor holds a message now (the world's ground truth, for Key_Shared order)."""
    index_only: Callable[[str, str, str, Ident], bool] = lambda *_: False
    """Whether a region's cursor holds a message now as an acknowledged index of a batch it holds only in part
    (ground truth: what a poll of that region's cursor does not show)."""
    consumer_acked: dict[tuple[str, str, Ident], tuple[float, str]] = field(default_factory=dict)
    acked_unpolled: dict[tuple[str, str, Ident], float] = field(default_factory=dict)
    """When a consumer first acknowledged a message in a region whose agent does not poll cursors."""
    jumped: dict[tuple[str, str, Ident], str] = field(default_factory=dict)
    """Messages a cursor jump no consumer made acknowledged, and the region it happened in."""
    failover_at: dict[tuple[str, str], float] = field(default_factory=dict)
    rewound: dict[tuple[str, str, str], float] = field(default_factory=dict)
    operator_rewound: dict[tuple[str, str], float] = field(default_factory=dict)
    deleted_at: dict[tuple[str, str, str], float] = field(default_factory=dict)
    unread_when_deleted: set[tuple[str, str, str, Ident]] = field(default_factory=set)
    """Messages consumers acknowledged in a region whose topic was deleted before its agent read that (the
    plugin's feed had not handed it over): the claim is the cursor limited to what consumers acknowledged, and
    the cursor that would show it went with the topic (docs/limits.md)."""
    created_at: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """The last time an operator moved the subscription's cursor back in some region."""
    disturbed: list[tuple[float, float, str]] = field(default_factory=list)
    """(from, to, cause) windows an agent was down or control was faulted."""
    no_plugin: set[str] = field(default_factory=set)
    cursor_claims: set[str] = field(default_factory=set)
    """Regions whose claims are their cursors (no acknowledgement feed there, or ``claims_from: cursor``)."""
    polled: set[str] = field(default_factory=set)
    """Regions whose agents read cursors through the admin API (no plugin, or its plugin refusing every call):
    a poll shows no batch indexes (docs/limits.md)."""
    by_key: dict[tuple[str, str, str], list[Ident]] = field(default_factory=dict)
    """Key_Shared: (topic, key, origin) -> identities in origin order, as delivered."""
    first_by_key: dict[tuple[str, str, str], dict[Ident, None]] = field(default_factory=dict)
    """Key_Shared: (topic, key, origin) -> identities in the order they were first delivered."""
    hostile_sent: dict[tuple[str, Ident], str] = field(default_factory=dict)
    """Messages hostile producers published (forged stamps, the marker property, garbage): (topic, identity)
    -> what they carried; each must reach a consumer (``finish``)."""
    hostile_delivered: set[tuple[str, Ident]] = field(default_factory=set)
    violations: list[Violation] = field(default_factory=list)
    duplicates: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0

    def _violate(self, kind: str, at: float, region: str, topic: str, sub: str, *, detail: str) -> None:
        if len(self.violations) < 200:
            self.violations.append(Violation(kind, at, region, topic, sub, detail))

    def error(self, at: float, region: str, detail: str) -> None:
        """The agent raised an exception a real round would not survive."""
        self._violate("agent-error", at, region, "-", "-", detail=detail)

    # -- events ------------------------------------------------------------------------------------

    def acked(self, at: float, region: str, topic: str, sub: str, *, idents: list[Ident], cause: str) -> None:
        if cause in AllowedCause:
            for ident in idents:
                self.consumer_acked.setdefault((topic, sub, ident), (at, region))
                if region not in self.polled:
                    self.acked_unpolled.setdefault((topic, sub, ident), at)
            return
        if cause in JUMPS:
            for ident in idents:
                self.jumped.setdefault((topic, sub, ident), region)
            if cause == "agent:shadow-latest":
                unacked = [i for i in idents if (topic, sub, i) not in self.consumer_acked]
                if unacked:
                    self._violate(
                        "shadow-created-at-latest",
                        at,
                        region,
                        topic,
                        sub,
                        detail=f"{len(unacked)} messages no consumer acknowledged, e.g. {fmt(unacked[0])}",
                    )
            return
        if not cause.startswith("agent:"):
            return
        lost = [i for i in idents if (topic, sub, i) not in self.consumer_acked]
        if not lost:
            return
        jumped = [i for i in lost if (topic, sub, i) in self.jumped]
        if jumped:
            src = self.jumped[(topic, sub, jumped[0])]
            self._violate(
                "jump-replicated-by-cursor-claims" if src in self.cursor_claims else "jump-replicated",
                at,
                region,
                topic,
                sub,
                detail=f"{len(jumped)} messages by {cause} after a jump in {src}, e.g. {fmt(jumped[0])}",
            )
        rest = [i for i in lost if (topic, sub, i) not in self.jumped]
        if rest:
            self._violate(
                "loss", at, region, topic, sub, detail=f"{len(rest)} messages by {cause}, e.g. {fmt(rest[0])}"
            )

    def rewind(
        self, at: float, region: str, topic: str, sub: str, cause: str, *, idents: list[Ident]
    ) -> None:
        self.rewound[(region, topic, sub)] = at
        if cause == "deleted":
            self.deleted_at[(region, topic, sub)] = at
        if not cause.startswith("agent:"):
            self.operator_rewound[(topic, sub)] = at
            return
        since = self.operator_rewound.get((topic, sub), -1.0)
        consumed = [i for i in idents if self.consumer_acked.get((topic, sub, i), (-2.0, ""))[0] > since]
        if consumed:
            detail = (
                f"{len(consumed)} messages consumers acknowledged since, e.g. {fmt(consumed[0])} ({cause})"
            )
            # A region whose claims are its cursor follows rewinds by design: what its consumers acknowledged
            # since the operator's rewind is delivered again there (decision 0015; a limit).
            kind = "rewind-by-cursor-claims" if region in self.cursor_claims else "rewind"
            self._violate(kind, at, region, topic, sub, detail=detail)
        else:
            detail = f"an operator's rewind elsewhere followed: {len(idents)} messages ({cause})"
            kind = (
                "rewind-replicated-by-cursor-claims" if region in self.cursor_claims else "rewind-replicated"
            )
            self._violate(kind, at, region, topic, sub, detail=detail)

    def hostile(self, topic: str, ident: Ident, variant: str) -> None:
        """A hostile producer published ``ident`` (its true identity: where it was published)."""
        self.hostile_sent[(topic, ident)] = variant

    def finish(self) -> None:
        """At the run's end: every hostile producer's message reached a consumer (``hostile-undelivered``: a
        message no consumer was given, whatever a broker or agent did with it; issue 45, case 4)."""
        for (topic, ident), variant in self.hostile_sent.items():
            if (topic, ident) not in self.hostile_delivered:
                self._violate(
                    "hostile-undelivered", -1.0, ident[0], topic, "sub", detail=f"{fmt(ident)} ({variant})"
                )

    def deleted_unread(self, region: str, topic: str, sub: str, idents: list[Ident]) -> None:
        """A topic was deleted in ``region`` before its agent read these acknowledgements there."""
        self.unread_when_deleted.update((region, topic, sub, ident) for ident in idents)

    def created(self, at: float, region: str, topic: str, sub: str) -> None:
        self.created_at[(region, topic, sub)] = at

    def failover(self, at: float, topic: str, sub: str) -> None:
        self.failover_at[(topic, sub)] = at

    def disturbance(self, start: float, end: float, cause: str) -> None:
        self.disturbed.append((start, end, cause))

    def delivered(
        self, at: float, region: str, topic: str, sub: str, *, ident: Ident, msg: Msg, kind: str
    ) -> None:
        self.deliveries += 1
        if self.hostile_sent and (topic, ident) in self.hostile_sent:
            self.hostile_delivered.add((topic, ident))
        if kind == "Key_Shared":
            first = self.first_by_key.setdefault((topic, msg.key, ident[0]), {})
            if ident not in first:  # a message given before is given again as Pulsar does on a reconnect
                first[ident] = None
                self._key_order(at, region, topic, sub, ident=ident, msg=msg)
        acked = self.consumer_acked.get((topic, sub, ident))
        if acked is None:
            return
        self.duplicates[
            self._classify(at, region, topic, sub, ident=ident, msg=msg, kind=kind, acked=acked)
        ] += 1

    def _key_order(self, at: float, region: str, topic: str, sub: str, *, ident: Ident, msg: Msg) -> None:
        seen = self.by_key.setdefault((topic, msg.key, ident[0]), [])
        if not seen or seen[-1] < ident:
            seen.append(ident)
            return
        for later in reversed(seen):
            if later <= ident:
                break
            got = self.consumer_acked.get((topic, sub, later))
            if got is not None and self.cursor_has(region, topic, sub, later):
                mine = self.consumer_acked.get((topic, sub, ident))
                was = "never acknowledged" if mine is None else f"acknowledged in {mine[1]} at {mine[0]:.2f}s"
                self._violate(
                    "key-order",
                    at,
                    region,
                    topic,
                    sub,
                    detail=f"{fmt(ident)} ({was}) key {msg.key} after {fmt(later)} (acknowledged in {got[1]} "
                    f"at {got[0]:.2f}s) is held here",
                )
                return

    def _classify(
        self,
        at: float,
        region: str,
        topic: str,
        sub: str,
        *,
        ident: Ident,
        msg: Msg,
        kind: str,
        acked: tuple[float, str],
    ) -> str:
        ack_at, ack_region = acked
        rewound = self.rewound.get((region, topic, sub))
        if rewound is not None and rewound >= ack_at:
            return "rewound"
        deleted = self.deleted_at.get((region, topic, sub))
        if deleted is not None and ack_at <= self.created_at.get((region, topic, sub), at) + self.settle_s:
            # An operator deleted the subscription here: what was acknowledged before it exists again is not
            # applied to it (a subscription deleted on purpose is not created again from claims).
            return "recreated"
        if ack_region == region:
            return (
                "rewound"
                if rewound is not None
                else self._unexplained(at, region, topic, sub, ident=ident, why="same region")
            )
        failed_over = self.failover_at.get((topic, sub), 0.0)
        if ack_at > failed_over - self.settle_s:
            return "in-flight"
        if (ack_region, topic, sub, ident) in self.unread_when_deleted:
            return "topic-deleted"
        for start, end, cause in self.disturbed:
            if start <= failed_over and end >= ack_at - self.settle_s:
                return cause
        if region in self.no_plugin or ack_region in self.no_plugin:
            return "admin-path"
        if kind == "Key_Shared":
            # The per-key minimum: an earlier message of the key and origin (in the origin's order, which is
            # every log's: decision 0016) given to consumers and not acknowledged by the failover holds this
            # one back. Given before or after this one was first: a rebuilt region's new life never had the
            # messages its old life had received, and its consumers were given the later ones first. One
            # acknowledged less than ``settle_s`` before the failover held it back as long: this one could be
            # claimed only from then on, and that claim was in flight (seed 5542 of ``partitions``).
            for earlier in self.first_by_key.get((topic, msg.key, ident[0]), {}):
                if earlier >= ident:
                    continue
                got = self.consumer_acked.get((topic, sub, earlier))
                if got is None or got[0] > failed_over - self.settle_s:
                    return "key-order-held"
                if self._unseen(topic, sub, earlier, failed_over):
                    return "admin-path"
        return self._unexplained(
            at, region, topic, sub, ident=ident, why=f"acknowledged in {ack_region} at {ack_at:.2f}s"
        )

    def _unseen(self, topic: str, sub: str, ident: Ident, failed_over: float) -> bool:
        """Whether consumers had acknowledged ``ident`` by ``settle_s`` before ``failed_over`` only where no
        agent could see it: in regions whose agents poll cursors, as an index of a batch their cursors still
        hold only in part (a poll shows no batch indexes, docs/limits.md). No region claimed it, so for every
        agent it is unacknowledged and, Key_Shared, holds back the later messages of its key and origin in
        each region's claims (per-key order, invariant 6): the admin path's limit passed on through key order
        (seed 300450)."""
        if self.acked_unpolled.get((topic, sub, ident), failed_over) <= failed_over - self.settle_s:
            return False  # acknowledged where an agent sees it, in time for its claim to arrive
        return any(self.index_only(region, topic, sub, ident) for region in self.polled)

    def _unexplained(self, at: float, region: str, topic: str, sub: str, *, ident: Ident, why: str) -> str:
        self._violate("unexplained-duplicate", at, region, topic, sub, detail=f"{fmt(ident)} {why}")
        return "unexplained"


def fmt(ident: Ident) -> str:
    origin, ledger, entry, index = ident
    return f"{origin}@{ledger}:{entry}#{index}"
