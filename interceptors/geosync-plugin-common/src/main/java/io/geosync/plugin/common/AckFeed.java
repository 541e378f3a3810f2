package io.geosync.plugin.common;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * Which subscriptions consumers acknowledged on, and when: the change feed an agent reads instead of
 * polling every topic's cursors.
 *
 * <p>The broker interceptor records {@code (topic, subscription)} after each acknowledgement a consumer sent
 * has been applied to the cursor; an agent asks for what changed since the sequence number of its previous
 * read, and reads the cursors of just those subscriptions.
 *
 * <p>Invariants:
 * <ul>
 *   <li>sequence numbers only grow; a subscription acknowledged after a read with sequence {@code s} is
 *       reported by {@code since(s, ...)};
 *   <li>a subscription acknowledged within the last {@code settleNanos} is reported again even if the caller
 *       already saw its sequence number, so a cursor update that completes just after a read is never
 *       missed (the caller compares states and ignores repeats);
 *   <li>memory is bounded: past {@code maxTracked} subscriptions, those quiet the longest are forgotten and
 *       {@link #forgotten()} counts them; a caller that needs every cursor polls them anyway at a slower
 *       pace.
 * </ul>
 * Thread-safe; the recording path takes no lock.
 *
 * <p>Beside which subscriptions were acknowledged, it keeps what consumers acknowledged on each ({@link
 * AckedPositions}, through {@link #withAcked}): ranges, batch indexes and the highest cumulative position,
 * handed over by {@link #takeAcked} until a read confirms them. At most {@code maxTracked} subscriptions
 * hold such records; past it, records are dropped and {@link #ackedLost()} counts those that held
 * acknowledgements not yet confirmed delivered (a reader that sees it grow knows its acknowledged sets
 * since its previous read may be incomplete). Recording there holds the subscription's record monitor.
 */
public final class AckFeed {
    /** One subscription's latest acknowledgement: its sequence number and {@code System.nanoTime()}. */
    public record Mark(String topic, String subscription, long seq, long nanos) {
    }

    private final int maxTracked;
    private final ConcurrentHashMap<String, Mark> marks = new ConcurrentHashMap<>();
    private final AtomicLong seq = new AtomicLong();
    private final AtomicLong recorded = new AtomicLong();
    private final AtomicLong forgotten = new AtomicLong();

    private final ConcurrentHashMap<String, AckedPositions> acked = new ConcurrentHashMap<>();
    private final int maxItemsPerSubscription;
    private final AckedPositions.Budget budget;
    private final AtomicLong ackedLost = new AtomicLong();

    public AckFeed(int maxTracked) {
        this(maxTracked, 10_000, 1_000_000L);
    }

    /**
     * {@code maxItemsPerSubscription}: ranges plus partly acknowledged batches one subscription's record
     * holds before it overflows; {@code maxItems}: the same over every subscription.
     */
    public AckFeed(int maxTracked, int maxItemsPerSubscription, long maxItems) {
        if (maxTracked < 1 || maxItemsPerSubscription < 1 || maxItems < 1) {
            throw new IllegalArgumentException("maxTracked, maxItemsPerSubscription and maxItems must be positive");
        }
        this.maxTracked = maxTracked;
        this.maxItemsPerSubscription = maxItemsPerSubscription;
        this.budget = new AckedPositions.Budget(maxItems);
    }

    /**
     * Run {@code record} on the subscription's acknowledged positions, holding their monitor (so one
     * acknowledgement command's positions land in one record, never half in a record being retired).
     */
    public void withAcked(String topic, String subscription, Consumer<AckedPositions> record) {
        String key = topic + '\u0000' + subscription;
        for (;;) {
            AckedPositions p = acked.get(key);
            if (p == null) {
                p = acked.computeIfAbsent(key, k -> new AckedPositions(topic, subscription, maxItemsPerSubscription,
                        budget));
            }
            synchronized (p) {
                if (!p.retired()) {
                    record.accept(p);
                    break;
                }
            }
            acked.remove(key, p);
        }
        if (acked.size() > maxTracked) {
            trimAcked();
        }
    }

    private synchronized void trimAcked() {
        int excess = acked.size() - maxTracked;
        if (excess <= 0) {
            return;
        }
        int drop = Math.max(excess, maxTracked / 10);
        Iterator<Map.Entry<String, AckedPositions>> it = acked.entrySet().iterator();
        while (drop > 0 && it.hasNext()) {
            AckedPositions p = it.next().getValue();
            it.remove();
            if (p.evict()) {
                ackedLost.incrementAndGet();
            }
            drop--;
        }
    }

    /**
     * The acknowledged sets to hand over in the answer with sequence number {@code seq}. {@code confirmed}:
     * the reader's {@code since} names an answer of this broker's run (its epoch), so what that answer
     * carried is dropped; pass false when the reader's epoch is not this one (then {@code since} means
     * nothing here and everything held is handed over again).
     */
    public List<Map<String, Object>> takeAcked(long since, long seq, boolean confirmed) {
        List<Map<String, Object>> out = new ArrayList<>();
        boolean valid = confirmed && since >= 0 && since <= seq;
        for (Map.Entry<String, AckedPositions> e : acked.entrySet()) {
            AckedPositions p = e.getValue();
            Map<String, Object> block = p.take(since, seq, valid);
            if (block != null) {
                out.add(block);
            } else if (p.retired()) {
                acked.remove(e.getKey(), p);
            }
        }
        out.sort(Comparator.comparing((Map<String, Object> m) -> (String) m.get("topic"))
                .thenComparing(m -> (String) m.get("subscription")));
        return out;
    }

    /** Records dropped (past {@code maxTracked}) while holding acknowledgements not confirmed delivered. */
    public long ackedLost() {
        return ackedLost.get();
    }

    /** Subscriptions with a record of acknowledged positions. */
    public int ackedTracked() {
        return acked.size();
    }

    /** Ranges plus partly acknowledged batches held over every subscription. */
    public long ackedItems() {
        return budget.used();
    }

    public void record(String topic, String subscription, long nanos) {
        long n = seq.incrementAndGet();
        marks.put(topic + '\u0000' + subscription, new Mark(topic, subscription, n, nanos));
        recorded.incrementAndGet();
        if (marks.size() > maxTracked) {
            trim();
        }
    }

    private synchronized void trim() {
        int excess = marks.size() - maxTracked;
        if (excess <= 0) {
            return;
        }
        // Forget the quietest tenth at once, so a burst of new subscriptions does not sort on every record.
        int drop = Math.max(excess, maxTracked / 10);
        List<Mark> oldest = new ArrayList<>(marks.values());
        oldest.sort(Comparator.comparingLong(Mark::seq));
        for (Mark m : oldest.subList(0, Math.min(drop, oldest.size()))) {
            if (marks.remove(m.topic() + '\u0000' + m.subscription(), m)) {
                forgotten.incrementAndGet();
            }
        }
    }

    /** The highest sequence number handed out so far. */
    public long seq() {
        return seq.get();
    }

    /** Subscriptions acknowledged after {@code since}, or within {@code settleNanos} before {@code nowNanos}. */
    public List<Mark> since(long since, long nowNanos, long settleNanos) {
        List<Mark> out = new ArrayList<>();
        for (Mark m : marks.values()) {
            if (m.seq() > since || nowNanos - m.nanos() <= settleNanos) {
                out.add(m);
            }
        }
        out.sort(Comparator.comparingLong(Mark::seq));
        return out;
    }

    public int tracked() {
        return marks.size();
    }

    public long recorded() {
        return recorded.get();
    }

    public long forgotten() {
        return forgotten.get();
    }
}
