"""Hypothesis strategies shared by the core tests: small ledgers and entries so that collisions happen."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

# Model checks scan a small universe per example; a deadline only makes first runs flaky.
fast = settings(deadline=None, max_examples=60)

LEDGERS = (1, 2, 3)
ENTRIES = range(-1, 9)
UNIVERSE = tuple(Position(ledger, entry) for ledger in range(5) for entry in range(-1, 12))

positions = st.builds(Position, st.sampled_from(LEDGERS), st.sampled_from(ENTRIES))
entries = st.builds(Position, st.sampled_from(LEDGERS), st.integers(0, 8))


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    a, b = draw(st.lists(positions, min_size=2, max_size=2, unique=True))
    return Range(min(a, b), max(a, b))


ack_states = st.builds(AckState.of, positions, st.lists(ranges(), max_size=5))
