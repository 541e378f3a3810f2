"""The agent's tuning: every constant that trades latency against CPU, memory or message size.

They are not settings: an operator has no reason to change them, and each one's value comes from a measured
trade-off, said under it. Settings an operator changes live in ``geosync_agent.config.AgentConfig``. The
core and the shell read them from here, as ``tuning.NAME`` where a test changes one (read at call time).
"""

from __future__ import annotations

STATES_PER_ENVELOPE = 64
"""Subscription states per control message (a round's states for one namespace are batched)."""
MAX_ENVELOPE_BYTES = 1 << 20
"""A control message larger than this is sent in parts (brokers refuse messages over maxMessageSize, 5 MB
by default): its states in two envelopes, a single state's claims in two halves (receivers merge claims, so
parts say what the whole says). Claims of a subscription with many permanent holes grow for weeks."""
PLUGIN_ASK_GAP_S = 1.0
"""An entry the interceptor's last answer (less than this ago) should have covered and did not, and any
entry after an empty answer, is not asked about again: one answer covers every entry recorded when it was
given, so a drain costs one call per topic; an entry written after it is asked about at once."""
STALL_S = 60.0
"""/readyz fails when no round completed for this long."""
FAILING_S = 15.0
"""/readyz fails once rounds have failed for this long (a call gives up after retries of several seconds)."""
REDISCOVER_FOR_FEED_S = 1.0
"""Least time between discovery passes asked for by feed reports about subscriptions not tracked yet."""
CLAIMED_LOOKUP_S = 60.0
"""How long a topic other regions claimed on, not found here, is looked up again (every
REDISCOVER_FOR_FEED_S) before the agent waits for the claims' next resync to bring it back."""
PAUSE_FROM_SPANS = 2_000
PAUSE_PER_SPAN_S = 0.0001
MAX_PUBLISH_PAUSE_S = 10.0
"""See ``publish_pause``: 2,000 spans or fewer publish at once; 30,000 wait 3 s; never more than 10 s."""
PLAN_WAIT_FACTOR = 10.0
PUBLISH_WAIT_FACTOR = 10.0
"""See ``publish_pause``: claims above NEWS_FROM_SPANS spans are published again no sooner than ten times
what their last publish took."""
MAX_PLAN_WAIT_S = 2.0
"""A subscription is planned again for new entries or its own cursor's moves alone no sooner than ten times
what its last plan took (its CPU: at most 2 s later); claims received are planned at once, and so are new
entries the claims name (copies read after their claim). A plan walks up to
LOG_WINDOW entries above the mark-delete: in the region where a consumer leaves holes for good while the
other region is cut off, re-planning 4 such subscriptions at every acknowledgement was 74 % of the agent's
rounds (region_down bench). Those re-plans find nothing new unless claims named messages not there yet.

The wait is also multiplied by the number of subscriptions whose last plan took HEAVY_PLAN_S or more, so
that together they re-plan for a bounded share of the loop: each waiting ten times its own plan left 4 such
subscriptions at 36 % of it (the region_down bench's a, its cursors holding thousands of holes)."""
HEAVY_PLAN_S = 0.001
"""A plan or publish that took this much of the loop's CPU or more counts as heavy (see MAX_PLAN_WAIT_S)."""
APPENDED_CHECK_MAX = 64
"""Entries appended since a subscription's last plan that the apply step looks at before
it simply plans again."""
NEWS_FROM_SPANS = 500
"""Claims of more spans than this are sent as their news since the last publish between resyncs."""
RESYNC_STATES_PER_S = 100
"""At most this many states a second, on average, go out in full republishes: with more subscriptions than
``resync_interval_s`` times this, each topic's resync period stretches to (subscriptions / this) seconds. At
10,000 subscriptions every 30 s the resyncs alone were 333 states a second each way, a sixth of what 2,000
acknowledgements a second sent, each one translated, sealed, sent, verified and merged, and a cursor poll per
topic besides. Peers restart from their checkpoints; a lost send is republished soon (``on_sent``)."""
RESYNC_AFTER_LOSS_S = 5.0
"""After sends were lost and sending works again, every topic is republished in full within this long
(spread: at 10,000 subscriptions one round for all of them would stall the loop)."""
UNLISTED_CLAIMS_RESYNCS = 3
"""Claims about a topic this region does not list (and the agent does not track) are dropped once no region
sent any for this many resync intervals: every region republishes what it knows each interval, so the topic
is gone everywhere (a sidecar keeps every topic's claims for takeovers, so without this they would pile up
as topics are deleted); a region that still has it sends them again."""
RESTORED_POLL_SPREAD_S = 4.0
"""After a restart, the topics whose cursors the checkpoint held are first polled within this long, spread."""
CHECKPOINT_CONFIRMED = 1e-9
"""``confirmed_at`` of a subscription that existed at the checkpoint: earlier than any discovery pass."""
REOPEN_S = 5.0
"""Seconds between attempts to open a reader that could not be opened (topic missing, brokers failing)."""
STALLED_S = 5.0
"""A reader without a broker connection this long has its topic's owner checked, and is opened again once
the owner answers."""
FLOOR_EVERY_S = 1.0
"""The feed's looks at a topic ask up to where its tail may forget (every subscription of the topic read,
``subscriptions.forgettable_floor``) at most this often; polls ask at each. Forgetting later only keeps
entries longer: the floor is read afresh whenever the tail forgets (issue 46: at 0.1 s rounds the walk was
the feed step's largest cost, 100 subscriptions read for each topic acknowledged on)."""
REVIVE_CHECKS_PER_ROUND = 20
"""At most this many stalled readers' owners are looked up per round (a dead broker stalls all of its
topics' readers at once)."""
CHECKPOINT_SHARE = 0.1
"""Most of the loop's time taking checkpoints may use: the next one is due no earlier than the last one took
divided by this (10,000 subscriptions on a busy machine took the loop 1 to 2.5 s a checkpoint, every 2 s in
the lab). A later checkpoint only means a restart reads a little more."""
CHECKPOINT_UNCHANGED_MAX_AGE_S = 60.0
"""A periodic checkpoint is skipped while nothing it would hold looks changed (the checkpoint's fingerprint),
for at most this long: an idle agent at 10,000 subscriptions spent a fifth of its CPU writing the same
checkpoint every few seconds. The fingerprint may miss a change (a batch's size learned): a checkpoint older
than the state is what a crash between two checkpoints leaves anyway, and this bounds its age."""
REWIND_SETTLE_S = 30.0
"""After the agent rewound a cursor itself (following a newer generation), backward moves down to where it
rewound it are its own for this long (a report taken before the rewind may arrive after it)."""
MAX_UNOBSERVED = 20000

HELD_ACKED_S = 60.0
"""How long the feed's ``acked`` blocks for a subscription the agent does not track yet (its namespace not
discovered yet: passes every ``discover_interval_s``, 10 s) are kept for it; also at most MAX_UNOBSERVED
subscriptions' blocks. A block dropped is a set of acknowledgements never claimed: re-delivery after a
failover."""

MAX_WAITING_CLAIMS = 10_000
"""Claims about a life of a region that the region has not announced yet, kept until it does (a region
announces itself at least once a resync interval); past this many the oldest are dropped, and their senders'
next resync says them again."""
STEP_BUDGET_S = 0.5
"""The wall seconds a round's step may work before it leaves the rest for its next turn, resumed where it
stopped (the index, receive, feed and poll steps; ``Now.since``, so never where a round's time stands still):
a round then has a bounded length, and what waits coalesces per subscription or topic (a newer report
replaces an older one, a poll reads a topic's cursors whole). Beside a CPU hog at 10,000 subscriptions
unbounded steps made rounds of 20-95 s, and control messages waited behind them (issue 46.4, records 240,
241)."""
CONTROL_EVERY_S = 0.2
"""Control messages waiting are taken between a round's steps once this long has passed since they were last
taken, and during the pause the CPU budget puts after a costly round: not once or twice a round only."""
POLLS_AT_ONCE = 16
"""Topics whose cursors are polled at once (two calls for each of the admin pool's 8 workers) before the poll
step looks at its budget."""
