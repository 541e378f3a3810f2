"""One ``-o text|json|yaml`` switch for every command: commands return plain data, this renders it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
import yaml

FORMATS = ("text", "json", "yaml")

output_option = click.option(
    "-o",
    "--output",
    "output",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Output format: text for people, json or yaml for scripts.",
)


def emit(data: Any, fmt: str, text: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON or YAML, or hand it to ``text`` for the human rendering."""
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=True, default_flow_style=False).rstrip())
    else:
        text(data)
