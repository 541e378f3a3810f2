"""Failure types shared by every layer, typed by what the caller should do about them.

Expected non-results are values elsewhere in the core (for example an ``Untranslatable`` reason); these
exceptions are for real failures. A runtime decides between retrying and giving up from the type alone,
never by parsing a message.
"""

from __future__ import annotations


class GeoSyncError(Exception):
    """Base of every error GeoSync raises on purpose."""


class TemporaryError(GeoSyncError):
    """A failure that may go away by itself; retry after ``delay`` seconds (a hint, not a promise)."""

    def __init__(self, message: str, *, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(GeoSyncError):
    """A failure that retrying will not fix: bad input, a missing resource, a refused permission."""


class MalformedMessage(PermanentError):
    """A wire message we own (control message, marker, stored record) could not be decoded."""
