"""Absorbing: what consumers acknowledged, as the broker plugin's feed tells it, through the core's entry
(``core.stepping.step`` with ``AckedRead``, round step 1; decision 0015).

A feed answer carries ``acked`` blocks: per subscription, the entries and batch indexes its consumers
acknowledged since the last answer. The shell reads the answer and journals its blocks first (they survive
a crash before the next checkpoint: ``checkpointing.Journal``); then they come here, those a restored agent
took up from its journal first. Each block is added to what the subscription's consumers were seen
acknowledging (``acknowledged.absorb``), and a subscription whose set grew is looked at again: with its
report's cursor if the answer had one, else with the cursor held here (``Feed.held_looks``: nothing the
broker showed, so not judged for a rewind).

Invariants (tests in ``tests/agent/test_core_absorbing.py``, through ``step``); whatever cannot be taken
makes the claims smaller, never larger, and is counted (re-delivery is possible after a failover):

* a block for a subscription not tracked here yet is held for it up to ``tuning.HELD_ACKED_S`` (the plugin
  hands a block over once), for at most ``tuning.MAX_UNOBSERVED`` subscriptions; older, or beyond that,
  dropped; one for a topic another broker owns now is dropped (its feed starts from there);
* a batch whose entry the tail has not read yet (its size unknown) waits for a later answer; one the tail
  read and cannot size is left out;
* blocks the plugin dropped (a grown ``lost`` count) are noticed, not guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from geosync_agent.core import acknowledged, tuning
from geosync_agent.core.now import Now
from geosync_agent.core.planning import Tracked
from geosync_agent.core.stepped import Stepped
from geosync_core import pluginapi
from geosync_core.rangesets import AckState


class Absorbing(Tracked, Protocol):
    """What of the agent's state taking ``acked`` blocks reads and changes."""


@dataclass(frozen=True, slots=True)
class AckedRead:
    """Round step 1: a feed answer's ``acked`` ``blocks`` (those replayed from the journal first) and the
    plugin's ``lost`` count (blocks it dropped since the broker started); ``reported``, the cursors the
    answer's reports gave (topic -> name -> cursor); ``owned``, whether this agent syncs a topic (sidecar
    mode: its broker owns it)."""

    blocks: tuple[pluginapi.AckedSet, ...]
    lost: int
    reported: Mapping[str, Mapping[str, AckState]]
    owned: Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class AckedLost:
    """The plugin dropped ``blocks`` acknowledged blocks: those acknowledgements are not claimed."""

    blocks: int


@dataclass(slots=True)
class Absorbed:
    """What ``acked`` blocks did: ``looks``, subscriptions to look at again with the cursor held here (in the
    order they grew), none of them among the answer's reports; ``lost``, blocks the plugin dropped since the
    last answer (the shell warns); ``out``, counters."""

    out: Stepped = field(default_factory=Stepped)
    looks: list[tuple[str, str, AckState]] = field(default_factory=list)
    lost: AckedLost | None = None


def absorb(state: Absorbing, event: AckedRead, now: Now) -> Absorbed:
    """Step 1 (see the module docstring)."""
    absorbed, feed = Absorbed(), state.feed
    counts = absorbed.out.counts
    feed.acked = True
    if event.lost > feed.acked_lost:
        counts["acked_blocks_lost"] += event.lost - feed.acked_lost
        absorbed.lost = AckedLost(event.lost - feed.acked_lost)
    feed.acked_lost = event.lost
    waiting, feed.waiting = feed.waiting, {}
    again = tuple(pluginapi.AckedSet(t, n, batches=tuple(b)) for (t, n), b in waiting.items())
    held, feed.held = feed.held, {}
    since = {key: first for key, (first, _) in held.items()}
    looked: set[tuple[str, str]] = set()
    for block in (*(b for _, bs in held.values() for b in bs), *event.blocks, *again):
        key = (block.topic, block.subscription)
        sub = state.subs.get(key)
        ts = state.topics.get(block.topic)
        if ts is not None and not event.owned(block.topic):
            counts["acked_blocks_dropped"] += 1  # another broker's now: its feed starts from there
            continue
        if sub is None or not sub.exists or ts is None:
            first = since.get(key, now.mono)
            room = key in feed.held or len(feed.held) < tuning.MAX_UNOBSERVED
            if now.mono - first < tuning.HELD_ACKED_S and room:
                feed.held[key] = (first, (*feed.held.get(key, (first, ()))[1], block))
            else:
                counts["acked_blocks_dropped"] += 1
            continue
        if block.overflowed:
            counts["acked_blocks_overflowed"] += 1
        tail = ts.tail
        grown, left_out = acknowledged.absorb(sub.acked, block, tail.size_of)
        wait = tuple(b for b in left_out if not tail.has_read(b.position))
        if wait:
            feed.waiting[key] = (*feed.waiting.get(key, ()), *wait)
        if len(wait) < len(left_out):
            counts["acked_batches_left_out"] += len(left_out) - len(wait)
        if grown != sub.acked:
            sub.acked = grown
            if (
                sub.cursor is not None
                and block.subscription not in event.reported.get(block.topic, {})
                and key not in looked
            ):
                # No report of it: looked at with the cursor held here (``Feed.held_looks``).
                looked.add(key)
                absorbed.looks.append((block.topic, block.subscription, sub.cursor))
                feed.held_looks.add(key)
    return absorbed
