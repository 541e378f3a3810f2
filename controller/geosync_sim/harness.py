"""The real agent as the simulator runs it: one region's ``Agent`` built over the simulated world's ports,
with what the agent's composition root would give it, made deterministic.

- Keys: each region signs with a keyed BLAKE2b (``HashSigner``, ``keys_for``), not Ed25519 (below, why).
- Effects run at once on the round's thread (``InlineExecutor``): a cursor write or a send completes within
  the round that asked for it, and its outcome is read at the next round as the shell reads it.
- ``start`` builds an agent for a region, restored from a checkpoint or not; ``discover`` runs one discovery
  pass for it as the shell's discovery task would (``geosync_agent.discovering.scan``), at a virtual time.

``running`` decides when each of these happens (the schedule, rounds, crashes and restarts); this module only
makes the parts.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from geosync_agent import checkpointing, discovering
from geosync_agent import effects as fx
from geosync_agent.config import AgentConfig
from geosync_agent.runtime import ROUND_ERRORS, Agent, Now
from geosync_core import envelopes
from geosync_core.incarnations import Incarnation
from geosync_sim.ports import SimAdmin, SimMessaging
from geosync_sim.world import World

NAMESPACE = "geo/sim"
MONO0 = 1000.0
"""The agents' monotonic clock at virtual time 0."""

_KEYS: dict[tuple[str, ...], dict[str, envelopes.Keys]] = {}


@dataclass(frozen=True, slots=True)
class HashSigner:
    """A region's key in the simulator: a keyed BLAKE2b of the message (the agent's ``envelopes.Signer``).

    Why not Ed25519 as in the agent's composition root (``geosync_adapters.signing``): verifying one took
    ~150 us, about a tenth of a simulated schedule's CPU (every region reads every envelope). What the
    simulated faults exercise is kept: an envelope signed by no region's key, altered after signing, or
    signed by one region's key for another is refused as Ed25519 refuses it. What is lost, a verifier
    holding public keys only, is tested against the real signer elsewhere (``tests/adapters/test_signing.py``,
    ``tests/core/test_envelopes.py``). Signatures are as long as Ed25519's (64 bytes, hex)."""

    key_id: str
    secret: bytes = field(repr=False)

    def sign(self, message: bytes) -> str:
        return hashlib.blake2b(message, key=self.secret, digest_size=64).hexdigest()


@dataclass(frozen=True, slots=True)
class HashVerifier:
    secret: bytes = field(repr=False)

    def verify(self, message: bytes, sig: str) -> bool:
        return sig == hashlib.blake2b(message, key=self.secret, digest_size=64).hexdigest()


def keys_for(regions: tuple[str, ...]) -> dict[str, envelopes.Keys]:
    """Signing keys per region (``HashSigner``), made once per process (the secrets are drawn from the OS:
    keys never show in a trace, and signatures do not change what any agent decides)."""
    if regions not in _KEYS:
        signers = {region: HashSigner(f"{region}-test", os.urandom(32)) for region in regions}
        keyring = envelopes.Keyring.of(
            {region: {s.key_id: HashVerifier(s.secret)} for region, s in signers.items()}
        )
        _KEYS[regions] = {region: envelopes.Keys(s, keyring) for region, s in signers.items()}
    return _KEYS[regions]


class InlineExecutor(Executor):
    """Runs submitted work at once on the caller's thread: effects complete within the round."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:
            future.set_exception(e)
        return future

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        """``Executor.map`` without a ``Future`` per item (each makes a lock and a condition: the agent maps
        its polls, reads and writes over every topic due, every round): every call is made at once, and the
        results come in order, the first error raised where its result would be."""
        outcomes: list[tuple[bool, Any]] = []
        for args in zip(*iterables, strict=False):
            try:
                outcomes.append((True, fn(*args)))
            except BaseException as e:
                outcomes.append((False, e))

        def results() -> Iterator[Any]:
            for ok, value in outcomes:
                if not ok:
                    raise value
                yield value

        return results()


AgentHook = Callable[["Life"], None]
"""Called on each agent's life as it starts (the checker's tests use it to break an agent on purpose)."""


@dataclass
class Life:
    """One region's agent, while it runs."""

    region: str
    agent: Agent
    messaging: SimMessaging
    admin: SimAdmin
    phase: float
    next_round: float = 0.0
    next_discovery: float = 0.0


def start(
    world: World,
    region: str,
    now: Now,
    *,
    claims_from: str,
    keys: envelopes.Keys,
    journal: checkpointing.Journal,
    first_seq: int,
    rng: random.Random,
    incarnation: Incarnation,
    checkpoint: Any,
    at: float,
    phase: float,
) -> Life:
    """A new agent for ``region`` at virtual time ``at`` (``now``), its first round ``phase`` later and its
    first discovery pass at once, restored from ``checkpoint`` unless it is None; it writes no
    checkpoint of its own (the simulation takes them as the checkpoint task would)."""
    config = AgentConfig(
        region=region,
        admin_url=f"http://{region}-broker:8080",
        service_url=f"pulsar://{region}-broker:6650",
        namespaces=(NAMESPACE,),
        mirror_policies=False,
        claims_from=claims_from,
    )
    messaging = SimMessaging(world, region)
    admin = SimAdmin(world, region)
    effector = fx.Effector(
        admin_factory=lambda: admin,
        messaging=messaging,
        pool=InlineExecutor(),
        clock=lambda: MONO0 + world.now,
    )
    agent = Agent(
        config,
        keys=keys,
        effector=effector,
        messaging=messaging,
        discovered=discovering.Latest(),
        rediscover=threading.Event(),
        wake=threading.Event(),
        first_seq=first_seq,
        rng=rng,
        started_ms=now.wall_ms,
        incarnation=incarnation,
        journal=journal,
    )
    effector.on_sent = agent.on_sent
    if checkpoint is not None:
        agent.restore(checkpoint, now)
    agent.checkpoint_at = math.inf  # the simulation writes them (every CHECKPOINT_S, or when the agent asks)
    return Life(region, agent, messaging, admin, phase, next_round=at + phase, next_discovery=at)


def discover(life: Life, mono: float) -> bool:
    """One discovery pass for ``life``'s agent at monotonic time ``mono``, handed to it as the shell's
    discovery task hands it; False when the pass failed (the region's admin API is down): none is handed."""
    views = discovering.PluginTopics(life.admin, clock=lambda: mono)
    try:
        found = discovering.scan(life.admin, life.agent.config, now=mono, views=views)
    except ROUND_ERRORS:
        return False
    life.agent.discovered.put(found)
    life.agent.rediscover.clear()
    return True
