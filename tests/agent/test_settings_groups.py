"""Settings in groups (``geosync_agent.settings_groups``): a file may name a setting at the top level or in
its group's section, and the groups cover ``AgentConfig`` exactly."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

import pytest
import yaml

from geosync_agent import config as cfg
from geosync_agent import settings_groups

BASE = {"region": "a", "admin_url": "http://a:8080", "service_url": "pulsar://a:6650"}


def write(tmp_path: pathlib.Path, settings: Mapping[str, object]) -> pathlib.Path:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_every_setting_is_in_exactly_one_group() -> None:
    grouped = [name for group in settings_groups.GROUPS for name in group.settings]
    settings = [f.name for f in dataclasses.fields(cfg.AgentConfig) if f.name != "extra"]
    assert sorted(grouped) == sorted(settings)
    names = {group.name for group in settings_groups.GROUPS}
    assert not names & set(settings), "a group's name would read as a setting"


def test_a_grouped_file_reads_as_the_flat_one(tmp_path: pathlib.Path) -> None:
    flat = {**BASE, "poll_interval_s": 0.5, "claims_from": "acknowledgements", "mirror_policies": False}
    grouped = {
        "region": "a",
        "connection": {"admin_url": "http://a:8080", "service_url": "pulsar://a:6650"},
        "sync": {"poll_interval_s": 0.5, "claims_from": "acknowledgements"},
        "mirror": {"mirror_policies": False},
    }
    one = cfg.load(write(tmp_path, flat))
    (tmp_path / "g").mkdir()
    assert cfg.load(write(tmp_path / "g", grouped)) == one
    assert (one.poll_interval_s, one.claims_from, one.mirror_policies) == (0.5, "acknowledgements", False)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (
            {**BASE, "sync": {"metrics_port": 9100}},
            "'metrics_port' is not a setting of 'sync': it belongs in 'metrics'",
        ),
        (
            {**BASE, "sync": {"poll_every": 1}},
            "'poll_every' is not a setting of 'sync': 'sync' holds poll_interval_s",
        ),
        ({**BASE, "poll_interval_s": 1, "sync": {"poll_interval_s": 2}}, "'poll_interval_s' is given twice"),
        (
            {**BASE, "sync": 3},
            "'sync' is a group of settings: expected a mapping, e.g. sync: {poll_interval_s: ...}",
        ),
        ({**BASE, "sync": {"poll_interval_s": -1}}, "'poll_interval_s' must be a positive number of seconds"),
    ],
)
def test_a_misplaced_setting_says_where_it_goes(
    tmp_path: pathlib.Path, settings: dict[str, object], said: str
) -> None:
    with pytest.raises(cfg.ConfigError) as e:
        cfg.load(write(tmp_path, settings))
    assert said in str(e.value)
