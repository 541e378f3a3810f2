"""The chaos run's generator and history: producers in every region, one consumer per subscription that
moves between regions, and the JSON-lines history every event is written to."""

from __future__ import annotations

import contextlib
import json
import pathlib
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

import pulsar

from geosync_lab.chaos_plan import HOLE_RATIO, KEYS, SUBSCRIPTIONS, Plan, Report, Settle


def _consumer_type(kind: str) -> Any:
    """The client's enum member for a subscription type as Pulsar names it (``Key_Shared``)."""
    return getattr(pulsar.ConsumerType, kind.replace("_", ""))


# -- the history -----------------------------------------------------------------------------------


class History:
    """Events as JSON lines, each with ``t``: seconds since the run started (one clock, monotonic)."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.counts: dict[str, int] = {}

    def now(self) -> float:
        return time.monotonic() - self._t0

    def record(self, ev: str, **fields: Any) -> None:
        with self._lock:
            line = json.dumps({"t": round(self.now(), 3), "ev": ev, **fields}, sort_keys=True, default=str)
            self._out.write(line + "\n")
            self.counts[ev] = self.counts.get(ev, 0) + 1

    def flush(self) -> None:
        with self._lock:
            self._out.flush()


# -- the generator ---------------------------------------------------------------------------------


@dataclass
class Settings:
    rate_per_region: float = 8.0
    """Messages per second each region's producers write (half batched, half not)."""
    settle_timeout_s: float = 20.0
    final_settle_timeout_s: float = 90.0
    drain_quiet_s: float = 10.0
    hole_ratio: float = HOLE_RATIO
    failover_every_s: float = 20.0
    fault_every_s: float = 15.0


class _Producers(threading.Thread):
    """A batched and an unbatched producer in one region, writing keyed messages at a steady rate."""

    def __init__(self, run: _Run, region: str, client: pulsar.Client) -> None:
        super().__init__(name=f"chaos-producers-{region}", daemon=True)
        self.run_, self.region, self.client = run, region, client
        self.rng = random.Random(f"{run.plan.seed}-{region}")
        self.seq = {f"{region}-b": 0, f"{region}-u": 0}
        self.producers: dict[str, Any] = {}

    def _open(self, name: str) -> Any:
        if name not in self.producers:
            batched = name.endswith("-b")
            self.producers[name] = self.client.create_producer(
                self.run_.topic,
                batching_enabled=batched,
                batching_max_messages=20,
                batching_max_publish_delay_ms=20,
                block_if_queue_full=False,
                max_pending_messages=2000,
                send_timeout_millis=30000,
            )
        return self.producers[name]

    def _send(self, name: str) -> None:
        seq = self.seq[name]
        key = f"k{self.rng.randrange(KEYS)}"
        uid = f"{name}-{seq}"
        body = json.dumps({"uid": uid, "producer": name, "seq": seq, "key": key}).encode()
        fields = {"uid": uid, "producer": name, "region": self.region, "seq": seq, "key": key}
        history = self.run_.history

        def sent(result: Any, msg_id: Any) -> None:
            ok = result == pulsar.Result.Ok
            history.record(
                "send", ok=ok, msg_id=str(msg_id) if ok else None, error=None if ok else str(result), **fields
            )

        try:
            producer = self._open(name)
        except Exception as e:  # the region is down: nothing of this producer is pending
            history.record("send", ok=False, error=f"no producer: {e}", **fields)
            time.sleep(0.5)
        else:
            try:
                producer.send_async(body, sent, partition_key=key)
            except Exception as e:  # its queue is full; the same producer keeps its order once it drains
                history.record("send", ok=False, error=f"not queued: {e}", **fields)
                time.sleep(0.5)
        self.seq[name] = seq + 1

    def run(self) -> None:
        interval = 2.0 / self.run_.settings.rate_per_region
        while not self.run_.producing_stop.is_set():
            for name in self.seq:
                self._send(name)
            self.run_.producing_stop.wait(interval)
        for p in self.producers.values():
            with contextlib.suppress(Exception):
                p.flush()
            with contextlib.suppress(Exception):
                p.close()


@dataclass(frozen=True)
class _Move:
    to: str
    quiescent: bool
    final: bool = False


class _Consumer(threading.Thread):
    """The one consumer of a subscription, in one region at a time; acknowledges with holes."""

    def __init__(self, run: _Run, sub: str, home: str) -> None:
        super().__init__(name=f"chaos-consumer-{sub}", daemon=True)
        self.run_, self.sub, self.region = run, sub, home
        self.name_ = f"{run.prefix}-{sub}"
        self.kind = _consumer_type(SUBSCRIPTIONS[sub])
        self.rng = random.Random(f"{run.plan.seed}-{sub}")
        self.moves: queue.Queue[_Move] = queue.Queue()
        self.consumer: Any = None
        self.done = threading.Event()

    def _subscribe(self, deadline: float) -> None:
        while self.consumer is None and time.monotonic() < deadline:
            try:
                self.consumer = self.run_.clients[self.region].subscribe(
                    self.run_.topic,
                    self.name_,
                    consumer_type=self.kind,
                    initial_position=pulsar.InitialPosition.Earliest,
                    batch_index_ack_enabled=True,
                    receiver_queue_size=100,
                )
            except Exception as e:  # the region is down or frozen: try again
                self.run_.report(f"{self.sub}: cannot subscribe in {self.region} yet ({e})")
                time.sleep(2.0)

    def _close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
        self.consumer = None

    def _receive(self, *, ack_all: bool, timeout_ms: int = 200) -> bool:
        if self.consumer is None:
            self._subscribe(time.monotonic() + 5.0)
            return False
        try:
            msg = self.consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return False
        except Exception:  # closed underneath us, e.g. after a long freeze: open it again
            self._close()
            return False
        history = self.run_.history
        try:
            uid = str(json.loads(msg.data())["uid"])
        except (ValueError, KeyError, TypeError):
            return True
        region, sub = self.region, self.sub
        history.record(
            "recv",
            sub=sub,
            region=region,
            uid=uid,
            msg_id=str(msg.message_id()),
            redelivery=msg.redelivery_count(),
        )
        if ack_all or self.rng.random() >= self.run_.settings.hole_ratio:
            try:
                self.consumer.acknowledge(msg)
            except Exception as e:
                history.record("ack-failed", sub=sub, region=region, uid=uid, error=str(e))
            else:
                history.record("ack", sub=sub, region=region, uid=uid)
        else:
            history.record("hole", sub=sub, region=region, uid=uid)
        return True

    def _move(self, move: _Move) -> None:
        source, history = self.region, self.run_.history
        closed_at = history.now()
        self._close()
        verdict, waited = "none", 0.0
        detail: dict[str, Any] = {}
        if move.quiescent:
            started = time.monotonic()
            timeout = (
                self.run_.settings.final_settle_timeout_s
                if move.final
                else self.run_.settings.settle_timeout_s
            )
            try:
                verdict, detail = self.run_.settle(source, move.to, self.name_, timeout)
            except Exception as e:
                verdict = f"error: {e}"
            waited = time.monotonic() - started
        self.region = move.to
        history.record(
            "failover",
            sub=self.sub,
            phase="final" if move.final else "run",
            quiescent=move.quiescent,
            settled=verdict == "safe",
            verdict=verdict,
            closed_at=round(closed_at, 3),
            waited_s=round(waited, 2),
            check=detail,
            **{"from": source, "to": move.to},
        )
        self._subscribe(time.monotonic() + 300.0)

    def _drain(self) -> None:
        quiet = self.run_.settings.drain_quiet_s
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            if self._receive(ack_all=True, timeout_ms=500):
                last = time.monotonic()
        time.sleep(1.0)  # the client's grouped acknowledgements go out before the close
        self._close()

    def run(self) -> None:
        self._subscribe(time.monotonic() + 300.0)
        while True:
            try:
                move = self.moves.get_nowait()
            except queue.Empty:
                self._receive(ack_all=False)
                continue
            self._move(move)
            if move.final:
                self._drain()
                self.done.set()
                return


@dataclass
class _Run:
    lab_dir: pathlib.Path
    plan: Plan
    history: History
    settings: Settings
    settle: Settle
    report: Report
    prefix: str
    topic: str
    clients: dict[str, pulsar.Client] = field(default_factory=dict)
    producing_stop: threading.Event = field(default_factory=threading.Event)
