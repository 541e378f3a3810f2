"""Reading a region's topics: each partition's reader, and the inbox it fills for the runtime.

A reader per topic partition hands messages to the runtime through a queue (the client's listener thread
never does more than ``put``); the queue is bounded (``INBOX_MAX``): when the runtime falls behind, the
listener waits, the reader's receive queue fills and the broker stops dispatching to it, so memory does not
grow with the lag. A data topic's payloads are not kept in it (only snapshot markers' are used).

What the messages tell (each local entry's origin, batch sizes and keys, entries whose origin could not be
named yet) is the core's ``LogView`` (``geosync_agent.core.logview``): a ``Tail`` is that view with the reader
and inbox that feed it. ``taken`` takes what the inbox holds in one go, for the index step to hand to the
core (``core.naming.EntriesRead``, one step a batch); ``drain`` hands it to ``LogView.take`` at once. A
subclass rather than a view held in an attribute: the apply and observe steps read a tail's index, sizes and
keys per acknowledgement, and no extra step is added on that path (decision 0001).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from geosync_adapters.messaging import Received
from geosync_agent.core.logview import LogView
from geosync_agent.ports import Messaging, Reader
from geosync_core import resolving
from geosync_core.envelopes import Keyring
from geosync_core.markers import PROPERTY as MARKER_PROPERTY
from geosync_core.positions import Position

INBOX_MAX = 20_000
"""Messages read but not yet indexed that one tail holds before its reader waits (backpressure)."""
PUT_WAIT_S = 0.5
"""How long the listener waits for room at a time; a tail closed meanwhile drops the message."""


@dataclass
class Tail(LogView):
    """One topic partition being read from its earliest retained entry: its ``LogView`` and its reader."""

    inbox: queue.Queue[Received] = field(default_factory=lambda: queue.Queue(INBOX_MAX))
    reader: Reader | None = None
    bytes_read: int = 0
    """Bytes the reader delivered (counted on the client's thread)."""
    reopen_at: float = 0.0
    """When to try opening the reader again after it could not be opened (monotonic)."""
    stalled_since: float | None = None
    """Since when (monotonic) the open reader has had no broker connection; None: connected."""
    revive_at: float = 0.0
    """When a stalled reader's topic owner may be checked again (see ``reading.Readers.revive``)."""
    wake: threading.Event | None = None
    """Set on every message, to end the runtime's wait between rounds early (control topics)."""

    def listener(self, msg: Received) -> None:
        # Runs on the client's thread: hand over, waiting only while the inbox is full.
        self.bytes_read += len(msg.data)
        if self.wake is None and msg.data and MARKER_PROPERTY not in msg.properties:
            msg = replace(msg, data=b"")  # a data topic's payload (if any): never read here
        while True:
            try:
                self.inbox.put(msg, timeout=PUT_WAIT_S)
                break
            except queue.Full:
                if self.reader is None:
                    return  # closed: nobody drains this inbox any more
        if self.wake is not None:
            self.wake.set()

    def open(self, messaging: Messaging) -> None:
        """Open the reader: at the last entry read (what it delivers again is skipped by position), else at
        the checkpoint's ``resume_at``, else at the earliest entry."""
        self.stalled_since = None
        start = self.last if self.last is not None else self.resume_at
        self.reader = messaging.reader(self.topic, self.listener, start=start)

    def close(self) -> None:
        # Marked closed first: a listener waiting for room in the inbox gives up instead of holding the
        # client's listener thread while the reader closes.
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()

    def first_unread(self, wanted: Callable[[Received], bool], *, scan: int = 64) -> Position | None:
        """The position of the first queued message past the last one indexed that ``wanted`` accepts, among
        the first ``scan`` queued (the listener keeps appending meanwhile; this only reads)."""
        if not self.inbox.queue:
            return None  # read without the lock: a message put meanwhile is looked at next round
        with self.inbox.mutex:
            queued: list[Received] = list(itertools.islice(self.inbox.queue, scan))
        for msg in queued:
            if (self.last is None or msg.position > self.last) and wanted(msg):
                return msg.position
        return None

    def drain(
        self,
        resolver: resolving.OriginResolver,
        *,
        limit: int = 5000,
        now: float = 0.0,
        keyring: Keyring | None = None,
    ) -> int:
        """Take up to ``limit`` queued messages and index them (``LogView.take``) with a resolver that answers
        its lookups itself (the index step steps them as ``core.naming.EntriesRead`` instead); return how
        many entries were appended."""
        taken = self.taken(limit)
        return self.take(taken, resolver, now=now, keyring=keyring) if taken else 0

    def taken(self, limit: int = 5000) -> list[Received]:
        """Up to ``limit`` queued messages, in the order read. Taken in one go under the inbox's lock, waking
        listeners waiting for room once (the queue's ``get`` locks and wakes once a message). When the first
        message lies below ``resume_at`` (``stale``), the rest taken are dropped with this tail: the runtime
        reads the topic again."""
        inbox = self.inbox
        if not inbox.queue:
            return []  # read without the lock (every tail, every round): one put meanwhile waits a round
        with inbox.mutex:
            queued = inbox.queue
            taken = [queued.popleft() for _ in range(min(limit, len(queued)))]
            if taken:
                inbox.not_full.notify(len(taken))
        return taken

    def has_read(self, position: Position) -> bool:
        """Whether every message of entry ``position`` (and all before it) has been indexed: a later entry
        was, or it is the last one and no message waits in the inbox (more of its batch may)."""
        if self.last is None or self.last < position:
            return False
        return self.last > position or self.inbox.empty()
