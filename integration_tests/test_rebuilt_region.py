"""A region rebuilt under its name (issue 17.2), on the shared lab: the lab's ``rebuild_region`` wipes a
region's data and boots it again with the same name and ports, the way an operator replaces a region.

What makes it dangerous for GeoSync: the rebuilt region's ledger ids start again from 0, so positions it
publishes at repeat positions it published before (and other regions may still hold claims about those).
This module proves the lab reproduces that; the guard against old claims is issue 17.2's remaining work.
"""

from __future__ import annotations

import pathlib

from geosync_lab import labs
from integration_tests.helpers import Lab, produce, read_all


def test_a_rebuilt_region_comes_back_under_its_name_with_ledger_ids_from_zero(lab: Lab, unique: str) -> None:
    if "c" not in lab.topology.regions:
        raise AssertionError("this test needs a lab with region c (geoctl lab up --regions a,b,c)")
    before, after = f"persistent://geo/abc/before-{unique}", f"persistent://geo/abc/after-{unique}"
    (_, old), *_ = produce(lab.service_url("c"), before, [b"old"])
    labs.rebuild_region(pathlib.Path(lab.dir), "c")
    labs.start_agent(pathlib.Path(lab.dir), "c")
    labs.wait_agent_ready(pathlib.Path(lab.dir), "c")
    (_, new), *_ = produce(lab.service_url("c"), after, [b"new"])
    assert new.ledger < old.ledger  # the rebuilt region's ledger ids start again
    got = read_all(lab.service_url("a"), after, expect=1)  # and it replicates again
    assert [m.data for m in got] == [b"new"]
