"""``geoctl failover check``: may consumers move from one region to another now, and at what cost?

A move is safe when, for every replicated subscription of the namespaces both regions serve, the target
region has applied everything the source acknowledged (no duplicates), nothing the source's producers
wrote is still waiting to be replicated to the target, and the target's agent is up and ready. Otherwise
the verdict lists, per subscription, what it would cost now (duplicates) and what to wait for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from geoctl import access, observing
from geoctl.errors import EXIT_UNHEALTHY, GeoctlError
from geoctl.output import emit, output_option

err = Console(stderr=True, highlight=False)


@dataclass
class Verdict:
    source: str
    target: str
    safe: bool
    duplicates: int
    subscriptions: list[dict[str, Any]] = field(default_factory=list)
    wait_for: list[str] = field(default_factory=list)
    checked_at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "safe": self.safe,
            "duplicates": self.duplicates,
            "subscriptions": self.subscriptions,
            "wait_for": self.wait_for,
            "checked_at": self.checked_at,
        }


def judge(obs: observing.Observation, source: str, target: str) -> Verdict:
    """Turn an observation into a verdict for moving consumers from ``source`` to ``target``."""
    wait: list[str] = []
    agent = obs.agents.get(target)
    if agent is not None and agent.url and not (agent.alive and agent.ready):
        wait.append(f"the agent of {target} is not ready ({agent.error or 'see its /readyz'})")
    subs: list[dict[str, Any]] = []
    total = 0
    for row in obs.rows:
        src, dst = row.cells.get(source), row.cells.get(target)
        if src is None or dst is None or not src.exists:
            continue
        dup = dst.duplicates_from.get(source, 0)
        in_flight = obs.replication_backlog.get((row.topic, source, target), 0)
        reasons = []
        if not dst.exists:
            reasons.append(f"the subscription does not exist in {target} yet (its agent creates it)")
        if dup:
            reasons.append(f"{target} has not applied {dup} acknowledgement(s) of {source}")
            if dst.consumers and (dst.pending_holes or 0) > 0:
                reasons.append(
                    f"{dst.pending_holes} hole(s) held back while {dst.consumers} consumer(s) are "
                    f"connected in {target}: disconnect them until the move"
                )
        if in_flight:
            reasons.append(f"{in_flight} message(s) from {source} not yet replicated to {target}")
        if src.consumers:
            reasons.append(
                f"{src.consumers} consumer(s) still connected in {source}: they may still acknowledge; "
                "stop them, then check again"
            )
        total += dup
        if reasons or dup:
            subs.append(
                {
                    "topic": row.topic,
                    "subscription": row.subscription,
                    "duplicates": dup,
                    "in_flight": in_flight,
                    "lag_s": dst.lag_s,
                    "wait_for": reasons,
                }
            )
            wait.extend(f"{row.topic} / {row.subscription}: {r}" for r in reasons)
    blocking = [
        s
        for s in subs
        if s["duplicates"] or s["in_flight"] or any("does not exist" in r for r in s["wait_for"])
    ]
    safe = not blocking and not (agent is not None and agent.url and not (agent.alive and agent.ready))
    return Verdict(
        source=source, target=target, safe=safe, duplicates=total, subscriptions=subs, wait_for=wait
    )


def check(sites: dict[str, access.Site], source: str, target: str, namespaces: list[str] | None) -> Verdict:
    obs = observing.observe({n: sites[n] for n in (source, target)}, namespaces=namespaces)
    if not obs.namespaces:
        raise GeoctlError(
            f"no namespace is replicated between {source} and {target}"
            + (f" among {', '.join(namespaces)}" if namespaces else "")
            + "; nothing to fail over"
        )
    return judge(obs, source, target)


@click.group("failover")
def failover_group() -> None:
    """Moving consumers between regions on purpose."""


@failover_group.command("check")
@click.option("--from", "source", required=True, help="Region the consumers are in now.")
@click.option("--to", "target", required=True, help="Region the consumers would move to.")
@click.option("--namespace", "namespaces", multiple=True, help="Only this namespace (repeatable).")
@click.option("--wait", is_flag=True, help="Block until the move is safe (at most --timeout seconds).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds --wait may take.")
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between checks.")
@access.options
@output_option
def failover_check(  # noqa: PLR0917
    sites: dict[str, access.Site],
    source: str,
    target: str,
    namespaces: tuple[str, ...],
    wait: bool,
    timeout: float,
    interval: float,
    output: str,
) -> None:
    """Whether consumers may move from --from to --to now, what it would cost, and what to wait for.

    Safe means: for every replicated subscription both regions serve, the target has applied everything
    the source acknowledged (0 duplicates), nothing from the source is still in flight to the target, and
    the target's agent is ready. Consumers still connected in the source are reported (they may still
    acknowledge), but do not make the move unsafe by themselves.

    Exit code 0 when safe, 6 when not (with --wait: when still not safe after --timeout).
    """
    access.pick(sites, source)
    access.pick(sites, target)
    if source == target:
        raise GeoctlError("--from and --to name the same region")
    started = time.monotonic()
    verdict = check(sites, source, target, list(namespaces) or None)
    if wait and not verdict.safe:
        with err.status("waiting until the move is safe…", spinner="dots") if output == "text" else _Null():
            while not verdict.safe and time.monotonic() - started < timeout:
                time.sleep(interval)
                verdict = check(sites, source, target, list(namespaces) or None)
                if output == "text":
                    err.log(
                        f"{verdict.duplicates} duplicate(s), {len(verdict.wait_for)} thing(s) to wait for"
                    )
    data = verdict.as_dict()
    data["waited_s"] = round(time.monotonic() - started, 1)

    def text(_d: dict[str, Any]) -> None:
        out = Console(width=160, highlight=False)
        if verdict.subscriptions:
            table = Table("subscription", "duplicates now", "in flight", "wait for")
            for s in verdict.subscriptions:
                table.add_row(
                    f"{s['topic'].split('://', 1)[-1]} / {s['subscription']}",
                    str(s["duplicates"]),
                    str(s["in_flight"]),
                    "\n".join(s["wait_for"]),
                )
            out.print(table)
        if verdict.safe:
            click.echo(f"SAFE: consumers can move from {source} to {target} now (0 duplicates)")
        else:
            click.echo(
                f"NOT SAFE: moving from {source} to {target} now would deliver {verdict.duplicates} "
                "message(s) again; wait for the items above (or 'geoctl failover check --wait')"
            )

    emit(data, output, text)
    if not verdict.safe:
        raise SystemExit(EXIT_UNHEALTHY)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
