"""When a PIP-121 provider moves Pulsar clients to another region: the switch decision, as values.

Pulsar's Java client can take its service URL from an HTTP provider (``ControlledClusterFailover``) and
reconnects wherever the provider points. ``geoctl failover serve`` is such a provider for one application:
it answers with the active region's service URL; an operator asks it to move the clients to another region;
it moves them only once the target is exact for the application's subscriptions (``failover check``: every
acknowledgement applied, nothing in flight, the target's agent ready), checking again with backoff, or, if
the operator gave a maximum wait, once that has passed (forced, recording what the last check predicted).

This module is that decision: ``step(state, event, now, timing) -> (state, effects)``. The provider
performs the effects (start a check, append to the journal, save the state, answer the request) in one
place. ``now`` is wall-clock seconds: a pending request's deadline must survive a restart of the provider,
which monotonic time does not.

Invariants (each is a test in ``tests/core/test_switching.py``):

1. The active region changes only with a ``switched`` record, and only to the pending request's target.
2. A switch is recorded ``exact`` only when the check that decided it, for this request, said exact.
3. A switch is ``forced`` only at or after the request's deadline; a request without one is never forced.
4. A refused request leaves the state as it was: unknown region, the active region, a negative wait, or
   another target while a switch is pending (asking again for the pending target is accepted as is).
5. Checks back off: the pause after the n-th check is ``first_delay_s * 2**(n-1)`` capped at ``max_delay_s``,
   and never runs past the deadline.
6. ``load(dump(state))`` is the state without its check in flight (a restarted provider checks again).
7. A check result that is not the answer to the check in flight (an older check, another request, none in
   flight) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from geosync_core.errors import MalformedMessage

Reason = Literal["exact", "forced-after-max-wait"]
EXACT: Reason = "exact"
FORCED: Reason = "forced-after-max-wait"
STATE_VERSION = 1

Refusal = Literal["unknown-region", "already-active", "pending", "none-pending", "bad-request"]


@dataclass(frozen=True, slots=True)
class Timing:
    first_delay_s: float = 1.0
    """Pause after the first check that was not exact; doubled after each further one."""
    max_delay_s: float = 15.0
    check_timeout_s: float = 120.0
    """A check that has not answered after this long counts as failed (an unreachable region may hang)."""


DEFAULT_TIMING = Timing()


@dataclass(frozen=True, slots=True)
class Figures:
    """What one ``failover check`` said, or that it could not say (``error``; ``duplicates`` unknown)."""

    exact: bool
    duplicates: int | None
    in_flight: int = 0
    wait_for: tuple[str, ...] = ()
    error: str | None = None
    checked_at: float = 0.0
    subscriptions: int = 0
    """Subscriptions the check judged (0 with an exact verdict: nothing to lose, or a misnamed one)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "exact": self.exact,
            "subscriptions": self.subscriptions,
            "duplicates": self.duplicates,
            "in_flight": self.in_flight,
            "wait_for": list(self.wait_for),
            "error": self.error,
            "checked_at": self.checked_at,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Figures:
        dup = raw.get("duplicates")
        return cls(
            exact=bool(raw["exact"]),
            duplicates=None if dup is None else int(dup),
            in_flight=int(raw.get("in_flight") or 0),
            wait_for=tuple(str(w) for w in raw.get("wait_for") or ()),
            error=raw.get("error"),
            checked_at=float(raw.get("checked_at") or 0.0),
            subscriptions=int(raw.get("subscriptions") or 0),
        )


@dataclass(frozen=True, slots=True)
class Request:
    """A switch an operator asked for and that has not happened yet."""

    id: int
    target: str
    requested_at: float
    deadline: float | None
    """``requested_at`` plus the operator's maximum wait; None: wait until exact, however long."""
    by: str = ""
    checks: int = 0
    """Checks started for this request (the number of the one in flight, if any)."""
    next_check_at: float = 0.0
    checking_since: float | None = None
    last: Figures | None = None

    @property
    def max_wait_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.requested_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "to": self.target,
            "requested_at": self.requested_at,
            "deadline": self.deadline,
            "max_wait_s": self.max_wait_s,
            "by": self.by,
            "checks": self.checks,
            "next_check_at": self.next_check_at,
            "checking": self.checking_since is not None,
            "last_check": None if self.last is None else self.last.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class State:
    regions: tuple[str, ...]
    active: str
    active_since: float
    pending: Request | None = None
    last_id: int = 0


# -- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requested:
    target: str
    max_wait_s: float | None = None
    by: str = ""


@dataclass(frozen=True, slots=True)
class Cancelled:
    by: str = ""


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: start a check that is due, give up on one that hangs."""


@dataclass(frozen=True, slots=True)
class Checked:
    request_id: int
    check: int
    figures: Figures


Event = Requested | Cancelled | Tick | Checked


# -- effects ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartCheck:
    """Run ``failover check`` from ``source`` to ``target`` and answer with ``Checked(request_id, check)``."""

    request_id: int
    check: int
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class Record:
    """Append one line to the journal (before the state that follows from it is saved)."""

    entry: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Save:
    """Persist the new state."""


@dataclass(frozen=True, slots=True)
class Accepted:
    request: Request
    changed: bool
    """False when the same switch was already pending (asking twice is not an error)."""


@dataclass(frozen=True, slots=True)
class Refused:
    why: Refusal
    message: str


Effect = StartCheck | Record | Save | Accepted | Refused


@dataclass(frozen=True, slots=True)
class Step:
    state: State
    effects: tuple[Effect, ...] = field(default_factory=tuple)


def initial(regions: tuple[str, ...], active: str, now: float) -> State:
    if active not in regions:
        raise ValueError(f"unknown region {active!r}; known regions: {', '.join(sorted(regions))}")
    return State(regions=tuple(sorted(regions)), active=active, active_since=now)


def step(state: State, event: Event, now: float, timing: Timing = DEFAULT_TIMING) -> Step:
    if isinstance(event, Requested):
        return _request(state, event, now, timing)
    if isinstance(event, Cancelled):
        return _cancel(state, event, now)
    if isinstance(event, Tick):
        return _tick(state, now, timing)
    return _checked(state, event, now, timing)


def _refuse(state: State, why: Refusal, message: str) -> Step:
    return Step(state, (Refused(why, message),))


def _request(state: State, event: Requested, now: float, timing: Timing) -> Step:
    if event.target not in state.regions:
        known = ", ".join(state.regions)
        return _refuse(
            state, "unknown-region", f"unknown region {event.target!r}: clients can be sent to {known}"
        )
    if event.max_wait_s is not None and event.max_wait_s < 0:
        return _refuse(state, "bad-request", f"a maximum wait cannot be negative ({event.max_wait_s})")
    pending = state.pending
    if pending is not None:
        if pending.target == event.target:
            return Step(state, (Accepted(pending, changed=False),))
        return _refuse(
            state,
            "pending",
            f"a switch to {pending.target} (request {pending.id}) is pending; cancel it first",
        )
    if event.target == state.active:
        return _refuse(state, "already-active", f"clients are already sent to {state.active}")
    request = Request(
        id=state.last_id + 1,
        target=event.target,
        requested_at=now,
        deadline=None if event.max_wait_s is None else now + event.max_wait_s,
        by=event.by,
        next_check_at=now,
    )
    record = Record({"event": "requested", "at": now, "from": state.active, **_request_fields(request)})
    after = _tick(replace(state, pending=request, last_id=request.id), now, timing)
    return Step(after.state, (Accepted(request, changed=True), record, Save(), *after.effects))


def _cancel(state: State, event: Cancelled, now: float) -> Step:
    pending = state.pending
    if pending is None:
        return _refuse(state, "none-pending", "no switch is pending")
    record = Record(
        {
            "event": "cancelled",
            "at": now,
            "from": state.active,
            "cancelled_by": event.by,
            **_request_fields(pending),
        }
    )
    return Step(replace(state, pending=None), (Accepted(pending, changed=True), record, Save()))


def _tick(state: State, now: float, timing: Timing) -> Step:
    pending = state.pending
    if pending is None:
        return Step(state)
    if pending.checking_since is not None:
        if now - pending.checking_since < timing.check_timeout_s:
            return Step(state)
        hung = Figures(
            exact=False,
            duplicates=None,
            error=f"the check did not answer within {timing.check_timeout_s:g} s",
            checked_at=now,
        )
        return _decide(state, pending, hung, now, timing)
    due = now >= pending.next_check_at or (pending.deadline is not None and now >= pending.deadline)
    if not due:
        return Step(state)
    started = replace(pending, checks=pending.checks + 1, checking_since=now)
    effect = StartCheck(pending.id, started.checks, state.active, pending.target)
    return Step(replace(state, pending=started), (effect,))


def _checked(state: State, event: Checked, now: float, timing: Timing) -> Step:
    pending = state.pending
    if (
        pending is None
        or pending.id != event.request_id
        or pending.checks != event.check
        or pending.checking_since is None
    ):
        return Step(state)
    return _decide(state, pending, event.figures, now, timing)


def _decide(state: State, pending: Request, figures: Figures, now: float, timing: Timing) -> Step:
    if figures.exact:
        return _switch(state, pending, figures, EXACT, now)
    if pending.deadline is not None and now >= pending.deadline:
        return _switch(state, pending, figures, FORCED, now)
    pause = min(timing.max_delay_s, timing.first_delay_s * 2 ** max(0, pending.checks - 1))
    next_at = now + pause
    if pending.deadline is not None:
        next_at = min(next_at, pending.deadline)
    waiting = replace(pending, checking_since=None, next_check_at=next_at, last=figures)
    return Step(replace(state, pending=waiting), (Save(),))


def _switch(state: State, pending: Request, figures: Figures, reason: Reason, now: float) -> Step:
    record = {
        "event": "switched",
        "at": now,
        "from": state.active,
        "reason": reason,
        "waited_s": round(now - pending.requested_at, 3),
        "predicted_duplicates": figures.duplicates,
        "check": figures.to_dict(),
        **_request_fields(replace(pending, last=figures)),
    }
    switched = replace(state, active=pending.target, active_since=now, pending=None)
    return Step(switched, (Record(record), Save()))


def _request_fields(request: Request) -> dict[str, Any]:
    return {
        "to": request.target,
        "request_id": request.id,
        "requested_at": request.requested_at,
        "requested_by": request.by,
        "max_wait_s": request.max_wait_s,
        "checks": request.checks,
    }


def resume(state: State, last_switch: dict[str, Any] | None, now: float) -> State:
    """The state after a restart, given the journal's last ``switched`` record: a provider that stopped
    between recording a switch and saving its state finishes that switch instead of deciding it again."""
    pending = state.pending
    if pending is None or last_switch is None or last_switch.get("request_id") != pending.id:
        return state
    return replace(
        state,
        active=pending.target,
        active_since=float(last_switch.get("at") or now),
        pending=None,
    )


# -- the state file (a format we own: versioned, round-trip tested) --------------------------------


def dump(state: State) -> dict[str, Any]:
    pending = state.pending
    return {
        "version": STATE_VERSION,
        "regions": list(state.regions),
        "active": state.active,
        "active_since": state.active_since,
        "last_id": state.last_id,
        "pending": None
        if pending is None
        else {
            "id": pending.id,
            "to": pending.target,
            "requested_at": pending.requested_at,
            "deadline": pending.deadline,
            "by": pending.by,
            "checks": pending.checks,
            "next_check_at": pending.next_check_at,
            "last_check": None if pending.last is None else pending.last.to_dict(),
        },
    }


def load(raw: Any) -> State:
    """The state a provider saved; a check that was in flight is forgotten (it is started again)."""
    if not isinstance(raw, dict) or raw.get("version") != STATE_VERSION:
        version = raw.get("version") if isinstance(raw, dict) else None
        raise MalformedMessage(f"not a version-{STATE_VERSION} provider state (version {version!r})")
    try:
        p = raw.get("pending")
        pending = (
            None
            if p is None
            else Request(
                id=int(p["id"]),
                target=str(p["to"]),
                requested_at=float(p["requested_at"]),
                deadline=None if p.get("deadline") is None else float(p["deadline"]),
                by=str(p.get("by") or ""),
                checks=int(p.get("checks") or 0),
                next_check_at=float(p.get("next_check_at") or 0.0),
                last=None if p.get("last_check") is None else Figures.from_dict(p["last_check"]),
            )
        )
        return State(
            regions=tuple(str(r) for r in raw["regions"]),
            active=str(raw["active"]),
            active_since=float(raw["active_since"]),
            pending=pending,
            last_id=int(raw.get("last_id") or 0),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise MalformedMessage(f"provider state is incomplete: {type(e).__name__}: {e}") from e
