"""Pulsar binary-protocol access (pulsar-client): producing, reading and consuming.

The Python client's own quirks stay here: it raises ``pulsar.Timeout`` rather than a connection error
when a broker is unreachable, its ``MessageId`` types do not compare across wrapper and raw forms, and it
exposes no ``replicated_from`` accessor (the replicated copy's origin position is the property
``__MSG_PROP_REPL_SOURCE_POSITION``). Callers get project types and errors.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar

from geosync_core.errors import TemporaryError
from geosync_core.positions import Position

REPL_SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION"

_QUIET = logging.getLogger("geosync.pulsar-client")
_QUIET.setLevel(logging.WARNING)


class MessagingUnavailable(TemporaryError):
    """The region's brokers did not answer in time."""


@contextlib.contextmanager
def client(
    service_url: str,
    *,
    timeout_s: int = 15,
    token: str | None = None,
    tls_trust_certs_file: str | None = None,
) -> Iterator[pulsar.Client]:
    """A short-lived client; closed on exit even when the body raises. ``pulsar+ssl://`` URLs are verified,
    host names included, against ``tls_trust_certs_file`` (the system's CAs without it)."""
    c = pulsar.Client(
        service_url,
        operation_timeout_seconds=timeout_s,
        connection_timeout_ms=timeout_s * 1000,
        logger=_QUIET,
        **client_options(token=token, tls_trust_certs_file=tls_trust_certs_file),
    )
    try:
        yield c
    except pulsar.Timeout as e:
        raise MessagingUnavailable(f"{service_url}: no answer within {timeout_s} s", delay=1.0) from e
    finally:
        c.close()


def client_options(*, token: str | None, tls_trust_certs_file: str | None) -> dict[str, Any]:
    """``pulsar.Client`` keyword arguments for token authentication and TLS verification (host names are
    always checked; the client library's default is not to)."""
    options: dict[str, Any] = {
        "authentication": pulsar.AuthenticationToken(token) if token else None,
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

    @property
    def source_position(self) -> Position | None:
        """For a replicated copy, the position of the message in the region it came from."""
        raw = self.properties.get(REPL_SOURCE_POSITION)
        return Position.parse(raw) if raw else None


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
    )


def position_of(message_id: Any) -> Position:
    return Position(message_id.ledger_id(), message_id.entry_id())
