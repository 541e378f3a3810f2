"""A Key_Shared message held back by an earlier one that only a region without the plugin acknowledged, as a
batch index its polls cannot see (the campaign on ef16620: seed 300450, profile ``clean``, 20 topics).

t13 is Key_Shared. a's consumers acknowledged c@24:10#0 (key k5) at 6.40 s while k5's earlier message
c@24:9#1 was unacknowledged in a, so a's claim held it back (per-key order, invariant 6). The consumers moved
to b (8.45 s), which acknowledged c@24:9#1 at 8.50 s as an index of a batch left partly acknowledged there.
b has no plugin: its agent polls cursors, and a poll shows no batch indexes (docs/limits.md, the admin-API
path), so b never claimed c@24:9#1, and held back its own acknowledgement of c@24:10#0 for the same reason. No
claim ever named c@24:10#0, and c gave it again after the move there (26.5 s). Nothing lost, nor anything the
agents could have claimed: the admin path's documented limit, passed on through key order. The checker looked
only at the delivering and the acknowledging regions (both with the plugin) and called it
``unexplained-duplicate``; it now classes it ``admin-path`` when every acknowledgement of the earlier message
before the failover was such an invisible batch index (``Checker._unseen``).
"""

from __future__ import annotations

from geosync_sim import running, schedules
from geosync_sim.checking import Checker
from geosync_sim.world import Ident, Msg

EARLIER: Ident = ("c", 24, 9, 1)
LATER: Ident = ("c", 24, 10, 0)
K5 = Msg("k5", "c-0-13", 1)


def test_seed_300450_passes_with_the_duplicate_attributed_to_the_admin_path() -> None:
    result = running.run(schedules.draw(300450, profile="clean", topics=20))
    assert not result.violations, "\n".join(map(str, result.violations))
    assert "unexplained" not in result.duplicates
    assert result.duplicates.get("admin-path", 0) >= 1


def _checker(*, polled: set[str], partial_in: set[str], b_acks_at: float) -> Checker:
    """a (plugin) acknowledges LATER at 6.4 s with EARLIER unacknowledged; b acknowledges EARLIER at
    ``b_acks_at``; the consumers move to c at 26.45 s, which gives LATER again. ``polled``: the regions
    whose agents poll cursors; ``partial_in``: those whose cursors hold EARLIER as an index of a batch held in
    part."""

    def index_only(region: str, topic: str, sub: str, ident: Ident) -> bool:
        return ident == EARLIER and region in partial_in

    checker = Checker(index_only=index_only, polled=polled, no_plugin=set(polled))
    checker.delivered(5.9, "a", "t", "s", ident=EARLIER, msg=K5, kind="Key_Shared")
    checker.delivered(5.9, "a", "t", "s", ident=LATER, msg=K5, kind="Key_Shared")
    checker.acked(6.4, "a", "t", "s", idents=[LATER], cause="consumer")
    checker.failover(8.45, "t", "s")
    checker.acked(b_acks_at, "b", "t", "s", idents=[EARLIER], cause="consumer")
    checker.failover(26.45, "t", "s")
    checker.delivered(26.5, "c", "t", "s", ident=LATER, msg=K5, kind="Key_Shared")
    return checker


def test_an_earlier_message_acknowledged_only_where_polls_cannot_see_it_is_the_admin_paths() -> None:
    checker = _checker(polled={"b"}, partial_in={"b"}, b_acks_at=8.5)
    assert not checker.violations, checker.violations
    assert checker.duplicates == {"admin-path": 1}


def test_an_earlier_message_another_agent_could_claim_leaves_the_duplicate_unexplained() -> None:
    """The attribution needs the limit: b with the plugin (its feed and cursor reads show batch indexes), or
    the batch acknowledged whole in b (a poll shows the entry): b's agent could claim the earlier message,
    and the later one held back after that is the agents' fault."""
    for polled, partial_in in (({"b"}, set[str]()), (set[str](), {"b"})):
        checker = _checker(polled=polled, partial_in=partial_in, b_acks_at=8.5)
        assert [v.kind for v in checker.violations] == ["unexplained-duplicate"], (polled, partial_in)


def test_an_earlier_message_also_acknowledged_where_the_plugin_is_leaves_it_unexplained() -> None:
    """c's consumers acknowledged the earlier message too, before the failover, and c has the plugin: c
    claims it, and the later one held back after that is the agents' fault."""

    def index_only(region: str, topic: str, sub: str, ident: Ident) -> bool:
        return ident == EARLIER and region == "b"

    checker = Checker(index_only=index_only, polled={"b"}, no_plugin={"b"})
    checker.delivered(5.9, "a", "t", "s", ident=EARLIER, msg=K5, kind="Key_Shared")
    checker.delivered(5.9, "a", "t", "s", ident=LATER, msg=K5, kind="Key_Shared")
    checker.acked(6.4, "a", "t", "s", idents=[LATER], cause="consumer")
    checker.acked(8.5, "b", "t", "s", idents=[EARLIER], cause="consumer")
    checker.acked(9.0, "c", "t", "s", idents=[EARLIER], cause="consumer")  # c has the plugin: c claims it
    checker.failover(26.45, "t", "s")
    checker.delivered(26.5, "c", "t", "s", ident=LATER, msg=K5, kind="Key_Shared")
    assert [v.kind for v in checker.violations] == ["unexplained-duplicate"]
