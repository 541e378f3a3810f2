"""The shared lab for integration tests: one real three-region Pulsar lab per test session.

Booting costs about half a minute, so every test shares it. Point ``GEOSYNC_TEST_LAB`` at the directory
of a running lab (``geoctl lab up --dir DIR``) to reuse it across sessions; it is then left running.
Otherwise the session boots its own lab in a temporary directory and stops it at the end. When a test
that used the lab fails, the last lines of every region's log are attached to its report.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from geosync_lab import labs
from integration_tests.helpers import Lab, given_or_booted

LAB_REGIONS = ["a", "b", "c"]


def _reusable(path: pathlib.Path) -> bool:
    try:
        state = labs.status(path)
    except Exception:
        return False
    return bool(state["healthy"]) and sorted(state["regions"]) == LAB_REGIONS


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    def boot(lab_dir: pathlib.Path) -> None:
        labs.up(lab_dir, LAB_REGIONS)

    with given_or_booted("GEOSYNC_TEST_LAB", _reusable, boot, tmp_path_factory.mktemp("lab")) as handle:
        yield handle


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topic and subscription names, so tests never see each other's data."""
    return uuid.uuid4().hex[:10]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and "lab" in getattr(item, "fixturenames", ()):
        handle = item.funcargs.get("lab") if hasattr(item, "funcargs") else None
        if isinstance(handle, Lab):
            report.sections.append(("region logs", handle.log_tails()))
