"""``geoctl status``: is GeoSync keeping replicated subscriptions in step, region by region?"""

from __future__ import annotations

import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from geoctl import access, observing
from geoctl.errors import EXIT_UNHEALTHY
from geoctl.output import emit, output_option

err = Console(stderr=True, highlight=False)


def _ago(ts: float | None, now: float) -> str:
    return "-" if not ts else f"{max(0.0, now - ts):.1f} s ago"


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def observation_dict(obs: observing.Observation) -> dict[str, Any]:
    return {
        "taken_at": obs.taken_at,
        "namespaces": obs.namespaces,
        "agents": {name: view.as_dict() for name, view in obs.agents.items()},
        "subscriptions": [row.as_dict() for row in obs.rows],
        "errors": obs.errors,
    }


@click.command("status")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Only this namespace (tenant/ns); repeat for several. Default: every namespace replicated to "
    "two or more known regions.",
)
@click.option("--all", "show_all", is_flag=True, help="Also list subscriptions that are fully in sync.")
@click.option(
    "--max-entries",
    type=click.IntRange(1),
    default=200_000,
    show_default=True,
    help="At most this many entries are read per topic partition and region.",
)
@access.options
@output_option
def status(
    sites: dict[str, access.Site], namespaces: tuple[str, ...], show_all: bool, max_entries: int, output: str
) -> None:
    """Per replicated subscription and region: mark-delete, holes, and what other regions acknowledged
    that this region has not applied yet; plus each region's agent health.

    \b
    Columns (text output):
      mark-delete   position up to which this region's subscription acknowledged everything
      holes         unacknowledged entries between mark-delete and the highest acknowledged one
      unapplied     entries another region acknowledged that this one has not (sync lag in messages);
                    also the duplicates consumers would get if they failed over here from the region
                    that acknowledged the most
      lag           how long this region's agent has had acknowledgements to apply (from its /state)
      applied       when this region's agent last moved this cursor
      held holes    holes the agent holds back because application consumers are connected here

    geoctl computes these itself, by reading each topic partition with a backlog in every region and
    translating cursors to origin coordinates; it does not take the agents' word for them. Topics with
    no backlog anywhere are not read. Stalled replicators (Pulsar's own geo-replication holding a backlog
    and sending nothing for the agent's replicator_stall_s) are the agents' word: each agent watches its
    region's. Exit code 6 when an agent is down or not ready.
    """
    report = err.log if output == "text" else (lambda _m: None)
    with err.status("reading regions…", spinner="dots") if output == "text" else _Null():
        obs = observing.observe(
            sites, namespaces=list(namespaces) or None, max_entries=max_entries, report=report
        )
    data = observation_dict(obs)
    unhealthy = [n for n, a in obs.agents.items() if a.url and not (a.alive and a.ready)]

    def text(_d: dict[str, Any]) -> None:
        now = time.time()
        out = Console(width=200, highlight=False)
        agents = Table("region", "agent", "alive", "ready", "claims from", "note", title="agents")
        for name, view in obs.agents.items():
            agents.add_row(
                name,
                view.url or "-",
                "yes" if view.alive else "NO",
                "yes" if view.ready else "NO",
                view.claims,
                view.error or _unresolved_note(view.unresolved),
            )
        out.print(agents)
        held = [
            (name, path, why)
            for name, view in obs.agents.items()
            for path, why in view.held_deletions.items()
        ]
        if held:
            holds = Table("region", "policy", "why", title="deletions held (they would destroy data here)")
            for name, path, why in held:
                holds.add_row(name, path, why)
            out.print(holds)
            out.print(
                "  applied once the region has drained, or: geoctl policies release --region R NAMESPACE"
            )
        stalls = [(name, s) for name, view in obs.agents.items() for s in view.stalled_replicators]
        if stalls:
            stalled = Table(
                "from",
                "to",
                "topic",
                "entries behind",
                "connected",
                "sent nothing for",
                title="stalled replicators",
            )
            for name, s in stalls:
                stalled.add_row(
                    name,
                    str(s.get("to")),
                    str(s.get("topic")),
                    str(s.get("backlog")),
                    "yes" if s.get("connected") else "NO",
                    _secs(s.get("stalled_for_s")),
                )
            out.print(stalled)
        table = Table(
            "subscription",
            "region",
            "mark-delete",
            "holes",
            "unapplied",
            "dup. if failover from",
            "lag",
            "oldest unapplied",
            "applied",
            "held holes",
            "consumers",
            title="replicated subscriptions",
        )
        shown = 0
        for row in obs.rows:
            if not show_all and all(c.unapplied == 0 and c.exists for c in row.cells.values()):
                continue
            shown += 1
            name = f"{row.topic.split('://', 1)[-1]} / {row.subscription}"
            for i, (region, c) in enumerate(sorted(row.cells.items())):
                table.add_row(
                    name if i == 0 else "",
                    region,
                    c.mark_delete if c.exists else "(missing)",
                    str(c.holes),
                    str(c.unapplied),
                    ", ".join(f"{r}: {n}" for r, n in sorted(c.duplicates_from.items())) or "-",
                    _secs(c.lag_s),
                    _secs(c.oldest_unapplied_age_s),
                    _ago(c.last_applied_at, now),
                    "-" if c.pending_holes is None else str(c.pending_holes),
                    str(c.consumers),
                )
        if shown:
            out.print(table)
        in_sync = len(obs.rows) - shown
        click.echo(
            f"{len(obs.rows)} replicated subscription(s) in {len(obs.namespaces)} namespace(s); "
            f"{in_sync} fully in sync{' (hidden; --all shows them)' if in_sync and not show_all else ''}"
        )
        for e in obs.errors:
            click.echo(f"warning: {e}")
        if unhealthy:
            click.echo(f"UNHEALTHY: agent(s) {', '.join(unhealthy)} down or not ready")
        for name, view in sorted(obs.agents.items()):
            if view.unretained:
                click.echo(
                    f"warning: in {name}, {', '.join(view.unretained)} keep(s) no acknowledged message: "
                    "messages replicated there before GeoSync creates their subscription can be deleted by "
                    "a broker restart or ledger rollover (set a retention: pulsar-admin namespaces "
                    "set-retention NS --time 1h --size 1G)"
                )
        if stalls:
            click.echo(
                f"STALLED: {len(stalls)} Pulsar replicator(s) hold a backlog and send nothing: the region "
                "they replicate to is missing those messages (see 'stalled replicators'; check the brokers' "
                "replicators with pulsar-admin topics stats)"
            )

    emit(data, output, text)
    if unhealthy:
        raise SystemExit(EXIT_UNHEALTHY)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _unresolved_note(count: int) -> str:
    if not count:
        return ""
    return (
        f"{count} entries of unknown origin (retrying; mark-delete stops below them, "
        "a failover here redelivers them)"
    )
