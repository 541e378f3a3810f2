"""Reading a batch's size out of a serialized message id (the Python client has no accessor for it)."""

from __future__ import annotations

import pytest

from geosync_adapters.messaging import batch_size_of


def varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def test_the_size_the_client_serialized() -> None:
    # As pulsar-client 3.x serialized the id of message 2 of a 7-message batch at 104:0 (seen on the lab).
    assert batch_size_of(bytes.fromhex("0868100020023007")) == 7


@pytest.mark.parametrize(
    ("serialized", "size"),
    [
        (field(1, 104) + field(2, 0) + field(3, -1) + field(4, 5) + field(6, 300), 300),  # 10-byte partition
        (field(1, 104) + field(5, 2**63 - 1) + field(5, 12) + field(6, 20), 20),  # an ack set before it
        (field(1, 104) + varint(7 << 3 | 2) + bytes([4]) + field(1, 9) + field(2, 1) + field(6, 3), 3),
        (field(1, 104) + field(2, 0) + field(4, 0), None),  # no size
        (field(1, 104) + field(6, 0), None),  # zero: not a batch
        (field(1, 104) + field(6, 2**40), None),  # not an int32
        (bytes.fromhex("08681000200030"), None),  # truncated
        (field(1, 104) + bytes([0x0D, 0, 0, 0, 0]), None),  # a fixed32 field: not in MessageIdData
        (b"", None),
    ],
)
def test_sizes_and_what_is_not_one(serialized: bytes, size: int | None) -> None:
    assert batch_size_of(serialized) == size
