"""The ``--dir`` option of every lab command (apart from ``cli``, so command modules can import it)."""

from __future__ import annotations

import pathlib

import click

DEFAULT_LAB_DIR = pathlib.Path("lab")

lab_dir_option = click.option(
    "--dir",
    "lab_dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=DEFAULT_LAB_DIR,
    show_default=True,
    envvar="GEOSYNC_LAB_DIR",
    help="Directory of the lab: its topology.json, region data and logs (env GEOSYNC_LAB_DIR).",
)
