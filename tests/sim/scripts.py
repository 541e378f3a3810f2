"""The schedule shape most scripted simulation tests share: three regions, one Shared topic consumed in a,
40 s of virtual time; each test gives its steps and what it changes."""

from __future__ import annotations

from typing import Any

from geosync_sim.schedules import Schedule, Step

REGIONS = ("a", "b", "c")


def a_publishes(count: int = 119, *, every: float = 0.3) -> list[Step]:
    """a publishes one unbatched message every ``every`` seconds, from ``every`` on."""
    return [Step(round(every * k, 2), "produce", ("a", 0, 1, False)) for k in range(1, count + 1)]


def one_topic(
    seed: int,
    steps: list[Step],
    *,
    plugin: tuple[bool, ...] = (True, True, True),
    claims_from: str = "acknowledgements",
    duration: float = 40.0,
    **fields: Any,
) -> Schedule:
    """The schedule of ``steps`` (in time order) on one Shared topic whose consumers start in a."""
    return Schedule(
        seed,
        REGIONS,
        1,
        ("Shared",),
        plugin,
        duration,
        tuple(sorted(steps, key=lambda s: s.at)),
        ("a",),
        claims_from=claims_from,
        **fields,
    )
