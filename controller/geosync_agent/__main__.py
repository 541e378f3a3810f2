"""``python -m geosync_agent --config FILE``: the agent process (what ``geoctl agent run`` execs)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from geosync_agent import config as cfg
from geosync_agent import jsonlog, supervising
from geosync_core.errors import PermanentError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="geosync-agent", description="GeoSync agent for one region.")
    parser.add_argument("--config", required=True, help="agent YAML config (see geosync_agent/config.py)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    jsonlog.install(args.log_level)
    logging.getLogger("geosync.pulsar-client").setLevel(logging.WARNING)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("geosync.agent").info("signal %s: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return supervising.run(cfg.load(args.config), stop)
    except PermanentError as e:
        print(f"geosync-agent: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
