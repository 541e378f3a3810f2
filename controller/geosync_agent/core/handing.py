"""Handing: sidecar mode's ownership change taken into the state through the core's entry
(``core.stepping.step`` with ``OwnershipMoved``; round step 0).

The shell refreshes what its broker owns (an admin call, ``owning``) and, when the bundles it owns changed,
steps the answer before and after; the core says which tracked topics to hand off and which claimed
topics to take over, and comes back, as tracking's other step does, with ``adopting.Adopted``: the topics
to untrack (``gone``: the shell closes their readers, forgets their origin lookups and snapshot caches,
and asks for a discovery pass), those taken over (``taken_over``) and counters. It reads the part of the
state adopting a discovery pass reads (``stepping`` takes ``adopting.Adopting`` for both).

Invariants (tests in ``tests/agent/test_core_handing.py``, through ``step``):

* a tracked topic the broker owned before and no longer owns is handed off: its subscriptions forget what
  was seen of their cursors and published from them (``Subscription.hand_off``), their claims received
  stay; a tracked topic still owned, or newly owned, is kept;
* a topic claims were announced about that is not tracked here (or is being handed off) and that the
  broker now owns and did not before is taken over: queued for a look-up now (``claimed_untracked``, given
  ``tuning.CLAIMED_LOOKUP_S``); one it owned already, or claimed only by unannounced states, is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from geosync_agent.core import tuning
from geosync_agent.core.adopting import Adopted
from geosync_agent.core.now import Now
from geosync_agent.core.subscriptions import SubsTable
from geosync_core import ownership


class Handing(Protocol):
    """What of the agent's state an ownership change reads and changes."""

    @property
    def topics(self) -> Mapping[str, object]: ...

    @property
    def subs(self) -> SubsTable: ...

    @property
    def claimed_untracked(self) -> dict[str, tuple[float, float]]: ...


@dataclass(frozen=True, slots=True)
class OwnershipMoved:
    """Sidecar mode: the bundles this agent's broker owns changed from ``before`` to ``after``."""

    before: ownership.Owned
    after: ownership.Owned


def hand_off(state: Handing, event: OwnershipMoved, now: Now) -> Adopted:
    """Hand off the tracked topics the broker lost, take over the claimed ones it gained (see the module
    docstring)."""
    out = Adopted()
    lost, _ = ownership.moved(event.before, event.after, list(state.topics))
    leaving = set(lost)
    for topic in lost:
        for sub in state.subs.values():
            if sub.topic == topic:
                sub.hand_off()
        out.counts["topics_handed_off"] += 1
    claimed = {
        k[0]
        for k, sub in state.subs.items()
        if sub.announced and (k[0] not in state.topics or k[0] in leaving)
    }
    _, gained = ownership.moved(event.before, event.after, claimed)
    for topic in gained:
        state.claimed_untracked[topic] = (now.mono, now.mono + tuning.CLAIMED_LOOKUP_S)
    out.counts["ownership_changes"] += 1
    out.gone, out.taken_over = lost, gained
    return out
