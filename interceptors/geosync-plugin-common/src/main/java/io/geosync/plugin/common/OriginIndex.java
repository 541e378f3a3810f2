package io.geosync.plugin.common;

import java.math.BigInteger;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Which region each locally persisted entry came from, per topic, as runs of
 * {@code (local ledger, first entry, count, origin region[, source ledger, source first entry])}: what the
 * broker interceptor records as entries are persisted, so that an agent can name the origin region of
 * replicated entries without producer-name rules or one admin call per entry.
 *
 * <p>The source position is where a replicated entry was stored in its origin region (the replicator's
 * {@code __MSG_PROP_REPL_SOURCE_POSITION} stamp, which the broker parses from the entry metadata). The agent
 * needs it from here for batched entries: its client shows it only each message's own properties, and the
 * stamp is not among them. A run without a source ({@code -1, -1}) is a local run or a replicated one whose
 * stamp the broker did not show.
 *
 * <p>Invariants:
 * <ul>
 *   <li>a run claims only entries that were recorded with its origin and, if it has a source, only entries
 *       recorded with exactly the source position it implies ({@code sourceFirst + (entry - first)} in
 *       {@code sourceLedger}); anything not inside a run is unknown (never guessed), so a gap (broker
 *       restart, topic moved, eviction) only costs the reader a fallback;
 *   <li>a source is both non-negative or absent ({@code -1, -1}); a half-known source counts as absent;
 *   <li>memory is bounded: at most {@code maxTopics} topics (the least recently written is evicted) and
 *       {@code maxRunsPerTopic} runs per topic (the oldest run is dropped and counted);
 *   <li>an entry extends the last run only if it is the next entry of the same local ledger with the same
 *       origin and either both have no source or its source is the next entry of the run's source ledger;
 *       so a topic written from one region costs one run per ledger, a replicated stream one run per
 *       (local ledger, source ledger) pair plus one per gap in the source entries, and a run with a source
 *       never merges with one without.
 * </ul>
 * Thread-safe: each topic's runs are guarded by their own lock; the hot path takes no global lock.
 */
public final class OriginIndex {
    public static final int WIRE_VERSION = 2;

    private final int maxTopics;
    private final int maxRunsPerTopic;
    private final ConcurrentHashMap<String, TopicRuns> topics = new ConcurrentHashMap<>();
    private final AtomicLong recorded = new AtomicLong();
    private final AtomicLong droppedRuns = new AtomicLong();
    private final AtomicLong evictedTopics = new AtomicLong();

    public OriginIndex(int maxTopics, int maxRunsPerTopic) {
        if (maxTopics < 1 || maxRunsPerTopic < 1) {
            throw new IllegalArgumentException("limits must be positive");
        }
        this.maxTopics = maxTopics;
        this.maxRunsPerTopic = maxRunsPerTopic;
    }

    /**
     * One run: entries {@code first .. first + count - 1} of {@code ledger} came from {@code origin}, and were
     * entries {@code sourceFirst ..} of {@code sourceLedger} there (both {@code -1} when not known).
     */
    public record Run(long ledger, long first, long count, String origin, long sourceLedger, long sourceFirst) {
        public Run(long ledger, long first, long count, String origin) {
            this(ledger, first, count, origin, -1, -1);
        }

        public long last() {
            return first + count - 1;
        }

        public boolean hasSource() {
            return sourceLedger >= 0;
        }
    }

    private static final class TopicRuns {
        // {ledger, first, count, sourceLedger, sourceFirst}, the source -1, -1 when unknown
        private final ArrayDeque<long[]> runs = new ArrayDeque<>();
        private final ArrayDeque<String> origins = new ArrayDeque<>();
        private volatile long lastWrite;
        private long dropped;
    }

    /**
     * A source-position stamp {@code "L:E"} as two non-negative longs, or null for anything else (stamps are
     * message properties: untrusted text).
     */
    public static long[] parseStamp(String stamp) {
        if (stamp == null) {
            return null;
        }
        int colon = stamp.indexOf(':');
        if (colon <= 0 || colon != stamp.lastIndexOf(':') || colon == stamp.length() - 1) {
            return null;
        }
        try {
            long ledger = Long.parseLong(stamp.substring(0, colon));
            long entry = Long.parseLong(stamp.substring(colon + 1));
            return ledger >= 0 && entry >= 0 ? new long[] {ledger, entry} : null;
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** Record that entry {@code ledger:entry} of {@code topic} came from {@code origin}, source unknown. */
    public void record(String topic, long ledger, long entry, String origin, long nowNanos) {
        record(topic, ledger, entry, origin, -1, -1, nowNanos);
    }

    /**
     * Record that entry {@code ledger:entry} of {@code topic} came from {@code origin}, where it was entry
     * {@code sourceLedger:sourceEntry} (pass {@code -1, -1} when not known; a negative half makes both unknown).
     */
    public void record(String topic, long ledger, long entry, String origin, long sourceLedger, long sourceEntry,
                       long nowNanos) {
        if (topic == null || origin == null || ledger < 0 || entry < 0) {
            return;
        }
        if (sourceLedger < 0 || sourceEntry < 0) {
            sourceLedger = -1;
            sourceEntry = -1;
        }
        TopicRuns t = topics.get(topic);
        if (t == null) {
            t = topics.computeIfAbsent(topic, k -> new TopicRuns());
            if (topics.size() > maxTopics) {
                evictOldest(topic);
            }
        }
        synchronized (t) {
            t.lastWrite = nowNanos;
            long[] last = t.runs.peekLast();
            if (last != null && continues(last, ledger, entry, sourceLedger, sourceEntry)
                    && t.origins.peekLast().equals(origin)) {
                last[2]++;
            } else {
                t.runs.addLast(new long[] {ledger, entry, 1, sourceLedger, sourceEntry});
                t.origins.addLast(origin);
                if (t.runs.size() > maxRunsPerTopic) {
                    t.runs.pollFirst();
                    t.origins.pollFirst();
                    t.dropped++;
                    droppedRuns.incrementAndGet();
                }
            }
        }
        recorded.incrementAndGet();
    }

    /** Whether an entry is the next one after {@code run} on the local side and, if any, the source side. */
    private static boolean continues(long[] run, long ledger, long entry, long sourceLedger, long sourceEntry) {
        if (run[0] != ledger || run[1] + run[2] != entry) {
            return false;
        }
        if (run[3] < 0 || sourceLedger < 0) {
            return run[3] < 0 && sourceLedger < 0;
        }
        return run[3] == sourceLedger && run[4] + run[2] == sourceEntry;
    }

    private void evictOldest(String keep) {
        String oldest = null;
        long oldestWrite = Long.MAX_VALUE;
        for (Map.Entry<String, TopicRuns> e : topics.entrySet()) {
            if (!e.getKey().equals(keep) && e.getValue().lastWrite < oldestWrite) {
                oldestWrite = e.getValue().lastWrite;
                oldest = e.getKey();
            }
        }
        if (oldest != null && topics.remove(oldest) != null) {
            evictedTopics.incrementAndGet();
        }
    }

    /** The runs of {@code topic} that end at or after {@code fromLedger:fromEntry}, oldest first. */
    public List<Run> runs(String topic, long fromLedger, long fromEntry) {
        TopicRuns t = topics.get(topic);
        List<Run> out = new ArrayList<>();
        if (t == null) {
            return out;
        }
        synchronized (t) {
            Iterator<String> origins = t.origins.iterator();
            for (long[] r : t.runs) {
                String origin = origins.next();
                long last = r[1] + r[2] - 1;
                if (r[0] > fromLedger || (r[0] == fromLedger && last >= fromEntry)) {
                    out.add(new Run(r[0], r[1], r[2], origin, r[3], r[4]));
                }
            }
        }
        return out;
    }

    public List<Run> runs(String topic) {
        return runs(topic, -1, -1);
    }

    /**
     * The wire form served to agents (version {@link #WIRE_VERSION}): each run is {@code [ledger, first, count,
     * origin]} without a source and {@code [ledger, first, count, origin, sourceLedger, sourceFirst]} with one,
     * so readers of version 1 that look at the first four items keep working.
     */
    public Map<String, Object> toJson(String region, String topic, long fromLedger, long fromEntry) {
        List<Object> runs = new ArrayList<>();
        for (Run r : runs(topic, fromLedger, fromEntry)) {
            List<Object> run = new ArrayList<>(List.of(BigInteger.valueOf(r.ledger()),
                    BigInteger.valueOf(r.first()), BigInteger.valueOf(r.count()), r.origin()));
            if (r.hasSource()) {
                run.add(BigInteger.valueOf(r.sourceLedger()));
                run.add(BigInteger.valueOf(r.sourceFirst()));
            }
            runs.add(run);
        }
        TopicRuns t = topics.get(topic);
        long dropped;
        if (t == null) {
            dropped = 0;
        } else {
            synchronized (t) {
                dropped = t.dropped;
            }
        }
        Map<String, Object> out = new HashMap<>();
        out.put("version", BigInteger.valueOf(WIRE_VERSION));
        out.put("region", region);
        out.put("topic", topic);
        out.put("runs", runs);
        out.put("dropped_runs", BigInteger.valueOf(dropped));
        return out;
    }

    public Map<String, Object> stats() {
        long runs = 0;
        for (TopicRuns t : topics.values()) {
            synchronized (t) {
                runs += t.runs.size();
            }
        }
        Map<String, Object> out = new HashMap<>();
        out.put("topics", BigInteger.valueOf(topics.size()));
        out.put("runs", BigInteger.valueOf(runs));
        out.put("entries_recorded", BigInteger.valueOf(recorded.get()));
        out.put("runs_dropped", BigInteger.valueOf(droppedRuns.get()));
        out.put("topics_evicted", BigInteger.valueOf(evictedTopics.get()));
        out.put("max_topics", BigInteger.valueOf(maxTopics));
        out.put("max_runs_per_topic", BigInteger.valueOf(maxRunsPerTopic));
        return out;
    }
}
