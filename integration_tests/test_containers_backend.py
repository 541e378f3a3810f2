"""The testcontainers backend boots the same topology from the official image where Docker answers.

This machine has no Docker engine, so here the test is skipped with the reason; the process backend
(every other integration test) is the one that counts.
"""

from __future__ import annotations

import pytest

from geosync_lab import containers
from geosync_lab.errors import LabError
from integration_tests.helpers import produce, read_all

available, reason = containers.docker_available()


@pytest.mark.skipif(not available, reason=reason)
def test_two_regions_from_the_official_image_replicate() -> None:
    with containers.lab(["a", "b"]) as topology:
        topic = "persistent://geo/ab/containers"
        produce(topology.regions["a"].service_url, topic, [b"hello"])
        got = read_all(topology.regions["b"].service_url, topic, expect=1, timeout_s=60)
        assert [m.data for m in got] == [b"hello"]
        assert got[0].source_position is not None


def test_without_docker_the_backend_says_what_to_use_instead() -> None:
    if available:
        pytest.skip("a Docker engine answers here")
    with pytest.raises(LabError, match="Docker") as info, containers.lab(["a", "b"]):
        pass
    assert "geoctl lab up" in info.value.hint
