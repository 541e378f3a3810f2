"""``geoctl tenants migrate``: move a tenant from one region to another with consumers keeping their place.

The five steps of Tencent Cloud's migration, each idempotent, with progress kept in a state file so an
interrupted migration resumes where it stopped (``--resume``):

1. copy-metadata: the tenant (allowed clusters widened to the target), its namespaces with their simple
   policies (TTL, retention, backlog quotas, deduplication, schema rules) and partitioned topics, created
   in the target; every namespace's allowed clusters widened to the target in every region that holds it;
2. replicate: the target added to every namespace's replication clusters, in every region of that set
   (a namespace replicated to a, b, c moving from a to d becomes a, b, c, d); each source partition's last
   entry is recorded, because Pulsar's replicators start at the end of the log: what was published before
   exists only in the source and must be consumed there before the switch;
3. sync: the agents carry every subscription's consumption state, holes included, to the target; this
   step waits (bounded by ``--timeout``) until the target has applied everything the source acknowledged,
   nothing is in flight, and the pre-replication backlog is consumed;
4. switch: checks once more that moving is safe with no consumer left in the source, records the moment,
   and reports what clients must do;
5. cleanup: the source replaced by the target: the source leaves every namespace's replication clusters,
   every other region stays (a, b, c, d becomes b, c, d), written in the remaining regions first and in
   the source last (its brokers then delete the tenant's topics there).

Each region keeps its own copy of a namespace's policies (metadata stores are isolated), so a change is
written in every region of the namespace that geoctl knows; a region it does not know is reported, never
dropped from the set. ``plan_replicate`` and ``plan_cleanup`` are that rule, pure.

``--dry-run`` shows what each remaining step would do without writing anything; ``--until STEP`` stops
after a step (e.g. to move producers by hand before the switch).

Sync and switch go on ``failover check``'s verdict only when it is safe. One that cannot tell (the source
or the target could not be read) is waited out like one that is not safe, up to ``--timeout``, and then
stops the migration with exit code 8; there is no way to force it: a migration moves a tenant between
regions that both answer (its last step needs the source), and with the source down the move is a forced
failover, for which ``failover check`` says what the target knows.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from geoctl import access, failover, observing
from geoctl.errors import EXIT_REFUSED, EXIT_UNHEALTHY, EXIT_UNKNOWN, EXIT_UNREACHABLE, GeoctlError
from geoctl.output import emit, output_option
from geosync_adapters import admin as adm
from geosync_adapters import adminhttp

STEPS = ("copy-metadata", "replicate", "sync", "switch", "cleanup")
COPIED_POLICIES = (
    "message_ttl_in_seconds",
    "retention_policies",
    "backlog_quota_map",
    "deduplicationEnabled",
    "schema_compatibility_strategy",
    "is_allow_auto_update_schema",
    "schema_validation_enforced",
)
err = Console(stderr=True, highlight=False, log_path=False)
Say = Callable[[str], None]


class Migration:
    """One migration's progress, persisted after every step (atomically: write, then rename)."""

    def __init__(self, path: pathlib.Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def open(
        cls, path: pathlib.Path, *, tenant: str, source: str, target: str, resume: bool, dry: bool = False
    ) -> Migration:
        if path.exists():
            data = json.loads(path.read_text())
            if (data.get("tenant"), data.get("from"), data.get("to")) != (tenant, source, target):
                raise GeoctlError(
                    f"{path} belongs to the migration of {data.get('tenant')} from {data.get('from')} to "
                    f"{data.get('to')}; pass another --state-file"
                )
            if not resume and not dry and data.get("done"):
                raise GeoctlError(
                    f"a migration of {tenant} from {source} to {target} is in progress ({path}: done "
                    f"{', '.join(data['done'])}); continue it with --resume, or delete the file to start over"
                )
            return cls(path, data)
        if resume and not dry:
            raise GeoctlError(f"nothing to resume: {path} does not exist; run without --resume to start")
        return cls(
            path, {"tenant": tenant, "from": source, "to": target, "done": [], "started_at": time.time()}
        )

    def done(self, step: str) -> bool:
        return step in self.data["done"]

    def finish(self, step: str, **facts: Any) -> None:
        self.data["done"].append(step)
        self.data.setdefault("facts", {})[step] = {"at": time.time(), **facts}
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True))
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class ReplicationChange:
    """One namespace's replication clusters before and after a step, and the regions whose copy of the
    policy is written, in that order."""

    namespace: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    write_in: tuple[str, ...]


def plan_replicate(namespace: str, current: Iterable[str], source: str, target: str) -> ReplicationChange:
    """Step 2: add the target; every region already in the set stays. Written in the source, the target,
    then the others."""
    before = tuple(sorted(set(current)))
    after = tuple(sorted({*before, source, target}))
    rest = tuple(r for r in after if r not in (source, target))
    return ReplicationChange(namespace, before, after, (source, target, *rest))


def plan_cleanup(namespace: str, current: Iterable[str], source: str, target: str) -> ReplicationChange:
    """Step 5: the source replaced by the target; every other region stays. Written in the target, the
    others, and the source last (it must still replicate until the others no longer send to it)."""
    before = tuple(sorted(set(current)))
    after = tuple(sorted(({*before} - {source}) | {target}))
    rest = tuple(r for r in after if r != target)
    return ReplicationChange(namespace, before, after, (target, *rest, source))


def _apply(change: ReplicationChange, sites: dict[str, access.Site], *, dry: bool, say: Say) -> list[str]:
    """Write ``change.after`` in each region of ``change.write_in``; warnings for regions geoctl does not
    know or that refused (the source's own copy must succeed: its failure raises)."""
    known = [r for r in change.write_in if r in sites]
    unknown = [r for r in change.write_in if r not in sites]
    say(
        f"namespace {change.namespace}: replication clusters [{', '.join(change.before)}] -> "
        f"[{', '.join(change.after)}], written in {', '.join(known)}"
    )
    warnings = [
        f"{change.namespace}: region {r} is not in the topology/config: set its replication clusters to "
        f"[{', '.join(change.after)}] there yourself"
        for r in unknown
    ]
    for w in warnings:
        say(f"warning: {w}")
    if dry:
        return warnings
    for region in known:
        sites[region].admin().set_replication_clusters(change.namespace, list(change.after))
    return warnings


def _namespaces(admin: adm.AdminClient, tenant: str) -> list[str]:
    try:
        return sorted(admin.namespaces(tenant))
    except adminhttp.AdminNotFound as e:
        raise GeoctlError(f"tenant {tenant!r} does not exist in the source region", exit_code=12) from e


def _partitioned(admin: adm.AdminClient, ns: str) -> dict[str, int]:
    names = admin.get(f"/admin/v2/persistent/{ns}/partitioned") or []
    return {t: admin.partitioned_metadata(t) for t in names}


def copy_metadata(
    sites: dict[str, access.Site], src: access.Site, dst: access.Site, tenant: str, *, dry: bool, say: Say
) -> dict[str, Any]:
    s, d = src.admin(), dst.admin()
    info = s.tenant(tenant)
    allowed = sorted({*info.get("allowedClusters", []), src.name, dst.name})
    roles = list(info.get("adminRoles") or [])
    namespaces = {ns: s.namespace_policies(ns) for ns in _namespaces(s, tenant)}
    # regions that replicate a namespace with the source must accept the target in their own store too
    peers = sorted(
        {r for p in namespaces.values() for r in p.get("replication_clusters") or []} - {src.name, dst.name}
    )
    say(
        f"tenant {tenant}: allowed clusters {allowed} in "
        f"{', '.join([src.name, dst.name, *(p for p in peers if p in sites)])}"
    )
    if not dry:
        s.upsert_tenant(tenant, allowed_clusters=allowed, admin_roles=roles)
        d.upsert_tenant(tenant, allowed_clusters=allowed, admin_roles=roles)
        for peer in (p for p in peers if p in sites):
            sites[peer].admin().upsert_tenant(tenant, allowed_clusters=allowed, admin_roles=roles)
    created = []
    for ns, policies in namespaces.items():
        replication = policies.get("replication_clusters") or []
        ns_allowed = sorted({*(policies.get("allowed_clusters") or []), *replication, src.name, dst.name})
        body = {k: policies[k] for k in COPIED_POLICIES if policies.get(k) not in (None, {}, [])}
        body.update(replication_clusters=[dst.name], allowed_clusters=ns_allowed)
        others = [r for r in replication if r not in (src.name, dst.name) and r in sites]
        say(
            f"namespace {ns}: create in {dst.name} with {sorted(body)}; allowed clusters {ns_allowed} in "
            f"{', '.join([src.name, dst.name, *others])}"
        )
        if dry:
            continue
        s.set_allowed_clusters(ns, ns_allowed)
        for other in others:
            sites[other].admin().set_allowed_clusters(ns, ns_allowed)
        try:
            d.create_namespace_with_policies(ns, body)
            created.append(ns)
        except adminhttp.AdminConflict:
            d.set_allowed_clusters(ns, ns_allowed)
        for topic, partitions in _partitioned(s, ns).items():
            if partitions and not d.partitioned_metadata(topic):
                say(f"partitioned topic {topic}: {partitions} partitions in {dst.name}")
                d.create_partitioned_topic(topic, partitions)
    return {"created": created}


def replicate(
    sites: dict[str, access.Site], src: access.Site, dst: access.Site, tenant: str, *, dry: bool, say: Say
) -> dict[str, Any]:
    s = src.admin()
    start: dict[str, str] = {}
    warnings: list[str] = []
    for ns in _namespaces(s, tenant):
        change = plan_replicate(ns, s.replication_clusters(ns), src.name, dst.name)
        warnings += _apply(change, sites, dry=dry, say=say)
        if dry:
            continue
        for topic in s.topics(ns):
            if topic.startswith("persistent://") and topic.split("/")[-1] not in observing.INTERNAL_TOPICS:
                start[topic] = str(s.internal_stats(topic).get("lastConfirmedEntry", "-1:-1"))
    return {"replication_start": start, "warnings": warnings}


def _pre_replication_backlog(src: access.Site, dst: access.Site, start: dict[str, str]) -> list[str]:
    """Source subscriptions whose mark-delete is still below where replication to ``dst`` started, on topics
    no other region holds: those entries exist only in the source. Where a third region replicates the
    namespace too, it holds them (it was replicating before), and its consumers keep them."""
    from geosync_core.positions import Position

    out = []
    admin = src.admin()
    others: dict[str, bool] = {}
    for topic, last in start.items():
        ns = "/".join(topic.split("://", 1)[-1].split("/")[:2])
        if ns not in others:
            try:
                clusters = admin.replication_clusters(ns)
            except adminhttp.AdminError:
                clusters = []
            others[ns] = bool(set(clusters) - {src.name, dst.name})
        if others[ns]:
            continue
        floor = Position.parse(last)
        try:
            cursors = admin.internal_stats(topic).get("cursors") or {}
        except adminhttp.AdminNotFound:
            continue
        for name, c in cursors.items():
            if name.startswith(observing.INTERNAL_CURSORS):
                continue
            if floor.entry >= 0 and Position.parse(c["markDeletePosition"]) < floor:
                out.append(
                    f"{topic} / {name}: entries up to {last} were published before replication was enabled "
                    f"and exist only in {src.name}: consume them there first"
                )
    return out


def sync(
    sites: dict[str, access.Site],
    src: access.Site,
    dst: access.Site,
    tenant: str,
    start: dict[str, str],
    *,
    timeout: float,
    interval: float,
    show: bool,
) -> failover.Verdict:
    pair = {src.name: src, dst.name: dst}
    deadline = time.monotonic() + timeout
    with Progress(
        TextColumn("sync"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} subscriptions in step"),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        disable=not show,
    ) as progress:
        task = progress.add_task("", total=1)
        while True:
            obs = observing.observe(pair, tenant=tenant)
            verdict = failover.judge(obs, src.name, dst.name)
            try:
                pending = _pre_replication_backlog(src, dst, start)
            except adminhttp.AdminTemporary as e:  # the source not answering: cannot tell, like the check
                pending = []
                verdict.errors.append(f"region {src.name}: cannot read the pre-replication backlog: {e}")
                verdict.unread.setdefault(src.name, observing.problem("cannot read its cursors", e))
            rows = [r for r in obs.rows if src.name in r.cells and r.cells[src.name].exists]
            behind = {(s["topic"], s["subscription"]) for s in verdict.subscriptions if s["duplicates"]}
            progress.update(
                task,
                total=max(1, len(rows)),
                completed=len(rows) - len(behind),
                description=failover.progress_line(verdict)
                if verdict.outcome == failover.UNKNOWN
                else f"{verdict.duplicates} acknowledgement(s) to apply",
            )
            blocked = [w for w in verdict.wait_for if "consumer(s) still connected" not in w]
            if not blocked and not pending and verdict.outcome == failover.SAFE:
                return verdict
            if time.monotonic() > deadline:
                verdict.wait_for = [*pending, *verdict.wait_for]
                verdict.safe = False
                return verdict
            time.sleep(interval)


def client_report(src: access.Site, dst: access.Site, tenant: str, duplicates: int | None) -> dict[str, Any]:
    return {
        "producers": f"point producers of tenant {tenant} at {dst.region.service_url} (was "
        f"{src.region.service_url}); messages keep their order per producer; enable producer deduplication "
        "or idempotent handling for messages resent around the switch",
        "consumers": f"start consumers with the same subscription names against {dst.region.service_url}; "
        f"they resume where they stopped in {src.name}, holes included: every message acknowledged in "
        f"{src.name} stays acknowledged"
        + ("" if duplicates is None else f" ({duplicates} duplicate(s) at the switch)"),
        "order": "Key_Shared subscriptions keep per-key order (acknowledgements behind an unacknowledged "
        "message of the same key are delivered again rather than out of order)",
        "admin": f"admin tools for tenant {tenant} must use {dst.region.admin_url} from now on",
    }


@click.group("tenants")
def tenants_group() -> None:
    """Tenants across regions."""


@tenants_group.command("migrate")
@click.argument("tenant")
@click.option("--from", "source", required=True, help="Region the tenant lives in now.")
@click.option("--to", "target", required=True, help="Region the tenant moves to.")
@click.option("--dry-run", is_flag=True, help="Show what each remaining step would do; write nothing.")
@click.option("--resume", is_flag=True, help="Continue an interrupted migration from its state file.")
@click.option(
    "--until", type=click.Choice(STEPS), default="cleanup", show_default=True, help="Stop after this step."
)
@click.option(
    "--state-file",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    help="Where progress is kept (default ./geoctl-migrate-TENANT-FROM-TO.json).",
)
@click.option(
    "--timeout", type=float, default=300.0, show_default=True, help="Seconds the sync step may wait."
)
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between sync checks.")
@access.options
@output_option
def migrate(  # noqa: PLR0917
    sites: dict[str, access.Site],
    tenant: str,
    source: str,
    target: str,
    dry_run: bool,
    resume: bool,
    until: str,
    state_file: pathlib.Path | None,
    timeout: float,
    interval: float,
    output: str,
) -> None:
    """Move TENANT from --from to --to in five resumable steps: copy-metadata, replicate, sync, switch,
    cleanup (Tencent Cloud's migration, with holes synced by the GeoSync agents).

    \b
    Before the switch step, stop the tenant's consumers in the source: the switch refuses while any is
    connected there, because they could still acknowledge. The report at the end says what producers,
    consumers and admin tools must change. Progress is saved after every step; after an interruption or
    a failure run the same command with --resume.

    \b
    Sync and switch need 'failover check' to say safe. When it cannot tell (the source or the target
    could not be read) they wait up to --timeout like for anything else, then stop: nothing is switched,
    and there is no override (with the source down, use 'geoctl failover check', which says what the
    target knows for a forced failover).

    \b
    Exit codes: 6 sync not reached within --timeout or consumers still connected at the switch (resume
    later); 8 cannot tell at sync or switch (a region could not be read; resume when it answers);
    4 an admin API refused a change; 5 a region did not answer a step that writes or reads it.
    """
    src, dst = access.pick(sites, source), access.pick(sites, target)
    if source == target:
        raise GeoctlError("--from and --to name the same region")
    path = state_file or pathlib.Path(f"geoctl-migrate-{tenant}-{source}-{target}.json")
    state = Migration.open(path, tenant=tenant, source=source, target=target, resume=resume, dry=dry_run)
    text_out = output == "text"
    log: list[str] = []

    def say(line: str) -> None:
        log.append(line)
        if text_out:
            err.log(("(dry run) " if dry_run else "") + line, markup=False)

    last = STEPS.index(until)
    verdict: failover.Verdict | None = None
    try:
        for i, step in enumerate(STEPS[: last + 1], start=1):
            if state.done(step):
                say(f"{i}/5 {step}: done earlier, skipped")
                continue
            say(f"{i}/5 {step}")
            if step == "copy-metadata":
                facts = copy_metadata(sites, src, dst, tenant, dry=dry_run, say=say)
            elif step == "replicate":
                facts = replicate(sites, src, dst, tenant, dry=dry_run, say=say)
            elif step == "sync":
                if dry_run:
                    say(f"wait until {target} has applied every acknowledgement of {source} (holes included)")
                    continue
                start = state.data.get("facts", {}).get("replicate", {}).get("replication_start", {})
                verdict = sync(
                    sites, src, dst, tenant, start, timeout=timeout, interval=interval, show=text_out
                )
                if verdict.outcome != failover.SAFE:
                    raise _NotYet(f"not in step after {timeout:.0f} s", verdict)
                facts = {"duplicates": verdict.duplicates}
            elif step == "switch":
                if dry_run:
                    say(f"check: 0 duplicates and no consumer in {source}, then report what clients must do")
                    continue
                # Agents may still be creating subscriptions they just learned of (e.g. one another region's
                # consumers acknowledged on), a region may not answer for a moment: look again until the
                # timeout before giving up.
                deadline = time.monotonic() + timeout
                while True:
                    verdict = failover.check({source: src, target: dst}, source, target, None, tenant=tenant)
                    connected = [w for w in verdict.wait_for if "still connected" in w]
                    ready = verdict.outcome == failover.SAFE and not verdict.wait_for
                    if ready or connected or time.monotonic() > deadline:
                        break
                    time.sleep(interval)
                if connected:
                    raise _NotYet("consumers still connected in the source", verdict)
                if not ready:
                    raise _NotYet("not in step", verdict)
                facts = {"duplicates": sum(s["duplicates"] for s in verdict.subscriptions)}
            else:
                planned = None
                if dry_run:
                    admin = src.admin()
                    planned = {
                        ns: list(plan_replicate(ns, admin.replication_clusters(ns), source, target).after)
                        for ns in _namespaces(admin, tenant)
                    }
                facts = cleanup(sites, src, dst, tenant, dry=dry_run, say=say, planned=planned)
            if not dry_run:
                state.finish(step, **facts)
    except _NotYet as stop:
        unknown = stop.verdict.outcome == failover.UNKNOWN
        data = {
            "tenant": tenant,
            "done": state.data["done"],
            "stopped": stop.args[0],
            "verdict": stop.verdict.outcome,
            "wait_for": stop.verdict.wait_for,
            "unread": stop.verdict.unread,
            "errors": stop.verdict.errors,
            "state_file": str(path),
        }
        if unknown:
            data["stopped"] = "cannot tell whether consumers would keep their place: " + (
                "; ".join(f"region {r} {why}" for r, why in stop.verdict.unread.items())
                or "; ".join(stop.verdict.errors[:3])
            )
        emit(data, output, _stopped_text)
        raise SystemExit(EXIT_UNKNOWN if unknown else EXIT_UNHEALTHY) from None
    except adminhttp.AdminError as e:
        raise GeoctlError(
            f"{e}; progress is saved in {path}: fix the cause and run again with --resume",
            exit_code=EXIT_UNREACHABLE if isinstance(e, adminhttp.AdminTemporary) else EXIT_REFUSED,
        ) from e
    report = (
        client_report(src, dst, tenant, None if verdict is None else verdict.duplicates)
        if state.done("switch") or dry_run
        else None
    )
    data = {
        "tenant": tenant,
        "from": source,
        "to": target,
        "dry_run": dry_run,
        "done": state.data["done"],
        "steps": log,
        "clients": report,
        "state_file": str(path),
    }

    def text(d: dict[str, Any]) -> None:
        click.echo(f"done: {', '.join(d['done']) or 'nothing yet'}" + (" (dry run)" if dry_run else ""))
        if d["clients"]:
            click.echo("what clients must do at the switch:")
            for who, what in d["clients"].items():
                click.echo(f"  {who}: {what}")

    emit(data, output, text)


def cleanup(
    sites: dict[str, access.Site],
    src: access.Site,
    dst: access.Site,
    tenant: str,
    *,
    dry: bool,
    say: Say,
    planned: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """``planned``: each namespace's replication clusters as step 2 left them (a dry run has not run step
    2, so it shows the cleanup of what step 2 would have set); else the target's current copy."""
    d = dst.admin()
    warnings: list[str] = []
    for ns in list(planned) if planned is not None else _namespaces(d, tenant):
        current = planned[ns] if planned is not None else d.replication_clusters(ns)
        change = plan_cleanup(ns, current, src.name, dst.name)
        say(f"namespace {ns}: {src.name} leaves, its brokers then delete its copies of the topics")
        warnings += _apply(change, sites, dry=dry, say=say)
    return {"warnings": warnings}


class _NotYet(Exception):
    def __init__(self, message: str, verdict: failover.Verdict) -> None:
        super().__init__(message)
        self.verdict = verdict


def _stopped_text(d: dict[str, Any]) -> None:
    click.echo(f"stopped: {d['stopped']}; done so far: {', '.join(d['done']) or 'nothing'}")
    for w in d["wait_for"]:
        click.echo(f"  wait for: {w}")
    for e in d["errors"]:
        click.echo(f"  could not read: {e}")
    click.echo(f"progress is saved in {d['state_file']}; run the same command with --resume to continue")
