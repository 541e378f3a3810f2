"""The chaos run's nemesis: one fault after another, each restoring what it broke before the next."""

from __future__ import annotations

import contextlib
import functools
import json
import random
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pulsar

from geosync_adapters import messaging
from geosync_adapters.admin import AdminClient
from geosync_adapters.adminhttp import AdminError
from geosync_core import topology as topo
from geosync_lab import labs, regions, wan
from geosync_lab.chaos_plan import NAMESPACE, POLICY_FIELDS, POLICY_NAMESPACE, Step
from geosync_lab.chaos_workload import _Run

# -- the nemesis -----------------------------------------------------------------------------------


class _Nemesis:
    def __init__(self, run: _Run) -> None:
        self.run_ = run
        self.lab = run.lab_dir

    def topology(self) -> topo.Topology:
        return labs.load(self.lab)

    def apply(self, step: Step, fault_id: int) -> None:
        args, history = dict(step.args), self.run_.history
        regions_hit = (
            [args["region"]] if "region" in args else list(args.get("pair") or args.get("edits", {}))
        )
        history.record("fault", id=fault_id, phase="start", kind=step.action, regions=regions_hit, args=args)
        details: dict[str, Any] = {}
        try:
            details = getattr(self, "_" + step.action.replace("-", "_"))(**args) or {}
        except Exception as e:
            details = {"error": f"{type(e).__name__}: {e}"}
            self.run_.report(f"fault {step.action} failed: {e}")
        finally:
            history.record(
                "fault", id=fault_id, phase="end", kind=step.action, regions=regions_hit, **details
            )

    def _agent_kill(self, region: str, down_s: float) -> dict[str, Any]:
        labs.stop_agent(self.lab, region, kill=True)
        time.sleep(down_s)
        return self._start_agent(region)

    def _start_agent(self, region: str) -> dict[str, Any]:
        started = time.monotonic()
        labs.start_agent(self.lab, region)
        labs.wait_agent_ready(self.lab, region, timeout_s=120.0)
        return {"ready_after_s": round(time.monotonic() - started, 1)}

    def _broker_kill(self, region: str, down_s: float) -> dict[str, Any]:
        labs.stop_region(self.lab, region, kill=True)
        time.sleep(down_s)
        started = time.monotonic()
        labs.start_region(self.lab, region)
        return {"restarted_after_s": round(time.monotonic() - started, 1)}

    def _freeze(self, region: str, hold_s: float) -> None:
        labs.freeze_region(self.lab, region, frozen=True)
        try:
            time.sleep(hold_s)
        finally:
            labs.freeze_region(self.lab, region, frozen=False)

    def _partition(self, pair: list[str], hold_s: float) -> None:
        topology, link = self.topology(), (pair[0], pair[1])
        wan.partition(topology, self.lab, link, heal=False)
        try:
            time.sleep(hold_s)
        finally:
            wan.partition(topology, self.lab, link, heal=True)

    def _latency(self, pair: list[str], latency_ms: int, jitter_ms: int, hold_s: float) -> None:
        topology, link = self.topology(), (pair[0], pair[1])
        wan.shape_links(topology, self.lab, wan.Shape(latency_ms, jitter_ms), link)
        try:
            time.sleep(hold_s)
        finally:
            wan.shape_links(topology, self.lab, wan.Shape(), link)

    def _zk_expiry(self, region: str, hold_s: float) -> dict[str, Any]:
        """Stop the agent's process for longer than its ZooKeeper session timeout: the server expires the
        session, and the agent finds it expired when it runs again (as after a long GC pause)."""
        agent = self.topology().agents[region]
        logfile = labs.agent_log(self.lab, region)
        offset = logfile.stat().st_size if logfile.exists() else 0
        if not agent.pid or not regions.signal_region(agent.pid, agent.config, signal.SIGSTOP):
            return {"error": f"the agent of {region} is not running"}
        try:
            time.sleep(hold_s)
        finally:
            regions.signal_region(agent.pid, agent.config, signal.SIGCONT)
        labs.wait_agent_ready(self.lab, region, timeout_s=120.0)
        time.sleep(3.0)
        with logfile.open("rb") as f:
            f.seek(offset)
            tail = f.read().decode(errors="replace").lower()
        return {"session_expired_logged": "session has expired" in tail or "expired_session" in tail}

    def _control(self, region: str, garbage: int, tampered: int, replayed: int) -> dict[str, Any]:
        """Write onto the namespace's control topic what an attacker with produce permission and no key
        can: garbage, genuine messages altered, genuine messages again (old and recent)."""
        topology = self.topology()
        control = (
            topology.namespaces[NAMESPACE].control_topic or f"persistent://{NAMESPACE}/{labs.CONTROL_TOPIC}"
        )
        rng = random.Random(f"{self.run_.plan.seed}-control-{self.run_.history.now():.0f}")
        genuine = _genuine(topology.region(region).service_url, control, limit=20)
        bad: list[bytes] = [rng.randbytes(rng.randint(1, 200)) for _ in range(garbage)]
        for data in rng.sample(genuine, min(tampered, len(genuine))):
            bad.append(_tamper(data, rng))
        bad.extend(rng.sample(genuine, min(replayed, len(genuine))))
        before = self._rejections()
        with messaging.client(topology.region(region).service_url) as c:
            producer = c.create_producer(control, batching_enabled=False)
            for data in bad:
                producer.send(data)
            producer.close()
        time.sleep(3.0)
        after = self._rejections()
        return {
            "written": len(bad),
            "genuine_read": len(genuine),
            "rejected": {
                r: {k: v - before.get(r, {}).get(k, 0) for k, v in c.items()} for r, c in after.items()
            },
        }

    def _rejections(self) -> dict[str, dict[str, int]]:
        out = {}
        for name in self.topology().agents:
            try:
                with urllib.request.urlopen(
                    labs.agent_metrics_url(self.lab, name) + "/state", timeout=3
                ) as r:
                    counters = json.loads(r.read()).get("counters") or {}
            except (OSError, ValueError):
                continue
            out[name] = {k: int(v) for k, v in counters.items() if k.startswith("control_rejected")}
        return out

    def _policy_edit(self, round_no: int, field: str, edits: dict[str, int]) -> None:
        topology, history = self.topology(), self.run_.history
        barrier = threading.Barrier(len(edits))

        def edit(region: str, value: int) -> None:
            body = POLICY_FIELDS[field](value)
            admin = AdminClient(topology.region(region).admin_url)
            barrier.wait(timeout=30)
            try:
                admin.post(f"/admin/v2/namespaces/{POLICY_NAMESPACE}/{field}", body)
            except AdminError as e:
                history.record(
                    "policy-edit", round=round, region=region, field=field, value=body, ok=False, error=str(e)
                )
            else:
                history.record("policy-edit", round=round_no, region=region, field=field, value=body, ok=True)

        threads = [threading.Thread(target=edit, args=(r, v), daemon=True) for r, v in edits.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)

    def restore(self) -> list[str]:
        """Put back whatever a fault that failed halfway may have left broken; what was done, and what
        could not be (the run goes on to its final phase either way: the checker judges what follows)."""
        done: list[str] = []

        def attempt(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as e:
                done.append(f"{what} failed: {type(e).__name__}: {e}")
                self.run_.report(f"restore: {what} failed: {e}")
            else:
                done.append(what)

        topology = self.topology()
        for name, up in labs.alive_regions(self.lab, topology).items():
            if up:
                with contextlib.suppress(Exception):
                    labs.freeze_region(self.lab, name, frozen=False)
            else:
                attempt(f"started region {name}", functools.partial(labs.start_region, self.lab, name))
        for name, agent in labs.load(self.lab).agents.items():
            if agent.pid:
                regions.signal_region(agent.pid, agent.config, signal.SIGCONT)
            if not agent.pid or not regions.owns(agent.pid, agent.config):
                attempt(f"started agent {name}", functools.partial(self._start_agent, name))
        if topology.wan:
            names = sorted(topology.regions)
            pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
            for x, y in pairs:
                attempt(
                    f"healed {x}-{y}", functools.partial(wan.partition, topology, self.lab, (x, y), heal=True)
                )
            attempt("cleared WAN shaping", lambda: wan.shape_links(topology, self.lab, wan.Shape(), None))
        return [d for d in done if "failed" in d or d.startswith("started")]


def _genuine(service_url: str, topic: str, *, limit: int) -> list[bytes]:
    """Up to ``limit`` messages of a control topic: the oldest ones and the next one written."""
    found: list[bytes] = []
    with messaging.client(service_url) as c:
        for start, wait_ms in ((pulsar.MessageId.earliest, 500), (pulsar.MessageId.latest, 5000)):
            reader = c.create_reader(topic, start)
            try:
                while len(found) < limit:
                    try:
                        found.append(reader.read_next(timeout_millis=wait_ms).data())
                    except pulsar.Timeout:
                        break
                    if start == pulsar.MessageId.latest:
                        break
            finally:
                reader.close()
            limit += 1
    return found


def _tamper(data: bytes, rng: random.Random) -> bytes:
    """A genuine envelope with one value changed and its signature kept, or a flipped byte."""
    try:
        value = json.loads(data)
        if isinstance(value, dict) and "seq" in value:
            value["seq"] = int(value["seq"]) + rng.randint(1, 10**6)
            return json.dumps(value).encode()
    except (ValueError, TypeError):
        pass
    at = rng.randrange(len(data)) if data else 0
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :] if data else b"\x00"
