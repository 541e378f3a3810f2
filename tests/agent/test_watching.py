"""Liveness (``geosync_agent.watching``): a loop that stops getting on is stuck, one whose rounds fail is not.

The watchdog's rules by a clock the test moves; the real sync loop over fakes, once with every call of its
region failing (rounds fail, the loop beats: nothing ends) and once with a round that never returns (the
watchdog acts within its bound); /healthz and the metrics on a real HTTP endpoint; and a real agent process
whose round never returns, which must exit with ``EXIT_STUCK`` within ``stuck_after_s`` plus slack.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml

from geosync_adapters import adminhttp, signing
from geosync_agent import serving, supervising, watching
from geosync_agent.runtime import Now, read_now
from tests.agent.fakes import FakeRegion, Harness

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_is_stuck_only_once_its_last_beat_is_older_than_the_limit() -> None:
    clock = Clock()
    dog = watching.Watchdog(limit_s=120.0, clock=clock)
    sync = dog.watch("sync-loop")
    mirror = dog.watch("policy-mirror")
    clock.now += 120.0
    assert dog.liveness() == (True, "ok")  # exactly the limit: not yet
    mirror.beat()
    clock.now += 0.5
    assert dog.stuck() == [("sync-loop", 120.5)]
    assert dog.liveness() == (False, "stuck: sync-loop made no progress for 120 s")
    sync.beat()
    assert dog.liveness() == (True, "ok")
    assert dog.ages() == {"policy-mirror": 0.5, "sync-loop": 0.0}


def test_a_loop_watched_again_starts_afresh() -> None:
    """A task the supervisor restarts is watched from its restart, not from its first start."""
    clock = Clock()
    dog = watching.Watchdog(limit_s=10.0, clock=clock)
    old = dog.watch("sync-loop")
    clock.now += 30.0
    assert not dog.liveness()[0]
    dog.watch("sync-loop", old)
    assert dog.liveness() == (True, "ok")


def test_the_watchdog_acts_once_and_never_after_stop() -> None:
    clock = Clock()
    dog = watching.Watchdog(limit_s=0.05, clock=clock)
    dog.watch("sync-loop")
    stop = threading.Event()
    told: list[str] = []
    stop.set()
    clock.now += 60.0
    dog.run(stop, on_stuck=told.append)  # stopping: a shutdown is not a stuck loop
    assert told == []
    stop.clear()
    dog.run(stop, on_stuck=told.append)
    assert told == ["stuck: sync-loop made no progress for 60 s"]


class _Adapter:
    """An adapter whose calls each take a while and then fail, and one call that never returns."""

    def __init__(self) -> None:
        self.timeout = 5.0
        self.release = threading.Event()

    def refused(self) -> None:
        time.sleep(0.05)
        raise adminhttp.AdminTemporary("connection refused", method="GET", url="http://fake")

    def hang(self) -> None:
        self.release.wait()


def test_each_call_that_ends_is_progress_and_one_that_never_returns_is_not() -> None:
    """A round of many failing calls (a frozen region: each waits out its timeout) is not stuck however long
    it takes; a call that never returns is."""
    clock = Clock()
    dog = watching.Watchdog(limit_s=1.0, clock=clock)
    heartbeat = dog.watch("sync-loop")
    target = _Adapter()
    adapter = watching.beating(target, heartbeat.beat)
    for _ in range(5):
        clock.now += 0.9
        with pytest.raises(adminhttp.AdminTemporary):
            adapter.refused()
        assert dog.liveness() == (True, "ok")
    adapter.timeout = 7.0  # attributes are the adapter's own
    assert (target.timeout, adapter.timeout) == (7.0, 7.0)
    hanging = threading.Thread(target=adapter.hang, daemon=True)
    hanging.start()
    clock.now += 1.5
    assert dog.liveness() == (False, "stuck: sync-loop made no progress for 2 s")
    target.release.set()
    hanging.join(5.0)
    assert dog.liveness() == (True, "ok")


class _Down:
    """A region whose broker is down: every admin call and every reader fails as a refused connection."""

    def __init__(self, region: FakeRegion) -> None:
        self._region = region
        self.down = False

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._region, name)
        if self.down and callable(value):

            def refused(*_: Any, **__: Any) -> Any:
                raise adminhttp.AdminTemporary(f"{name}: connection refused", method="GET", url="http://fake")

            return refused
        return value


def _running(h: Harness, dog: watching.Watchdog) -> tuple[threading.Event, list[str], list[threading.Thread]]:
    stop, told = threading.Event(), list[str]()
    beat = dog.watch("sync-loop").beat
    threads = [
        threading.Thread(target=h.agent.run, args=(stop, beat), daemon=True),
        threading.Thread(target=dog.run, args=(stop, told.append), daemon=True),
    ]
    for thread in threads:
        thread.start()
    return stop, told, threads


def test_rounds_that_fail_because_the_region_is_down_are_progress() -> None:
    """Local broker down: every round fails (and waits a second before the next); readiness says so, the
    loop still beats, and the watchdog ends nothing."""
    region = _Down(FakeRegion("a", {"geo/ab": ["a", "b"]}))
    h = Harness.build(region)  # type: ignore[arg-type]
    h.discover()
    h.step()
    region.down = True
    dog = watching.Watchdog(limit_s=2.5)
    stop, told, threads = _running(h, dog)
    time.sleep(6.0)  # over twice the limit
    stop.set()
    for thread in threads:
        thread.join(5.0)
    counters = h.agent.status()["counters"]
    assert counters.get("loop_errors", 0) + counters.get("feed_errors", 0) >= 3, counters  # they failed
    ready, why = h.agent.readiness(time.monotonic() + 20)
    assert not ready
    assert why.startswith("failing")
    assert told == []


def test_a_round_that_never_returns_is_stuck_within_the_limit() -> None:
    h = Harness.build(FakeRegion("a", {"geo/ab": ["a", "b"]}))
    h.discover()
    h.step()
    release = threading.Event()

    def stuck(now: Now) -> None:
        release.wait()

    h.agent.round = stuck  # type: ignore[method-assign]
    dog = watching.Watchdog(limit_s=1.0)
    started = time.monotonic()
    stop, told, threads = _running(h, dog)
    threads[1].join(5.0)
    took = time.monotonic() - started
    release.set()
    stop.set()
    threads[0].join(5.0)
    assert told
    assert told[0].startswith("stuck: sync-loop made no progress for 1 s")
    assert 1.0 < took < 3.0


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_fails_while_a_loop_is_stuck_and_the_metrics_say_how_long() -> None:
    h = Harness.build(FakeRegion("a", {"geo/ab": ["a", "b"]}), metrics_port=_free_port())
    h.discover()
    h.agent.round(read_now())
    clock = Clock()
    dog = watching.Watchdog(limit_s=120.0, clock=clock)
    sync = dog.watch("sync-loop")
    supervisor = supervising.Supervisor(threading.Event())
    server = serving.endpoint(h.agent, liveness=lambda: supervisor.liveness(dog), watchdog=dog)
    assert server is not None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{h.config.metrics_port}"
    try:
        assert _get(f"{base}/healthz") == (200, "ok\n")
        clock.now += 121.0
        assert _get(f"{base}/healthz") == (503, "stuck: sync-loop made no progress for 121 s\n")
        metrics = _get(f"{base}/metrics")[1]
        assert 'geosync_agent_loop_progress_age_seconds{loop="sync-loop",region="a"} 121.0' in metrics
        assert 'geosync_agent_ready{region="a"} 1.0' in metrics
        sync.beat()
        assert _get(f"{base}/healthz") == (200, "ok\n")
        supervisor.stop.set()
        assert _get(f"{base}/healthz") == (503, "stopping\n")
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


AGENT = textwrap.dedent(
    """
    import sys, threading, time
    from geosync_adapters import adminhttp
    from geosync_agent import __main__ as main, runtime

    def stuck(self, now):  # the injected call that never returns
        threading.Event().wait()

    def failing(self, now):  # the region's broker refuses every call
        raise adminhttp.AdminTemporary("connection refused", method="GET", url="http://broker")

    def slow(self, now):  # one round of failing calls, longer than the bound (a frozen region)
        for _ in range(40):
            self.messaging.broker_answers("pulsar://127.0.0.1:9")  # nothing listens: refused
            time.sleep(0.25)
        raise adminhttp.AdminTemporary("the round's calls all failed", method="GET", url="http://broker")

    runtime.Agent.round = {"stuck": stuck, "failing": failing, "slow": slow}[sys.argv[2]]
    sys.exit(main.main(["--config", sys.argv[1]]))
    """
)


def _agent_config(tmp_path: pathlib.Path, **settings: Any) -> pathlib.Path:
    signer = signing.generate("a-1")
    private, public = signing.write_key_pair(tmp_path / "keys", signer)
    keyring = tmp_path / "keyring.yaml"
    keyring.write_text(signing.dump_keyring({"a": {"a-1": str(public)}}))
    config = tmp_path / "agent.yaml"
    # Nothing listens at these addresses: the agent's calls fail at once (connection refused).
    values = {
        "region": "a",
        "admin_url": f"http://127.0.0.1:{_free_port()}",
        "service_url": f"pulsar://127.0.0.1:{_free_port()}",
        "signing_key_file": str(private),
        "signing_key_id": "a-1",
        "keyring_file": str(keyring),
        **settings,
    }
    config.write_text(yaml.safe_dump(values))
    return config


def test_an_agent_process_stuck_in_a_call_exits_within_the_bound(tmp_path: pathlib.Path) -> None:
    bound, slack = 3.0, 12.0  # slack: the interpreter's start and imports on a loaded machine
    config = _agent_config(tmp_path, stuck_after_s=bound)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "controller"), str(ROOT)])}
    env.pop("GEOSYNC_KEY", None)
    started = time.monotonic()
    process = subprocess.run(
        [sys.executable, "-c", AGENT, str(config), "stuck"],
        env=env,
        capture_output=True,
        text=True,
        timeout=bound + slack + 30,
        check=False,
    )
    took = time.monotonic() - started
    assert process.returncode == watching.EXIT_STUCK, process.stderr[-3000:]
    assert bound < took < bound + slack
    assert "stuck: sync-loop made no progress" in process.stderr
    assert "in stuck" in process.stderr  # the stacks say where it was stuck (faulthandler)


@pytest.mark.parametrize(
    ("rounds", "logged"),
    [("failing", "round failed, retrying: connection refused"), ("slow", "the round's calls all failed")],
)
def test_an_agent_process_whose_rounds_fail_keeps_running(
    tmp_path: pathlib.Path, rounds: str, logged: str
) -> None:
    """The same process, its rounds failing as when its region's broker is down (and discovery failing for
    real: nothing listens at its addresses): past the bound it still runs, until SIGTERM ends it. "slow":
    one round of 10 s of failing calls (made through the agent's own messaging adapter, as the watchdog's
    wiring sees them), more than three times the bound."""
    config = _agent_config(tmp_path, stuck_after_s=3.0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "controller"), str(ROOT)])}
    env.pop("GEOSYNC_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(config), rounds], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(12.0)
        assert process.poll() is None
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    # Ended by the SIGTERM, not by the watchdog. (Not "== 0": the Pulsar client's C++ threads now and then
    # abort the interpreter's exit after an orderly shutdown, "terminate called without an active
    # exception", whatever the watchdog does.)
    assert process.returncode != watching.EXIT_STUCK, stderr[-3000:]
    assert "signal 15: stopping" in stderr
    assert logged in stderr
    assert "discovery failed" in stderr
    assert "stuck" not in stderr
