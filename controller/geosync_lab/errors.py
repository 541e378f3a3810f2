"""Lab failures carry a hint: what the user should do next."""

from __future__ import annotations

from geosync_core.errors import PermanentError


class LabError(PermanentError):
    """The lab could not do what was asked; ``hint`` says what to do about it."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n  -> {self.hint}" if self.hint else base
