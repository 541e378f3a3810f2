"""The Pulsar admin API over HTTP: the session every admin call goes through, and its errors.

Why our own: the Python Pulsar client has no admin API. This adapter translates HTTP outcomes into the
project's error types (status code -> class, always chained), follows Pulsar's 307 redirects to the
owning broker itself with a hop limit and re-attaches credentials on every hop (``requests`` drops the
``Authorization`` header when a redirect changes host), and retries temporary failures with a tenacity
policy that is a value, not loops sprinkled around. The endpoints themselves are ``admin.AdminClient``'s.
"""

from __future__ import annotations

import functools
import json
import pathlib
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
import tenacity

from geosync_core.errors import PermanentError, TemporaryError


class AdminError(Exception):
    """An admin call failed; carries the status, the method and path, and a trimmed body."""

    def __init__(
        self, message: str, *, status: int | None = None, method: str = "", url: str = "", body: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.method = method
        self.url = url
        self.body = body[:500]


class AdminTemporary(AdminError, TemporaryError):
    """Connection refused, timeout, 429 or 5xx: retried by the policy, then raised."""


class OwnerUnreachable(AdminTemporary):
    """The broker asked redirected the call to another one (the topic's owner) that does not answer: it died
    and its bundles keep it as their owner until its metadata session expires. Not retried at once (nothing
    changes for tens of seconds, and asking another broker gets the same redirect): the caller tries later."""


class AdminPermanent(AdminError, PermanentError):
    """A 4xx answer: the request itself is wrong or not allowed."""


class AdminTlsError(AdminPermanent):
    """The server's TLS certificate could not be verified: retrying cannot help."""


class AdminBadRequest(AdminPermanent):
    """400."""


class AdminUnauthorized(AdminPermanent):
    """401."""


class AdminForbidden(AdminPermanent):
    """403."""


class AdminNotFound(AdminPermanent):
    """404."""


class AdminNotAllowed(AdminPermanent):
    """405: for example a per-partition operation on a partitioned topic name."""


class AdminConflict(AdminPermanent):
    """409: the resource exists already, or a concurrent operation is running."""


class AdminPreconditionFailed(AdminPermanent):
    """412."""


class TooManyRedirects(AdminPermanent):
    """The brokers kept redirecting; Pulsar has had redirect loops (apache/pulsar#13946)."""


_BY_STATUS: dict[int, type[AdminPermanent]] = {
    400: AdminBadRequest,
    401: AdminUnauthorized,
    403: AdminForbidden,
    404: AdminNotFound,
    405: AdminNotAllowed,
    409: AdminConflict,
    412: AdminPreconditionFailed,
}


def _reason(body: str) -> str:
    """Pulsar answers errors as ``{"reason": "..."}``; fall back to the raw text."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if isinstance(parsed, dict) and isinstance(parsed.get("reason"), str):
        return str(parsed["reason"])
    return body.strip()[:300]


def error_for(status: int, *, method: str, url: str, body: str) -> AdminError:
    """Map an HTTP status to the project's error class."""
    message = f"{method} {url} answered {status}: {_reason(body)}"
    if status == 429 or status >= 500:
        return AdminTemporary(message, status=status, method=method, url=url, body=body)
    cls = _BY_STATUS.get(status, AdminPermanent)
    return cls(message, status=status, method=method, url=url, body=body)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying a call that failed temporarily. A value, so tests can use a fast one."""

    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 3.0
    deadline: float = 30.0

    def retrying(self) -> tenacity.Retrying:
        """The retry controller of this policy: one per policy, shared by every call and thread (tenacity
        keeps a call's state per thread). One built per call left 17 objects in reference cycles for the
        garbage collector each time: most of what an agent making tens of admin calls a second gave it."""
        return _retrying(self)


@functools.lru_cache(maxsize=32)
def _retrying(policy: RetryPolicy) -> tenacity.Retrying:
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(
            lambda e: isinstance(e, AdminTemporary) and not isinstance(e, OwnerUnreachable)
        ),
        stop=tenacity.stop_after_attempt(policy.attempts) | tenacity.stop_after_delay(policy.deadline),
        wait=tenacity.wait_exponential_jitter(
            multiplier=policy.initial_delay, max=policy.max_delay, jitter=policy.initial_delay
        ),
        reraise=True,
    )


NO_RETRY = RetryPolicy(attempts=1)


class TokenFile:
    """A token kept in a file, read again whenever the file changes: credentials rotated by an operator (or a
    Kubernetes secret update) are used from the next call, without a restart. If the file cannot be read
    any more, the last token read is kept (and the calls then say what the broker thinks of it)."""

    def __init__(self, path: str | pathlib.Path) -> None:
        self.path = pathlib.Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self._token: str | None = None

    def __call__(self) -> str | None:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                self._token = self.path.read_text().strip() or None
                self._stamp = stamp
        except OSError:
            if self._stamp is None:
                raise
        return self._token

    def __repr__(self) -> str:  # never the token itself
        return f"TokenFile({str(self.path)!r})"


Token = str | Callable[[], "str | None"] | None
"""A token, or a function answering the current one (``TokenFile``)."""


@dataclass
class AdminSession:
    """The HTTP session with one region's admin API (``http://host:port``): credentials, redirects, retries,
    and JSON in and out. ``admin.AdminClient`` adds the endpoints."""

    base_url: str
    token: Token = field(default=None, repr=False)
    timeout: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_redirects: int = 5
    verify: bool | str = True
    session: requests.Session = field(default_factory=requests.Session, repr=False)
    on_call: Callable[[str, float], None] | None = field(default=None, repr=False)
    """Told of every HTTP request answered: its kind (``call_kind``) and the seconds it took."""

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        # Credentials and proxies come from our own settings only: no ~/.netrc look-up on every call.
        self.session.trust_env = False

    def _headers(self) -> dict[str, str]:
        # Uncompressed: the broker gzips its answers by default, and a region's agents and tools talk to it
        # over its own network, where its CPU costs more than the bytes (at 10,000 subscriptions the stats a
        # discovery pass reads are tens of megabytes of JSON; compressing and inflating them every pass cost
        # the broker and the agent a share of a saturated machine).
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        token = self.token() if callable(self.token) else self.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _once(self, method: str, path: str, body: Any, params: Mapping[str, Any] | None) -> requests.Response:
        url = path if path.startswith("http") else f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body)
        for hop in range(self.max_redirects + 1):
            headers = self._headers()
            if data is not None:
                headers["Content-Type"] = "application/json"
            started = time.monotonic()
            try:
                response = self.session.request(
                    method,
                    url,
                    data=data,
                    params=params,
                    headers=headers,
                    timeout=self.timeout,
                    allow_redirects=False,
                    verify=self.verify,
                )
            except requests.exceptions.SSLError as e:
                raise AdminTlsError(
                    f"{method} {url}: TLS verification failed ({e.__class__.__name__}: {e}); give the CA "
                    "bundle that signed the server's certificate (agent: tls_trust_certs_file; geoctl: "
                    "ca_file in --config)",
                    method=method,
                    url=url,
                ) from e
            except (requests.ConnectionError, requests.Timeout) as e:
                if hop > 0:
                    raise OwnerUnreachable(
                        f"{method} {url}: the broker the call was redirected to (the topic's owner) does not "
                        f"answer ({e.__class__.__name__}: {e})",
                        method=method,
                        url=url,
                    ) from e
                raise AdminTemporary(
                    f"{method} {url}: {e.__class__.__name__}: {e}", method=method, url=url
                ) from e
            if self.on_call is not None:
                self.on_call(call_kind(method, url), time.monotonic() - started)
            if response.status_code in (301, 302, 307, 308) and "Location" in response.headers:
                url = urllib.parse.urljoin(url, response.headers["Location"])
                params = None  # the Location already carries the query string
                continue
            if response.status_code >= 400:
                raise error_for(response.status_code, method=method, url=url, body=response.text)
            return response
        raise TooManyRedirects(
            f"{method} {path}: more than {self.max_redirects} redirects", method=method, url=url
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Send one call (with retries on temporary failures) and return the decoded JSON, or None."""
        policy = retry or self.retry
        response: requests.Response = policy.retrying()(self._once, method, path, body, params)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("PUT", path, body, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)


CALL_STEPS = frozenset(
    {
        "cursors",
        "cursor",
        "acks",
        "origins",
        "stats",
        "internalStats",
        "entry",
        "resetcursor",
        "expireMessages",
        "skipByMessageIds",
        "subscriptions",
        "subscription",
        "partitions",
        "runtime",
        "ownedNamespaces",
        "replication",
        "retention",
        "lookup",
    }
)
"""Path steps that name a call (a bounded set: topic, namespace and subscription names are never kinds)."""


def call_kind(method: str, url: str) -> str:
    """A request's kind for timing: the method and the last step of its path that names the call (``GET
    cursors``: the interceptor's feed; ``POST acks``: its cursor writes; ``GET stats``: a topic's statistics),
    else the resource it is on (``GET namespaces``), never a topic's or a subscription's name."""
    steps = [step for step in urllib.parse.urlsplit(url).path.split("/") if step]
    named = next((step for step in reversed(steps) if step in CALL_STEPS), None)
    if named is None:
        named = steps[2] if len(steps) > 2 and steps[0] == "admin" else "other"
    return f"{method} {named}"
