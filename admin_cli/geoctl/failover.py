"""``geoctl failover check``: may consumers move from one region to another now, and at what cost?

A move is safe when, for every replicated subscription of the namespaces both regions serve, the target
region has applied everything the source acknowledged (no duplicates; in a Key_Shared subscription, no
duplicates beyond the per-key minimum that invariant 6 requires, ``observing.Cell.key_order_from``),
nothing the source's producers wrote is still waiting to be replicated to the target, nor anything a third
region published that the source acknowledged (while that region's replicator into the target has a backlog),
and the target's agent is up and ready. Otherwise
the verdict lists, per subscription, what it would cost now (duplicates) and what to wait for.

A verdict is one of three (``Verdict.outcome``): safe, not safe, or unknown. It is unknown whenever
something could not be read, above all the source region: what the source acknowledged is known only
there, and the target alone may look in step while proving nothing. ``failover check`` exits 8 on it,
``tenants migrate`` refuses to switch on it, and the client provider counts it as not exact: one notion.
With the source down, the verdict gives what the target knows by itself (``standby``: when its agent
last received the source's acknowledgements, when it last applied) for an operator who fails over
because the source is down: a forced failover, whose duplicates nobody can count until the source is back.
"""

from __future__ import annotations

import http.server
import logging
import pathlib
import signal
import socket
import sys
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import click
import requests
from rich.console import Console
from rich.table import Table

from geoctl import access, observing, providing
from geoctl.errors import (
    EXIT_BY_STATUS,
    EXIT_REFUSED,
    EXIT_UNHEALTHY,
    EXIT_UNKNOWN,
    EXIT_UNREACHABLE,
    GeoctlError,
)
from geoctl.output import emit, output_option
from geosync_core import switching

err = Console(stderr=True, highlight=False)

Outcome = Literal["safe", "not-safe", "unknown"]
SAFE: Outcome = "safe"
NOT_SAFE: Outcome = "not-safe"
UNKNOWN: Outcome = "unknown"
EXIT_BY_OUTCOME = {SAFE: 0, NOT_SAFE: EXIT_UNHEALTHY, UNKNOWN: EXIT_UNKNOWN}


@dataclass
class Verdict:
    source: str
    target: str
    safe: bool
    duplicates: int
    key_order_duplicates: int = 0
    """Of ``duplicates``, those per-key order requires in Key_Shared subscriptions (invariant 6: a key's
    message acknowledged after an unacknowledged earlier one of that key is never carried). A move is safe
    with them: no wait removes them."""
    subscriptions: list[dict[str, Any]] = field(default_factory=list)
    wait_for: list[str] = field(default_factory=list)
    checked_at: float = field(default_factory=time.time)
    checked: int = 0
    """Subscriptions judged (those the source region has)."""
    errors: list[str] = field(default_factory=list)
    """What could not be read (a region down, a topic unreadable): the verdict is then unknown."""
    unread: dict[str, str] = field(default_factory=dict)
    """Region -> why it could not be read (``unreachable (...)`` when it did not answer)."""
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    standby: list[dict[str, Any]] = field(default_factory=list)
    """With the source unread: each subscription as the target shows it by itself, with its agent's last
    state (when it last received the source's acknowledgements, when it last applied)."""

    @property
    def outcome(self) -> Outcome:
        """Unknown when anything could not be read, else safe or not safe (``safe`` is what was read)."""
        if self.errors or self.unread:
            return UNKNOWN
        return SAFE if self.safe else NOT_SAFE

    @property
    def source_unread(self) -> str | None:
        return self.unread.get(self.source)

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "verdict": self.outcome,
            "safe": self.outcome == SAFE,
            "duplicates": self.duplicates,
            "key_order_duplicates": self.key_order_duplicates,
            "subscriptions": self.subscriptions,
            "wait_for": self.wait_for,
            "checked_at": self.checked_at,
            "checked": self.checked,
            "errors": self.errors,
            "unread": self.unread,
            "agents": self.agents,
            "standby": self.standby,
        }


def judge(obs: observing.Observation, source: str, target: str) -> Verdict:
    """Turn an observation into a verdict for moving consumers from ``source`` to ``target``."""
    wait: list[str] = []
    agent = obs.agents.get(target)
    if agent is not None and agent.url and not (agent.alive and agent.ready):
        wait.append(f"the agent of {target} is not ready ({agent.error or 'see its /readyz'})")
    subs: list[dict[str, Any]] = []
    total = checked = key_order_total = 0
    for row in obs.rows:
        src, dst = row.cells.get(source), row.cells.get(target)
        if src is None or dst is None or not src.exists:
            continue
        checked += 1
        dup = dst.duplicates_from.get(source, 0)
        # Key_Shared: what per-key order requires (invariant 6) is never carried; in step once only it's left.
        key_order = min(dst.key_order_from.get(source, 0), dup)
        unsynced = dup - key_order
        in_flight = obs.replication_backlog.get((row.topic, source, target), 0)
        # What the source acknowledged of a third region's messages that have not reached the target: counted
        # while some third region's replicator into the target has a backlog (record 276's chaos run).
        third = sum(
            n
            for (t, r, d), n in obs.replication_backlog.items()
            if t == row.topic and d == target and r not in (source, target)
        )
        not_arrived = dst.not_arrived_from.get(source, 0) if third else 0
        reasons = []
        if not dst.exists:
            reasons.append(f"the subscription does not exist in {target} yet (its agent creates it)")
        if unsynced:
            reasons.append(f"{target} has not applied {unsynced} acknowledgement(s) of {source}")
            if dst.consumers and (dst.pending_holes or 0) > 0:
                reasons.append(
                    f"{dst.pending_holes} hole(s) held back while {dst.consumers} consumer(s) are "
                    f"connected in {target}: disconnect them until the move"
                )
        if in_flight:
            reasons.append(f"{in_flight} message(s) from {source} not yet replicated to {target}")
        if not_arrived:
            reasons.append(
                f"{not_arrived} entr(y/ies) of other regions that {source} acknowledged not yet replicated "
                f"to {target}"
            )
        if src.consumers:
            reasons.append(
                f"{src.consumers} consumer(s) still connected in {source}: they may still acknowledge; "
                "stop them, then check again"
            )
        total += dup
        key_order_total += key_order
        if reasons or dup:
            subs.append(
                {
                    "topic": row.topic,
                    "subscription": row.subscription,
                    "duplicates": dup,
                    "key_order_duplicates": key_order,
                    "in_flight": in_flight,
                    "not_arrived": not_arrived,
                    "lag_s": dst.lag_s,
                    "wait_for": reasons,
                    "owed": list(dst.owed_from.get(source, [])),
                    "cells": {c.region: {**c.as_dict(), "agent": c.agent_reports} for c in (src, dst)},
                }
            )
            wait.extend(f"{row.topic} / {row.subscription}: {r}" for r in reasons)
    blocking = [
        s
        for s in subs
        if s["duplicates"] > s["key_order_duplicates"]
        or s["in_flight"]
        or s["not_arrived"]
        or any("does not exist" in r for r in s["wait_for"])
    ]
    safe = not blocking and not (agent is not None and agent.url and not (agent.alive and agent.ready))
    return Verdict(
        source=source,
        target=target,
        safe=safe and not obs.errors,
        duplicates=total,
        key_order_duplicates=key_order_total,
        subscriptions=subs,
        wait_for=wait,
        checked=checked,
        errors=list(obs.errors),
        unread=dict(obs.unread),
        agents={name: view.as_dict() for name, view in obs.agents.items()},
        standby=_standby(obs, source, target) if source in obs.unread else [],
    )


def _standby(obs: observing.Observation, source: str, target: str) -> list[dict[str, Any]]:
    """What ``target`` shows of each subscription by itself, for a failover with ``source`` unread."""
    out = []
    for row in obs.rows:
        dst = row.cells.get(target)
        if dst is None:
            continue
        out.append(
            {
                "topic": row.topic,
                "subscription": row.subscription,
                "exists": dst.exists,
                "backlog": dst.backlog,
                "consumers": dst.consumers,
                "received_from_source_at": dst.received_from.get(source),
                "last_applied_at": dst.last_applied_at,
                "lag_s": dst.lag_s,
            }
        )
    return out


def check(
    sites: dict[str, access.Site],
    source: str,
    target: str,
    namespaces: list[str] | None,
    *,
    subscriptions: Collection[str] | None = None,
    tenant: str | None = None,
) -> Verdict:
    """The verdict for moving consumers from ``source`` to ``target`` now, over every replicated
    subscription of ``namespaces`` (or of ``tenant``'s, or only those named ``subscriptions``)."""
    obs = observing.observe(
        {n: sites[n] for n in (source, target)},
        namespaces=namespaces,
        tenant=tenant,
        subscriptions=subscriptions,
    )
    if not obs.namespaces and not obs.unread:
        raise GeoctlError(
            f"no namespace is replicated between {source} and {target}"
            + (f" among {', '.join(namespaces)}" if namespaces else "")
            + "; nothing to fail over"
        )
    return judge(obs, source, target)


def figures(verdict: Verdict) -> switching.Figures:
    """A verdict as the figures the client provider decides and records switches by: exact only when the
    verdict is safe, so never when something could not be read (with the source region down, what was read
    may look in step: it proves nothing, and the duplicates it counts are not a prediction: unknown)."""
    known = verdict.outcome != UNKNOWN
    return switching.Figures(
        exact=verdict.outcome == SAFE,
        error="; ".join(verdict.errors[:5]) or None,
        duplicates=verdict.duplicates if known else None,
        in_flight=sum(int(s["in_flight"]) for s in verdict.subscriptions),
        wait_for=tuple(verdict.wait_for),
        checked_at=verdict.checked_at,
        subscriptions=verdict.checked,
    )


@click.group("failover")
def failover_group() -> None:
    """Moving consumers between regions on purpose."""


@failover_group.command("check")
@click.option("--from", "source", required=True, help="Region the consumers are in now.")
@click.option("--to", "target", required=True, help="Region the consumers would move to.")
@click.option("--namespace", "namespaces", multiple=True, help="Only this namespace (repeatable).")
@click.option("--subscription", "subscriptions", multiple=True, help="Only this subscription (repeatable).")
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
    subscriptions: tuple[str, ...],
    wait: bool,
    timeout: float,
    interval: float,
    output: str,
) -> None:
    """Whether consumers may move from --from to --to now, what it would cost, and what to wait for.

    Safe means: for every replicated subscription both regions serve, the target has applied everything
    the source acknowledged (0 duplicates; in a Key_Shared subscription, all but what per-key order
    requires: a key's message acknowledged after an unacknowledged earlier one is never carried), nothing
    from the source is still in flight to the target, and the target's agent is ready. Consumers still
    connected in the source are reported (they may still acknowledge), but do not make the move unsafe
    by themselves.

    \b
    Cannot tell (verdict "unknown") means something could not be read, above all the source region: what
    its consumers acknowledged is known only there, so nobody can say the move is safe. With the source
    down the output gives what the target knows by itself (when its agent last received the source's
    acknowledgements and last applied them): failing over then is a forced failover, whose duplicates
    cannot be counted until the source answers again.

    \b
    Exit codes: 0 safe; 6 not safe; 8 cannot tell (a region or topic could not be read); with --wait, the
    verdict after --timeout. 4 credentials refused, 5 TLS certificate not verified.
    """
    access.pick(sites, source)
    access.pick(sites, target)
    if source == target:
        raise GeoctlError("--from and --to name the same region")
    started = time.monotonic()
    wanted = list(subscriptions) or None
    verdict = check(sites, source, target, list(namespaces) or None, subscriptions=wanted)
    if wait and verdict.outcome != SAFE:
        with err.status("waiting until the move is safe…", spinner="dots") if output == "text" else _Null():
            while verdict.outcome != SAFE and time.monotonic() - started < timeout:
                time.sleep(interval)
                verdict = check(sites, source, target, list(namespaces) or None, subscriptions=wanted)
                if output == "text":
                    err.log(progress_line(verdict))
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
        for problem in verdict.errors:
            click.echo(f"could not read: {problem}", err=True)
        if verdict.outcome == SAFE and verdict.key_order_duplicates:
            click.echo(
                f"SAFE: consumers can move from {source} to {target} now ({verdict.key_order_duplicates} "
                "duplicate(s) that Key_Shared per-key order requires: no wait removes them)"
            )
        elif verdict.outcome == SAFE:
            click.echo(f"SAFE: consumers can move from {source} to {target} now (0 duplicates)")
        elif verdict.outcome == NOT_SAFE:
            click.echo(
                f"NOT SAFE: moving from {source} to {target} now would deliver {verdict.duplicates} "
                "message(s) again; wait for the items above (or 'geoctl failover check --wait')"
            )
        else:
            _unknown_text(verdict, out)

    emit(data, output, text)
    if verdict.outcome != SAFE:
        raise SystemExit(EXIT_BY_OUTCOME[verdict.outcome])


def progress_line(verdict: Verdict) -> str:
    """One line on where a repeated check stands."""
    if verdict.outcome == UNKNOWN:
        return "cannot tell: " + "; ".join(f"region {r} {why}" for r, why in verdict.unread.items())
    return f"{verdict.duplicates} duplicate(s), {len(verdict.wait_for)} thing(s) to wait for"


def _unknown_text(verdict: Verdict, out: Console) -> None:
    source, target = verdict.source, verdict.target
    why = "; ".join(f"region {r} {problem}" for r, problem in verdict.unread.items()) or "; ".join(
        verdict.errors[:3]
    )
    click.echo(f"CANNOT TELL whether consumers can move from {source} to {target}: {why}")
    if verdict.source_unread is None:
        click.echo(f"nothing is known of what was not read: check again once {target} answers")
        return
    if verdict.standby:
        table = Table(
            "subscription", f"in {target}", "backlog", f"{source}'s acks last received", "last applied"
        )
        for s in verdict.standby:
            table.add_row(
                f"{s['topic'].split('://', 1)[-1]} / {s['subscription']}",
                "yes" if s["exists"] else "no",
                str(s["backlog"]),
                _when_or_never(s["received_from_source_at"]),
                _when_or_never(s["last_applied_at"]),
            )
        out.print(f"what {target} shows by itself ({source}'s side is unknown):")
        out.print(table)
    for name, agent in verdict.agents.items():
        state = "alive, ready" if agent["alive"] and agent["ready"] else (agent["error"] or "not ready")
        click.echo(f"agent of {name}: {state}")
    click.echo(
        f"If you are failing over because {source} is down, this is a forced failover: {target} has "
        f"applied {source}'s acknowledgements only as far as its agent received them (times above); what "
        f"consumers acknowledged in {source} after that will be delivered again in {target}, and how much "
        f"cannot be known until {source} answers. Otherwise wait until {source} answers and check again."
    )


def _when_or_never(epoch: float | None) -> str:
    return "never" if not epoch else _when(epoch)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- the client provider (PIP-121) -------------------------------------------------------------------


class Duration(click.ParamType[float, Any]):
    """Seconds, written ``90``, ``90s``, ``2m``, ``1h`` or ``1m30s``."""

    name = "duration"
    UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        text, total, number = str(value).strip().lower(), 0.0, ""
        try:
            for ch in text:
                if ch.isdigit() or ch == ".":
                    number += ch
                elif ch in self.UNITS and number:
                    total, number = total + float(number) * self.UNITS[ch], ""
                else:
                    raise ValueError(ch)
            total += float(number) if number else 0.0
        except ValueError:
            self.fail(f"{value!r} is not a duration (e.g. 90, 90s, 2m, 1h, 1m30s)", param, ctx)
        if not text:
            self.fail("empty duration", param, ctx)
        return total


DURATION = Duration()
CLIENT_CLOSE_GRACE_S = 1.5

provider_option = click.option(
    "--provider",
    "provider_url",
    default="http://127.0.0.1:8089",
    show_default=True,
    envvar="GEOCTL_PROVIDER",
    help="Base URL of the running 'geoctl failover serve' (env GEOCTL_PROVIDER).",
)
provider_token_option = click.option(
    "--provider-token-file",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    envvar="GEOCTL_PROVIDER_TOKEN_FILE",
    help="File with the token the provider requires (Authorization: Bearer; env GEOCTL_PROVIDER_TOKEN_FILE).",
)


def _client_config(site: access.Site) -> providing.ClientConfig:
    c = site.clients
    url = c.get("service_url") or site.region.service_url
    if not url:
        raise GeoctlError(
            f"region {site.name} has no service_url: set it (or clients.service_url) in --config"
        )
    trust = c.get("tls_trust_certs_file") or (site.ca_file if url.startswith("pulsar+ssl://") else None)
    if bool(c.get("auth_plugin")) != bool(c.get("auth_params")):
        raise GeoctlError(
            f"region {site.name}: clients.auth_plugin and clients.auth_params go together (Pulsar clients "
            "apply neither alone)"
        )
    return providing.ClientConfig(url, trust, c.get("auth_plugin"), c.get("auth_params"))


def _eligible_regions(sites: dict[str, access.Site], namespaces: list[str]) -> tuple[str, ...]:
    """Regions every one of ``namespaces`` is replicated to: the only places clients may be sent."""
    spread = observing.synced_namespaces(sites, namespaces)
    missing = [ns for ns in namespaces if ns not in spread]
    if missing:
        raise GeoctlError(
            f"namespace(s) {', '.join(missing)} are not replicated between two of the known regions "
            f"({', '.join(sorted(sites))}), or no region answered; check the names (tenant/namespace)"
        )
    common = set(sites)
    for ns in namespaces:
        common &= set(spread[ns])
    if len(common) < 2:
        raise GeoctlError(f"no two regions replicate all of {', '.join(namespaces)}; nothing to fail over")
    return tuple(sorted(common))


def _read_secret(path: pathlib.Path | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise GeoctlError(f"cannot read {what} {path}: {e.strerror}") from e
    if not token:
        raise GeoctlError(f"{what} {path} is empty")
    return token


@failover_group.command("serve")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    required=True,
    help="Namespace the clients use (repeatable); clients are only ever sent to regions replicating all.",
)
@click.option(
    "--subscription",
    "subscriptions",
    multiple=True,
    help="Only these subscriptions decide whether a switch is exact (repeatable; default: every one).",
)
@click.option(
    "--initial-region",
    default=None,
    help="Region to send clients to when --state-dir holds no state yet (ignored afterwards).",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    required=True,
    envvar="GEOCTL_FAILOVER_STATE_DIR",
    help="Directory for state.json (the active region, a pending switch) and switches.jsonl (the journal).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8089, show_default=True, help="Port (0: any free one)."
)
@provider_token_option
@click.option(
    "--max-check-interval",
    type=DURATION,
    default="15s",
    show_default=True,
    help="Checks for a pending switch start 1 s apart and back off to this.",
)
@click.option(
    "--check-timeout",
    type=DURATION,
    default="120s",
    show_default=True,
    help="A check that has not answered by then counts as not exact.",
)
@access.options
def failover_serve(  # noqa: PLR0917
    sites: dict[str, access.Site],
    namespaces: tuple[str, ...],
    subscriptions: tuple[str, ...],
    initial_region: str | None,
    state_dir: pathlib.Path,
    host: str,
    port: int,
    provider_token_file: pathlib.Path | None,
    max_check_interval: float,
    check_timeout: float,
) -> None:
    """Serve Pulsar clients their service URL (PIP-121) and move them between regions only when exact.

    Java clients built with ControlledClusterFailover and urlProvider http://HOST:PORT/service-url poll
    it and reconnect wherever it points, without a restart. Endpoints: GET /service-url (serviceUrl,
    and tlsTrustCertsFilePath, authPluginClassName, authParamsString where 'clients:' in --config sets
    them), GET /status, POST /switch {"to": "b", "max_wait_s": 60}, DELETE /switch (cancel), GET /healthz.

    A requested switch ('geoctl failover switch --to b') keeps serving the current region until
    'failover check' for the target says exact for --subscription (or every subscription of --namespace),
    re-checking with backoff; with a maximum wait, it switches anyway once that has passed and records
    that it was forced, with the duplicates the last check predicted. Every request, cancel and switch
    is appended to STATE_DIR/switches.jsonl; STATE_DIR/state.json keeps the active region across restarts.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = _read_secret(provider_token_file, "--provider-token-file")
    regions = _eligible_regions(sites, list(namespaces))
    clients = {name: _client_config(sites[name]) for name in regions}
    wanted = list(subscriptions) or None

    last_check_done = [0.0]

    def run_check(source: str, target: str) -> switching.Figures:
        try:
            return figures(check(sites, source, target, list(namespaces), subscriptions=wanted))
        finally:
            last_check_done[0] = time.monotonic()

    store = providing.Store(state_dir)
    timing = switching.Timing(max_delay_s=max_check_interval, check_timeout_s=check_timeout)
    scope = {"namespaces": list(namespaces), "subscriptions": wanted}
    stop = threading.Event()
    with store.locked(), ThreadPoolExecutor(1, thread_name_prefix="failover-check") as checks:
        state = providing.start_state(store, regions, initial_region, time.time())
        store.save(state)
        provider = providing.Provider(state, store, clients, run_check, checks, timing=timing, scope=scope)
        try:
            server = http.server.ThreadingHTTPServer((host, port), providing.handler(provider, token))
        except OSError as e:
            raise GeoctlError(f"cannot listen on {host}:{port}: {e.strerror}") from e
        bound = server.server_address[1]
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        click.echo(
            f"serving on http://{host}:{bound}/service-url: clients go to {state.active} "
            f"({clients[state.active].service_url}); state in {state_dir}",
        )
        sys.stdout.flush()
        providing.run(provider, server, stop)
        checks.shutdown(wait=False, cancel_futures=True)
    # The Pulsar (C++) client finishes closing on its own threads; a process that exits right after a check
    # aborts in its static destructors ("terminate called without an active exception"), so give it a moment.
    time.sleep(max(0.0, last_check_done[0] + CLIENT_CLOSE_GRACE_S - time.monotonic()))


def _call(
    method: str, base: str, path: str, token_file: pathlib.Path | None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    token = _read_secret(token_file, "--provider-token-file")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = base.rstrip("/") + path
    try:
        response = requests.request(method, url, json=body, headers=headers, timeout=10)
    except requests.RequestException as e:
        raise GeoctlError(
            f"cannot reach the provider at {base}: {e}\n  -> is 'geoctl failover serve' running? "
            "(--provider URL or GEOCTL_PROVIDER)",
            exit_code=EXIT_UNREACHABLE,
        ) from e
    try:
        data = response.json()
    except ValueError:
        data = {"error": response.text.strip()[:300]}
    if response.status_code == 401:
        raise GeoctlError(
            f"the provider refused the request (401): {data.get('error')}\n  -> pass "
            "--provider-token-file (or GEOCTL_PROVIDER_TOKEN_FILE)",
            exit_code=EXIT_REFUSED,
        )
    if response.status_code >= 400:
        raise GeoctlError(
            f"the provider refused: {data.get('error', response.status_code)}",
            exit_code=EXIT_BY_STATUS.get(response.status_code, 1),
        )
    return response.status_code, data


@failover_group.command("switch")
@click.option("--to", "target", default=None, help="Region to move the provider's clients to.")
@click.option(
    "--max-wait",
    type=DURATION,
    default=None,
    help="Switch anyway (forced, duplicates recorded) if not exact by then. Default: wait until exact.",
)
@click.option("--cancel", is_flag=True, help="Cancel the pending switch instead.")
@click.option("--wait", is_flag=True, help="Block until the provider has switched (at most --timeout).")
@click.option("--timeout", type=DURATION, default="10m", show_default=True, help="How long --wait waits.")
@provider_option
@provider_token_option
@output_option
def failover_switch(  # noqa: PLR0917
    target: str | None,
    max_wait: float | None,
    cancel: bool,
    wait: bool,
    timeout: float,
    provider_url: str,
    provider_token_file: pathlib.Path | None,
    output: str,
) -> None:
    """Ask the running provider ('geoctl failover serve') to move its clients to --to.

    The provider keeps sending clients to the current region until 'failover check' says the target is
    exact, then switches (reason: exact); with --max-wait it switches anyway once that has passed
    (reason: forced-after-max-wait, with the predicted duplicates). Asking again for the same target is
    harmless; another target is refused while a switch is pending (--cancel first).

    Exit codes: 0 accepted (with --wait: switched), 4 token refused, 5 provider unreachable, 10 bad
    request (unknown region), 13 conflict (already there, another switch pending), 6 --wait timed out.
    """
    if cancel == bool(target):
        raise click.UsageError("give either --to REGION or --cancel")
    if cancel:
        _, data = _call("DELETE", provider_url, "/switch", provider_token_file)
        emit(data, output, lambda d: click.echo(f"cancelled the switch to {d['request']['to']}"))
        return
    body = {"to": target, "max_wait_s": max_wait, "by": f"geoctl@{socket.gethostname()}"}
    _, data = _call("POST", provider_url, "/switch", provider_token_file, body)
    request = data["request"]
    if wait:
        data = _wait_for_switch(provider_url, provider_token_file, request["id"], timeout, output)

    def text(d: dict[str, Any]) -> None:
        done = d.get("switch")
        if done:
            click.echo(
                f"SWITCHED to {done['to']} ({done['reason']}) after {done['waited_s']:.1f} s; "
                f"predicted duplicates: {done['predicted_duplicates']}"
            )
            return
        limit = "until exact" if request["max_wait_s"] is None else f"at most {request['max_wait_s']:g} s"
        click.echo(
            f"switch to {request['to']} requested (request {request['id']}); clients stay on "
            f"{d['status']['active']} until it is exact ({limit}); 'geoctl failover status' follows it"
        )

    emit(data, output, text)


def _wait_for_switch(
    base: str, token_file: pathlib.Path | None, request_id: int, timeout: float, output: str
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with err.status("waiting for the switch…", spinner="dots") if output == "text" else _Null():
        while True:
            _, status = _call("GET", base, "/status", token_file)
            done = next((s for s in status["switches"] if s.get("request_id") == request_id), None)
            pending = status.get("pending")
            if done is not None:
                return {"request": {"id": request_id, **done}, "status": status, "switch": done}
            if pending is None or pending["id"] != request_id:
                raise GeoctlError(f"request {request_id} was cancelled", exit_code=EXIT_UNHEALTHY)
            if time.monotonic() > deadline:
                waits = len((pending.get("last_check") or {}).get("wait_for") or [])
                raise GeoctlError(
                    f"not switched after {timeout:g} s: {waits} thing(s) to wait for "
                    "('geoctl failover status')",
                    exit_code=EXIT_UNHEALTHY,
                )
            time.sleep(1.0)


@failover_group.command("status")
@provider_option
@provider_token_option
@output_option
def failover_status(provider_url: str, provider_token_file: pathlib.Path | None, output: str) -> None:
    """Where the provider sends clients now, any pending switch with its last check, and recent switches."""
    _, data = _call("GET", provider_url, "/status", provider_token_file)

    def text(d: dict[str, Any]) -> None:
        click.echo(f"clients go to {d['active']} ({d['service_url']}) since {_when(d['active_since'])}")
        pending = d.get("pending")
        if pending:
            last = pending.get("last_check") or {}
            limit = (
                "until exact" if pending["max_wait_s"] is None else f"forced at {_when(pending['deadline'])}"
            )
            if not last:
                said = "none yet"
            elif last["exact"]:
                said = "exact"
            else:
                said = f"{last['duplicates']} duplicate(s) now" + (
                    f"; {last['error']}" if last.get("error") else ""
                )
            click.echo(
                f"pending: switch to {pending['to']} requested {_when(pending['requested_at'])} ({limit}); "
                f"{pending['checks']} check(s), last: {said}"
            )
            for item in (last.get("wait_for") or [])[:10]:
                click.echo(f"  wait for: {item}")
        table = Table("at", "from", "to", "reason", "waited (s)", "predicted duplicates")
        for s in d["switches"]:
            table.add_row(
                _when(s["at"]),
                s["from"],
                s["to"],
                s["reason"],
                f"{s['waited_s']:.1f}",
                str(s["predicted_duplicates"]),
            )
        if d["switches"]:
            Console(width=140, highlight=False).print(table)

    emit(data, output, text)


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
