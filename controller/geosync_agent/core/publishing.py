"""Step 3 of the round: a subscription's claim, decided from its cursor, what its consumers acknowledged and
its topic's log as this region read it; what of it goes out on the control topic.

``claim`` is the decision ``observing`` asks for each subscription a look found moved (or every one, at a
resync): it updates the subscription's record of what it translated and published and says what to send,
and the shell does the rest (the CPU it took, the publish pause that follows, the envelope it goes in).

Invariants:

* a claim is made of what the region's consumers acknowledged (``exact``: the cursor limited to what they
  were seen acknowledging, ``acknowledged.own_part``) or, in cursor mode, of the cursor; never of more;
* a Key_Shared subscription claims in per-key order: in cursor mode the key order limits the translation
  (``claiming.KeyOrder``), with acknowledgements it limits the cursor first and then what consumers
  acknowledged (entries other regions' claims moved here hold no key back);
* the same claim is not decided twice (``subscriptions.decided_already``), unless ``force`` (a resync);
* what goes out is the whole claim, or, for a large claim already published, its news since then
  (``tuning.NEWS_FROM_SPANS``): every resync sends it whole.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from geosync_agent.core import acknowledged, tuning
from geosync_agent.core.applying import claimed_to
from geosync_agent.core.logview import LogView
from geosync_agent.core.subscriptions import Subscription, claim_size, decided_already
from geosync_core import ackstates, claiming


@functools.lru_cache(maxsize=65_536)
def namespace_of(topic: str) -> str:
    """``tenant/namespace`` of ``topic``: the control topic its claims go out on is that namespace's (asked
    for each claim decided and each claim received: remembered)."""
    rest = topic.split("://", 1)[-1]
    tenant, ns = rest.split("/")[:2]
    return f"{tenant}/{ns}"


@dataclass(frozen=True, slots=True)
class Send:
    """A claim to publish: ``message`` (whole, or its news when ``as_news``), ``size`` spans in all."""

    message: ackstates.AckStateMessage
    size: int
    as_news: bool


Held = Literal["same", "kept"]
"""Nothing to send: ``same``, the claim decided already (nothing to translate again); ``kept``, decided now
and nothing beyond what other regions already claimed, or not translatable yet, or of a namespace not
synced here (the subscription's record says what was decided)."""


def claim(
    state: Subscription,
    log: LogView,
    *,
    exact: bool,
    force: bool,
    local: str,
    sendable: bool,
) -> Send | Held:
    """Decide ``state``'s claim over ``log`` (its topic's tail) and record it on ``state``. ``exact``: claims
    are made of acknowledgements (``claims_from: acknowledgements`` with a feed that reports them);
    ``force``: a resync (publish whole, even unchanged); ``local``: this region's name; ``sendable``: its
    namespace is synced here. ``state.cursor`` is set."""
    cursor = state.cursor
    assert cursor is not None
    acked = state.acked if exact else None
    if not force and decided_already(state, acknowledgements=exact, log_version=log.version):
        return "same"  # the same claim again (with claims_from: acknowledgements, at every poll before)
    own = acknowledged.own_part(cursor, acked) if exact else cursor
    key_order = None
    if state.key_shared:
        key_order = claiming.KeyOrder(
            log.positions_above(cursor.mark_delete),
            log.key_of,
            size_of=log.size_of,
            key_of_message=log.key_of_message,
            origin_of=log.origin_region_of,
        )
        if exact:
            # Per-key order is the cursor's (as in cursor mode), then limited to what consumers acknowledged:
            # entries others' claims moved here are no consumer's, and must not hold back the keys' later
            # messages (they are in the claims received already).
            own = acknowledged.own_part(key_order.ordered(cursor), state.acked)
            key_order = None
    decided = claiming.decide(
        log.index,
        own,
        received=state.received,
        published=state.published,
        last_translated=state.translated,
        force=force,
        key_order=key_order,
        index_grew=state.incomplete_at is not None and state.incomplete_at != log.version,
        local=local,
        # Translated whole each time: what is claimed_to below the cursor's mark-delete need not be in the
        # claims (a jump moved it), and consumers' acknowledgements may arrive after the move.
        claimed_to=None if exact else state.claimed_to,
    )
    if decided is None:
        state.translated_from = (cursor, acked, exact, state.translated)
        return "kept"
    if not state.active and decided.news:
        state.active = True  # acknowledged here first (messages, not forms): consumed here
    state.translated = own
    state.translated_from = (cursor, acked, exact, own)
    state.incomplete_at = None if decided.complete else log.version
    if not decided.send:
        # Nothing beyond what others told us (typically: our cursor just caught up with their claims).
        state.published, state.claimed_to = decided.claims, claimed_to(cursor, log)
        return "kept"
    if not sendable:
        return "kept"
    size = claim_size(decided.claims)
    sent, as_news = decided.claims, False
    if not force and size > tuning.NEWS_FROM_SPANS and state.published is not None:
        # Receivers merge claims and hold the published ones: large claims travel as their news between
        # resyncs (each resync sends them whole, for a receiver that missed some). Sent whole each time, 4
        # subscriptions of ~30,000 spans wrote 845 MB an hour to a control topic, in entries of ~190 KB that
        # Pulsar 4.0.8's replicator then failed to read 1,000 at a time, for good.
        sent, as_news = decided.claims.news_since(state.published), True
    message = ackstates.AckStateMessage(
        state.topic, state.name, local, sent, state.generation, state.key_shared
    )
    state.published, state.claimed_to = decided.claims, claimed_to(cursor, log)
    return Send(message, size, as_news)
