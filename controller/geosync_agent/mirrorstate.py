"""Where the policy mirror keeps its checkpoint in the region's ZooKeeper: one node, or parts behind it.

ZooKeeper refuses a node (and a transaction) over ``jute.maxbuffer``, about 1 MB, and a mirror of tens of
thousands of policies checkpoints more than that. The checkpoint's bytes (the mirror's ``Checkpoint`` as
compressed JSON, ``geosync_agent.core.mirror.encode_checkpoint``) therefore live in one of two shapes, both
under ``{mirror_root}``:

* **inline** (version 1, and still written while the bytes fit the budget): ``state`` holds them;
* **in parts** (version 2): ``state`` holds a pointer (``GSM2`` and JSON: generation, part count, size,
  SHA-256) and the bytes are cut into parts of at most the budget at ``parts/{generation}/{index}``.

A write never leaves a mix of old and new parts: the parts go to a fresh generation first, then ``state``
is switched with one compare-and-set, and only then are other generations deleted. A crash before the
switch leaves the old checkpoint whole (and orphan parts that the next write deletes); a crash after it
leaves the new one whole. Every write is fenced by the leader's lock node, like the mirror's store writes,
so a deposed leader cannot switch the pointer or delete the parts its successor reads. A reader verifies
the part count, size and digest, so parts that do not make the checkpoint the pointer names are refused
(the mirror then starts afresh, as for any unreadable checkpoint).

One of the mirror's parts (see ``mirrorlocal``): it draws no random number. A generation's name comes from
the ``new_id`` it is given (the mirror's, a fresh hex id from the shell); a ``StateNodes`` given none (tools,
benchmarks) names a generation after those already under ``parts/``, unique because only the fenced leader
writes there.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from geosync_adapters import zookeeper as zk

log = logging.getLogger("geosync.mirror")

POINTER_MAGIC = b"GSM2"  # GeoSync mirror checkpoint, version 2: a pointer to parts, JSON follows
POINTER_VERSION = 2
DEFAULT_PART_BYTES = 512 * 1024


@dataclass(frozen=True)
class Pointer:
    """What ``state`` holds when the checkpoint is in parts."""

    generation: str
    parts: int
    size: int
    sha256: str


def encode_pointer(pointer: Pointer) -> bytes:
    doc = {
        "v": POINTER_VERSION,
        "generation": pointer.generation,
        "parts": pointer.parts,
        "size": pointer.size,
        "sha256": pointer.sha256,
    }
    return POINTER_MAGIC + json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode_pointer(data: bytes) -> Pointer | None:
    """The pointer ``data`` holds, or ``None`` if it holds none we can read."""
    if not data.startswith(POINTER_MAGIC):
        return None
    try:
        doc = json.loads(data[len(POINTER_MAGIC) :])
        if not isinstance(doc, dict) or doc.get("v") != POINTER_VERSION:
            return None
        pointer = Pointer(str(doc["generation"]), int(doc["parts"]), int(doc["size"]), str(doc["sha256"]))
    except (ValueError, KeyError, TypeError):
        return None
    if not pointer.generation.isalnum() or pointer.parts < 1 or pointer.size < 0:
        return None
    return pointer


def split(data: bytes, budget: int) -> list[bytes]:
    """``data`` cut into parts of at most ``budget`` bytes (at least one part)."""
    if budget < 1:
        raise ValueError(f"part budget must be positive, not {budget}")
    return [data[i : i + budget] for i in range(0, len(data), budget)] or [b""]


class StateNodes:
    """The checkpoint's nodes under ``root``, written by the leader holding ``fence``."""

    def __init__(
        self,
        store: zk.Store,
        root: str,
        *,
        budget: int = DEFAULT_PART_BYTES,
        fence: tuple[str, int] | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self.new_id = new_id
        self.root = root.rstrip("/")
        self.budget = budget
        self.fence = fence
        self.state_path = f"{self.root}/state"
        self.parts_root = f"{self.root}/parts"

    def read(self) -> tuple[zk.Node | None, bytes | None]:
        """``state`` as read (what the next ``write`` expects) and the checkpoint's bytes, if whole."""
        node = self.store.read(self.state_path)
        if node is None:
            return None, None
        pointer = decode_pointer(node.value)
        if pointer is None:
            return node, node.value  # inline (version 1), or unreadable: the decoder decides
        parts = []
        for i in range(pointer.parts):
            part = self.store.read(f"{self.parts_root}/{pointer.generation}/{i:06d}")
            if part is None:
                log.warning("mirror checkpoint %s: part %d is missing", pointer.generation, i)
                return node, None
            parts.append(part.value)
        data = b"".join(parts)
        if len(data) != pointer.size or hashlib.sha256(data).hexdigest() != pointer.sha256:
            log.warning("mirror checkpoint %s: parts do not match the pointer", pointer.generation)
            return node, None
        return node, data

    def write(self, data: bytes, *, expected: zk.Node | None) -> zk.Node:
        """Make the checkpoint ``data`` if ``state`` is still ``expected``; ``state`` as written.

        Raises ``zk.ZkStale`` when ``state`` changed (another writer), ``zk.ZkFenced`` when the fence is
        gone; parts already written for this call are then orphans the next successful write deletes."""
        generation = None
        if len(data) <= self.budget:
            value = data
        else:
            generation = self._fresh_generation()
            parts = split(data, self.budget)
            self._write_parts(generation, parts)
            digest = hashlib.sha256(data).hexdigest()
            value = encode_pointer(Pointer(generation, len(parts), len(data), digest))
        self.store.write(self.state_path, value, expected=expected, fence=self.fence)
        written = self.store.read(self.state_path)
        if written is None:
            raise zk.ZkStale("mirror checkpoint deleted right after its write", path=self.state_path)
        self.sweep(keep=generation)
        return written

    def _fresh_generation(self) -> str:
        if self.new_id is not None:
            return self.new_id()
        taken = set(self.store.children(self.parts_root))
        return next(g for g in (f"g{n}" for n in range(len(taken) + 1)) if g not in taken)

    def _write_parts(self, generation: str, parts: list[bytes]) -> None:
        # One transaction per part: a transaction is bounded by jute.maxbuffer as a node is.
        self.store.ensure_path(self.parts_root)
        path = f"{self.parts_root}/{generation}"
        self.store.write(path, b"", expected=None, fence=self.fence)
        for i, part in enumerate(parts):
            self.store.write(f"{path}/{i:06d}", part, expected=None, fence=self.fence)

    def sweep(self, *, keep: str | None) -> int:
        """Delete every generation of parts but ``keep``; how many were deleted."""
        deleted = 0
        for generation in self.store.children(self.parts_root):
            if generation != keep:
                self._delete(f"{self.parts_root}/{generation}")
                deleted += 1
        return deleted

    def _delete(self, path: str) -> None:
        for child in self.store.children(path):
            self._delete(f"{path}/{child}")
        node = self.store.read(path)
        if node is not None:
            self.store.write(path, None, expected=node, fence=self.fence)
