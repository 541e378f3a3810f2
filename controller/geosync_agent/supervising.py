"""The agent process's composition root: it builds every part, starts every task by name, supervises them,
and shuts down in order.

Tasks: ``discovery`` (admin scans into a mailbox), ``sync-loop`` (the agent's rounds), ``checkpoint-writer``
(the checkpoints the rounds take, encoded and written: ``checkpointing.Writer``), ``policy-mirror`` (where
configured, with ``policy-mirror-reader``, the event reader of each of its leadership terms, a task its term
starts and ends: ``Supervisor.scoped``), ``http`` (metrics, probes, state) and ``watchdog``. Nothing else
starts a thread of ours. A task that raises is restarted with
backoff; one that keeps failing (``MAX_RESTARTS`` in a row) stops the process with a non-zero status, so the
sidecar is restarted by Kubernetes instead of looking alive while doing nothing. A task that neither fails
nor gets on (the sync loop or the mirror blocked in a call for ``stuck_after_s``) is the watchdog's: it
fails /healthz and ends the process (``geosync_agent.watching``).

Shutdown, in order: stop and join the sync loop and discovery, then the mirror, then the HTTP endpoint;
then the agent's last checkpoint (after any its writer was still writing) and the writer; then close readers,
producers, the admin pool and the Pulsar client.

Part of the shell, with ``runtime``'s loop, the ``Effector``, the checkpoint writer, serving, reporting,
watching and the collector, and the policy mirror's ``mirroring``: only these read clocks, draw random
numbers (``rng``, the agent's given here; the mirror's ids) or start threads. The parts (``agentstate`` and
those built on it; the mirror's ``mirrorlocal`` and those built on it) are given what they need of them.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from geosync_adapters import adminhttp
from geosync_agent import allocator, checkpointing, collector, discovering, incarnating, serving, watching
from geosync_agent import effects as fx
from geosync_agent.config import AgentConfig
from geosync_agent.mirroring import Mirror
from geosync_agent.ports import Admin
from geosync_agent.recent import CallTimes
from geosync_agent.runtime import Agent, read_now
from geosync_core.errors import PermanentError
from geosync_core.incarnations import Incarnation

log = logging.getLogger("geosync.agent")
MAX_RESTARTS = 5
"""Consecutive failures after which a task is given up and the process exits non-zero."""
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
JOIN_S = 15.0


@dataclass
class Supervisor:
    """Runs named tasks on threads until ``stop``; restarts a task that raised (see the module docstring)."""

    stop: threading.Event
    threads: dict[str, threading.Thread] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    given_up: list[str] = field(default_factory=list)

    def spawn(self, name: str, body: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._keep, args=(name, body), name=name, daemon=True)
        self.threads[name] = thread
        self.restarts[name] = 0
        thread.start()

    def scoped(self, name: str, body: Callable[[], None]) -> threading.Thread:
        """Start ``body`` as the task ``name`` whose owner bounds its life (the policy mirror's event reader,
        one per leadership term): not restarted, not counted by ``alive``; the owner stops and joins it."""
        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread

    def _keep(self, name: str, body: Callable[[], None]) -> None:
        failures = 0
        delay = FIRST_BACKOFF_S
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                body()
                return
            except Exception:
                log.exception("task %s failed", name)
            if time.monotonic() - started > MAX_BACKOFF_S:
                failures, delay = 0, FIRST_BACKOFF_S  # it ran a good while: a fresh failure, not a loop
            failures += 1
            self.restarts[name] += 1
            if failures > MAX_RESTARTS:
                log.error("task %s failed %d times in a row: stopping the agent", name, failures)
                self.given_up.append(name)
                self.stop.set()
                return
            self.stop.wait(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)

    def alive(self) -> bool:
        """Every task still running (or restarting) and none given up."""
        return not self.given_up and all(t.is_alive() for t in self.threads.values())

    def liveness(self, watchdog: watching.Watchdog) -> tuple[bool, str]:
        """What /healthz says: alive, and no watched loop stuck."""
        if self.stop.is_set():
            return False, "stopping"
        if not self.alive():
            return False, f"task given up: {', '.join(self.given_up)}" if self.given_up else "a task ended"
        return watchdog.liveness()

    def join(self, *names: str) -> None:
        for name in names:
            thread = self.threads.get(name)
            if thread is not None:
                thread.join(timeout=JOIN_S)


def resume(agent: Agent) -> bool:
    """Restore the agent's checkpoint if it has one it can trust; otherwise it rebuilds from the earliest
    messages, and a checkpoint that exists but cannot be used is said loudly. Whether one was restored."""
    path = agent.checkpoint_path
    if path is None:
        return False
    building = agent.collections.building() if agent.collections is not None else contextlib.nullcontext()
    try:
        with building:
            state = checkpointing.load(path, region=agent.config.region)
            if state is not None:
                agent.restore(state, read_now())
                return True
    except (checkpointing.CheckpointError, ValueError) as e:
        agent.stats.inc("checkpoint_rejected")
        log.error("checkpoint refused, rebuilding every topic from its earliest message: %s", e)
        return False
    log.info("no checkpoint in %s: reading every topic from its earliest message", path.parent)
    return False


def run(config: AgentConfig, stop: threading.Event) -> int:
    """Build the agent's parts, run its tasks until ``stop`` is set or a task is given up; the exit status."""
    memory = allocator.tune()  # before the Pulsar client's threads start and take arenas of their own
    try:
        collections = collector.tune()  # after the imports and the config: those are frozen
    except ValueError as e:
        raise PermanentError(str(e)) from e
    keys = config.keys()
    log.info("signing as key %s; keyring accepts %s", keys.signer.key_id, keys.keyring.key_ids())
    messaging = config.messaging()
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="admin")
    discovered: discovering.Latest[discovering.Discovered] = discovering.Latest()
    rediscover, wake = threading.Event(), threading.Event()
    calls = CallTimes()
    checkpoints = checkpointing.Writer()
    watchdog = watching.Watchdog(config.stuck_after_s)
    # Every call of the sync loop (its own or its pool's) is progress when it ends, answered or not.
    sync = watching.Heartbeat()
    syncing = watching.beating(messaging, sync.beat)
    effector = fx.Effector(
        admin_factory=lambda: watching.beating(
            config.admin_client(timeout=5.0, on_call=calls.add), sync.beat
        ),
        messaging=syncing,
        pool=pool,
    )
    agent = Agent(
        config,
        keys=keys,
        effector=effector,
        messaging=syncing,
        discovered=discovered,
        rediscover=rediscover,
        wake=wake,
        first_seq=time.time_ns() // 1000,
        rng=random.Random(),
        started_ms=time.time_ns() // 10**6,
        allocator=memory,
        collections=collections,
        incarnation=_incarnation(config),
        broker_calls=calls,
        checkpoint_writer=checkpoints,
    )
    effector.on_sent = agent.on_sent
    resume(agent)
    supervisor = Supervisor(stop)
    mirror = None
    if config.zookeeper and config.mirror_policies:
        mirror = Mirror(
            config,
            keys,
            wall_ms=lambda: time.time_ns() // 10**6,
            new_id=lambda: uuid.uuid4().hex,
            spawn=supervisor.scoped,
        )
    server = serving.endpoint(
        agent, mirror, liveness=lambda: supervisor.liveness(watchdog), watchdog=watchdog
    )

    def discovery() -> None:
        discover(
            config.admin_client(timeout=10.0, on_call=calls.add),
            config,
            discovered,
            stop=stop,
            again=rediscover,
            on_outcome=lambda e: _discovery_outcome(agent, e),
            owns=None if agent.ownership is None else agent.ownership.owns,
        )

    supervisor.spawn("discovery", discovery)
    supervisor.spawn("sync-loop", lambda: agent.run(stop, progress=watchdog.watch("sync-loop", sync).beat))
    supervisor.spawn("checkpoint-writer", lambda: checkpoints.run(stop))
    if mirror is not None:
        mirror.progress = watchdog.watch("policy-mirror").beat
        supervisor.spawn("policy-mirror", mirror.run)
    if server is not None:
        supervisor.spawn("http", server.serve_forever)
    supervisor.spawn("watchdog", lambda: watchdog.run(stop))
    try:
        stop.wait()
    finally:
        stop.set()
        rediscover.set()
        wake.set()
        supervisor.join("sync-loop", "discovery")
        if mirror is not None:
            mirror.stop()
            supervisor.join("policy-mirror")
        if server is not None:
            server.shutdown()
            server.server_close()
        agent.close(read_now())
        supervisor.join("checkpoint-writer")
        effector.close()
        pool.shutdown(wait=True, cancel_futures=True)
        messaging.close()
    return 1 if supervisor.given_up else 0


def discover(
    admin: Admin,
    config: AgentConfig,
    out: discovering.Latest[discovering.Discovered],
    *,
    stop: threading.Event,
    again: threading.Event,
    on_outcome: Callable[[Exception | None], None],
    owns: Callable[[str], bool] | None = None,
) -> None:
    """The discovery task: a pass (``discovering.scan``) every ``discover_interval_s`` or when ``again`` is
    set, until ``stop``; each pass's outcome (None: it succeeded) goes to ``on_outcome``. ``owns``: as for
    ``scan``. Where the agent uses the broker plugin (``plugin_cursors``), its topic lists replace the stats
    of the topics they list (``discovering.PluginTopics``)."""
    views = discovering.PluginTopics(admin, clock=time.monotonic) if config.plugin_cursors else None
    while not stop.is_set():
        started = time.monotonic()
        try:
            found = discovering.scan(admin, config, now=started, owns=owns, views=views)
        except (adminhttp.AdminError, OSError) as e:
            on_outcome(e)
        else:
            out.put(replace(found, took_s=time.monotonic() - started))
            on_outcome(None)
        again.wait(discovering.pass_wait(config.discover_interval_s, time.monotonic() - started))
        again.clear()


def _incarnation(config: AgentConfig) -> Incarnation | None:
    if not config.zookeeper:
        log.warning(
            "no zookeeper configured: this region has no incarnation, so if it is ever wiped and rebuilt "
            "under its name, claims about its old messages would be taken for its new ones (docs/agent.md, "
            '"A region rebuilt under its name")'
        )
        return None
    auth, now_ms = config.zookeeper_auth(), time.time_ns() // 10**6
    return incarnating.load(config.zookeeper, config.incarnation_node, auth=auth, now_ms=now_ms)


def _discovery_outcome(agent: Agent, error: Exception | None) -> None:
    agent.part_outcome("discovery", error, time.monotonic())
    if error is not None:
        agent.stats.inc("discovery_errors")
        log.warning("discovery failed, retrying: %s", error)
