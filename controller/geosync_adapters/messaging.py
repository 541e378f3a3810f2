"""Pulsar binary-protocol access (pulsar-client): producing, reading and consuming.

The Python client's own quirks stay here: it raises ``pulsar.Timeout`` rather than a connection error
when a broker is unreachable, its ``MessageId`` types do not compare across wrapper and raw forms, and it
exposes no ``replicated_from`` accessor (the replicated copy's origin position is the property
``__MSG_PROP_REPL_SOURCE_POSITION``). Callers get project types and errors.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import socket
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulsar

from geosync_core import resolving
from geosync_core.errors import PermanentError, TemporaryError
from geosync_core.positions import Position

REPL_SOURCE_POSITION = resolving.REPL_SOURCE_POSITION

_QUIET = logging.getLogger("geosync.pulsar-client")
_QUIET.setLevel(logging.WARNING)
PROBE_TIMEOUT_S = 1.0
"""How long ``Messaging.broker_answers`` waits for a broker to accept a connection."""


def client_log() -> pathlib.Path | None:
    """Where short-lived clients (geoctl, the lab, tests) log the Pulsar client's warnings: a Python logger
    there makes the C++ client's threads call into an interpreter that is shutting down, and about one process
    in six aborted at exit ("terminate called without an active exception", status 134) after doing its work.
    The agent's long-lived client keeps the Python logger (its warnings belong in the agent's log).

    None where no temporary directory is writable (the agent's image runs on a read-only root): looked up when
    a client is made, never at import, so such a process still starts."""
    try:
        return pathlib.Path(tempfile.gettempdir()) / f"geosync-pulsar-client-{os.getuid()}.log"
    except OSError:
        return None


class MessagingUnavailable(TemporaryError):
    """The region's brokers did not answer in time."""


class TopicMissing(PermanentError):
    """The topic does not exist and the brokers will not create it (auto topic creation is off)."""


@contextlib.contextmanager
def client(
    service_url: str,
    *,
    timeout_s: int = 15,
    token: str | Callable[[], str | None] | None = None,
    tls_trust_certs_file: str | None = None,
) -> Iterator[pulsar.Client]:
    """A short-lived client; closed on exit even when the body raises. ``pulsar+ssl://`` URLs are verified,
    host names included, against ``tls_trust_certs_file`` (the system's CAs without it)."""
    log = client_log()
    c = pulsar.Client(
        service_url,
        operation_timeout_seconds=timeout_s,
        connection_timeout_ms=timeout_s * 1000,
        logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(log)) if log else _QUIET,
        **client_options(token=token, tls_trust_certs_file=tls_trust_certs_file),
    )
    try:
        yield c
    except pulsar.Timeout as e:
        raise MessagingUnavailable(f"{service_url}: no answer within {timeout_s} s", delay=1.0) from e
    finally:
        c.close()


def client_options(
    *, token: str | Callable[[], str | None] | None, tls_trust_certs_file: str | None
) -> dict[str, Any]:
    """``pulsar.Client`` keyword arguments for token authentication and TLS verification (host names are
    always checked; the client library's default is not to)."""
    options: dict[str, Any] = {
        "authentication": _authentication(token),
        "tls_validate_hostname": True,
    }
    if tls_trust_certs_file:
        options["tls_trust_certs_file_path"] = tls_trust_certs_file
    return options


@dataclass(frozen=True)
class Received:
    """One message as read in one region."""

    topic: str
    position: Position
    partition: int
    batch_index: int
    data: bytes
    key: str
    publish_ms: int
    properties: dict[str, str]
    producer: str = ""
    ordering_key: str = ""
    batch_size: int | None = None
    """Messages in the entry, for a message of a batch, as the client read it from the entry's metadata
    (None: not a batch, or a client that does not say). Messages of one batch reach a reader one by one, so
    counting them as they come gives the size only once the last one is in."""
    read_at: float = 0.0
    """When the client handed it to this process's listener, on the machine's monotonic clock (0: not known,
    e.g. the simulator's): how long it then waited for the agent's loop is measured from it."""

    @property
    def source_position(self) -> Position | None:
        """For a replicated copy, the position of the message in the region it came from (None for a
        message published here, or a stamp that is not a position: properties are untrusted input)."""
        stamp = resolving.stamp_of(self.properties)
        return stamp if isinstance(stamp, Position) else None


def received(msg: Any) -> Received:
    mid = msg.message_id()
    return Received(
        topic=msg.topic_name(),
        position=Position(mid.ledger_id(), mid.entry_id()),
        partition=mid.partition(),
        batch_index=mid.batch_index(),
        data=msg.data(),
        key=msg.partition_key(),
        publish_ms=msg.publish_timestamp(),
        properties=dict(msg.properties()),
        producer=msg.producer_name(),
        ordering_key=msg.ordering_key() or "",
        batch_size=batch_size_of(mid.serialize()) if mid.batch_index() >= 0 else None,
        read_at=time.monotonic(),
    )


def batch_size_of(serialized: bytes) -> int | None:
    """The ``batch_size`` field (6) of a serialized ``MessageIdData`` (Pulsar's protocol buffer; the Python
    client has no accessor for it), None if absent, zero or unreadable. Only varint and length-delimited
    fields occur in that message; anything else ends the reading (None)."""
    i, end = 0, len(serialized)

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while i < end and shift < 70:
            byte = serialized[i]
            i += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ValueError("truncated varint")

    try:
        while i < end:
            tag = varint()
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                value = varint()
                if field == 6:
                    return value if 0 < value < 2**31 else None
            elif wire == 2:
                length = varint()  # read first: ``i += varint()`` would add to the value before the read
                i += length
            else:
                return None
    except ValueError:
        return None
    return None


def position_of(message_id: Any) -> Position:
    return Position(message_id.ledger_id(), message_id.entry_id())


class _Sender:
    """A producer whose completion callback only reports success (the port's ``Producer``)."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def send_async(
        self,
        data: bytes,
        callback: Callable[[bool], None],
        *,
        properties: dict[str, str] | None = None,
        replication_clusters: list[str] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {}
        if properties:
            kwargs["properties"] = properties
        if replication_clusters is not None:
            kwargs["replication_clusters"] = replication_clusters
        self._producer.send_async(data, lambda result, _mid: callback(result == pulsar.Result.Ok), **kwargs)

    def close(self) -> None:
        with contextlib.suppress(pulsar.PulsarException):
            self._producer.flush()
            self._producer.close()


def accepts_connections(service_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the broker at ``service_url`` (``pulsar://`` or ``pulsar+ssl://``) opens
    within ``timeout_s``: a dead broker's port refuses it or lets it time out."""
    parts = urllib.parse.urlsplit(service_url)
    if not parts.hostname or not parts.port:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
            return True
    except OSError:
        return False


class _Closing:
    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def close(self) -> None:
        with contextlib.suppress(pulsar.PulsarException):
            self._reader.close()

    def connected(self) -> bool:
        return bool(self._reader.is_connected())


class Messaging:
    """A long-lived client for one region's brokers: readers from the earliest message, unbatched producers
    and a short-lived shadow consumer. The agent's ``Messaging`` port."""

    def __init__(
        self,
        service_url: str,
        *,
        token: str | Callable[[], str | None] | None = None,
        tls_trust_certs_file: str | None = None,
        timeout_s: int = 10,
    ) -> None:
        self.service_url = service_url
        self._client = pulsar.Client(
            service_url,
            operation_timeout_seconds=timeout_s,
            logger=_QUIET,
            **client_options(token=token, tls_trust_certs_file=tls_trust_certs_file),
        )

    def reader(
        self, topic: str, on_message: Callable[[Received], None], *, start: Position | None = None
    ) -> _Closing:
        """Read ``topic`` from its earliest retained message, or from entry ``start`` (included)."""
        # The "geosync-" subscription prefix lets the broker plugins' entry filter show us snapshot markers.
        first = (
            pulsar.MessageId.earliest
            if start is None
            else pulsar.MessageId(-1, start.ledger, start.entry, -1)
        )
        try:
            reader = self._client.create_reader(
                topic,
                first,
                reader_listener=lambda _reader, msg: on_message(received(msg)),
                receiver_queue_size=1000,
                subscription_role_prefix="geosync-tail",
                start_message_id_inclusive=start is not None,
            )
        except pulsar.Timeout as e:
            raise MessagingUnavailable(f"{topic}: no reader within the timeout", delay=1.0) from e
        except pulsar.TopicNotFound as e:
            raise TopicMissing(f"{topic} does not exist (and auto topic creation is off)") from e
        except pulsar.PulsarException as e:
            raise MessagingUnavailable(f"{topic}: no reader: {e}", delay=1.0) from e
        return _Closing(reader)

    def broker_answers(self, service_url: str) -> bool:
        return accepts_connections(service_url)

    def producer(self, topic: str) -> _Sender:
        try:
            return _Sender(self._client.create_producer(topic, batching_enabled=False))
        except pulsar.Timeout as e:
            raise MessagingUnavailable(f"{topic}: no producer within the timeout", delay=1.0) from e

    def _idle_consumer(self, topic: str, subscription: str, name: str) -> Any:
        """A Shared consumer of ``subscription`` that nothing is dispatched to (no receiver queue): the
        agent's short-lived consumers, which acknowledge or create and close at once.

        Always at initial position Earliest. Subscribing creates a missing subscription, and the client's
        default (Latest) would create it with every message acknowledged that nobody consumed: a shadow
        consumer for a subscription deleted since the agent looked brought it back so, and the jump
        travelled to the other regions as acknowledgements (issue 45, case 1). At Earliest, a subscription
        re-created by that race holds only what the consumer then acknowledges."""
        return self._client.subscribe(
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            receiver_queue_size=0,
            consumer_name=name,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    def subscribe_at_earliest(self, topic: str, subscription: str, *, name: str) -> None:
        """Create the durable ``subscription`` at the earliest message in one step: a consumer subscribing
        with initial position Earliest (no receiver queue: nothing is dispatched to it), closed at once.

        Not the admin API's create-subscription: Pulsar 4.0 creates the cursor at the latest entry, persists
        that, and then resets it to the requested position in memory. A broker killed before that reset is
        persisted brings the subscription back at the latest entry, every earlier message acknowledged
        though nobody consumed it (CI's sidecar kill test lost 5 messages that way). Raises TopicMissing where
        the topic does not exist and auto topic creation is off, MessagingUnavailable on other failures."""
        try:
            consumer = self._idle_consumer(topic, subscription, name)
        except pulsar.Timeout as e:
            raise MessagingUnavailable(f"{topic}: cannot subscribe {subscription!r} in time") from e
        except pulsar.TopicNotFound as e:
            raise TopicMissing(f"{topic} does not exist (and auto topic creation is off)") from e
        except pulsar.PulsarException as e:
            raise MessagingUnavailable(f"{topic}: cannot subscribe {subscription!r}: {e}") from e
        with contextlib.suppress(pulsar.PulsarException):
            consumer.close()

    def shadow_ack(
        self, topic: str, subscription: str, *, partition: int, positions: list[Position], name: str
    ) -> None:
        """Acknowledge ``positions`` of ``subscription`` with a short-lived idle consumer. The caller checks
        that the subscription exists first (``effects``): were it deleted in between, it comes back at the
        earliest message with ``positions`` acknowledged, never at Latest."""
        consumer = self._idle_consumer(topic, subscription, name)
        try:
            for p in positions:
                consumer.acknowledge(pulsar.MessageId(partition, p.ledger, p.entry, -1))
        finally:
            consumer.close()

    def close(self) -> None:
        with contextlib.suppress(pulsar.PulsarException):
            self._client.close()


def _authentication(token: str | Callable[[], str | None] | None) -> Any:
    """Token authentication; a function is asked at each authentication (connect, refresh), so a rotated
    token file is used without restarting the client."""
    if token is None or token == "":
        return None
    if callable(token):
        supplier = token
        return pulsar.AuthenticationToken(lambda: supplier() or "")
    return pulsar.AuthenticationToken(token)
