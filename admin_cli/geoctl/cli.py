"""The root of ``geoctl``: noun groups with verbs; thin commands over library calls."""

from __future__ import annotations

import pathlib
import signal
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from geoctl.errors import EXIT_LAB, EXIT_UNHEALTHY, GeoctlError
from geoctl.labdir import lab_dir_option
from geoctl.output import emit, output_option
from geosync_core.errors import GeoSyncError
from geosync_lab import labs, launches
from geosync_lab.errors import LabError

console = Console(stderr=True, highlight=False)


def _progress(message: str) -> None:
    """A progress line on stderr, printed as written ("[geosync] ..." is not console markup) and left to the
    terminal to wrap (a log keeps it on one line)."""
    console.print(message, markup=False, soft_wrap=True)


def _lab_errors(fn: Any) -> Any:
    """Turn library failures into CLI errors with the lab exit code."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LabError as e:
            raise GeoctlError(str(e), exit_code=EXIT_LAB) from e
        except GeoSyncError as e:
            raise GeoctlError(str(e)) from e

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "GEOCTL"})
@click.version_option(package_name="geosync", prog_name="geoctl")
def main() -> None:
    """GeoSync: consumers that fail over between Pulsar regions, policies kept consistent between
    isolated metadata stores, and proof of both.

    Commands are NOUN VERB, e.g. 'geoctl lab up'. Every command has --help.
    """


# -- lab -------------------------------------------------------------------------------------------


@main.group()
def lab() -> None:
    """A local lab of real Pulsar regions (one standalone + ZooKeeper each, or with --brokers a cluster of
    processes each) on this machine.

    The lab downloads Pulsar from Maven Central once (cached under ~/.cache/geosync), boots one
    region per name with free ports, wires geo-replication between them and writes DIR/topology.json,
    which tests, benchmarks and the other geoctl commands read.
    """


def _regions_arg(_: Any, __: Any, value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()] if value else []


@lab.command("up")
@click.option(
    "--regions",
    default="a,b,c",
    show_default=True,
    callback=_regions_arg,
    help="Comma-separated region names (lower-case letters, digits, '-'); at least two.",
)
@lab_dir_option
@click.option(
    "--deadline",
    type=float,
    default=240.0,
    show_default=True,
    help="Seconds a region may take to come up before it is reported as failed.",
)
@click.option("--no-agents", is_flag=True, help="Do not start a GeoSync agent per region.")
@click.option(
    "--wan",
    "with_wan",
    is_flag=True,
    help="Route replication between regions through Toxiproxy (needs toxiproxy-server from "
    "scripts/setup.sh), so that 'geoctl lab wan' and 'geoctl lab partition' can shape it.",
)
@click.option(
    "--brokers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Brokers per region. 1: one standalone JVM per region. 2 or more: each region is a cluster with "
    "its own ZooKeeper, configuration store (a second ZooKeeper), one bookie and that many brokers, each "
    "a process (not combinable with --wan yet).",
)
@click.option(
    "--sidecars",
    is_flag=True,
    help="Start one agent per broker instead of one per region, as the Helm chart's sidecar mode does: each "
    "syncs the topics its broker owns and hands them over when bundles move (with --brokers 2 or more).",
)
@click.option(
    "--no-plugins",
    is_flag=True,
    help="Boot the brokers without GeoSync's broker plugins (Pulsar as shipped): the agents then read and "
    "move cursors through the admin API, with what that path gives up (docs/limits.md). For measuring the "
    "plugins' cost on the broker.",
)
@output_option
@_lab_errors
def lab_up(
    *,
    regions: list[str],
    lab_dir: pathlib.Path,
    deadline: float,
    no_agents: bool,
    with_wan: bool,
    brokers: int,
    sidecars: bool,
    no_plugins: bool,
    output: str,
) -> None:
    """Boot the lab (a no-op with a message if the same lab is already running in DIR).

    Ctrl-C, SIGTERM or SIGHUP during the boot stops every process it had started; after a SIGKILL,
    'geoctl lab down' stops what the boot left."""
    report = _progress if output == "text" else (lambda _m: None)
    try:
        with console.status("booting regions…", spinner="dots") if output == "text" else _null():
            result = labs.up(
                lab_dir,
                regions,
                deadline_s=deadline,
                agents=not no_agents,
                with_wan=with_wan,
                brokers=brokers,
                sidecars=sidecars,
                plugins_loaded=not no_plugins,
                report=report,
            )
    except (KeyboardInterrupt, launches.Interrupted) as e:
        signum = e.signum if isinstance(e, launches.Interrupted) else int(signal.SIGINT)
        click.echo(
            f"lab up interrupted ({signal.Signals(signum).name}): what it had started is stopped", err=True
        )
        raise SystemExit(128 + signum) from None
    data = {
        "topology": str(result.path),
        "already_running": result.already_running,
        "total_seconds": round(result.total_seconds, 1),
        "regions": {
            b.name: {"boot_seconds": round(b.seconds, 1), "rss_mb": round(b.rss_mb), "attempts": b.attempts}
            for b in result.boots
        },
    }

    def text(d: dict[str, Any]) -> None:
        if d["already_running"]:
            click.echo(
                f"a lab with regions {', '.join(result.topology.regions)} is already running in "
                f"{lab_dir}; nothing to do ({d['topology']})"
            )
            return
        table = Table("region", "boot (s)", "MiB", "admin", "service")
        for name, r in d["regions"].items():
            reg = result.topology.regions[name]
            table.add_row(name, f"{r['boot_seconds']}", f"{r['rss_mb']}", reg.admin_url, reg.service_url)
        Console().print(table)
        click.echo(f"lab ready in {d['total_seconds']} s; topology: {d['topology']}")

    emit(data, output, text)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@lab.command("down")
@lab_dir_option
@output_option
@_lab_errors
def lab_down(lab_dir: pathlib.Path, output: str) -> None:
    """Stop exactly the processes the lab started (gracefully, then forcibly); data stays in DIR.

    Also stops what an interrupted 'geoctl lab up' left, from the record of launches it keeps in DIR."""
    outcome = labs.down(lab_dir)

    def text(d: dict[str, str]) -> None:
        for what, happened in d.items():
            click.echo(f"{what}: {happened}")
        if not d:
            click.echo("nothing was running")

    emit(outcome, output, text)


@lab.command("status")
@lab_dir_option
@output_option
@_lab_errors
def lab_status(lab_dir: pathlib.Path, output: str) -> None:
    """Health of every region: process, admin API, replicators, memory. Exit code 6 when unhealthy."""
    data = labs.status(lab_dir)

    def text(d: dict[str, Any]) -> None:
        # One line per namespace and per broker, so that the table fits 80 columns without splitting an
        # address: "geo/abc: b✓ c✓" and "127.0.0.1:48193 pid 11987" (or "... stopped"; the region's own
        # process state is in the JSON output).
        table = Table("region", "brokers", "admin", "replication", "MiB")
        for name, r in d["regions"].items():
            repl = "\n".join(
                f"{ns}: "
                + (" ".join(f"{c}{'✓' if ok else '✗'}" for c, ok in v.items()) if isinstance(v, dict) else v)
                for ns, v in r.get("replication", {}).items()
            )
            brokers = "\n".join(
                f"{b['service_url'].removeprefix('pulsar://')} "
                + (f"pid {b['pid']}" if b["process"] == "running" else b["process"])
                for b in r.get("brokers", [])
            )
            table.add_row(
                name, brokers or r["process"], r.get("admin", "-"), repl or "-", f"{r['rss_mb']:.0f}"
            )
        Console().print(table)
        if "wan" in d:
            click.echo(
                f"wan: toxiproxy-server {d['wan']['process']} ({d['wan']['api']}); see 'geoctl lab wan'"
            )
        click.echo("healthy" if d["healthy"] else "UNHEALTHY")

    emit(data, output, text)
    if not data["healthy"]:
        raise SystemExit(EXIT_UNHEALTHY)


@lab.command("stop-region")
@click.argument("region")
@click.option("--kill", is_flag=True, help="SIGKILL instead of a graceful stop (a crash).")
@lab_dir_option
@_lab_errors
def lab_stop_region(region: str, kill: bool, lab_dir: pathlib.Path) -> None:
    """Stop one region, keeping its data (for failure drills)."""
    labs.stop_region(lab_dir, region, kill=kill)
    click.echo(f"region {region}: {'killed' if kill else 'stopped'}")


@lab.command("start-region")
@click.argument("region")
@lab_dir_option
@_lab_errors
def lab_start_region(region: str, lab_dir: pathlib.Path) -> None:
    """Start a stopped region again on its old ports and data."""
    labs.start_region(lab_dir, region)
    click.echo(f"region {region}: running")


@lab.command("freeze-region")
@click.argument("region")
@click.option("--thaw", is_flag=True, help="Resume a frozen region (SIGCONT).")
@lab_dir_option
@_lab_errors
def lab_freeze_region(region: str, thaw: bool, lab_dir: pathlib.Path) -> None:
    """Freeze a region with SIGSTOP (a hung host: sockets open, nothing answers), or thaw it."""
    labs.freeze_region(lab_dir, region, frozen=not thaw)
    click.echo(f"region {region}: {'thawed' if thaw else 'frozen'}")


@lab.command("wan")
@click.option(
    "--latency", default="0ms", show_default=True, help="One-way latency added each way (40ms, 0.1s)."
)
@click.option("--jitter", default="0ms", show_default=True, help="Random +/- added to the latency.")
@click.option("--bandwidth", type=click.IntRange(min=1), default=None, help="Cap in KB/s, each way.")
@click.option(
    "--pair",
    metavar="X,Y",
    default=None,
    help="Two regions, e.g. a,b (both directions); without it every pair of the lab.",
)
@click.option("--clear", is_flag=True, help="Remove every latency and bandwidth toxic (of --pair, or all).")
@lab_dir_option
@output_option
@_lab_errors
def lab_wan(
    *,
    latency: str,
    jitter: str,
    bandwidth: int | None,
    pair: str | None,
    clear: bool,
    lab_dir: pathlib.Path,
    output: str,
) -> None:
    """Shape the WAN between regions of a lab booted with 'geoctl lab up --wan'.

    Replication from region X to region Y goes through a Toxiproxy proxy; this sets its latency, jitter
    and bandwidth on both directions of a pair (or of every pair), replacing what was set before. Agents,
    clients and the admin API are not affected: they talk to each region directly. With no shaping
    option it shows the WAN. Examples:

      geoctl lab wan --latency 40ms --jitter 10ms

      geoctl lab wan --pair a,b --bandwidth 512

      geoctl lab wan --clear
    """
    from geosync_lab import wan

    topology = labs.load(lab_dir)
    chosen = wan.parse_pair(pair, topology.regions) if pair else None
    shape = wan.Shape(wan.parse_duration_ms(latency), wan.parse_duration_ms(jitter), bandwidth)
    if clear and shape != wan.Shape():
        raise GeoctlError("--clear removes the shaping: give it without --latency, --jitter or --bandwidth")
    if clear or shape != wan.Shape():
        wan.shape_links(topology, lab_dir, shape, chosen)
    emit(wan.describe(topology, lab_dir), output, _wan_text)


@lab.command("partition")
@click.argument("x")
@click.argument("y")
@click.option("--heal", is_flag=True, help="Reconnect the pair (replication then resumes by itself).")
@lab_dir_option
@output_option
@_lab_errors
def lab_partition(x: str, y: str, heal: bool, lab_dir: pathlib.Path, output: str) -> None:
    """Cut replication between regions X and Y, both ways (or reconnect them with --heal).

    Needs a lab booted with 'geoctl lab up --wan'. The two Toxiproxy proxies of the pair are disabled: their
    connections close and new ones are refused, as if the link were down. Agents, clients and the admin
    API still reach both regions directly.
    """
    from geosync_lab import wan

    topology = labs.load(lab_dir)
    pair = wan.check_pair(x, y, topology.regions)
    wan.partition(topology, lab_dir, pair, heal=heal)
    emit(wan.describe(topology, lab_dir), output, _wan_text)


def _wan_text(d: dict[str, Any]) -> None:
    table = Table("proxy", "state", "listen", "upstream", "toxics")
    for name, p in d.items():
        shaped = (
            "; ".join(
                t.removeprefix("wan-") + " " + " ".join(f"{k}={v}" for k, v in sorted(attrs.items()))
                for t, attrs in sorted(p["toxics"].items())
            )
            or "-"
        )
        table.add_row(name, "up" if p["enabled"] else "CUT", p["listen"], p["upstream"], shaped)
    Console().print(table)


# -- demo ------------------------------------------------------------------------------------------


@main.group()
def demo() -> None:
    """Short live demonstrations on a running lab."""


@demo.command("failover")
@lab_dir_option
@click.option(
    "--messages",
    type=click.IntRange(10, 100_000),
    default=200,
    show_default=True,
    help="Messages published in the source region.",
)
@click.option(
    "--holes",
    type=click.FloatRange(0, 0.9),
    default=0.1,
    show_default=True,
    help="Share of received messages the consumer leaves unacknowledged (ack holes).",
)
@click.option(
    "--settle",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds given to sync between the consumer stopping and failing over.",
)
@click.option(
    "--batching/--no-batching",
    default=True,
    show_default=True,
    help="Publish with batching on and the client's batching settings (the Java client's default) and "
    "acknowledge with batch-index acknowledgements, or one message per entry.",
)
@output_option
@_lab_errors
def demo_failover(  # noqa: PLR0917 (click passes options positionally)
    lab_dir: pathlib.Path, messages: int, holes: float, settle: float, batching: bool, output: str
) -> None:
    """A consumer in region a acknowledges out of order, stops, and fails over to region b.

    Runs the same workload twice on the same regions: with Pulsar's built-in replicated subscriptions
    (PIP-33) and with GeoSync, and shows what the consumer in b is given: duplicates are messages already
    acknowledged in a, lost are messages acknowledged nowhere and not delivered.
    """
    from geosync_lab import failover

    topology = labs.load(lab_dir)
    if not topology.agents or not any(a.pid for a in topology.agents.values()):
        raise GeoctlError("the lab has no agents running", exit_code=EXIT_LAB)
    report = _progress if output == "text" else (lambda _m: None)
    outcomes = [
        failover.run(
            topology,
            mode=mode,
            messages=messages,
            receive=int(messages * 0.75),
            hole_ratio=holes,
            settle_s=settle,
            batching=batching,
            report=report,
        )
        for mode in ("builtin", "geosync")
    ]
    data = {o.mode: o.as_dict() for o in outcomes}

    def text(_d: dict[str, Any]) -> None:
        # A batched backlog counts entries, not messages, so the time until b's backlog is exact is read
        # only with --no-batching; with batching the column is left out rather than shown empty.
        columns = ["mode", "published", "acked\nin a", "delivered\nin b", "duplicates", "lost"]
        table = Table(*columns, *([] if batching else [f"synced\n(≤{settle:g} s)"]))
        for o in outcomes:
            row = [
                "Pulsar PIP-33" if o.mode == "builtin" else "GeoSync",
                str(o.published),
                str(o.acked_in_source),
                str(o.delivered_in_target),
                str(o.duplicates),
                str(o.lost),
            ]
            if not batching:
                row.append(f"{o.synced_after_s:.2f} s" if o.synced_after_s is not None else "no")
            table.add_row(*row)
        Console().print(table)

    emit(data, output, text)


from geoctl import namespaces as _namespaces  # noqa: E402
from geoctl import policies as _policies  # noqa: E402

main.add_command(_namespaces.namespaces)
main.add_command(_policies.policies_group)
from geoctl import releasing as _releasing  # noqa: E402

_policies.policies_group.add_command(_releasing.release)
from geoctl import status as _status  # noqa: E402

main.add_command(_status.status)

from geoctl import audit as _audit  # noqa: E402

main.add_command(_audit.audit)

from geoctl import failover as _failover  # noqa: E402
from geoctl import tenants as _tenants  # noqa: E402

main.add_command(_failover.failover_group)
main.add_command(_tenants.tenants_group)
from geoctl import keys as _keys  # noqa: E402

main.add_command(_keys.keys_group)
from geoctl import chaos as _chaos  # noqa: E402

main.add_command(_chaos.chaos_group)
