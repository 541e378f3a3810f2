"""This region's incarnation, kept in the region's own ZooKeeper (``geosync_core.incarnations`` says why).

The node lives beside the ledger-id counter it stands for: the region's metadata store. Wiping the region
wipes both, so the first agent to start in the rebuilt region creates a new incarnation, and every agent of
the region (one per broker in sidecar mode, two during a rolling update) reads the same one: creation is
create-if-absent, and a loser of that race reads the winner's.

Wire form (a format we own): UTF-8 JSON ``{"version": 1, "created_ms": n, "id": "..."}``. A node that holds
anything else is not overwritten: the agent refuses to start and says which node to look at (overwriting
it would make every region drop what it knows of this one).
"""

from __future__ import annotations

import json
import logging
import secrets

import tenacity

from geosync_adapters import zookeeper as zk
from geosync_core.errors import PermanentError
from geosync_core.incarnations import Incarnation

log = logging.getLogger("geosync.agent")
VERSION = 1
ATTEMPTS = 6
"""ZooKeeper unreachable this many times in a row (about 30 s with the backoff): the agent gives up."""


class IncarnationError(PermanentError):
    """The incarnation cannot be had; the message says what to do (the agent exits with status 2)."""


def encode(incarnation: Incarnation) -> bytes:
    return json.dumps(
        {"version": VERSION, "created_ms": incarnation.created_ms, "id": incarnation.id}, sort_keys=True
    ).encode()


def decode(data: bytes) -> Incarnation | None:
    """What ``encode`` wrote; ``None`` for anything else."""
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(value, dict) or value.get("version") != VERSION:
        return None
    return Incarnation.from_wire([value.get("created_ms"), value.get("id")])


def read_or_create(store: zk.Store, path: str, *, now_ms: int) -> tuple[Incarnation, bool]:
    """The incarnation at ``path``, created (with a fresh random id) if there is none; whether it was created
    now. ``IncarnationError`` if the node holds something else."""
    node = store.read(path)
    if node is None:
        parent = path.rsplit("/", 1)[0]
        if parent:
            store.ensure_path(parent)
        fresh = Incarnation(now_ms, secrets.token_hex(8))
        try:
            store.write(path, encode(fresh), expected=None)
            return fresh, True
        except zk.ZkStale:
            node = store.read(path)  # another agent of the region created it first
            if node is None:
                raise
    found = decode(node.value)
    if found is None:
        raise IncarnationError(
            f"ZooKeeper node {path} does not hold a GeoSync incarnation ({len(node.value)} bytes). If the "
            "region was rebuilt, delete the node and start the agent again; otherwise set "
            "incarnation_node to a node of GeoSync's own"
        )
    return found, False


def load(
    hosts: str, path: str, *, auth: zk.ZkAuth | None, now_ms: int, timeout_s: float = 15.0
) -> Incarnation:
    """``read_or_create`` on the region's ZooKeeper at ``hosts``, retried with backoff while it is
    unreachable (``IncarnationError`` once it stays so)."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(zk.ZkUnavailable),
        wait=tenacity.wait_exponential(multiplier=1, max=10),
        stop=tenacity.stop_after_attempt(ATTEMPTS),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "region ZooKeeper %s not reachable for the incarnation (%s); retrying",
            hosts,
            state.outcome.exception() if state.outcome else "",
        ),
    )
    try:
        for attempt in retrying:
            with attempt:
                store = zk.Store(hosts, auth=auth)
                try:
                    store.start(timeout_s=timeout_s)
                    incarnation, created = read_or_create(store, path, now_ms=now_ms)
                finally:
                    store.stop()
    except zk.ZkError as e:
        raise IncarnationError(
            f"cannot read the region's incarnation from ZooKeeper {hosts} ({e}); check that the agent's "
            "zookeeper setting names the region's metadata store and that it is up"
        ) from e
    if created:
        log.warning("region incarnation %s created at %s (a new region, or one rebuilt)", incarnation, path)
    else:
        log.info("region incarnation %s (from %s)", incarnation, path)
    return incarnation
