"""Python clients that follow a PIP-121 provider (``geoctl failover serve``), as Java's clients do.

Java's client has ``ControlledClusterFailover``: it polls an HTTP URL and reconnects wherever the answer
points. The Python client (pulsar-client 3.13 and later, on the C++ client) has no such poller, but it takes
a ``pulsar.ServiceInfoProvider``: an object that gives the first service URL and then pushes new ones into
the client through a callback, after which the client closes its connections and reconnects its producers
and consumers there. ``ControlledFailover`` is that object for a PIP-121 provider, with Java's contract: only
a 200 answer with a JSON object naming a non-empty ``serviceUrl`` counts; another status, an unreachable
provider or a body that is not such JSON leaves the client where it is. ``tlsTrustCertsFilePath`` is
applied; of the authentication plugins only token authentication is (``authParamsString`` ``token:...``,
``file:///path`` read at each authentication, or the bare token); an answer naming another plugin is not
applied (logged), since the client could not authenticate there.

    client = pulsar.Client(ControlledFailover("http://provider:8089/service-url", "pulsar://a:6650"))
"""

from __future__ import annotations

import logging
import pathlib
import threading
from collections.abc import Callable
from typing import Any

import pulsar
import requests

log = logging.getLogger("geosync.clientfailover")

TOKEN_PLUGINS = ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token")


def _token(params: str) -> str | Callable[[], str]:
    if params.startswith("file://"):
        path = pathlib.Path(params.removeprefix("file://"))
        return lambda: path.read_text().strip()
    return params.removeprefix("token:")


def service_info(doc: dict[str, Any]) -> pulsar.ServiceInfo | None:
    """The client's ``ServiceInfo`` for a provider's answer, or None when the client cannot use it."""
    url = doc.get("serviceUrl")
    if not isinstance(url, str) or not url:
        return None
    plugin, params = doc.get("authPluginClassName"), doc.get("authParamsString")
    auth = None
    if plugin and params:
        if plugin not in TOKEN_PLUGINS:
            log.warning("provider names auth plugin %s, which this client cannot apply; staying", plugin)
            return None
        auth = pulsar.AuthenticationToken(_token(str(params)))
    trust = doc.get("tlsTrustCertsFilePath") or None
    return pulsar.ServiceInfo(url, authentication=auth, tls_trust_certs_file_path=trust)


class ControlledFailover(pulsar.ServiceInfoProvider):  # type: ignore[misc]
    """Polls ``url`` every ``interval_s`` seconds (its first answer, else ``default_service_url``, is where
    the client starts) and moves the client when the answer changes."""

    def __init__(
        self,
        url: str,
        default_service_url: str,
        *,
        interval_s: float = 5.0,
        headers: dict[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self._url = url
        self._default = default_service_url
        self._interval = interval_s
        self._headers = {"Accept": "application/json", **(headers or {})}
        self._timeout = timeout_s
        self._stop = threading.Event()
        self._applied: dict[str, Any] | None = None

    def _fetch(self) -> dict[str, Any] | None:
        try:
            response = requests.get(self._url, headers=self._headers, timeout=self._timeout)
            doc = response.json() if response.status_code == 200 else None
        except (requests.RequestException, ValueError) as e:
            log.warning("provider %s: %s", self._url, e)
            return None
        if not isinstance(doc, dict):
            log.warning("provider %s answered %s without a JSON object", self._url, response.status_code)
            return None
        return doc

    def initial_service_info(self) -> pulsar.ServiceInfo:
        doc = self._fetch()
        info = service_info(doc) if doc is not None else None
        if info is None:
            return pulsar.ServiceInfo(self._default)
        self._applied = doc
        return info

    def initialize(self, on_service_info_update: Callable[[pulsar.ServiceInfo], None]) -> None:
        # The client calls this once and expects updates from then on: the poller is the client's, not ours.
        threading.Thread(
            target=self._poll, args=(on_service_info_update,), name="geosync-service-info", daemon=True
        ).start()

    def _poll(self, update: Callable[[pulsar.ServiceInfo], None]) -> None:
        while not self._stop.wait(self._interval):
            doc = self._fetch()
            if doc is None or doc == self._applied:
                continue
            info = service_info(doc)
            if info is None:
                continue
            log.info("moving the client to %s", info.service_url)
            update(info)
            self._applied = doc

    def close(self) -> None:
        self._stop.set()
