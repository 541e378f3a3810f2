package io.geosync.plugin.common;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

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

    public AckFeed(int maxTracked) {
        if (maxTracked < 1) {
            throw new IllegalArgumentException("maxTracked must be positive");
        }
        this.maxTracked = maxTracked;
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
