"""The policy mirror in the simulation (``geosync_sim.policies``): each region's real mirror term over its
own metadata store (PIP-136), on virtual time. A scripted deletion of a namespace that a peer still holds
topics in, random schedules of the ``policies`` profile, and the checker failing a mirror whose deletion
guard is taken away."""

from __future__ import annotations

import json

import pytest

from geosync_core import deletions
from geosync_sim import policies
from geosync_sim.policystores import PolicyStores, Stored
from geosync_sim.schedules import Schedule, Step

NS = f"{policies.TENANT}/n0"
EVERYWHERE = (("a", "b", "c"), ("a", "b", "c"))


def _scripted(*steps: tuple[float, str, str, object]) -> Schedule:
    """Three regions, no data topics: only the policy steps, the tenant made in a first."""
    policy = [Step(0.5, "policy", ("tenant", "a", policies.TENANT, 0))]
    policy += [Step(at, "policy", (op, region, NS, arg)) for at, op, region, arg in steps]
    return Schedule(1, ("a", "b", "c"), 0, (), (True, True, True), 20.0, tuple(policy))


def _deleted_in_a_while_b_holds_a_topic() -> policies.Simulation:
    """n0 made in a, a topic made in it in b, then n0 deleted in a (a holds no topic there: Pulsar allows it).
    b's users delete their topic only at the schedule's end (20 s)."""
    return policies.Simulation(
        _scripted((2.0, "create", "a", EVERYWHERE), (3.0, "topic+", "b", "t0"), (5.0, "delete", "a", 0))
    )


def test_a_namespace_deleted_elsewhere_is_held_where_it_holds_topics_then_deleted_once_drained() -> None:
    sim = _deleted_in_a_while_b_holds_a_topic()
    seen: dict[str, bool] = {}
    step = sim._policies

    def watch(t: float) -> None:
        step(t)
        if 10.0 <= t < 10.05:  # after the deletion reached everyone, before b drained
            seen.update({r: NS in s.nodes for r, s in sim.stores.regions.items()})

    sim._policies = watch  # type: ignore[method-assign]
    result = sim.run()
    assert not result.violations, "\n".join(map(str, result.violations))
    assert seen == {"a": False, "b": True, "c": False}  # held in b only
    assert sim.mirrors["b"].counters["held"] >= 1
    assert all(NS not in s.nodes for s in sim.stores.regions.values())  # and gone everywhere at the end


def test_without_the_deletion_guard_the_checker_finds_the_namespace_deleted_with_its_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checker can fail: a mirror that applies every deletion at once deletes b's namespace under its
    topic."""
    monkeypatch.setattr(deletions, "destroys", lambda event, current: False)
    result = _deleted_in_a_while_b_holds_a_topic().run()
    assert "namespace-with-topics-deleted" in result.kinds()
    assert any(v.region == "b" for v in result.violations)


def test_an_edit_made_while_its_regions_mirror_is_down_wins_everywhere() -> None:
    sim = policies.Simulation(
        _scripted(
            (2.0, "create", "b", EVERYWHERE),
            (3.0, "mirror-down", "c", 6.0),
            (4.0, "edit", "a", 30),
            (
                5.0,
                "edit",
                "c",
                60,
            ),  # the last edit, made while c's mirror is down: found by its next term's walk
        )
    )
    result = sim.run()
    assert not result.violations, "\n".join(map(str, result.violations))
    docs = {r: json.loads(s.nodes[NS].value) for r, s in sim.stores.regions.items()}
    assert {r: d.get("message_ttl_in_seconds") for r, d in docs.items()} == {"a": 60, "b": 60, "c": 60}


def test_a_mirror_that_publishes_nothing_is_caught_diverging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PolicyStores, "publish", lambda self, region, data: None)
    result = policies.run(_scripted((2.0, "create", "b", EVERYWHERE), (4.0, "edit", "c", 60)))
    assert result.kinds() == {"policies-diverge"}


@pytest.mark.parametrize("seed", range(1, 7))
def test_random_policy_schedules_converge_and_delete_nothing_held(seed: int) -> None:
    result = policies.run(policies.draw(seed, topics=1, duration=40.0))
    assert not result.violations, "\n".join(map(str, result.violations))


def test_a_namespace_recreated_without_a_region_that_still_holds_it_is_held_there_until_drained() -> None:
    """Found by the simulator: b holds a's deletion of n0 (b's topic t0), and a makes n0 again without b. b
    refused that document while it held the deletion and dropped it; once b drained, the deletion was applied
    and b stayed without n0 (``policies-diverge``). Now the document is held in b like the deletion (it takes
    b's topics as well) and written once b has drained."""
    only_a = (("a",), ("a",))
    sim = policies.Simulation(
        _scripted(
            (2.0, "create", "a", EVERYWHERE),
            (3.0, "topic+", "b", "t0"),
            (5.0, "delete", "a", 0),
            (8.0, "recreate", "a", only_a),
        )
    )
    result = sim.run()
    assert not result.violations, "\n".join(map(str, result.violations))
    assert {
        json.loads(s.nodes[NS].value)["replication_clusters"][0] for s in sim.stores.regions.values()
    } == {"a"}


def test_the_checker_tells_a_refusal_by_design_from_a_divergence() -> None:
    """A region that keeps its own document naming it, where the others' leaves it out, is the mirror's
    refusal (a namespace is taken away from a region only in that region); any other difference diverges."""
    stores = PolicyStores(["a", "b", "c"], delay=lambda: 0.1)
    without_c = b'{"replication_clusters":["a","b"],"allowed_clusters":["a","b"]}'
    with_c = b'{"replication_clusters":["a","b","c"],"allowed_clusters":["a","b","c"]}'
    for region, doc in (("a", without_c), ("b", without_c), ("c", with_c)):
        stores.regions[region].nodes[NS] = Stored(doc, 0, 0)
    stores.check_converged()
    assert (stores.refused, stores.violations) == ({NS: "c"}, [])
    del stores.regions["c"].nodes[NS]
    stores.check_converged()
    assert [v.kind for v in stores.violations] == ["policies-diverge"]


def test_the_same_seed_replays_the_same_policy_trace() -> None:
    schedule = policies.draw(5, topics=1, duration=30.0)
    first, second = policies.run(schedule, trace=True), policies.run(schedule, trace=True)
    assert any(" policy " in line for line in first.trace)
    assert first.trace == second.trace
    assert first.digest == second.digest
