"""The agent's log lines are JSON, one per record, whatever the message holds."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from geosync_agent.jsonlog import JsonFormatter


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError('bad "entry"\nsecond line')
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("geosync.agent", logging.WARNING, __file__, 1, msg, args, exc_info)


@pytest.mark.parametrize(
    ("msg", "args", "expected"),
    [
        ("%s on %s is back", ("sub'x", "persistent://t/n/a"), "sub'x on persistent://t/n/a is back"),
        ("property %r", ('k"ey\\',), "property 'k\"ey\\\\'"),
        ("two\nlines\r\tand \u2028 unicode é", (), "two\nlines\r\tand \u2028 unicode é"),
    ],
)
def test_every_message_is_one_json_line(msg: str, args: tuple[object, ...], expected: str) -> None:
    line = JsonFormatter().format(_record(msg, *args))
    assert "\n" not in line
    assert "\r" not in line
    parsed = json.loads(line)
    assert parsed["msg"] == expected
    assert (parsed["level"], parsed["logger"]) == ("WARNING", "geosync.agent")
    assert parsed["ts"]


def test_a_traceback_goes_into_the_line_not_after_it() -> None:
    line = JsonFormatter().format(_record("reading failed", exc=True))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["msg"] == "reading failed"
    assert 'ValueError: bad "entry"\nsecond line' in parsed["exc"]
    assert "Traceback" in parsed["exc"]
