"""Every ``geoctl`` command group that calls an admin API reaches a region the same way: with the token
and the CA that ``--config`` (or ``GEOCTL_TOKEN`` / ``--token-file``) names.

``status`` is covered in ``test_token_auth.py``; here ``namespaces`` (every verb) and ``policies diff
--source admin`` run against the same real region with JWT token authentication and TLS listeners,
through its ``https://`` admin URL: refused without the token (exit 4, the token never printed), refused
without the CA (exit 5, saying to set ``ca_file``), working with both.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import yaml
from click.testing import CliRunner

from geoctl.cli import main
from geoctl.errors import EXIT_REFUSED, EXIT_UNREACHABLE
from geosync_adapters import admin as adm
from integration_tests import test_token_auth

secured_region = test_token_auth.secured_region  # the same module-scoped secured region fixture

TENANT = "ops"


def _config(tmp_path: pathlib.Path, sec: test_token_auth.Secured, **extra: Any) -> str:
    region = {
        "admin_url": sec.https_admin_url,
        "service_url": sec.ssl_service_url,
        "zookeeper": sec.proc.zookeeper,
    }
    path = tmp_path / f"regions-{'-'.join(sorted(extra)) or 'bare'}.yaml"
    path.write_text(yaml.safe_dump({"regions": {"sec": region}, **extra}))
    return str(path)


def _files(tmp_path: pathlib.Path, sec: test_token_auth.Secured) -> dict[str, str]:
    token_file = tmp_path / "token"
    token_file.write_text(sec.token)
    return {"token_file": str(token_file), "ca_file": str(sec.tls.ca)}


def _geoctl(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={"GEOCTL_TOKEN": "", "GEOCTL_TOKEN_FILE": ""})


def _admin(sec: test_token_auth.Secured) -> adm.AdminClient:
    return adm.AdminClient(sec.https_admin_url, token=sec.token, verify=str(sec.tls.ca))


def test_namespaces_commands_use_the_token_and_the_ca(
    secured_region: test_token_auth.Secured, tmp_path: pathlib.Path
) -> None:
    sec = secured_region
    admin = _admin(sec)
    admin.upsert_tenant(TENANT, allowed_clusters=["sec"], admin_roles=[])
    files = _files(tmp_path, sec)
    full = _config(tmp_path, sec, **files)
    no_token = _config(tmp_path, sec, ca_file=files["ca_file"])
    no_ca = _config(tmp_path, sec, token_file=files["token_file"])
    create = ["namespaces", "create", f"{TENANT}/ns", "--region", "sec", "--clusters", "sec"]

    refused = _geoctl(*create, "--allowed-clusters", "sec", "--config", no_token)
    assert refused.exit_code == EXIT_REFUSED, refused.output
    assert "token" in refused.output
    untrusted = _geoctl(*create, "--allowed-clusters", "sec", "--config", no_ca)
    assert untrusted.exit_code == EXIT_UNREACHABLE, untrusted.output
    assert "ca_file" in untrusted.output
    assert f"{TENANT}/ns" not in admin.namespaces(TENANT)

    done = _geoctl(*create, "--allowed-clusters", "sec", "--config", full, "-o", "json")
    assert done.exit_code == 0, done.output
    assert sorted(admin.allowed_clusters(f"{TENANT}/ns")) == ["sec"]
    for verb in ("set-allowed-clusters", "set-clusters"):
        args = ["namespaces", verb, f"{TENANT}/ns", "--region", "sec", "--clusters", "sec"]
        assert _geoctl(*args, "--config", no_token).exit_code == EXIT_REFUSED
        assert _geoctl(*args, "--config", no_ca).exit_code == EXIT_UNREACHABLE
        ok = _geoctl(*args, "--config", full)
        assert ok.exit_code == 0, ok.output
    get = ["namespaces", "get-allowed-clusters", f"{TENANT}/ns", "-o", "json"]
    assert _geoctl(*get, "--config", no_token).exit_code == EXIT_REFUSED
    assert _geoctl(*get, "--config", no_ca).exit_code == EXIT_UNREACHABLE
    got = _geoctl(*get, "--config", full)
    assert got.exit_code == 0, got.output
    assert json.loads(got.output)["regions"] == {"sec": ["sec"]}
    for result in (refused, untrusted, done, got):
        assert sec.token not in result.output


def test_policies_diff_from_the_admin_api_uses_the_token_and_the_ca(
    secured_region: test_token_auth.Secured, tmp_path: pathlib.Path
) -> None:
    sec = secured_region
    _admin(sec).upsert_tenant(f"{TENANT}-p", allowed_clusters=["sec"], admin_roles=[])
    files = _files(tmp_path, sec)
    diff = ["policies", "diff", "--source", "admin", "-o", "json"]
    refused = _geoctl(*diff, "--config", _config(tmp_path, sec, ca_file=files["ca_file"]))
    assert refused.exit_code == EXIT_REFUSED, refused.output
    assert "token" in refused.output
    untrusted = _geoctl(*diff, "--config", _config(tmp_path, sec, token_file=files["token_file"]))
    assert untrusted.exit_code == EXIT_UNREACHABLE, untrusted.output
    assert "ca_file" in untrusted.output
    ok = _geoctl(*diff, "--config", _config(tmp_path, sec, **files))
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert data["regions"] == ["sec"]
    assert data["paths"] >= 1  # at least the tenant created above was read through the secured API
    assert sec.token not in ok.output + refused.output
