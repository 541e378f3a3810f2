"""The agent's checkpoint: what it needs to resume after a restart or a crash without re-reading history.

Rebuilding an origin index means reading a topic from its earliest retained message, so without a checkpoint
restart cost grows with retention (a week at 1,000 msg/s is 600 M messages). The checkpoint holds, per topic
partition, the origin index (runs, not messages), how far the reader got, the batch sizes and keys of entries
above the slowest mark-delete and the entries whose origin is still unresolved; per subscription, the claims
received from other regions and the claims last published; per control topic, how far it was read and its
replay guard. A restarted agent restores it and its readers start where the checkpoint ends.

Where it lives: a file in ``state_dir`` on the agent's own disk (the sidecar's volume), written every
``checkpoint_interval_s`` and at shutdown, atomically (a temporary file, fsync, rename). A local file is the
one store that is there when the region is not: the agent restarts precisely when its brokers or their
network misbehave, and a checkpoint kept in a topic or a ZooKeeper node of that region would then be
unreadable, and large for ZooKeeper's 1 MB node limit. It is one process's private state, so nothing else
needs to read it. A pod moved to another node starts without it (an ``emptyDir`` volume), which is a
rebuild, not an error; a persistent volume keeps it.

What it trusts: the file is checked whole (format, version, region, length, SHA-256) before any of it is used.
A missing, unreadable, corrupted or foreign checkpoint is refused loudly (logged as an error, counted as
``checkpoint_rejected``) and the agent rebuilds from the earliest messages, as without one. A checkpoint
that is fine as a file but no longer matches a topic (the topic was deleted and re-created, the region
rebuilt) is caught per topic: the reader's first message lies below where the checkpoint says it stopped,
and that topic alone is rebuilt (``checkpoint_topics_rebuilt``).

Invariants:

* ``load(save(path, state))`` returns ``state`` (JSON values);
* ``load`` never returns a state whose bytes differ from what ``save`` wrote: any change to the file is
  refused (``CheckpointError``), as is a checkpoint of another region or format version;
* a crash during ``save`` leaves the previous checkpoint whole (the new one replaces it by rename).

Who writes it: the loop takes the state and hands the writing (encoding, compressing, ``save``) to a
``Writer``, whose ``run`` is the ``checkpoint-writer`` task of the composition root (``supervising``).
Where no task runs it (the unit tests' harness, a simulator), ``drain`` writes on the caller's thread, when
the caller chooses: deterministically.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any

FORMAT = "geosync-agent-checkpoint"
VERSION = 1
FILE = "checkpoint.json.z"


class CheckpointError(Exception):
    """The checkpoint cannot be used; the message says why (never its content)."""


def path_in(state_dir: str) -> pathlib.Path:
    return pathlib.Path(state_dir) / FILE


PIECE_DEPTH = 2
"""``pieces`` encodes containers down to this depth one member at a time: the state's parts, then each topic
and each subscription whole."""
CHUNK_CHARS = 1 << 16
"""``compressed`` hands the compressor this much text at a time."""


def pieces(value: Any, depth: int = PIECE_DEPTH) -> Iterator[str]:
    """``value`` as compact JSON (the same text as ``json.dumps(value, separators=(",", ":"))``), in pieces.

    Why: ``json.dumps`` encodes in one call of its C encoder, holding the interpreter's lock throughout. The
    checkpoint of 10,000 subscriptions took it for a large part of a second on the checkpoint's thread, and
    every other thread (the sync loop, the feed and write calls' answers) waited. Between pieces the
    interpreter can switch threads."""
    if depth > 0 and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        yield "{"
        for i, (key, member) in enumerate(value.items()):
            yield ("," if i else "") + json.dumps(key) + ":"
            yield from pieces(member, depth - 1)
        yield "}"
    elif depth > 0 and isinstance(value, (list, tuple)):
        yield "["
        for i, member in enumerate(value):
            if i:
                yield ","
            yield from pieces(member, depth - 1)
        yield "]"
    else:
        yield json.dumps(value, separators=(",", ":"))


def compressed(state: dict[str, Any]) -> bytes:
    """``state``'s compact JSON, compressed (zlib, level 1) as its ``pieces`` are encoded: the whole text is
    never held, nor the interpreter's lock for all of it."""
    z = zlib.compressobj(level=1)
    out: list[bytes] = []
    chunk: list[str] = []
    size = 0
    for piece in pieces(state):
        chunk.append(piece)
        size += len(piece)
        if size >= CHUNK_CHARS:
            out.append(z.compress("".join(chunk).encode()))
            chunk, size = [], 0
    out.append(z.compress("".join(chunk).encode()))
    out.append(z.flush())
    return b"".join(out)


def save(path: pathlib.Path, *, region: str, state: dict[str, Any]) -> int:
    """Write ``state`` atomically; the number of bytes written."""
    body = compressed(state)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "region": region,
        "length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    data = json.dumps(header, sort_keys=True).encode() + b"\n" + body
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(data)


def load(path: pathlib.Path, *, region: str) -> dict[str, Any] | None:
    """The state saved at ``path``; None when there is none; ``CheckpointError`` when it cannot be trusted."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e}") from e
    head, sep, body = data.partition(b"\n")
    if not sep:
        raise CheckpointError(f"{path}: no header")
    try:
        header = json.loads(head)
    except ValueError as e:
        raise CheckpointError(f"{path}: header is not JSON") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a GeoSync agent checkpoint")
    if header.get("version") != VERSION:
        raise CheckpointError(f"{path}: format version {header.get('version')!r}, this agent reads {VERSION}")
    if header.get("region") != region:
        raise CheckpointError(
            f"{path}: written by the agent of region {header.get('region')!r}, not {region!r}"
        )
    if header.get("length") != len(body) or header.get("sha256") != hashlib.sha256(body).hexdigest():
        raise CheckpointError(f"{path}: length or checksum does not match (truncated or corrupted)")
    try:
        state = json.loads(zlib.decompress(body))
    except (ValueError, zlib.error) as e:
        raise CheckpointError(f"{path}: body does not decode") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: body is not an object")
    return state


class Writer:
    """One checkpoint write at a time, off the loop's thread.

    Invariants: at most one write is waiting and at most one is being written, never both (``offer`` refuses
    while ``busy``: the loop then skips that checkpoint, and the next interval's is newer); a write offered
    is done exactly once, by the task (``run``) or, where none runs, by ``drain`` or ``wait``."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: Callable[[], None] | None = None
        self._writing = False
        self._served = False

    def busy(self) -> bool:
        """A write is waiting or being written."""
        with self._changed:
            return self._waiting is not None or self._writing

    def offer(self, write: Callable[[], None]) -> bool:
        """Hand ``write`` over, unless ``busy`` (False: not taken)."""
        with self._changed:
            if self._waiting is not None or self._writing:
                return False
            self._waiting = write
            self._changed.notify_all()
            return True

    def _take(self) -> Callable[[], None] | None:
        with self._changed:
            write, self._waiting = self._waiting, None
            self._writing = write is not None
            return write

    def _done(self) -> None:
        with self._changed:
            self._writing = False
            self._changed.notify_all()

    def drain(self) -> None:
        """Do the waiting write (if any) on the caller's thread: where no task runs this writer."""
        write = self._take()
        if write is not None:
            try:
                write()
            finally:
                self._done()

    def wait(self) -> None:
        """Until nothing is waiting or being written; a write waiting with no task to run it is done here."""
        while True:
            with self._changed:
                if self._waiting is None and not self._writing:
                    return
                served = self._served
                if served:
                    self._changed.wait(0.1)
            if not served:
                self.drain()

    def run(self, stop: threading.Event) -> None:
        """The ``checkpoint-writer`` task's body: do each write offered, until ``stop`` (a write still
        waiting then is done by whoever waits for it: the agent's last checkpoint at shutdown)."""
        with self._changed:
            self._served = True
        try:
            while not stop.is_set():
                with self._changed:
                    if self._waiting is None:
                        self._changed.wait(0.5)
                        continue
                self.drain()
        finally:
            with self._changed:
                self._served = False
                self._changed.notify_all()


JOURNAL_GLOB = "acked-*.jsonl"


class Journal:
    """What consumers acknowledged since the last checkpoint, kept until the next one is written (decision
    0015: a feed read confirms what the previous answer carried, and the broker then forgets it).

    Why: the plugin hands an ``acked`` block over until a read confirms it, and the agent confirms at its
    next read, a fraction of a second later, while its checkpoint is written every ``checkpoint_interval_s``.
    An agent killed in between came back from a checkpoint without those acknowledgements, and nobody had
    them any more: never claimed, re-delivered after a failover, and ``geoctl failover check`` never judged
    that subscription safe again. Each answer's blocks are appended here before the next read confirms them
    (a line of JSON, flushed to the operating system: it survives the process, not the machine); a
    checkpoint starts a new segment when it takes the state (``rotate``) and drops the older ones once it is
    written (``drop_before``); a restored agent takes up what the segments hold (``records``) at its first
    feed read. Replaying a block the checkpoint already holds changes nothing (absorbing is a union).

    Invariants (``tests/agent/test_checkpointing.py``): ``records`` returns every record appended since the
    segment last passed to ``drop_before``, in order; a line cut short by a crash is skipped, never fatal.
    Without a directory (the simulator) the segments live in memory: the simulator keeps one journal per
    region across an agent's lives, as the disk would. ``keep=False`` keeps nothing: an agent without
    ``state_dir`` writes no checkpoint, so nothing would ever drop what it kept."""

    def __init__(self, directory: pathlib.Path | None = None, *, keep: bool = True) -> None:
        self.directory = directory
        self.keep = keep
        self._memory: dict[int, list[str]] = {}
        self._file: Any = None
        found = sorted(self._segments()) if directory is not None else []
        self.segment = found[-1] + 1 if found else 1
        self.torn = 0
        """Lines skipped by ``records`` (cut short by a crash, or damaged)."""

    def _segments(self) -> list[int]:
        if self.directory is None:
            return sorted(self._memory)
        out = []
        for path in self.directory.glob(JOURNAL_GLOB):
            try:
                out.append(int(path.stem.removeprefix("acked-")))
            except ValueError:
                continue
        return sorted(out)

    def _path(self, segment: int) -> pathlib.Path:
        assert self.directory is not None
        return self.directory / f"acked-{segment:08d}.jsonl"

    def append(self, record: dict[str, Any]) -> None:
        if not self.keep:
            return
        line = json.dumps(record, separators=(",", ":"))
        if self.directory is None:
            self._memory.setdefault(self.segment, []).append(line)
            return
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = self._path(self.segment).open("a", encoding="utf-8")
        self._file.write(line + "\n")
        self._file.flush()

    def rotate(self) -> int:
        """Start a new segment; the number of the new one (what a checkpoint taken now does not hold)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.segment += 1
        return self.segment

    def drop_before(self, segment: int) -> None:
        """Forget the segments older than ``segment`` (a checkpoint holding them is written)."""
        for n in self._segments():
            if n >= segment:
                continue
            if self.directory is None:
                del self._memory[n]
            else:
                self._path(n).unlink(missing_ok=True)

    def records(self) -> list[dict[str, Any]]:
        lines: list[str] = []
        for n in self._segments():
            if self.directory is None:
                lines.extend(self._memory[n])
                continue
            try:
                lines.extend(self._path(n).read_text(encoding="utf-8").splitlines())
            except OSError:
                self.torn += 1
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                self.torn += 1
                continue
            if isinstance(record, dict):
                out.append(record)
            else:
                self.torn += 1
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
