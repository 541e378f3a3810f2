package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class AckedPositionsTest {
    private static AckedPositions fresh(int maxItems) {
        return new AckedPositions("t", "s", maxItems, new AckedPositions.Budget(1_000_000));
    }

    /** Everything held, handed over once (no reader before). */
    private static Map<String, Object> all(AckedPositions p) {
        return p.take(-1, 1, false);
    }

    @Test
    void consecutiveEntriesMergeIntoOneRangeAndLedgersStaySeparate() {
        AckedPositions p = fresh(100);
        for (long e : new long[] {3, 5, 4, 9, 2}) {
            p.entry(12, e);
        }
        p.entry(13, 0);
        p.entry(11, 7);
        Map<String, Object> w = all(p);
        assertEquals("[(11:6..11:7],(12:1..12:5],(12:8..12:9],(13:-1..13:0]]", w.get("ranges"));
        assertNull(w.get("cumulative"));
        assertEquals(List.of(), w.get("batches"));
        assertEquals(false, w.get("overflowed"));
        assertEquals("t", w.get("topic"));
    }

    @Test
    void batchIndexAcksAreAndedAndAWholeBatchBecomesAnEntry() {
        AckedPositions p = fresh(100);
        p.batch(12, 8, PluginApi.ackSet(10, List.of(0, 1)));
        p.batch(12, 8, PluginApi.ackSet(10, List.of(5)));
        p.batch(12, 9, PluginApi.ackSet(3, List.of(0, 1)));
        p.batch(12, 9, PluginApi.ackSet(3, List.of(2)));
        Map<String, Object> w = all(p);
        assertEquals("[(12:8..12:9]]", w.get("ranges"));
        assertEquals(List.of(Map.of("position", "12:8", "unacked",
                Stream.of(2, 3, 4, 6, 7, 8, 9).map(BigInteger::valueOf).toList())), w.get("batches"));
    }

    @Test
    void aWholeEntryAckDropsItsPartialState() {
        AckedPositions p = fresh(100);
        p.batch(12, 8, PluginApi.ackSet(10, List.of(0)));
        p.entry(12, 8);
        Map<String, Object> w = all(p);
        assertEquals("[(12:7..12:8]]", w.get("ranges"));
        assertEquals(List.of(), w.get("batches"));
    }

    @Test
    void cumulativeAcksCoverWhatIsBelowAndABatchIndexStopsBeforeItsEntry() {
        AckedPositions p = fresh(100);
        p.entry(12, 2);
        p.entry(12, 6);
        p.entry(12, 7);
        p.batch(12, 3, PluginApi.ackSet(4, List.of(0)));
        p.cumulative(12, 6, PluginApi.ackSet(4, List.of(0, 1)));   // indexes 0, 1 of 12:6, all below it
        Map<String, Object> w = all(p);
        assertEquals("12:5", w.get("cumulative"));
        assertEquals("[(12:5..12:7]]", w.get("ranges"), "12:6 was acknowledged whole before; 12:2 is covered");
        assertEquals(List.of(), w.get("batches"));
        AckedPositions q = fresh(100);
        q.cumulative(12, 0, PluginApi.ackSet(4, List.of(0)));
        q.cumulative(11, 5, null);   // lower: ignored
        Map<String, Object> v = all(q);
        assertEquals("12:-1", v.get("cumulative"));
        assertEquals(List.of(Map.of("position", "12:0", "unacked",
                Stream.of(1, 2, 3).map(BigInteger::valueOf).toList())), v.get("batches"));
        q.cumulative(12, 4, null);
        Map<String, Object> after = q.take(1, 2, true);
        assertEquals("12:4", after.get("cumulative"));
        assertEquals(List.of(), after.get("batches"));
    }

    @Test
    void pastTheBoundItOverflowsAndKeepsOnlyASubset() {
        AckedPositions p = fresh(3);
        for (long e = 0; e < 20; e += 2) {
            p.entry(12, e);   // ten separate entries: three are kept
        }
        p.entry(12, 1);        // merges two held ones: still kept
        Map<String, Object> w = all(p);
        assertEquals(true, w.get("overflowed"));
        assertEquals("[(12:-1..12:2],(12:3..12:4]]", w.get("ranges"));
    }

    @Test
    void aSharedBudgetOverflowsTheSubscriptionThatNeedsOneMore() {
        AckedPositions.Budget budget = new AckedPositions.Budget(2);
        AckedPositions a = new AckedPositions("t", "a", 100, budget);
        AckedPositions b = new AckedPositions("t", "b", 100, budget);
        a.entry(1, 0);
        a.entry(1, 5);
        b.entry(1, 0);
        assertEquals(true, all(b).get("overflowed"));
        assertEquals(false, all(a).get("overflowed"));
        assertEquals(2, budget.used());
        a.take(1, 2, true);   // confirmed: a's items go back
        assertEquals(0, budget.used());
    }

    @Test
    void handedOverUntilAReadConfirmsTheAnswerThatCarriedIt() {
        AckedPositions p = fresh(100);
        p.entry(1, 1);
        Map<String, Object> first = p.take(0, 10, true);        // answer seq 10 carries 1:1
        assertEquals("[(1:0..1:1]]", first.get("ranges"));
        p.entry(1, 5);
        Map<String, Object> lost = p.take(0, 12, true);         // the reader never got answer 10
        assertEquals("[(1:0..1:1],(1:4..1:5]]", lost.get("ranges"));
        assertEquals("[(1:0..1:1],(1:4..1:5]]", p.take(10, 13, false).get("ranges"), "another epoch: nothing confirmed");
        Map<String, Object> next = p.take(12, 14, true);        // answer 12 (and 13) received
        assertNull(next);
        assertTrue(p.retired());
        assertFalse(p.entry(1, 9), "a retired record takes nothing: the feed makes a new one");
    }

    static Stream<Object[]> randomRuns() {
        return Stream.of(new Object[] {1L}, new Object[] {2L}, new Object[] {3L}, new Object[] {4L});
    }

    /** Against a plain model: the entries acknowledged whole, per index for batches of 8. */
    @ParameterizedTest
    @MethodSource("randomRuns")
    void holdsExactlyWhatWasAcknowledgedWhileWithinBounds(long seed) {
        Random r = new Random(seed);
        AckedPositions p = fresh(1_000_000);
        TreeSet<Long> whole = new TreeSet<>();
        java.util.HashMap<Long, java.util.BitSet> partial = new java.util.HashMap<>();
        long cumulative = -1;
        List<Map<String, Object>> answers = new ArrayList<>();
        for (int i = 0; i < 3000; i++) {
            long e = r.nextInt(300);
            switch (r.nextInt(10)) {
                case 0 -> {
                    if (r.nextInt(20) == 0) {
                        p.cumulative(5, e, null);
                        cumulative = Math.max(cumulative, e);
                    }
                }
                case 1, 2 -> {
                    List<Integer> acked = List.of(r.nextInt(8), r.nextInt(8));
                    p.batch(5, e, PluginApi.ackSet(8, acked));
                    java.util.BitSet bits = partial.computeIfAbsent(e, k -> {
                        java.util.BitSet b = new java.util.BitSet();
                        b.set(0, 8);
                        return b;
                    });
                    acked.forEach(bits::clear);
                    if (bits.isEmpty()) {
                        whole.add(e);
                    }
                }
                default -> {
                    p.entry(5, e);
                    whole.add(e);
                }
            }
            if (r.nextInt(500) == 0) {
                answers.add(p.take(-1, i, false));
            }
        }
        Map<String, Object> w = p.take(-1, 9999, false);
        // Expected ranges: the whole entries above the cumulative position, as runs.
        StringBuilder want = new StringBuilder("[");
        long runStart = -2;
        long prev = -2;
        for (long e : whole) {
            if (e <= cumulative) {
                continue;
            }
            if (e != prev + 1) {
                if (runStart >= 0) {
                    want.append(want.length() > 1 ? "," : "").append("(5:").append(runStart - 1).append("..5:")
                            .append(prev).append(']');
                }
                runStart = e;
            }
            prev = e;
        }
        if (runStart >= 0) {
            want.append(want.length() > 1 ? "," : "").append("(5:").append(runStart - 1).append("..5:").append(prev)
                    .append(']');
        }
        want.append(']');
        assertEquals(want.toString(), w.get("ranges"));
        assertEquals(cumulative < 0 ? null : "5:" + cumulative, w.get("cumulative"));
        List<Object> wantBatches = new ArrayList<>();
        long covered = cumulative;
        new TreeSet<>(partial.keySet()).forEach(e -> {
            if (e > covered && !whole.contains(e)) {
                wantBatches.add(Map.of("position", "5:" + e, "unacked",
                        partial.get(e).stream().mapToObj(BigInteger::valueOf).toList()));
            }
        });
        assertEquals(wantBatches, w.get("batches"));
        assertEquals(false, w.get("overflowed"));
    }

    /** Consumers on several IO threads, a reader confirming each answer: every acknowledgement arrives once. */
    @Test
    void concurrentConsumersAndAReaderLoseNothing() throws Exception {
        AckFeed feed = new AckFeed(100, 1_000_000, 10_000_000);
        int threads = 4;
        int perThread = 20_000;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        CountDownLatch done = new CountDownLatch(threads);
        for (int t = 0; t < threads; t++) {
            int offset = t;
            pool.submit(() -> {
                for (int i = 0; i < perThread; i++) {
                    long entry = (long) i * threads + offset;   // interleaved: threads fill each other's holes
                    feed.record("topic", "sub", 0);
                    feed.withAcked("topic", "sub", a -> a.entry(7, entry));
                }
                done.countDown();
            });
        }
        TreeSet<Long> seen = new TreeSet<>();
        long since = 0;
        while (true) {
            boolean finished = done.await(1, TimeUnit.MILLISECONDS);
            long seq = feed.seq();
            for (Map<String, Object> block : feed.takeAcked(since, seq, true)) {
                collect((String) block.get("ranges"), seen);
                assertEquals(false, block.get("overflowed"));
            }
            since = seq;
            if (finished && feed.ackedTracked() == 0) {
                break;
            }
            if (finished) {
                // one more read confirms the last answer and retires the record
                for (Map<String, Object> block : feed.takeAcked(since, feed.seq(), true)) {
                    collect((String) block.get("ranges"), seen);
                }
            }
        }
        pool.shutdown();
        assertEquals(threads * perThread, seen.size());
        assertEquals(0L, seen.first());
        assertEquals((long) threads * perThread - 1, seen.last());
        assertEquals(0, feed.ackedItems());
        assertEquals(0, feed.ackedLost());
    }

    private static void collect(String ranges, TreeSet<Long> into) {
        String body = ranges.substring(1, ranges.length() - 1);
        if (body.isEmpty()) {
            return;
        }
        for (String r : body.split(",")) {
            String[] ends = r.substring(1, r.length() - 1).split("\\.\\.");
            long from = Long.parseLong(ends[0].split(":")[1]) + 1;
            long to = Long.parseLong(ends[1].split(":")[1]);
            for (long e = from; e <= to; e++) {
                into.add(e);
            }
        }
    }

    static Stream<Map<String, Object>> ackedFeeds() throws Exception {
        return Vectors.list(Vectors.load("plugin-api"), "acked_feeds").stream();
    }

    /** The shared vectors: replaying what consumers sent builds the answer the Python reader is tested on. */
    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("ackedFeeds")
    void replayedAcknowledgementsBuildTheSharedVectorsAnswers(Map<String, Object> v) throws Exception {
        Map<String, Object> wire = (Map<String, Object>) v.get("wire");
        AckFeed feed = new AckFeed(100, 100, 1000);
        for (Map<String, Object> ack : (List<Map<String, Object>>) v.get("acks")) {
            PluginApi.Pos at = PluginApi.parsePos((String) ack.get("position")).orElseThrow();
            long[] ackSet = null;
            if (ack.get("ack_set") instanceof List<?> words) {
                ackSet = words.stream().mapToLong(w -> ((BigInteger) w).longValue()).toArray();
            }
            long[] set = ackSet;
            feed.record((String) ack.get("topic"), (String) ack.get("subscription"), 0);
            feed.withAcked((String) ack.get("topic"), (String) ack.get("subscription"), a -> {
                switch ((String) ack.get("op")) {
                    case "entry" -> a.entry(at.ledger(), at.entry());
                    case "batch" -> a.batch(at.ledger(), at.entry(), set);
                    case "cumulative" -> a.cumulative(at.ledger(), at.entry(), set);
                    default -> throw new IllegalArgumentException("unknown op " + ack.get("op"));
                }
            });
        }
        long seq = feed.seq();
        Map<String, Object> built = PluginApi.feed((String) wire.get("epoch"), seq, List.of(),
                feed.takeAcked(0, seq, true), feed.ackedLost());
        assertEquals(new String(Json.canonical(wire), java.nio.charset.StandardCharsets.UTF_8),
                new String(Json.canonical(built), java.nio.charset.StandardCharsets.UTF_8));
    }

    @Test
    void theFeedDropsRecordsPastItsBoundAndCountsTheUndelivered() {
        AckFeed feed = new AckFeed(10, 100, 1000);
        for (int i = 0; i < 25; i++) {
            String sub = "s" + i;
            feed.withAcked("t", sub, a -> a.entry(1, 1));
        }
        assertTrue(feed.ackedTracked() <= 10);
        assertEquals(25 - feed.ackedTracked(), feed.ackedLost());
        assertEquals(feed.ackedTracked(), feed.ackedItems());
    }
}
