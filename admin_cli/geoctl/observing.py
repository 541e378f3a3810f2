"""Observing replicated subscriptions from the outside: what each region acknowledged, in origin terms.

``geoctl status``, ``failover check`` and ``tenants migrate`` need, per subscription and region, what the
other regions acknowledged that this region has not (yet) applied: those messages would be delivered again
if consumers moved here now. The agents know it, but an operator's tool should not take the agents' word
for what it is checking, so this module computes it itself, with the same core functions the agents use:

1. per region, read the topic partition from its earliest retained entry (a short-lived reader) into an
   ``OriginIndex``: a local message's origin is itself; a replicated copy's origin position is its
   ``__MSG_PROP_REPL_SOURCE_POSITION`` stamp, and its origin region is the only other region of the
   namespace, or (three or more regions) the entry's ``X-Pulsar-replicated-from`` header from the admin
   API, remembered per broker-generated producer name; ledger ids collide between regions, so positions
   alone never decide;
2. per region, read the cursor (``internalStats``: mark-delete and individually deleted ranges) and
   translate it with ``translating.to_origin_acks``;
3. for region Y and another region X, count Y's entries above Y's mark-delete that Y has not acknowledged
   and whose origin X acknowledged: the duplicates a failover from X to Y would deliver now. Over every
   other region at once, that is what Y has not applied (its sync lag in messages).

Topic partitions on which every region reports an empty backlog for every subscription are not read: there
is nothing above any mark-delete that could differ. The agents' ``/state`` adds what only they know
(when they last applied, since when they are behind, holes held back while consumers are connected).

What could not be read is kept (``Observation.errors``, and per region ``Observation.unread``): a region
that did not answer is absent from the rows, and what the others show alone may look in step while
proving nothing about it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import pulsar

from geoctl.access import AgentView, Site, probe_agent
from geoctl.errors import EXIT_REFUSED, EXIT_UNREACHABLE, GeoctlError
from geosync_adapters import adminhttp, adminorigins, messaging
from geosync_core import keyorder, translating
from geosync_core.indexing import OriginIndex
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position
from geosync_core.rangesets import AckState
from geosync_core.resolving import Malformed, OriginResolver, Unresolved

INTERNAL_CURSORS = ("pulsar.repl.", "pulsar.dedup", "geosync-")
INTERNAL_TOPICS = ("geosync-control", "geosync-policy-events")
Report = Callable[[str], None]


@dataclass
class Log:
    """One region's copy of a topic partition, as read now."""

    index: OriginIndex = field(default_factory=OriginIndex)
    positions: list[Position] = field(default_factory=list)
    publish_ms: dict[Position, int] = field(default_factory=dict)
    sizes: dict[Position, int] = field(default_factory=dict)
    """Messages in each batched entry (absent: one)."""
    keys: dict[tuple[Position, int], str] = field(default_factory=dict)
    """Each message's key (ordering key, else partition key, else ""), by entry and batch index (0 for an
    unbatched entry): what Key_Shared dispatch and the agent's per-key claims go by."""
    unresolved: int = 0

    def messages(self, positions: list[Position]) -> int:
        return sum(self.sizes.get(p, 1) for p in positions)


@dataclass
class Cell:
    """One subscription in one region."""

    region: str
    exists: bool
    mark_delete: str = "-"
    holes: int = 0
    backlog: int = 0
    consumers: int = 0
    unapplied: int = 0
    """Messages here whose origin another region acknowledged and this one has not: its lag in messages."""
    duplicates_from: dict[str, int] = field(default_factory=dict)
    """Per other region X: the messages consumers failing over from X to here would be given again now
    (whole entries X acknowledged, plus what this region's agent reports it cannot apply of batches other
    regions acknowledged in part: the admin-API path cannot write batch indexes)."""
    unapplied_batch_messages: int = 0
    """What the agent here reports it cannot apply of partly acknowledged batches (entry-granular path)."""
    key_order_from: dict[str, int] = field(default_factory=dict)
    """Key_Shared: per other region X, how many of ``duplicates_from[X]`` per-key order requires (invariant
    6): messages X acknowledged after an unacknowledged earlier message of the same key, which X's agent
    never claims (``keyorder.key_ordered``), and messages X claims that this region's agent does not apply
    behind an earlier message of their key and origin unacknowledged here (``keyorder.key_ordered_plan``).
    No sync removes them; a move is in step once only they remain."""
    owed_from: dict[str, list[str]] = field(default_factory=dict)
    """Per other region X: the first few messages X acknowledged that this region has not applied and
    could (``duplicates_from[X]`` less ``key_order_from[X]``), each as ``position (origin, key)``: what a
    failover check that waits for them names (evidence when the wait never ends)."""
    not_arrived_from: dict[str, int] = field(default_factory=dict)
    """Per other region X: entries X acknowledged that a third region published and that have not reached
    this region yet (past the last entry it holds from that region: replication keeps each origin's order).
    Consumers failing over from X to here would be given them as they arrive, before this region's agent
    could apply X's claims to them (the 30-minute chaos run of record 276: 5 such duplicates)."""
    oldest_unapplied_age_s: float | None = None
    lag_s: float | None = None
    """Since when the agent has had something to apply (its sync lag in time); None if not behind/unknown."""
    last_applied_at: float | None = None
    pending_holes: int | None = None
    received_from: dict[str, float] = field(default_factory=dict)
    kind: str = ""
    """The subscription's type as the broker reports it ("Key_Shared", ...; "" when not known)."""
    agent_reports: dict[str, Any] = field(default_factory=dict)
    """What this region's agent's ``/state`` says of the subscription (its cursor view, generation, what
    waits), as it said it: evidence, judged by nothing."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "exists": self.exists,
            "mark_delete": self.mark_delete,
            "holes": self.holes,
            "kind": self.kind,
            "backlog": self.backlog,
            "consumers": self.consumers,
            "unapplied": self.unapplied,
            "duplicates_from": dict(self.duplicates_from),
            "not_arrived_from": dict(self.not_arrived_from),
            "oldest_unapplied_age_s": _round(self.oldest_unapplied_age_s),
            "lag_s": _round(self.lag_s),
            "last_applied_at": self.last_applied_at,
            "pending_holes": self.pending_holes,
            "received_from": dict(self.received_from),
            "unapplied_batch_messages": self.unapplied_batch_messages,
            "key_order_from": dict(self.key_order_from),
        }


@dataclass
class Row:
    namespace: str
    topic: str
    subscription: str
    cells: dict[str, Cell]
    read: bool
    """False when no region had a backlog, so nothing was read (all cells trivially in sync)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "topic": self.topic,
            "subscription": self.subscription,
            "read": self.read,
            "regions": {name: c.as_dict() for name, c in self.cells.items()},
        }


@dataclass
class Observation:
    rows: list[Row]
    agents: dict[str, AgentView]
    namespaces: dict[str, list[str]]
    replication_backlog: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(topic, from region, to region) -> messages not yet replicated."""
    errors: list[str] = field(default_factory=list)
    unread: dict[str, str] = field(default_factory=dict)
    """Region -> the first thing that could not be read there (``unreachable (...)``: it did not answer)."""
    taken_at: float = field(default_factory=time.time)

    def could_not_read(self, region: str, what: str, e: Exception) -> None:
        self.errors.append(f"region {region}: {what}: {e}")
        self.unread.setdefault(region, problem(what, e))


UNREACHABLE = (adminhttp.AdminTemporary, messaging.MessagingUnavailable, pulsar.ConnectError, pulsar.Timeout)


def problem(what: str, e: Exception) -> str:
    """How a region that could not be read is described: ``unreachable (...)`` when it did not answer."""
    return f"unreachable ({e})" if isinstance(e, UNREACHABLE) else f"{what}: {e}"


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def synced_namespaces(
    sites: dict[str, Site], wanted: list[str] | None, *, unread: dict[str, str] | None = None
) -> dict[str, list[str]]:
    """Namespace -> regions it is replicated to (among the known sites, at least two), as the regions that
    answer see it; ``unread`` (if given) receives region -> problem for those that did not."""
    unread = {} if unread is None else unread
    found: dict[str, set[str]] = {}
    for name, site in sites.items():
        admin = site.admin(timeout=5.0)
        try:
            names = wanted or [ns for t in admin.tenants() if t != "pulsar" for ns in admin.namespaces(t)]
        except (adminhttp.AdminUnauthorized, adminhttp.AdminForbidden) as e:
            # A region that refuses our credentials must not look like a region with nothing to sync.
            raise GeoctlError(
                f"region {name} refused the request ({e.status}): {e}\n  -> give geoctl a token with "
                "GEOCTL_TOKEN, --token-file or token_file in --config",
                exit_code=EXIT_REFUSED,
            ) from e
        except adminhttp.AdminTlsError as e:
            # A configuration problem, not an outage: say so instead of showing a region with nothing.
            raise GeoctlError(
                f"region {name}: {e}\n  -> set ca_file in --config (top level or for this region)",
                exit_code=EXIT_UNREACHABLE,
            ) from e
        except adminhttp.AdminError as e:
            unread.setdefault(name, problem("cannot list namespaces", e))
            continue
        for ns in names:
            try:
                clusters = set(admin.replication_clusters(ns))
            except adminhttp.AdminNotFound:
                continue  # not a namespace of this region
            except adminhttp.AdminError as e:
                unread.setdefault(name, problem(f"cannot read the replication clusters of {ns}", e))
                continue
            if name in clusters:
                found.setdefault(ns, set()).update(c for c in clusters if c in sites)
    return {ns: sorted(rs) for ns, rs in sorted(found.items()) if len(rs) > 1}


def read_log(site: Site, topic: str, resolver: OriginResolver, *, max_entries: int) -> Log:
    """Read ``topic`` in ``site`` from the earliest retained entry to the end (bounded by ``max_entries``)."""
    log = Log()
    last: Position | None = None
    with messaging.client(
        site.region.service_url, token=site.token, timeout_s=10, tls_trust_certs_file=site.ca_file
    ) as client:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=1000)
        try:
            while len(log.positions) < max_entries and reader.has_message_available():
                try:
                    msg = reader.read_next(timeout_millis=5000)
                except pulsar.Timeout:
                    break
                mid = msg.message_id()
                position = Position(mid.ledger_id(), mid.entry_id())
                key = msg.ordering_key() or msg.partition_key() or ""
                log.keys.setdefault((position, max(mid.batch_index(), 0)), key)
                if last is not None and position <= last:
                    if position == last and mid.batch_index() >= 0:  # another message of the same batch
                        log.sizes[position] = max(log.sizes.get(position, 1), mid.batch_index() + 1)
                    continue
                last = position
                log.positions.append(position)
                log.publish_ms[position] = msg.publish_timestamp()
                origin = resolver.origin_of(
                    topic,
                    position,
                    properties=msg.properties(),
                    producer=msg.producer_name(),
                    batched=mid.batch_index() >= 0,
                )
                if isinstance(origin, Unresolved | Malformed):
                    log.unresolved += 1
                    continue
                log.index.append(position, origin)
        finally:
            reader.close()
    return log


def _claims(log: Log, cursor: AckState) -> OriginAcks:
    translated = translating.to_origin_acks(log.index, cursor)
    return translated.acks if isinstance(translated, translating.Translation) else OriginAcks.of({})


def key_ordered(log: Log, cursor: AckState) -> AckState:
    """What a Key_Shared subscription's agent claims of ``cursor`` (``keyorder.key_ordered``, by the keys
    and origins read from ``log``): the per-key prefixes of each origin, never an acknowledgement after a
    hole of the same key and origin."""

    def origin_of(p: Position) -> str | None:
        origin = log.index.origin_of(p)
        return None if origin is None else origin.region

    return keyorder.key_ordered(
        cursor,
        log.positions,
        lambda p: log.keys.get((p, 0)),
        size_of=lambda p: log.sizes.get(p, 1),
        key_of_message=lambda p, i: log.keys.get((p, i)),
        origin_of=origin_of,
    )


def _carried(log: Log, cursor: AckState, claims: OriginAcks) -> list[Position]:
    """What of a Key_Shared subscription's ``claims`` missing here this region's agent applies: not what lies
    behind an earlier message of its key and origin that stays unacknowledged here
    (``keyorder.key_ordered_plan``; a rebuilt region's claims pass messages its new life never had)."""
    missing = _missing_here(log, cursor, claims)
    if not missing:
        return missing
    kept = key_ordered(log, cursor.ack(*missing))
    return [p for p in missing if p in kept]


OWED_SHOWN = 5
"""Messages a cell names of those it owes another region (``Cell.owed_from``)."""


def _described(log: Log, p: Position) -> str:
    origin = log.index.origin_of(p)
    where = "origin unknown" if origin is None else f"from {origin}"
    return f"{p} ({where}, key {log.keys.get((p, 0), '?')!r})"


def _not_arrived(log: Log, claims: OriginAcks, skip: set[str]) -> int:
    """The entries ``claims`` names of origin regions not in ``skip`` that lie past the last entry ``log``
    holds from that region (all of them where it holds none): not replicated here yet, since replication
    keeps each origin's order."""
    last: dict[str, Position] = {}
    for p in log.positions:
        origin = log.index.origin_of(p)
        if origin is not None and (origin.region not in last or origin.position > last[origin.region]):
            last[origin.region] = origin.position
    count = 0
    for region in sorted(claims.origin_regions - skip):
        top = last.get(region)
        for span in claims.spans(region):
            if top is None or span.ledger > top.ledger:
                count += len(span)
            elif span.ledger == top.ledger and span.last > top.entry:
                count += span.last - max(span.first, top.entry + 1) + 1
        count += sum(1 for position, _ in claims.partials_of(region) if top is None or position > top)
    return count


def _missing_here(log: Log, cursor: AckState, claims: OriginAcks) -> list[Position]:
    out = []
    for p in log.positions:
        if p <= cursor.mark_delete or p in cursor:
            continue
        origin = log.index.origin_of(p)
        if origin is not None and origin in claims:
            out.append(p)
    return out


def observe(
    sites: dict[str, Site],
    *,
    namespaces: list[str] | None = None,
    tenant: str | None = None,
    subscriptions: Collection[str] | None = None,
    max_entries: int = 200_000,
    report: Report = lambda _m: None,
) -> Observation:
    """Observe every replicated subscription of ``namespaces`` (default: every namespace replicated to at
    least two known regions, optionally only those of ``tenant``), or only those named ``subscriptions``
    (topics without one of them are not read at all)."""
    unread: dict[str, str] = {}
    spread = synced_namespaces(sites, namespaces, unread=unread)
    if tenant is not None:
        spread = {ns: rs for ns, rs in spread.items() if ns.split("/")[0] == tenant}
    agents = {name: probe_agent(site) for name, site in sites.items()}
    obs = Observation(rows=[], agents=agents, namespaces=spread)
    for region, why in unread.items():
        obs.errors.append(f"region {region}: {why}")
        obs.unread[region] = why
    synced = _agent_subscriptions(agents)
    now = time.time()
    for ns, members in spread.items():
        stats: dict[str, dict[str, dict[str, Any]]] = {}  # topic -> region -> stats
        for region in members:
            if region in unread:  # already failed to answer: asking again only adds its timeouts
                continue
            admin = sites[region].admin(timeout=5.0)
            try:
                topics = [
                    t
                    for t in admin.topics(ns)
                    if t.startswith("persistent://") and t.split("/")[-1] not in INTERNAL_TOPICS
                ]
            except adminhttp.AdminError as e:
                obs.could_not_read(region, f"cannot list topics of {ns}", e)
                continue
            for topic in topics:
                try:
                    stats.setdefault(topic, {})[region] = admin.topic_stats(topic)
                except adminhttp.AdminError as e:
                    obs.could_not_read(region, f"no stats for {topic}", e)
        for topic, per_region in sorted(stats.items()):
            for src, st in per_region.items():
                for dst, repl in (st.get("replication") or {}).items():
                    obs.replication_backlog[(topic, src, dst)] = int(repl.get("replicationBacklog") or 0)
            subs = sorted(
                {
                    name
                    for st in per_region.values()
                    for name, sub in (st.get("subscriptions") or {}).items()
                    if sub.get("isDurable", True)
                    and not name.startswith(INTERNAL_CURSORS)
                    and (subscriptions is None or name in subscriptions)
                }
            )
            if not subs:
                continue
            report(f"{topic}: {len(subs)} subscription(s)")
            busy = any(
                int((st.get("subscriptions") or {}).get(s, {}).get("msgBacklog") or 0) > 0
                for st in per_region.values()
                for s in subs
            ) or any(s not in (st.get("subscriptions") or {}) for st in per_region.values() for s in subs)
            logs: dict[str, Log] = {}
            cursors: dict[str, dict[str, AckState]] = {}
            if busy:
                for region in per_region:
                    site = sites[region]
                    try:
                        logs[region] = read_log(
                            site,
                            topic,
                            adminorigins.header_resolver(region, site.admin(timeout=5.0)),
                            max_entries=max_entries,
                        )
                        raw = site.admin(timeout=5.0).internal_stats(topic).get("cursors") or {}
                    except (
                        adminhttp.AdminError,
                        pulsar.PulsarException,
                        messaging.MessagingUnavailable,
                    ) as e:
                        obs.could_not_read(region, f"cannot read {topic}", e)
                        continue
                    cursors[region] = {
                        name: AckState.parse(
                            c["markDeletePosition"], c.get("individuallyDeletedMessages") or "[]"
                        )
                        for name, c in raw.items()
                        if name in subs
                    }
            for sub in subs:
                obs.rows.append(_row(ns, topic, sub, per_region, logs, cursors, synced, now=now, read=busy))
    return obs


def _agent_subscriptions(agents: dict[str, AgentView]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(region, topic, subscription) -> what that region's agent reports (agents that publish it)."""
    out = {}
    for region, view in agents.items():
        for entry in (view.state or {}).get("synced") or []:
            out[(region, entry["topic"], entry["subscription"])] = entry
    return out


def _row(  # noqa: PLR0917
    ns: str,
    topic: str,
    sub: str,
    per_region: dict[str, dict[str, Any]],
    logs: dict[str, Log],
    cursors: dict[str, dict[str, AckState]],
    synced: dict[tuple[str, str, str], dict[str, Any]],
    *,
    now: float,
    read: bool,
) -> Row:
    cells: dict[str, Cell] = {}
    claims: dict[str, OriginAcks] = {}
    """What each region's agent claims (per-key prefixes only, for Key_Shared)."""
    acknowledged: dict[str, OriginAcks] = {}
    """What each region's consumers acknowledged."""
    key_shared = any(
        str(((st.get("subscriptions") or {}).get(sub) or {}).get("type") or "") == "Key_Shared"
        for st in per_region.values()
    ) or any((synced.get((region, topic, sub)) or {}).get("key_shared") for region in per_region)
    for region in per_region:
        cursor = cursors.get(region, {}).get(sub)
        if cursor is not None and region in logs:
            acknowledged[region] = _claims(logs[region], cursor)
            claims[region] = (
                _claims(logs[region], key_ordered(logs[region], cursor))
                if key_shared
                else acknowledged[region]
            )
    for region, st in per_region.items():
        raw = (st.get("subscriptions") or {}).get(sub)
        cell = Cell(region=region, exists=raw is not None)
        if raw is not None:
            cell.backlog = int(raw.get("msgBacklog") or 0)
            cell.kind = str(raw.get("type") or "")
            cell.consumers = sum(
                1
                for c in raw.get("consumers") or []
                if not str(c.get("consumerName", "")).startswith("geosync-")
            )
        agent = synced.get((region, topic, sub))
        if agent is not None:
            cell.agent_reports = dict(agent)
            cell.last_applied_at = agent.get("last_applied_at") or None
            cell.pending_holes = agent.get("pending_holes")
            cell.unapplied_batch_messages = int(agent.get("unapplied_batch_messages") or 0)
            cell.received_from = dict(agent.get("received_from") or {})
            if not cell.kind and agent.get("key_shared"):
                cell.kind = "Key_Shared"
            since = agent.get("behind_since")
            cell.lag_s = (now - since) if since else 0.0
        log = logs.get(region)
        cursor = cursors.get(region, {}).get(sub)
        if cursor is not None:
            cell.mark_delete = str(cursor.mark_delete)
        if log is not None:
            here = cursor if cursor is not None else AckState.of(Position(-1, -1))
            if cursor is not None:
                cell.holes = len(cursor.holes(log.positions))
            others = [claims[r] for r in claims if r != region]
            for other, acks in acknowledged.items():
                if other != region:
                    missed_at = _missing_here(log, here, acks)
                    missed = log.messages(missed_at)
                    cell.duplicates_from[other] = missed + cell.unapplied_batch_messages
                    owed = missed_at
                    if key_shared:
                        owed = _carried(log, here, claims[other])
                        cell.key_order_from[other] = missed - log.messages(owed)
                    if owed:
                        cell.owed_from[other] = [_described(log, p) for p in owed[:OWED_SHOWN]]
                    not_arrived = _not_arrived(log, acks, {region, other})
                    if not_arrived:
                        cell.not_arrived_from[other] = not_arrived
            missing = _missing_here(log, here, OriginAcks.of({}).merge(*others)) if others else []
            cell.unapplied = log.messages(missing) + cell.unapplied_batch_messages
            if missing:
                cell.oldest_unapplied_age_s = max(0.0, now - log.publish_ms[missing[0]] / 1000)
        elif not read:
            cell.duplicates_from = {r: 0 for r in per_region if r != region}
        cells[region] = cell
    return Row(namespace=ns, topic=topic, subscription=sub, cells=cells, read=read)
