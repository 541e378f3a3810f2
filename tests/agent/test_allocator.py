"""The agent's C allocator settings (``geosync_agent.allocator``)."""

from __future__ import annotations

import platform

import pytest

from geosync_agent import allocator


class FakeLibc:
    def __init__(self, *, refuse: frozenset[int] = frozenset(), releases: bool = True) -> None:
        self.calls: list[tuple[int, int]] = []
        self.trims = 0
        self.refuse = refuse
        self.releases = releases

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 0 if parameter in self.refuse else 1

    def malloc_trim(self, pad: int) -> int:
        assert pad == 0
        self.trims += 1
        return 1 if self.releases else 0


def test_tune_sets_two_arenas_a_fixed_mmap_threshold_and_a_trim_threshold() -> None:
    libc = FakeLibc()
    memory = allocator.tune({}, libc=libc)
    assert libc.calls == [
        (allocator.M_ARENA_MAX, 2),
        (allocator.M_MMAP_THRESHOLD, 256 * 1024),
        (allocator.M_TRIM_THRESHOLD, 1024 * 1024),
    ]
    assert memory.settings == {"arena_max": 2, "mmap_threshold": 262144, "trim_threshold": 1048576}


def test_what_the_environment_sets_is_left_alone() -> None:
    libc = FakeLibc()
    env = {"MALLOC_ARENA_MAX": "4", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}
    memory = allocator.tune(env, libc=libc)
    assert libc.calls == [(allocator.M_MMAP_THRESHOLD, 256 * 1024)]
    assert memory.settings["arena_max"] == "from the environment"
    assert memory.settings["trim_threshold"] == "from the environment"


def test_a_refused_setting_is_not_reported_as_set(caplog: pytest.LogCaptureFixture) -> None:
    memory = allocator.tune({}, libc=FakeLibc(refuse=frozenset({allocator.M_ARENA_MAX})))
    assert "arena_max" not in memory.settings
    assert "mallopt(arena_max, 2) was refused" in caplog.text


def test_trim_counts_the_trims_and_those_that_gave_memory_back() -> None:
    libc = FakeLibc(releases=False)
    memory = allocator.tune({}, libc=libc)
    memory.trim()
    libc.releases = True
    memory.trim()
    assert libc.trims == 2
    assert memory.report() == {"settings": memory.settings, "trims": 2, "trims_released": 1}


def test_without_a_c_library_nothing_is_set_and_trim_does_nothing() -> None:
    memory = allocator.Allocator()
    memory.trim()
    assert memory.report() == {"settings": {}, "trims": 0, "trims_released": 0}


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_this_machines_glibc_takes_every_setting() -> None:
    memory = allocator.tune({})
    assert memory.settings == {"arena_max": 2, "mmap_threshold": 262144, "trim_threshold": 1048576}
    memory.trim()
    assert memory.trims == 1
