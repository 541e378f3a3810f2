"""``bench/sim.py`` as a campaign runs it: seeds spread over worker processes give the figures one process
gives, profiles taken in turn, and bad options refused with what to do."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests import benchscripts

SIM = benchscripts.load("sim")
SHORT = ["--regions", "2", "--topics", "2", "--duration", "40"]
SAME_FIGURES = (
    "schedules",
    "failed",
    "failovers",
    "acks_per_schedule",
    "duplicates",
    "violations",
    "profiles",
)
"""What a campaign gives the same however it was run (not its times)."""


def _figures(tmp_path: pathlib.Path, name: str, *args: str) -> dict[str, object]:
    out = tmp_path / f"{name}.json"
    assert SIM.main([*SHORT, *args, "--json", str(out)]) == 0
    figures: dict[str, object] = json.loads(out.read_text())
    return figures


def test_worker_processes_give_the_figures_one_process_gives(tmp_path: pathlib.Path) -> None:
    one = _figures(tmp_path, "one", "--seeds", "1-4", "--profile", "faults,jumps")
    two = _figures(
        tmp_path,
        "two",
        "--seeds",
        "1-4",
        "--profile",
        "faults,jumps",
        "--jobs",
        "2",
        "--record",
        str(tmp_path / "row.json"),
    )
    assert one["failovers"]
    assert one["acks_per_schedule"]
    for key in SAME_FIGURES:
        assert one[key] == two[key], key
    written = json.loads((tmp_path / "row.json").read_text())
    assert written["geosync"].startswith(f"**{one['failovers']:,} failovers, 0 violations**")
    assert "faults, jumps" in written["scenario"]
    assert written["command"].startswith("`python")
    profiles = one["profiles"]
    assert isinstance(profiles, dict)
    assert {name: p["schedules"] for name, p in profiles.items()} == {"faults": 2, "jumps": 2}
    assert sum(p["failovers"] for p in profiles.values()) == one["failovers"]


def test_seeds_take_the_profiles_in_turn() -> None:
    profiles = SIM.profiles_of("faults,jumps,policies")
    assert {seed: SIM.profile_of(seed, profiles) for seed in (4, 5, 6)} == {
        4: "jumps",
        5: "policies",
        6: "faults",
    }
    assert SIM.profiles_of("all") == list(SIM.ALL)


def test_an_unknown_profile_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        SIM.main(["--profile", "faults,chaos"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unknown profile chaos" in err
    assert "jumps" in err
    assert "all" in err


def test_trace_without_one_seed_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        SIM.main(["--seeds", "1-3", "--trace"])
    assert "--seed N" in capsys.readouterr().err


def test_a_journal_resumes_a_campaign_with_the_figures_of_one_run(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _figures(tmp_path, "whole", "--seeds", "1-3", "--profile", "faults,jumps")
    journal = tmp_path / "campaign.jsonl"
    _figures(tmp_path, "first", "--seeds", "1-2", "--profile", "faults,jumps", "--journal", str(journal))
    # a run killed while writing its last line: that seed runs again
    with journal.open("a") as f:
        f.write('{"seed": 3, "profile": "fau')
    ran: list[int] = []
    real = SIM.run_one

    def counted(job: object) -> object:
        ran.append(job.seed)  # type: ignore[attr-defined]
        return real(job)

    monkeypatch.setattr(SIM, "run_one", counted)
    resumed = _figures(
        tmp_path, "resumed", "--seeds", "1-3", "--profile", "faults,jumps", "--journal", str(journal)
    )
    assert ran == [3]
    for key in SAME_FIGURES:
        assert resumed[key] == whole[key], key
    assert resumed["runs"] == 2
    assert whole["runs"] == 1


def test_a_journal_of_other_options_is_refused(tmp_path: pathlib.Path) -> None:
    journal = tmp_path / "campaign.jsonl"
    _figures(tmp_path, "first", "--seeds", "1", "--journal", str(journal))
    with pytest.raises(SystemExit) as refused:
        SIM.main([*SHORT, "--seeds", "1-2", "--topics", "3", "--journal", str(journal)])
    message = str(refused.value.code)
    assert "topics (2, now 3)" in message
    assert "worktree" in message
