"""Each region's namespace policies as the simulation's world holds them, and the rules the policy mirror is
judged by.

PIP-136: every region keeps its tenants' and namespaces' policies in its own metadata store, isolated from
the others' (``/admin/policies/{tenant}`` and ``/admin/policies/{tenant}/{namespace}``, JSON documents with a
version and an mtime, compare-and-set writes, watches). Pulsar does not replicate them; GeoSync's policy
mirror does (``geosync_sim.policies`` runs the real one here). Modelled, with the Pulsar rule each follows:

* a namespace is created only under an existing tenant, and a node with children is not deleted (ZooKeeper);
* an operator's namespace deletion is refused while the region holds topics in it (``NamespacesBase``: 409
  "Cannot delete non empty namespace");
* topics are created only in a namespace the region's store holds, not marked ``deleted``, whose clusters name
  the region (brokers refuse others); a namespace document that leaves the region out makes its brokers
  delete the region's topics in it (``PersistentTopic.checkReplication``);
* the policy event topic: one topic in a replicated namespace, so one copy per region; a region's publishes go
  into its own copy at once and reach every other copy in order, after 0.05-0.6 s.

The checker knows only these facts, nothing of the mirror's code. Violations:

* ``namespace-with-topics-deleted``: the mirror deleted a namespace (or tenant) in a region that held topics
  (or namespaces) under it (invariant 8 of the design: nothing destroyed);
* ``namespace-taken-away``: the mirror wrote a namespace document that leaves out a region that held topics
  in it (its brokers then delete them);
* ``policies-diverge``: after the quiet period, a policy path's document differs between regions, unless the
  difference is the one the mirror makes by design: a region keeps its own namespace document that names it
  where the others' leaves it out (a namespace is taken away from a region only in that region:
  ``allowedclusters.reject_event_regions``); such paths are counted in ``refused``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from geosync_sim.checking import Violation

ROOT = "/admin/policies"


@dataclass(frozen=True)
class Stored:
    value: bytes
    version: int
    mtime_ms: int


def clusters_of(doc: bytes | None) -> frozenset[str] | None:
    """The regions a namespace document names (replication and allowed clusters), ``None`` if unreadable."""
    if doc is None:
        return None
    try:
        parsed = json.loads(doc)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    names = [*parsed.get("replication_clusters", []), *parsed.get("allowed_clusters", [])]
    return frozenset(str(n) for n in names)


def marked_deleted(doc: bytes | None) -> bool:
    try:
        return doc is not None and json.loads(doc).get("deleted") is True
    except (ValueError, AttributeError):
        return False


@dataclass
class PolicyRegion:
    """One region's metadata store and the topics its namespaces hold."""

    name: str
    nodes: dict[str, Stored] = field(default_factory=dict)
    topics: dict[str, set[str]] = field(default_factory=dict)
    """Namespace path -> the topics the region holds in it."""
    copy: list[bytes] = field(default_factory=list)
    """The region's copy of the policy event topic."""
    watch: Callable[[str, bool], None] | None = None
    """Told of every change: (path, children); a children change names the parent."""
    skew_ms: int = 0

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            p[len(prefix) :] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix) :]
        )

    def holds(self, path: str) -> list[str]:
        """What a deletion of ``path`` would destroy here: a namespace's topics, a tenant's namespaces."""
        if path.count("/") == 4:
            return sorted(self.topics.get(path, ()))
        return self.children(path)


class PolicyStores:
    """Every region's policies, the event topic's copies, and the checker's facts."""

    def __init__(self, regions: list[str], *, delay: Callable[[], float]) -> None:
        self.regions = {r: PolicyRegion(r) for r in regions}
        self.delay = delay
        self.now = 0.0
        self.violations: list[Violation] = []
        self.refused: dict[str, str] = {}
        """Paths left different by design at the end: the regions that keep their own document."""
        self.trace: Callable[[str], None] = lambda _line: None
        self._in_flight: list[tuple[float, int, str, bytes]] = []
        self._link_last: dict[tuple[str, str], float] = {}
        self._n = 0

    def now_ms(self, region: str, wall0: float) -> int:
        return int((wall0 + self.now) * 1000) + self.regions[region].skew_ms

    # -- the store --------------------------------------------------------------------------------

    def write(
        self,
        region: str,
        path: str,
        value: bytes | None,
        *,
        expected: Stored | None,
        writer: str,
        now_ms: int,
    ) -> str | None:
        """Compare-and-set ``value`` at ``path``; the failure (``stale``, ``no-parent``, ``not-empty``) or
        ``None`` once written."""
        r = self.regions[region]
        held = r.nodes.get(path)
        if (held is None) != (expected is None) or (held and expected and held.version != expected.version):
            return "stale"
        if value is None and held is None:
            return None
        parent = path.rsplit("/", 1)[0]
        if value is not None and held is None and parent != ROOT and parent not in r.nodes:
            return "no-parent"
        if value is None and r.children(path):
            return "not-empty"
        if writer == "mirror":
            self._judge(r, path, held, value)
        if value is None:
            del r.nodes[path]
        else:
            r.nodes[path] = Stored(value, 0 if held is None else held.version + 1, now_ms)
        if path.count("/") == 4 and r.topics.get(path):
            names = clusters_of(value)
            if value is None or (names is not None and region not in names):
                self.trace(
                    f"{region}: brokers delete {len(r.topics[path])} topic(s) of {path[len(ROOT) + 1 :]}"
                )
                r.topics[path] = set()
        if r.watch is not None:
            r.watch(path, False)
            if (held is None) != (value is None):
                r.watch(parent, True)
        return None

    def _judge(self, r: PolicyRegion, path: str, held: Stored | None, value: bytes | None) -> None:
        if held is None:
            return
        short = path[len(ROOT) + 1 :]
        if value is None and (what := r.holds(path)):
            self._violate("namespace-with-topics-deleted", r.name, path, f"{short} deleted holding {what}")
        names = clusters_of(value)
        if value is not None and names is not None and r.name not in names and r.topics.get(path):
            self._violate("namespace-taken-away", r.name, path, f"{short} written without {r.name}")

    def _violate(self, kind: str, region: str, path: str, detail: str) -> None:
        self.trace(f"{region}: VIOLATION {kind}: {detail}")
        self.violations.append(Violation(kind, self.now, region, path, "", detail))

    def create_topic(self, region: str, namespace: str, topic: str) -> bool:
        r = self.regions[region]
        doc = r.nodes.get(namespace)
        names = None if doc is None else clusters_of(doc.value)
        if doc is None or marked_deleted(doc.value) or names is None or region not in names:
            return False
        r.topics.setdefault(namespace, set()).add(topic)
        return True

    # -- the event topic --------------------------------------------------------------------------

    def publish(self, region: str, data: bytes) -> None:
        self.regions[region].copy.append(data)
        for dst in self.regions:
            if dst != region:
                due = max(self.now + self.delay(), self._link_last.get((region, dst), 0.0))
                self._link_last[(region, dst)] = due
                self._n += 1
                self._in_flight.append((due, self._n, dst, data))

    def advance(self, t: float) -> None:
        self.now = t
        due = sorted(x for x in self._in_flight if x[0] <= t)
        if due:
            self._in_flight = [x for x in self._in_flight if x[0] > t]
            for _, _, dst, data in due:
                self.regions[dst].copy.append(data)

    # -- the end ----------------------------------------------------------------------------------

    def check_converged(self) -> None:
        """Every policy path holds the same document in every region (``policies-diverge``), but where the
        mirror refuses by design (``refused``)."""
        paths = sorted({p for r in self.regions.values() for p in r.nodes})
        for path in paths:
            docs = {name: r.nodes.get(path) for name, r in self.regions.items()}
            values = {None if d is None else d.value for d in docs.values()}
            if len(values) > 1 and (kept := self._kept(docs)):
                self.refused[path] = kept
                self.trace(
                    f"{kept}: keeps {path[len(ROOT) + 1 :]}, which the others' document leaves it out of"
                )
            elif len(values) > 1:
                seen = ", ".join(
                    f"{n}: {'-' if d is None else d.value.decode()[:60]}" for n, d in docs.items()
                )
                self._violate("policies-diverge", "*", path, f"{path[len(ROOT) + 1 :]}: {seen}")

    @staticmethod
    def _kept(docs: dict[str, Stored | None]) -> str:
        """The regions that keep their own namespace document naming them where every other region's leaves
        them out (``allowedclusters.reject_event_regions``: taking a namespace away from a region is made in
        the region itself, never mirrored), or "" if the difference is not that."""
        values = {d.value for d in docs.values() if d is not None}
        if len(values) != 2 or None in docs.values():
            return ""
        first, second = sorted(values)
        for own, other in ((first, second), (second, first)):
            keepers = {n for n, d in docs.items() if d is not None and d.value == own}
            named, left = clusters_of(own) or frozenset(), clusters_of(other) or frozenset()
            if keepers <= named and not keepers & left:
                return ",".join(sorted(keepers))
        return ""
