"""The agent starts where no temporary directory is writable (its image runs on a read-only root)."""

import subprocess
import sys
import tempfile

import pytest

from geosync_adapters import messaging

NO_TEMP = (
    "import tempfile\n"
    "def gone():\n"
    "    raise FileNotFoundError(2, 'No usable temporary directory found')\n"
    "tempfile.gettempdir = gone\n"
)


def test_the_agent_imports_without_a_temporary_directory() -> None:
    # The image's agent crashed at import: the client log's path was worked out when the module loaded.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_TEMP + "import geosync_agent.config, geosync_adapters.messaging as m\nprint(m.client_log())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "None"


def test_short_lived_clients_log_in_the_temporary_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/somewhere")
    log = messaging.client_log()
    assert log is not None
    assert str(log).startswith("/somewhere/geosync-pulsar-client-")
