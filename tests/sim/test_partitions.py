"""Partitioned topics (issue 45: the simulator's model gaps): a topic of N partitions is N topics
``...-partition-n`` in every region (``PartitionedTopicMetadata``; the admin API lists the partitions one by
one), each with its own ledger, replicator and cursor, and a consumer of the topic is a consumer per
partition (``MultiTopicsConsumerImpl``), all failing over together.

The schedule: three regions, one Shared topic of 3 partitions consumed in a; a publishes an entry every
0.3 s, round robin over the partitions; each partition's consumer holds one message from 4 s to 34 s; at 20 s
the consumers fail over to b. No region may acknowledge a message no consumer acknowledged, and every
partition is synced.
"""

from __future__ import annotations

import pytest

from geosync_sim import running
from geosync_sim.checking import LOSS
from geosync_sim.ports import partition_of
from geosync_sim.schedules import Step
from tests.sim.scripts import one_topic


def partitioned(*, plugin_b: bool, claims_from: str) -> running.Result:
    steps = [
        *(Step(round(0.3 * k, 2), "produce", ("a", 0, 1 + k % 3, k % 2 == 0)) for k in range(1, 120)),
        Step(4.0, "hole", (0, 30.0)),
        Step(20.0, "failover", (0, "b", 0.5)),
    ]
    schedule = one_topic(6, steps, plugin=(True, plugin_b, True), claims_from=claims_from, partitions=(3,))
    return running.run(schedule, trace=True)


def test_a_partition_is_named_as_the_brokers_list_it() -> None:
    assert partition_of("persistent://geo/sim/t0-partition-2") == 2
    assert partition_of("persistent://geo/sim/t0") == -1
    assert partition_of("persistent://geo/sim/t0-partition-x") == -1


@pytest.mark.parametrize("claims_from", ["acknowledgements", "cursor"])
@pytest.mark.parametrize("plugin_b", [True, False], ids=["plugin", "admin-api"])
def test_every_partition_is_synced_and_nothing_is_lost(plugin_b: bool, claims_from: str) -> None:
    result = partitioned(plugin_b=plugin_b, claims_from=claims_from)
    lost = [str(v) for v in result.violations if v.kind in LOSS]
    assert not lost, "\n".join(lost)
    assert not [v for v in result.violations if v.kind == "agent-error"]
    for n in range(3):
        # b's and c's cursors of each partition moved by their agents while a's consumers acknowledged
        for region in ("b", "c"):
            assert any(
                f"{region}: t0-partition-{n}/sub +" in line and "by agent:" in line for line in result.trace
            )
    assert result.failovers == 3  # one consumer per partition, moved together
