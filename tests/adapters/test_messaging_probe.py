"""``accepts_connections``: the probe the agent opens a stalled reader again by."""

import socket

from geosync_adapters import messaging


def test_a_listening_broker_answers_and_a_closed_port_or_a_url_without_one_does_not() -> None:
    probe = messaging.accepts_connections
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert probe(f"pulsar://127.0.0.1:{port}")
        assert probe(f"pulsar+ssl://127.0.0.1:{port}")
    assert not probe(f"pulsar://127.0.0.1:{port}")
    assert not probe("pulsar://127.0.0.1")
    assert not probe("")
