"""The Pulsar tarball is unpacked under its staging directory only, on Pythons with tar filters (3.11.4+)
and on Debian 12's python3.11 (3.11.2), which has none."""

from __future__ import annotations

import contextlib
import io
import pathlib
import tarfile

import pytest

from geosync_lab import distribution


def _tarball(path: pathlib.Path, members: list[tarfile.TarInfo]) -> pathlib.Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            data = b"x" if member.isfile() else b""
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.fixture(params=["with filters", "without filters"])
def python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "without filters":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return str(request.param)


def test_a_well_formed_tree_is_unpacked(tmp_path: pathlib.Path, python: str) -> None:
    tarball = _tarball(
        tmp_path / "ok.tar.gz",
        [_file("apache-pulsar/bin/pulsar"), _symlink("apache-pulsar/lib/current", "../bin/pulsar")],
    )
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(tarball) as tar:
        distribution._extract(tar, dest)
    assert (dest / "apache-pulsar" / "bin" / "pulsar").read_bytes() == b"x"
    assert (dest / "apache-pulsar" / "lib" / "current").resolve() == (
        dest / "apache-pulsar/bin/pulsar"
    ).resolve()


def _escapes(tmp_path: pathlib.Path) -> dict[str, list[tarfile.TarInfo]]:
    """Archives that would write ``tmp_path/escaped`` (outside ``tmp_path/out``) if unpacked naively."""
    return {
        "dot-dot": [_file("../escaped")],
        "absolute": [_file(f"{tmp_path}/escaped")],
        "through a symlink": [_symlink("apache-pulsar/lib", "../.."), _file("apache-pulsar/lib/escaped")],
    }


@pytest.mark.parametrize("case", ["dot-dot", "absolute", "through a symlink"])
def test_nothing_is_written_outside_the_destination(tmp_path: pathlib.Path, python: str, case: str) -> None:
    tarball = _tarball(tmp_path / "bad.tar.gz", _escapes(tmp_path)[case])
    dest = tmp_path / "out"
    dest.mkdir()
    # Refused outright, or (the "data" filter, for an absolute name) written inside instead.
    with tarfile.open(tarball) as tar, contextlib.suppress(tarfile.TarError):
        distribution._extract(tar, dest)
    assert not (tmp_path / "escaped").exists()
