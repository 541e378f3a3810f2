"""The agent's readers: opened when a topic is tracked, again when they could not be, and again when their
broker went away.

Opening a reader is a round trip to the topic's owner, so the readers due in a round are opened together on
the pool; a control topic that does not exist is created first (with auto topic creation off nobody else
creates it). A reader whose broker died is opened again once the topic's new owner answers, instead of
waiting for the client's own reconnection backoff (up to a minute). Every outside call goes through the
``Effector``; the tails are the loop's, and a pool worker touches only the tail it opens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container

from geosync_adapters import adminhttp
from geosync_adapters import messaging as msg
from geosync_agent import calls
from geosync_agent import effects as fx
from geosync_agent.core import tuning
from geosync_agent.tailing import Tail

log = logging.getLogger("geosync.agent")


class Readers:
    """Opens the tails' readers through the ``Effector`` (see the module docstring)."""

    def __init__(self, effector: fx.Effector, *, count: Callable[[str, int], None]) -> None:
        self.effector = effector
        self.count = count
        """Adds to one of the agent's counters."""

    def open(self, tail: Tail, now: float, *, control: bool = False) -> bool:
        """Open ``tail``'s reader; on failure leave it closed, to be tried again in REOPEN_S. A control topic
        that does not exist is created first (with auto topic creation off nobody else creates it; its
        publishers need it too)."""
        error = self._try_open(tail)
        return True if error is None else self._open_failed(tail, error, now, control=control)

    def _try_open(self, tail: Tail) -> msg.TopicMissing | msg.MessagingUnavailable | None:
        """Open ``tail``'s reader; what went wrong, if it did. A pool worker may call it while the loop
        waits: it touches ``tail`` alone, and sets its reader as soon as the client returns it. (Not later on
        the loop's thread: the reader delivers at once, and a listener that finds the inbox full and no
        reader set takes the tail for closed and drops what it holds.)"""
        try:
            self.effector.open_reader(tail)
            return None
        except (msg.TopicMissing, msg.MessagingUnavailable) as e:
            return e

    def _open_failed(
        self, tail: Tail, error: msg.TopicMissing | msg.MessagingUnavailable, now: float, *, control: bool
    ) -> bool:
        if not control or not isinstance(error, msg.TopicMissing):
            return self._not_opened(tail, error, now)
        try:
            if self.effector.call(calls.CreateTopic(tail.topic)):
                log.info("created the control topic %s (auto topic creation is off)", tail.topic)
            self.effector.open_reader(tail)
            return True
        except (adminhttp.AdminError, msg.TopicMissing, msg.MessagingUnavailable) as e:
            return self._not_opened(tail, e, now)

    def _not_opened(self, tail: Tail, error: Exception, now: float) -> bool:
        """Leave ``tail`` closed until REOPEN_S from now; False (not opened)."""
        tail.reopen_at = now + tuning.REOPEN_S
        self.count("reader_open_failures", 1)
        log.warning("cannot read %s (trying again in %.0f s): %s", tail.topic, tuning.REOPEN_S, error)
        return False

    def reopen(self, tails: list[Tail], controls: Container[str], now: float) -> None:
        """Open the readers not open yet: those that could not be opened, the topics adopted this round and,
        after a restart, every one. Several at a time: each is a round trip to the topic's owner, and the
        102 readers of a restart at 10,000 subscriptions took 0.65 s one after the other, in the round
        that takes the claims queued meanwhile (BENCHMARKS.md, "Scale")."""
        due = [tail for tail in tails if tail.reader is None and now >= tail.reopen_at]
        for tail, error in zip(due, self.effector.map(self._try_open, due), strict=True):
            if error is not None:
                self._open_failed(tail, error, now, control=tail.topic in controls)

    def revive(self, tails: list[Tail], controls: Container[str], now: float) -> None:
        """Open again the readers whose broker went away once their topic's owner answers. The client retries
        a lost connection itself, with a backoff doubling up to a minute: when a broker dies, its bundles get
        a new owner only after its metadata session expires (30 s by default), so a reader could wait most of
        a minute more with its owner ready, and remote acknowledgements (the control topics) or this region's
        entries with it. A reader disconnected for STALLED_S has its topic looked up (which has some broker
        take a bundle nobody owns) and is opened again at the entry it read last if the owner accepts a
        connection; at most REVIVE_CHECKS_PER_ROUND look-ups a round, each reader's every STALLED_S."""
        checks = 0
        probed: dict[str, bool] = {}  # one probe per broker a round: a dead pod's address may time out
        for tail in tails:
            if tail.reader is None:
                continue
            if tail.reader.connected():
                tail.stalled_since = None
                continue
            if tail.stalled_since is None:
                tail.stalled_since = now
            if (
                now - tail.stalled_since < tuning.STALLED_S
                or now < tail.revive_at
                or checks >= tuning.REVIVE_CHECKS_PER_ROUND
            ):
                continue
            checks += 1
            tail.revive_at = now + tuning.STALLED_S
            if not self._owner_answers(tail.topic, probed):
                continue
            log.info(
                "%s: the reader has had no broker for %.0f s and the topic's owner answers: opening it again",
                tail.topic,
                now - tail.stalled_since,
            )
            self.count("readers_revived", 1)
            tail.close()
            self.open(tail, now, control=tail.topic in controls)

    def _owner_answers(self, topic: str, probed: dict[str, bool]) -> bool:
        """Whether the broker a look-up names for ``topic`` accepts a connection (``probed``: the answers of
        the brokers probed already)."""
        try:
            url = str(self.effector.call(calls.LookupTopic(topic)).get("brokerUrl") or "")
        except adminhttp.AdminError:
            return False
        if url and url not in probed:
            probed[url] = self.effector.broker_answers(url)
        return bool(url) and probed[url]
