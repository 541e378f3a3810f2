"""The applications: one consumer group per (topic, subscription), connected in one region at a time.

Why: duplicates and loss are about what consumers were given and what they acknowledged. A group receives
from its region's subscription in log order (from the mark-delete on when it connects, skipping what is
deleted) and acknowledges as its type does: Shared and Key_Shared acknowledge messages one by one in any order
(holes, and batch indexes for batched entries: ``PersistentAcknowledgmentsGroupingTracker`` with batch-index
acknowledgement on), Failover and Exclusive acknowledge cumulatively (``ManagedCursorImpl.asyncMarkDelete``:
everything up to the message). A failover disconnects the group in one region and connects it in another.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_sim.world import Entry, Ident, Subscription, Topic, World

CUMULATIVE = ("Failover", "Exclusive")

Delivered = Callable[..., None]
"""(time, region, topic, subscription, *, ident, msg, kind): a message given to a consumer."""


@dataclass
class App:
    topic: str
    sub: str
    kind: str
    region: str | None = None
    pending: list[tuple[int, int]] = field(default_factory=list)
    """Delivered and not acknowledged yet, in delivery order: (entry, index) in ``region``."""
    hold_next: float = 0.0
    """Seconds the next message delivered is held unacknowledged (0: none asked): a hole on purpose."""
    held: dict[tuple[int, int], float] = field(default_factory=dict)
    """Messages held, and until when."""
    script: Callable[[Ident], bool] | None = None
    """Scripted acknowledgements (a trace run on the lab as well, ``integration_tests/test_sim_vs_lab.py``):
    the group acknowledges exactly the messages given that this accepts, with no random draw: Shared and
    Key_Shared each one at once, Failover and Exclusive cumulatively up to the last one it accepts."""


class Apps:
    def __init__(self, world: World, rng: random.Random, *, on_delivered: Delivered) -> None:
        self.world = world
        self.rng = rng
        self.on_delivered = on_delivered
        self.apps: dict[tuple[str, str], App] = {}
        self.acks = 0
        world.on_topic_created = self.topic_created

    def add(self, topic: str, sub: str, kind: str, region: str) -> App:
        app = self.apps[(topic, sub)] = App(topic, sub, kind)
        for r in self.world.regions:
            self.world.create_subscription(r, topic, sub, kind, latest=False, cause="setup")
        self.connect(app, region)
        return app

    def topic_created(self, region: str, topic: str) -> None:
        """A deleted topic exists again: its subscriptions are created again at Earliest (the operator's
        provisioning, as at setup; a consumer subscribing would do the same)."""
        for app in self.apps.values():
            if app.topic == topic:
                self.world.create_subscription(region, topic, app.sub, app.kind, latest=False, cause="setup")

    def connect(self, app: App, region: str) -> None:
        w = self.world
        if app.topic not in w.regions[region].topics:
            # Deleted there: the client retries until it exists again (``tick`` subscribes it then).
            app.region, app.pending, app.held = region, [], {}
            return
        if (app.topic, app.sub) not in w.regions[region].subs:
            # The application subscribes with its own initial position: Earliest.
            w.create_subscription(region, app.topic, app.sub, app.kind, latest=False, cause="consumer")
        s = w.regions[region].subs[(app.topic, app.sub)]
        s.consumers, s.dispatched = 1, True
        s.next_read = s.cursor.md + 1
        app.region, app.pending, app.held = region, [], {}

    def disconnect(self, app: App) -> None:
        if app.region is not None:
            s = self.world.regions[app.region].subs.get((app.topic, app.sub))
            if s is not None:
                s.consumers = 0
        app.region, app.pending, app.held = None, [], {}

    def tick(self, app: App, *, receive: int, ack_p: float) -> None:
        if app.region is None:
            return
        w = self.world
        region = w.regions[app.region]
        if app.topic not in region.topics:  # deleted under the consumers: nothing to receive until it is back
            app.pending, app.held = [], {}
            return
        s = region.subs.get((app.topic, app.sub))
        if s is None:
            # Its subscription was deleted under it: the client subscribes again.
            self.connect(app, app.region)
            return
        t = region.topics[app.topic]
        if s.next_read <= s.cursor.md:  # moved under the consumer (clear-backlog, skip, expiry, agent)
            s.next_read = s.cursor.md + 1
        given = 0
        while given < receive and s.next_read <= t.last:
            e = t.entries[s.next_read]
            s.next_read += 1
            for i, m in enumerate(e.msgs):
                if not s.cursor.has(e.eid, i):
                    app.pending.append((e.eid, i))
                    if app.hold_next:
                        app.held[(e.eid, i)] = w.now + app.hold_next
                        app.hold_next = 0.0
                    self.on_delivered(
                        w.now, app.region, app.topic, app.sub, ident=e.ident(i), msg=m, kind=app.kind
                    )
                    given += 1
        app.pending = [(e, i) for e, i in app.pending if not s.cursor.has(e, i)]
        if not app.pending:
            return
        held = {p for p, until in app.held.items() if until > w.now}
        if app.script is not None:
            self._scripted(app, app.script, s, t, held)
        elif app.kind in CUMULATIVE:
            if self.rng.random() < ack_p:
                free = next((n for n, p in enumerate(app.pending) if p in held), len(app.pending))
                if free == 0:
                    return
                upto = self.rng.randrange(free)
                eid, idx = app.pending[upto]
                newly = s.cursor.ack_through(t, eid - 1)
                for j in range(idx + 1):
                    newly += s.cursor.ack_index(t, eid, j)
                self._acked(app, t.entries, newly)
        else:
            newly = []
            for eid, idx in app.pending:
                if (eid, idx) not in held and self.rng.random() < ack_p:
                    batched = t.entries[eid].batched
                    newly += s.cursor.ack_index(t, eid, idx) if batched else s.cursor.ack_entry(t, eid)
            self._acked(app, t.entries, newly)

    def _scripted(
        self, app: App, script: Callable[[Ident], bool], s: Subscription, t: Topic, held: set[tuple[int, int]]
    ) -> None:
        entries = t.entries
        wanted = [(e, i) for e, i in app.pending if (e, i) not in held and script(entries[e].ident(i))]
        newly: list[tuple[int, int]] = []
        if app.kind in CUMULATIVE and wanted:
            eid, idx = wanted[-1]
            newly = s.cursor.ack_through(t, eid - 1)
            for j in range(idx + 1):
                newly += s.cursor.ack_index(t, eid, j)
        elif app.kind not in CUMULATIVE:
            for eid, idx in wanted:
                newly += (
                    s.cursor.ack_index(t, eid, idx) if entries[eid].batched else s.cursor.ack_entry(t, eid)
                )
        self._acked(app, entries, newly)

    def _acked(self, app: App, entries: list[Entry], newly: list[tuple[int, int]]) -> None:
        if not newly or app.region is None:
            return
        self.acks += len(newly)
        region = self.world.regions[app.region]
        region.feed.append((app.topic, app.sub))
        self.world.acked(app.region, app.topic, app.sub, newly, "consumer")
        app.pending = [p for p in app.pending if p not in set(newly)]
