package io.geosync.plugin.common;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What consumers acknowledged on one durable subscription, as ranges: the part of the acknowledgement feed
 * ({@link AckFeed}) that lets an agent claim exactly what consumers acknowledged, and nothing a cursor
 * moved for another reason (creation at Latest, clear-backlog, skip, TTL expiry, reset).
 *
 * <p>It holds three things, each only ever growing until it is handed over:
 * <ul>
 *   <li>{@code ranges}: entries acknowledged whole (individual acknowledgements, and batch entries whose
 *       every index was acknowledged), merged into runs of consecutive entries of one ledger;
 *   <li>{@code batches}: entries with some batch indexes acknowledged, as the AND of the ack sets the
 *       consumers sent (Pulsar's convention: a set bit is an index NOT acknowledged);
 *   <li>{@code cumulative}: the highest position a consumer acknowledged cumulatively (every entry at or
 *       below it; a cumulative acknowledgement of a batch index at {@code L:E} is {@code L:E-1} plus the
 *       ack set at {@code L:E}, as the cursor itself records it).
 * </ul>
 *
 * <p>Bounded: past {@code maxItems} ranges plus batches, nothing that would need a new item is kept (an
 * acknowledgement that extends or falls inside what is held still is) and {@code overflowed} is set: the
 * reader then knows it holds a subset of what consumers acknowledged, never more. Items are also counted
 * in a budget shared by every subscription of the broker ({@code budget}); an exhausted budget overflows
 * the subscription that needed one more item.
 *
 * <p>Delivery: an agent reads the feed with {@code since=S} (the {@code seq} of its previous answer). What
 * was handed over in an answer ({@link #take}) is kept and handed over again in every answer until a read
 * names that answer's {@code seq} or a later one: an answer lost on its way is not a loss of
 * acknowledgements. Thread-safe: every method holds this object's monitor (contended only by consumers
 * of the same subscription acknowledging on different connections, and by the feed's reader).
 */
public final class AckedPositions {
    /** The wire version of the feed's {@code acked} blocks. */
    public static final int WIRE_VERSION = 1;

    private final String topic;
    private final String subscription;
    private final int maxItems;
    private final Budget budget;
    private Block pending;
    private Block sent;
    private long sentSeq = -1;
    private boolean retired;

    /** A count of items shared by many subscriptions; {@link #take()} of one item fails past the limit. */
    public static final class Budget {
        private final long limit;
        private final java.util.concurrent.atomic.AtomicLong used = new java.util.concurrent.atomic.AtomicLong();

        public Budget(long limit) {
            this.limit = limit;
        }

        boolean take() {
            if (used.incrementAndGet() > limit) {
                used.decrementAndGet();
                return false;
            }
            return true;
        }

        void give(long n) {
            if (n > 0) {
                used.addAndGet(-n);
            }
        }

        public long used() {
            return used.get();
        }
    }

    public AckedPositions(String topic, String subscription, int maxItems, Budget budget) {
        if (maxItems < 1) {
            throw new IllegalArgumentException("maxItems must be positive");
        }
        this.topic = topic;
        this.subscription = subscription;
        this.maxItems = maxItems;
        this.budget = budget;
        this.pending = new Block();
    }

    /** Ranges keyed by their first entry (ledger, entry) with their last entry; batches' ack words; cumulative. */
    static final class Block {
        final TreeMap<PluginApi.Pos, Long> ranges = new TreeMap<>();
        final TreeMap<PluginApi.Pos, long[]> batches = new TreeMap<>();
        PluginApi.Pos cumulative;
        boolean overflowed;

        boolean isEmpty() {
            return ranges.isEmpty() && batches.isEmpty() && cumulative == null && !overflowed;
        }

        int items() {
            return ranges.size() + batches.size();
        }

        boolean covered(long ledger, long entry) {
            if (cumulative != null && compare(ledger, entry, cumulative) <= 0) {
                return true;
            }
            Map.Entry<PluginApi.Pos, Long> floor = ranges.floorEntry(new PluginApi.Pos(ledger, entry));
            return floor != null && floor.getKey().ledger() == ledger && floor.getValue() >= entry;
        }
    }

    private static int compare(long ledger, long entry, PluginApi.Pos p) {
        int c = Long.compare(ledger, p.ledger());
        return c != 0 ? c : Long.compare(entry, p.entry());
    }

    // -- recording (the broker's IO threads) -------------------------------------------------------------

    /** A consumer acknowledged the entry {@code ledger:entry} whole. False when this record is retired. */
    public synchronized boolean entry(long ledger, long entry) {
        if (retired) {
            return false;
        }
        addEntry(pending, ledger, entry);
        return true;
    }

    /**
     * A consumer acknowledged some batch indexes of {@code ledger:entry}: {@code ackSet} has a bit set for
     * each index NOT acknowledged. An ack set with no bit set acknowledges the entry whole.
     */
    public synchronized boolean batch(long ledger, long entry, long[] ackSet) {
        if (retired) {
            return false;
        }
        addBatch(pending, ledger, entry, ackSet);
        return true;
    }

    /**
     * A consumer acknowledged cumulatively up to {@code ledger:entry} (whole when {@code ackSet} is null;
     * otherwise every entry before it and the indexes of it that {@code ackSet} clears).
     */
    public synchronized boolean cumulative(long ledger, long entry, long[] ackSet) {
        if (retired) {
            return false;
        }
        if (ackSet == null) {
            addCumulative(pending, new PluginApi.Pos(ledger, entry));
        } else {
            addCumulative(pending, new PluginApi.Pos(ledger, entry - 1));
            addBatch(pending, ledger, entry, ackSet);
        }
        return true;
    }

    private boolean newItem(Block b) {
        if (b.overflowed) {
            return false;
        }
        if (b.items() >= maxItems || !budget.take()) {
            b.overflowed = true;
            return false;
        }
        return true;
    }

    private void addEntry(Block b, long ledger, long entry) {
        addRange(b, ledger, entry, entry);
    }

    /** Entries {@code first..last} (inclusive) of {@code ledger} acknowledged whole. */
    private void addRange(Block b, long ledger, long first, long last) {
        if (ledger < 0 || first < 0 || last < first || last == Long.MAX_VALUE) {
            return;
        }
        PluginApi.Pos cum = b.cumulative;
        if (cum != null && cum.ledger() >= ledger) {
            if (cum.ledger() > ledger || cum.entry() >= last) {
                return;
            }
            first = Math.max(first, cum.entry() + 1);
        }
        var partial = b.batches.subMap(new PluginApi.Pos(ledger, first), true, new PluginApi.Pos(ledger, last), true);
        budget.give(partial.size());
        partial.clear();
        long start = first;
        long end = last;
        int removed = 0;
        Map.Entry<PluginApi.Pos, Long> below = b.ranges.floorEntry(new PluginApi.Pos(ledger, first));
        if (below != null && below.getKey().ledger() == ledger && below.getValue() >= first - 1) {
            if (below.getValue() >= last) {
                return;   // already held
            }
            start = below.getKey().entry();
            b.ranges.remove(below.getKey());
            removed++;
        }
        Map.Entry<PluginApi.Pos, Long> next = b.ranges.ceilingEntry(new PluginApi.Pos(ledger, start));
        while (next != null && next.getKey().ledger() == ledger && next.getKey().entry() <= end + 1) {
            end = Math.max(end, next.getValue());
            b.ranges.remove(next.getKey());
            removed++;
            next = b.ranges.ceilingEntry(new PluginApi.Pos(ledger, start));
        }
        if (removed > 0) {
            budget.give(removed - 1);   // the merged range reuses one of the items it replaces
        } else if (!newItem(b)) {
            return;   // no room: overflowed, the block holds a subset
        }
        b.ranges.put(new PluginApi.Pos(ledger, start), end);
    }

    private void addBatch(Block b, long ledger, long entry, long[] ackSet) {
        if (ledger < 0 || entry < 0 || b.covered(ledger, entry)) {
            return;
        }
        PluginApi.Pos at = new PluginApi.Pos(ledger, entry);
        long[] words = b.batches.get(at);
        if (words == null) {
            if (allClear(ackSet, ackSet.length)) {
                addEntry(b, ledger, entry);
                return;
            }
            if (newItem(b)) {
                b.batches.put(at, ackSet.clone());
            }
            return;
        }
        // AND, as the cursor does: a word the newer ack set lacks is cleared (every index in it acknowledged).
        int n = Math.min(words.length, ackSet.length);
        for (int i = 0; i < words.length; i++) {
            words[i] = i < n ? words[i] & ackSet[i] : 0L;
        }
        if (allClear(words, words.length)) {
            addEntry(b, ledger, entry);   // removes the partial state and gives its item back
        }
    }

    private static boolean allClear(long[] words, int n) {
        for (int i = 0; i < n; i++) {
            if (words[i] != 0L) {
                return false;
            }
        }
        return true;
    }

    private void addCumulative(Block b, PluginApi.Pos to) {
        if (to.ledger() < 0 || to.entry() < -1) {
            return;
        }
        if (b.cumulative != null && to.compareTo(b.cumulative) <= 0) {
            return;
        }
        b.cumulative = to;
        // Drop what the cumulative acknowledgement now covers; trim a range it cuts.
        while (!b.ranges.isEmpty() && b.ranges.firstKey().compareTo(to) <= 0) {
            Map.Entry<PluginApi.Pos, Long> first = b.ranges.pollFirstEntry();
            PluginApi.Pos start = first.getKey();
            if (start.ledger() == to.ledger() && first.getValue() > to.entry()) {
                b.ranges.put(new PluginApi.Pos(start.ledger(), to.entry() + 1), first.getValue());
                break;
            }
            budget.give(1);
        }
        while (!b.batches.isEmpty() && b.batches.firstKey().compareTo(to) <= 0) {
            b.batches.pollFirstEntry();
            budget.give(1);
        }
    }

    // -- handing over (the feed's reader) ----------------------------------------------------------------

    /**
     * The acknowledgements to hand over in the answer with sequence number {@code seq}, to a reader whose
     * previous answer had {@code since} ({@code confirmed}: the reader named an answer of this broker's
     * run, so what that answer and earlier ones carried is dropped). Null when there is nothing to hand
     * over; then, when nothing is held at all, the record is retired (later acknowledgements go to a new
     * record) and {@link #retired()} says so.
     */
    public synchronized Map<String, Object> take(long since, long seq, boolean confirmed) {
        if (sent != null && confirmed && sentSeq <= since) {
            budget.give(sent.items());
            sent = null;
        }
        if (!pending.isEmpty()) {
            if (sent == null) {
                sent = pending;
            } else {
                merge(sent, pending);
            }
            pending = new Block();
            sentSeq = seq;
        }
        if (sent == null) {
            retired = true;
            return null;
        }
        Map<String, Object> out = wire(sent);
        out.put("topic", topic);
        out.put("subscription", subscription);
        return out;
    }

    public String topic() {
        return topic;
    }

    public String subscription() {
        return subscription;
    }

    /** Whether this record is retired: acknowledgements must go to a new one. */
    public synchronized boolean retired() {
        return retired;
    }

    /** Retire it, whatever it holds; returns whether it held acknowledgements not yet confirmed delivered. */
    public synchronized boolean evict() {
        retired = true;
        boolean held = !pending.isEmpty() || sent != null;
        budget.give(pending.items() + (sent == null ? 0 : sent.items()));
        pending = new Block();
        sent = null;
        return held;
    }

    private void merge(Block into, Block from) {
        budget.give(from.items());   // re-added item by item below
        into.overflowed |= from.overflowed;
        if (from.cumulative != null) {
            addCumulative(into, from.cumulative);
        }
        for (Map.Entry<PluginApi.Pos, Long> r : from.ranges.entrySet()) {
            addRange(into, r.getKey().ledger(), r.getKey().entry(), r.getValue());
        }
        for (Map.Entry<PluginApi.Pos, long[]> batch : from.batches.entrySet()) {
            addBatch(into, batch.getKey().ledger(), batch.getKey().entry(), batch.getValue());
        }
    }

    /** The wire form of a block (see {@link PluginApi#feed(String, long, List, List, long)}). */
    static Map<String, Object> wire(Block b) {
        StringBuilder ranges = new StringBuilder("[");
        for (Map.Entry<PluginApi.Pos, Long> r : b.ranges.entrySet()) {
            if (ranges.length() > 1) {
                ranges.append(',');
            }
            PluginApi.Pos start = r.getKey();
            ranges.append('(').append(start.ledger()).append(':').append(start.entry() - 1).append("..")
                    .append(start.ledger()).append(':').append(r.getValue()).append(']');
        }
        ranges.append(']');
        List<Object> batches = new ArrayList<>();
        for (Map.Entry<PluginApi.Pos, long[]> e : b.batches.entrySet()) {
            List<Object> unacked = new ArrayList<>();
            for (int i : PluginApi.unacked(e.getValue())) {
                unacked.add(BigInteger.valueOf(i));
            }
            Map<String, Object> one = new HashMap<>();
            one.put("position", e.getKey().toString());
            one.put("unacked", unacked);
            batches.add(one);
        }
        Map<String, Object> out = new HashMap<>();
        out.put("ranges", ranges.toString());
        out.put("cumulative", b.cumulative == null ? null : b.cumulative.toString());
        out.put("batches", batches);
        out.put("overflowed", b.overflowed);
        return out;
    }

    @Override
    public synchronized String toString() {
        return "AckedPositions{pending=" + wire(pending) + ", sent=" + (sent == null ? null : wire(sent))
                + ", sentSeq=" + sentSeq + ", retired=" + retired + "}";
    }
}
