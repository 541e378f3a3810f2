"""The round's outside calls as values: each makes its one admin call, through the calling thread's client.

The agent's round holds no admin client: it hands ``geosync_agent.calls`` values to ``Effector.call``. These
tests say what each value asks of the admin API, that answers and errors come back as the adapter gives
them, and that each thread gets a client of its own.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest

from geosync_adapters import adminhttp
from geosync_agent import calls
from geosync_agent import effects as fx
from geosync_agent.ports import Admin, Messaging
from geosync_core.positions import Position

TOPIC = "persistent://geo/ab/orders"


class Recorder:
    """An admin client that records each call it gets and answers with its name and arguments."""

    def __init__(self, log: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
        self.log = log
        self.thread = threading.get_ident()

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "topic_stats" and args[0] == "missing":
                raise adminhttp.AdminNotFound("404 topic not found")
            self.log.append((name, args, kwargs))
            return {"call": name}

        return call


def effector(log: list[tuple[str, tuple[Any, ...], dict[str, Any]]], made: list[Recorder]) -> fx.Effector:
    def factory() -> Admin:
        client = Recorder(log)
        made.append(client)
        return cast(Admin, client)

    pool = ThreadPoolExecutor(max_workers=2)
    return fx.Effector(admin_factory=factory, messaging=cast(Messaging, None), pool=pool)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (calls.InternalStats(TOPIC), ("internal_stats", (TOPIC,), {})),
        (calls.TopicStats(TOPIC), ("topic_stats", (TOPIC,), {})),
        (calls.LookupTopic(TOPIC), ("lookup_topic", (TOPIC,), {})),
        (calls.CreateTopic(TOPIC), ("create_topic", (TOPIC,), {})),
        (
            calls.ReadEntryHeaders(TOPIC, Position(7, 3)),
            ("entry_headers", (TOPIC,), {"ledger": 7, "entry": 3}),
        ),
        (calls.PluginOrigins(TOPIC, Position(7, 3)), ("plugin_origins", (TOPIC,), {"start": (7, 3)})),
        (calls.PluginFeed(42), ("plugin_feed", (), {"since": 42, "epoch": "", "acked": True})),
        (
            calls.PluginFeed(42, "e1", acked=False),
            ("plugin_feed", (), {"since": 42, "epoch": "e1", "acked": False}),
        ),
        (calls.RuntimeConfiguration(), ("runtime_configuration", (), {})),
    ],
)
def test_each_call_makes_its_one_admin_call_and_answers_what_the_client_answered(
    call: calls.Call[Any], expected: tuple[str, tuple[Any, ...], dict[str, Any]]
) -> None:
    log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    answer = effector(log, []).call(call)
    assert log == [expected]
    assert answer == {"call": expected[0]}


def test_an_admin_error_comes_back_as_the_adapter_raised_it() -> None:
    with pytest.raises(adminhttp.AdminNotFound):
        effector([], []).call(calls.TopicStats("missing"))


def test_each_thread_calls_through_a_client_of_its_own_made_once() -> None:
    log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    made: list[Recorder] = []
    fx_ = effector(log, made)
    fx_.call(calls.InternalStats(TOPIC))
    fx_.call(calls.InternalStats(TOPIC))
    assert len(made) == 1
    other = threading.Thread(target=fx_.call, args=(calls.LookupTopic(TOPIC),))
    other.start()
    other.join()
    assert len(made) == 2
    assert made[0].thread != made[1].thread
    assert [name for name, _, _ in log] == ["internal_stats", "internal_stats", "lookup_topic"]
