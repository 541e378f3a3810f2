"""Which subscriptions the apply step looks at: those something happened to, not every one at every round.

The apply step (``core.planning``) decides per subscription whether to plan its cursor change. Most of the
time nothing changed for almost all of them, and the step found that out by looking at each one: at 10,000
subscriptions that look was a round's largest fixed cost, and each topic that grew had every one of its
subscriptions test the new entries against its claims. Here is what lets the step skip them unlooked.

A subscription is *quiet* when the apply step's last look at it ended with nothing left to do that time
alone could change: planned from the cursor, claims and log held (or waiting for a cursor, not announced,
deleted here on purpose). Its next look can only end otherwise if

- a field the step reads of it was set (``Subscription.__setattr__`` tells its ``SubsTable``, which lists it
  in ``touched``), or
- its topic's log changed: entries indexed whose origins its claims might name, entries already indexed
  rewritten, or a new tail.

Every other subscription is *restless* (a plan cut short by its wait, a write or move in flight, a
creation asked for, a rewind followed, a cursor below what the tail forgot) and is looked at every round,
as before. Per topic, ``Walked`` keeps the log as the last look left it and ``reach``, per origin region, the
highest origin position any subscription's claims received name: new entries whose origins all lie above it
(or in regions nobody claims) are named by no claim, and leave every quiet subscription quiet.

Invariants (tests in ``tests/agent/test_core_quiet.py``): a subscription is left unlooked only if it was
quiet at its last look and nothing it is read by changed since; every subscription is looked at after a
new tail, rewritten entries, more than ``tuning.APPENDED_CHECK_MAX`` new entries or new entries some claim
might name; ``reach`` never lies below what a subscription's claims name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from geosync_agent.core.applying import Appended, Log, appended_above, plan_end
from geosync_core.origins import OriginAcks
from geosync_core.positions import Position

Reach = dict[str, tuple[int, int]]
"""Per origin region, the highest (ledger, entry) some claim names (an upper bound)."""


@dataclass
class Walked:
    """A topic's apply state after its last look: the log as it was, and which subscriptions were left
    restless (looked at every round until they are quiet)."""

    log: object
    """The tail looked at (another one, after a rebuild, has versions of its own)."""
    version: int
    rewrites: int
    end: Position | None
    reach: Reach
    restless: dict[str, None] = field(default_factory=dict)
    """Names of the subscriptions the last look left something to do (in the order they were looked at)."""


def add_reach(reach: Reach, claims: OriginAcks) -> None:
    """Raise ``reach`` to cover what ``claims`` name."""
    for region, spans in claims.by_region:
        if spans:
            last = spans[-1]
            at = (last.ledger, last.last)
            if at > reach.get(region, (-1, -1)):
                reach[region] = at
    for region, batches in claims.partials:
        if batches:
            p = batches[-1][0]
            at = (p.ledger, p.entry)
            if at > reach.get(region, (-1, -1)):
                reach[region] = at


def log_unchanged(walked: Walked | None, log: Log, appended: Appended) -> bool:
    """Whether ``log`` changed since ``walked`` in no way a quiet subscription's next look could see: the
    same tail, no entry rewritten, and any entries indexed since named by no claim (their origins above
    ``reach``). The entries are looked at once (``appended``: the round's cache); ``walked`` then covers
    them."""
    if walked is None or walked.log is not log or walked.rewrites != log.rewrites:
        return False
    if walked.version == log.version:
        return True
    if walked.end is None:
        return False  # the last entry's size was being counted: plans are made again (``plan_end``)
    origins = appended_above(appended, log, walked.end)
    if origins is None:
        return False
    reach = walked.reach
    for origin in origins:
        top = reach.get(origin.region)
        if top is not None and (origin.position.ledger, origin.position.entry) <= top:
            return False
    walked.version, walked.end = log.version, plan_end(log)
    return True


def to_look_at(walked: Walked | None, touched: Iterable[str], unchanged: bool) -> list[str] | None:
    """The names of a topic's subscriptions to look at this round: the restless ones and those ``touched``
    since; None: every one (the log changed, see ``log_unchanged``, or the topic was never looked at)."""
    if walked is None or not unchanged:
        return None
    names = dict(walked.restless)
    names.update(dict.fromkeys(touched))
    return list(names)


def after_look(
    walked: Walked | None,
    log: Log,
    *,
    whole: bool,
    looked: Iterable[OriginAcks],
    restless: Iterable[str],
    quiet: Iterable[str],
) -> Walked:
    """The topic's ``Walked`` after a look at every subscription (``whole``) or at some: ``looked`` are the
    claims received of those looked at, ``restless`` and ``quiet`` their names by how the look ended."""
    if whole or walked is None or walked.log is not log:
        walked = Walked(log, log.version, log.rewrites, plan_end(log), {})
    for claims in looked:
        add_reach(walked.reach, claims)
    for name in quiet:
        walked.restless.pop(name, None)
    for name in restless:
        walked.restless[name] = None
    return walked
