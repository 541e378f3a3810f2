"""``geoctl audit``: the Spark drift audit from the operator's tool.

A thin command over ``geosync_audit.drift_job.run``. It reuses the process's SparkSession when there is
one (tests, notebooks) and otherwise starts one on ``--master`` (``local[*]`` by default) whose Python
workers run on geoctl's own interpreter (``--worker-python`` to change it), so the audit works from an
installed ``geoctl`` whatever ``python3`` is in ``PATH``. PySpark is the ``spark`` extra; without it the
command says how to install it.
"""

from __future__ import annotations

import pathlib
from typing import Any

import click
from rich.console import Console

from geoctl.errors import GeoctlError
from geoctl.output import emit, output_option
from geosync_core.errors import GeoSyncError

EXIT_DRIFT = 7
"""``--fail-on-drift`` found unsynced, lost or out-of-order messages, or replication gaps."""


@click.group()
def audit() -> None:
    """Prove how far regions drifted apart, message by message (Spark)."""


@audit.command("drift")
@click.option(
    "--topology",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path),
    help="topology.json of the regions (a lab writes DIR/topology.json).",
)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False, path_type=pathlib.Path), help="Output directory."
)
@click.option(
    "--namespace", "namespaces", multiple=True, help="Namespace to audit (repeatable; default all)."
)
@click.option("--region", "regions", multiple=True, help="Region to audit (repeatable; default all).")
@click.option("--topics", default=None, help="Regular expression searched in full topic names.")
@click.option(
    "--deliveries",
    type=click.Path(exists=True, path_type=pathlib.Path),
    default=None,
    help="Consumers' delivery log (JSON lines); enables loss and key-order checks.",
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option(
    "--worker-python",
    default=None,
    envvar="PYSPARK_PYTHON",
    help="Interpreter of Spark's Python workers (env PYSPARK_PYTHON; default: the one geoctl runs on). "
    "On a cluster it must exist on every worker host with geosync installed.",
)
@click.option("--max-entries-per-split", default=50_000, show_default=True, help="Entries per Spark task.")
@click.option("--fail-on-drift", is_flag=True, help=f"Exit {EXIT_DRIFT} when anything drifted.")
@output_option
def drift(  # noqa: PLR0917 (click passes options positionally)
    topology: pathlib.Path,
    out: pathlib.Path,
    namespaces: tuple[str, ...],
    regions: tuple[str, ...],
    topics: str | None,
    deliveries: pathlib.Path | None,
    master: str,
    worker_python: str | None,
    max_entries_per_split: int,
    fail_on_drift: bool,
    output: str,
) -> None:
    """Join every region's messages by origin coordinates and report drift per subscription.

    Writes Parquet tables, OUT/summary.json and OUT/drift.png; prints the summary. Definitions:
    geosync_core.drift (docs/design.md, "Drift audit").
    """
    try:
        from pyspark.sql import SparkSession

        from geosync_audit import drift_job, reporting
        from geosync_audit.sessions import session
    except ImportError as e:
        raise GeoctlError(f"the audit needs PySpark: pip install 'geosync[spark]' ({e})") from e
    spark = SparkSession.getActiveSession() or session(master, worker_python=worker_python)
    try:
        outcome = drift_job.run(
            spark,
            topology=topology,
            out=out,
            namespaces=namespaces,
            regions=regions,
            topics=topics,
            deliveries=deliveries,
            max_entries_per_split=max_entries_per_split,
        )
    except GeoSyncError as e:
        raise GeoctlError(str(e)) from e

    def text(summary: dict[str, Any]) -> None:
        reporting.print_summary(summary, Console(width=140))
        click.echo(f"tables, summary.json and drift.png in {out}")

    emit(outcome.summary, output, text)
    totals = outcome.summary["totals"]
    if fail_on_drift and any(totals[k] for k in ("unsynced", "lost", "order_violations", "replication_gaps")):
        raise SystemExit(EXIT_DRIFT)
