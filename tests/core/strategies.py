"""Hypothesis strategies shared by the core tests: small ledgers and entries so that collisions happen."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from geosync_core.batches import BatchAcks
from geosync_core.incarnations import Incarnation
from geosync_core.origins import Origin
from geosync_core.positions import Position
from geosync_core.rangesets import AckState, Range

# Model checks scan a small universe per example; a deadline only makes first runs flaky.
fast = settings(deadline=None, max_examples=60)

REGIONS = ("a", "b", "c")
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


@st.composite
def origin_streams(draw: st.DrawFn) -> dict[str, list[Position]]:
    """Each region's stream of origin positions: ledgers 1, 2, 3 for everybody, with gaps."""
    streams: dict[str, list[Position]] = {}
    for region in REGIONS:
        stream = []
        for ledger in (1, 2, 3):
            entry = 0
            for _ in range(draw(st.integers(0, 8))):
                entry += draw(st.sampled_from((1, 1, 1, 1, 2)))
                stream.append(Position(ledger, entry))
        streams[region] = stream
    return streams


@st.composite
def local_logs(
    draw: st.DrawFn, streams: dict[str, list[Position]] | None = None
) -> list[tuple[Position, Origin]]:
    """A local log: a random interleaving of the origin streams, written into local ledgers 1, 2, 3..."""
    streams = {r: list(s) for r, s in (streams or draw(origin_streams())).items()}
    log: list[tuple[Position, Origin]] = []
    ledger, entry = 1, 0
    while any(streams.values()):
        region = draw(st.sampled_from([r for r in REGIONS if streams[r]]))
        for _ in range(draw(st.integers(1, 6))):
            if not streams[region]:
                break
            if draw(st.integers(0, 15)) == 0:
                ledger, entry = ledger + 1, 0
            log.append((Position(ledger, entry), Origin(region, streams[region].pop(0))))
            entry += 1
    return log


# --- batched entries --------------------------------------------------------------------------------


def size_of(position: Position) -> int:
    """The number of messages in entry ``position`` of the small universe: 1 (unbatched) to 4."""
    return 1 + (position.ledger + position.entry) % 4


def size_of_origin(origin: Origin) -> int:
    """An origin entry's batch size; replication keeps it, so a local copy has the same."""
    return 1 + (ord(origin.region) + origin.position.entry) % 4


@st.composite
def batch_acks(draw: st.DrawFn, size: int | None = None) -> BatchAcks:
    """Any set of acknowledged indexes (empty and full included) of a batch of ``size`` (or any size)."""
    n = size if size is not None else draw(st.integers(1, 6))
    return BatchAcks(n, draw(st.integers(0, (1 << n) - 1)))


@st.composite
def partial_batches(draw: st.DrawFn) -> list[tuple[Position, BatchAcks]]:
    """Batch acks on entries of the small universe, sized by ``size_of``, repeats allowed."""
    picked = draw(st.lists(entries, max_size=5))
    return [(p, draw(batch_acks(size_of(p)))) for p in picked]


batched_ack_states = st.builds(AckState.of, positions, st.lists(ranges(), max_size=4), partial_batches())


def messages(state: AckState) -> frozenset[tuple[Position, int]]:
    """The acknowledged messages of ``state`` among the universe's entries (sized by ``size_of``)."""
    return frozenset(
        (p, i) for p in UNIVERSE if p.entry >= 0 for i in range(size_of(p)) if state.acks_message(p, i)
    )


incarnations = st.builds(
    Incarnation, st.integers(0, 2**63 - 1), st.text(alphabet="0123456789abcdefz-", min_size=1, max_size=64)
)
