"""``geoctl chaos run`` and ``geoctl chaos check``: a seeded fault run on a lab, and its independent checker.

The run itself is ``geosync_lab.chaos`` (generator, nemesis, history); the verdict is
``geosync_lab.chaos_checker``, which reads only the history. This command supplies what the lab layer
may not import: quiescent failovers wait on ``geoctl failover check`` for the subscription that moves.
"""

from __future__ import annotations

import pathlib
import tempfile
import threading
import time
from typing import Any

import click

from geoctl import access
from geoctl import failover as failover_cmd
from geoctl.errors import EXIT_LAB, EXIT_UNHEALTHY, GeoctlError
from geoctl.labdir import lab_dir_option
from geoctl.output import emit, output_option
from geosync_lab import chaos as engine
from geosync_lab import chaos_checker, labs
from geosync_lab.errors import LabError


def settle_by_check(
    lab_dir: pathlib.Path, namespace: str = engine.NAMESPACE, *, stable_s: float = 15.0
) -> engine.Settle:
    """Wait until ``failover check`` judges moving the subscription safe, or time out: the last verdict.
    A not-safe verdict that has not changed for ``stable_s`` is final too (nothing is moving: e.g. a
    Key_Shared subscription whose acknowledgements after a key's hole are never carried)."""
    topology = labs.topology_path(lab_dir.resolve())

    def settle(source: str, target: str, subscription: str, timeout_s: float) -> tuple[str, dict[str, Any]]:
        started, verdict, detail = time.monotonic(), "unknown", {}
        same_since, last = started, None
        evidence: dict[str, Any] = {}
        """Of the last verdict read, the moving subscription's rows (what is owed, both cells with their
        agents' views): recorded only with a verdict that is not safe, and not compared between checks
        (ages and timestamps change every time)."""
        while True:
            try:
                found = _bounded_check(
                    topology,
                    source,
                    target,
                    namespace,
                    subscription,
                    within_s=timeout_s - (time.monotonic() - started),
                )
                verdict = found.outcome
                detail = {
                    "duplicates": found.duplicates,
                    "key_order_duplicates": found.key_order_duplicates,
                    "wait_for": found.wait_for[:5],
                    "errors": found.errors[:3],
                    "unread": found.unread,
                }
                evidence = {"subscriptions": found.subscriptions[:2]}
            except Exception as e:  # a region the nemesis froze or killed: cannot tell
                verdict, detail = "unknown", {"errors": [f"{type(e).__name__}: {e}"]}
            now = time.monotonic()
            if (verdict, detail) != last:
                same_since, last = now, (verdict, detail)
            stuck = verdict == failover_cmd.NOT_SAFE and now - same_since >= stable_s
            if verdict == failover_cmd.SAFE or stuck or now - started >= timeout_s:
                extra = evidence if verdict != failover_cmd.SAFE and evidence else {}
                return verdict, {**detail, "unchanged_s": round(now - same_since, 1), **extra}
            time.sleep(1.0)

    return settle


def _bounded_check(
    topology: pathlib.Path, source: str, target: str, namespace: str, subscription: str, *, within_s: float
) -> failover_cmd.Verdict:
    """One ``failover check``, given up after ``within_s`` (with a region frozen or restarting, its
    admin calls each wait for their own timeouts and retries: minutes under load)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            # Read every time: an agent restarted by the nemesis listens on a new port.
            sites = access.load(topology, None)
            box["verdict"] = failover_cmd.check(
                sites, source, target, [namespace], subscriptions=[subscription]
            )
        except Exception as e:
            box["error"] = e

    worker = threading.Thread(target=work, name="chaos-settle-check", daemon=True)
    worker.start()
    worker.join(timeout=max(within_s, 1.0))
    if "verdict" in box:
        return box["verdict"]  # type: ignore[no-any-return]
    raise box.get("error") or TimeoutError(f"failover check took more than {max(within_s, 1.0):.0f} s")


def text_summary(data: dict[str, Any]) -> None:
    click.echo(f"seed {data['seed']}: {'OK' if data['ok'] else 'VIOLATIONS'}")
    ops = data["operations"]
    click.echo(
        f"operations: {ops.get('send_ok', 0)} sent ({ops.get('send_failed', 0)} failed), "
        f"{ops.get('recv', 0)} received, {ops.get('ack', 0)} acknowledged, {ops.get('hole', 0)} holes"
    )
    click.echo("faults: " + (", ".join(f"{k} {v}" for k, v in data["faults"].items()) or "none"))
    for kind, why in data["unavailable"].items():
        click.echo(f"  unavailable: {kind}: {why}")
    f = data["failovers"]
    click.echo(
        f"failovers: {f.get('total', 0)} ({f.get('quiescent', 0)} quiescent, "
        f"{f.get('settled', 0)} judged safe, "
        f"{f.get('final', 0)} final)"
    )
    click.echo(f"lost: {data['lost_total']}  " + ", ".join(f"{s} {n}" for s, n in data["lost"].items()))
    for sub, n in data.get("undrained", {}).items():
        click.echo(f"  {sub}: no final move, {n} message(s) left undrained (not judged)")
    click.echo("duplicates: " + (", ".join(f"{k} {v}" for k, v in data["duplicates"].items()) or "none"))
    click.echo(f"Key_Shared order violations: {data['order_violations']}")
    for sub, move in data["final_moves"].items():
        click.echo(
            f"final move of {sub}: {move['verdict']}, duplicates predicted {move['predicted']}, "
            f"seen {move['seen']}"
        )
    p = data["policies"]
    click.echo(
        f"policies: {p.get('edits', 0)} edits, {p.get('conflicting_rounds', 0)} conflicting rounds, "
        f"{'converged' if p.get('converged') else 'NOT converged'}"
    )
    for v in data["violations"]:
        click.echo(f"VIOLATION: {v}", err=True)
    if not data["ok"]:
        click.echo(
            f"replay with: geoctl chaos run --seed {data['seed']} (same --duration and lab shape)", err=True
        )


def _finish(summary: chaos_checker.Summary, output: str, extra: dict[str, Any]) -> None:
    data = {**summary.as_dict(), **extra}
    emit(data, output, text_summary)
    if not summary.ok:
        raise SystemExit(EXIT_UNHEALTHY)


@click.group("chaos")
def chaos_group() -> None:
    """Seeded fault runs on a lab, with a checker independent of the agent."""


@chaos_group.command("run")
@lab_dir_option
@click.option(
    "--duration",
    type=failover_cmd.DURATION,
    default="10m",
    show_default=True,
    help="Length of the fault phase.",
)
@click.option(
    "--seed", type=int, required=True, help="Seed of the schedule; the same seed gives the same schedule."
)
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    help="Write the history (JSON lines) here (default: a temporary file, named in the summary).",
)
@click.option(
    "--faults",
    default=",".join(engine.KINDS),
    show_default=True,
    help="Comma-separated fault kinds to choose from (those the lab cannot do are reported unavailable).",
)
@click.option("--rate", type=float, default=8.0, show_default=True, help="Messages per second per region.")
@click.option(
    "--failover-every",
    type=failover_cmd.DURATION,
    default="20s",
    show_default=True,
    help="Mean time between failovers.",
)
@click.option(
    "--fault-every",
    type=failover_cmd.DURATION,
    default="15s",
    show_default=True,
    help="Mean quiet time between faults.",
)
@click.option("--verbose", is_flag=True, help="Print each fault and failover as it happens (to stderr).")
@output_option
def chaos_run(  # noqa: PLR0917
    lab_dir: pathlib.Path,
    duration: float,
    seed: int,
    history_path: pathlib.Path | None,
    faults: str,
    rate: float,
    failover_every: float,
    fault_every: float,
    verbose: bool,
    output: str,
) -> None:
    """Run producers, consumers with holes, failovers and faults for --duration, then check the history.

    Exit 0 when the checker found no violation; 6 otherwise (the seed to replay is printed); 3 when the
    lab is not running.
    """
    kinds = tuple(k.strip() for k in faults.split(",") if k.strip())
    unknown = [k for k in kinds if k not in engine.KINDS]
    if unknown:
        raise GeoctlError(f"unknown fault kind(s): {', '.join(unknown)}; known: {', '.join(engine.KINDS)}")
    if history_path is None:
        history_path = pathlib.Path(tempfile.mkstemp(prefix=f"geosync-chaos-{seed}-", suffix=".jsonl")[1])
    settings = engine.Settings(
        rate_per_region=rate, failover_every_s=failover_every, fault_every_s=fault_every
    )

    def report(line: str) -> None:
        if verbose:
            click.echo(line, err=True)

    started = time.monotonic()
    try:
        with history_path.open("w") as out:
            engine.run(
                lab_dir,
                seed=seed,
                duration_s=duration,
                history_out=out,
                settle=settle_by_check(lab_dir),
                kinds=kinds,
                settings=settings,
                report=report,
            )
    except LabError as e:
        raise GeoctlError(str(e), exit_code=EXIT_LAB) from e
    summary = chaos_checker.check(chaos_checker.read_history(history_path))
    _finish(
        summary, output, {"history": str(history_path), "elapsed_s": round(time.monotonic() - started, 1)}
    )


@chaos_group.command("check")
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, exists=True, path_type=pathlib.Path),
    required=True,
    help="A history written by 'geoctl chaos run --history'.",
)
@output_option
def chaos_check(history_path: pathlib.Path, output: str) -> None:
    """Check a recorded history again (exit 6 on any violation)."""
    try:
        events = chaos_checker.read_history(history_path)
    except (ValueError, UnicodeDecodeError) as e:
        raise GeoctlError(
            f"{e}: this is not a history 'geoctl chaos run --history' wrote (one JSON object per line); "
            "pass that file"
        ) from None
    _finish(chaos_checker.check(events), output, {"history": str(history_path)})
