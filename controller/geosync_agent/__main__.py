"""``python -m geosync_agent --config FILE``: the agent process (what ``geoctl agent run`` execs)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from geosync_agent import config as cfg
from geosync_agent import serving
from geosync_agent.mirroring import Mirror
from geosync_agent.runtime import Agent
from geosync_core.errors import PermanentError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="geosync-agent", description="GeoSync agent for one region.")
    parser.add_argument("--config", required=True, help="agent YAML config (see geosync_agent/config.py)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format='{"ts":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":%(message)r}',
    )
    logging.getLogger("geosync.pulsar-client").setLevel(logging.WARNING)
    try:
        config = cfg.load(args.config)
        agent = Agent(config)
    except PermanentError as e:
        print(f"geosync-agent: {e}", file=sys.stderr)
        return 2

    def stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("geosync.agent").info("signal %s: stopping", signum)
        agent.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    mirror: Mirror | None = None
    if config.zookeeper and config.mirror_policies:
        mirror = Mirror(config, agent.key)
        mirror.start()
    components = serving.start(agent, mirror)
    worker = threading.Thread(target=agent.run, name="sync-loop", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(timeout=0.5)
    finally:
        # Ordered shutdown: stop the loop first (it closes readers, producers, client), then the rest.
        agent.stop_event.set()
        worker.join(timeout=15)
        if mirror is not None:
            mirror.stop()
        for component in reversed(components):
            component.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
