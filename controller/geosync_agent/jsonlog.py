"""The agent's log format: one JSON object per line, whatever the message holds.

Log shippers (Fluent Bit, Vector, Promtail) parse a line at a time. A message is rendered with its arguments
first, then escaped by ``json.dumps``: quotes, backslashes and newlines from topic names or message
properties (untrusted input) cannot break the line, and a traceback goes into ``exc`` instead of trailing
lines of its own.
"""

from __future__ import annotations

import json
import logging


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg"[, "exc"]}``; ``ts`` in the local time of ``logging.Formatter``."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


def install(level: str) -> None:
    """The root logger writes JSON lines to standard error at ``level``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
