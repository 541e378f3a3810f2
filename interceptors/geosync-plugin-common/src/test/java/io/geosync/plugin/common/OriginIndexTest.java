package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.geosync.plugin.common.OriginIndex.Run;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class OriginIndexTest {
    @Test
    void consecutiveEntriesOfOneOriginShareARun() {
        OriginIndex index = new OriginIndex(10, 10);
        for (int e = 0; e < 5; e++) {
            index.record("t", 7, e, "a", e);
        }
        index.record("t", 7, 5, "b", 5);
        index.record("t", 7, 6, "b", 6);
        index.record("t", 7, 8, "b", 8);        // a gap: entry 7 was never seen here
        index.record("t", 9, 0, "b", 9);        // a new ledger
        assertEquals(List.of(new Run(7, 0, 5, "a"), new Run(7, 5, 2, "b"), new Run(7, 8, 1, "b"),
                new Run(9, 0, 1, "b")), index.runs("t"));
        assertEquals(List.of(new Run(7, 8, 1, "b"), new Run(9, 0, 1, "b")), index.runs("t", 7, 7));
    }

    @Test
    void everyRecordedEntryIsFoundWithItsOriginAndNothingElseIsClaimed() {
        Random random = new Random(1);
        OriginIndex index = new OriginIndex(10, 100_000);
        Map<Long, String> truth = new java.util.HashMap<>();
        long entry = 0;
        for (int i = 0; i < 5000; i++) {
            entry += 1 + (random.nextInt(10) == 0 ? random.nextInt(3) : 0);
            String origin = List.of("a", "b", "c").get(random.nextInt(random.nextBoolean() ? 1 : 3));
            truth.put(entry, origin);
            index.record("t", 3, entry, origin, i);
        }
        long claimed = 0;
        for (Run r : index.runs("t")) {
            for (long e = r.first(); e <= r.last(); e++) {
                assertEquals(truth.get(e), r.origin());
                claimed++;
            }
        }
        assertEquals(truth.size(), claimed);
    }

    @Test
    void memoryIsBounded() {
        OriginIndex index = new OriginIndex(3, 4);
        for (int e = 0; e < 20; e++) {
            index.record("t", 1, e, e % 2 == 0 ? "a" : "b", e);
        }
        assertEquals(4, index.runs("t").size());
        assertEquals(new Run(1, 16, 1, "a"), index.runs("t").get(0));
        for (int t = 0; t < 10; t++) {
            index.record("topic-" + t, 1, 0, "a", 100 + t);
        }
        Map<String, Object> stats = index.stats();
        assertEquals(BigInteger.valueOf(3), stats.get("topics"));
        assertEquals(BigInteger.valueOf(8), stats.get("topics_evicted"));
        assertEquals(1, index.runs("topic-9").size());
        assertTrue(index.runs("t").isEmpty());
    }

    @Test
    void garbageIsIgnored() {
        OriginIndex index = new OriginIndex(3, 4);
        index.record(null, 1, 1, "a", 0);
        index.record("t", -1, 1, "a", 0);
        index.record("t", 1, -1, "a", 0);
        index.record("t", 1, 1, null, 0);
        assertTrue(index.runs("t").isEmpty());
    }

    @Test
    void concurrentWritersLoseNothing() throws Exception {
        OriginIndex index = new OriginIndex(100, 1_000_000);
        ExecutorService pool = Executors.newFixedThreadPool(4);
        List<java.util.concurrent.Future<?>> done = new ArrayList<>();
        for (int w = 0; w < 4; w++) {
            String topic = "t" + w;
            done.add(pool.submit(() -> {
                for (int e = 0; e < 10_000; e++) {
                    index.record(topic, 1, e, e % 100 < 50 ? "a" : "b", e);
                }
            }));
        }
        for (var f : done) {
            f.get();
        }
        pool.shutdown();
        assertTrue(pool.awaitTermination(5, TimeUnit.SECONDS));
        assertEquals(BigInteger.valueOf(40_000), index.stats().get("entries_recorded"));
        assertEquals(200, index.runs("t0").size());
    }

    @Test
    void wireShape() throws Exception {
        OriginIndex index = new OriginIndex(3, 4);
        index.record("persistent://geo/ab/x", 12, 0, "b", 0);
        index.record("persistent://geo/ab/x", 12, 1, "b", 0);
        assertEquals("{\"dropped_runs\":0,\"region\":\"a\",\"runs\":[[12,0,2,\"b\"]],"
                + "\"topic\":\"persistent://geo/ab/x\",\"version\":2}",
                new String(Json.canonical(index.toJson("a", "persistent://geo/ab/x", -1, -1)),
                        java.nio.charset.StandardCharsets.UTF_8));
    }

    @Test
    void sourcedRunsMergeOnlyWhenBothSidesAreConsecutive() {
        OriginIndex index = new OriginIndex(10, 100);
        for (int e = 0; e < 4; e++) {
            index.record("t", 7, e, "b", 30, 100 + e, e);
        }
        index.record("t", 7, 4, "b", 30, 105, 4);     // a gap in the source entries: a new run
        index.record("t", 7, 5, "b", 30, 106, 5);
        index.record("t", 7, 6, "b", 31, 0, 6);       // a new source ledger: a new run
        index.record("t", 7, 8, "b", 31, 1, 8);       // a gap in the local entries: a new run
        index.record("t", 7, 9, "c", 31, 2, 9);       // another origin: a new run
        assertEquals(List.of(new Run(7, 0, 4, "b", 30, 100), new Run(7, 4, 2, "b", 30, 105),
                new Run(7, 6, 1, "b", 31, 0), new Run(7, 8, 1, "b", 31, 1), new Run(7, 9, 1, "c", 31, 2)),
                index.runs("t"));
    }

    @Test
    void runsWithAndWithoutSourceNeverMerge() {
        OriginIndex index = new OriginIndex(10, 100);
        index.record("t", 7, 0, "a", 0);              // local
        index.record("t", 7, 1, "a", 5, 1, 1);        // sourced (same region name: still not merged)
        index.record("t", 7, 2, "b", 0);              // replicated, source unknown
        index.record("t", 7, 3, "b", 5, 3, 3);        // replicated, source known
        index.record("t", 7, 4, "b", -1, 4, 4);       // half a source is no source
        index.record("t", 7, 5, "b", 6, -1, 5);
        assertEquals(List.of(new Run(7, 0, 1, "a"), new Run(7, 1, 1, "a", 5, 1), new Run(7, 2, 1, "b"),
                new Run(7, 3, 1, "b", 5, 3), new Run(7, 4, 2, "b")), index.runs("t"));
        assertTrue(index.runs("t").get(4).sourceLedger() == -1 && index.runs("t").get(4).sourceFirst() == -1);
    }

    @Test
    void everySourcedEntryIsFoundAtItsSourcePositionAndNothingElseIsClaimed() {
        Random random = new Random(2);
        OriginIndex index = new OriginIndex(10, 100_000);
        Map<Long, long[]> truth = new java.util.HashMap<>();   // local entry -> {source ledger, source entry}
        long entry = 0;
        long sourceLedger = 40;
        long sourceEntry = 0;
        for (int i = 0; i < 5000; i++) {
            entry += 1 + (random.nextInt(10) == 0 ? random.nextInt(3) : 0);
            sourceEntry += 1 + (random.nextInt(10) == 0 ? random.nextInt(3) : 0);
            if (random.nextInt(200) == 0) {
                sourceLedger++;
                sourceEntry = 0;
            }
            boolean known = random.nextInt(20) != 0;
            truth.put(entry, known ? new long[] {sourceLedger, sourceEntry} : null);
            index.record("t", 3, entry, "b", known ? sourceLedger : -1, known ? sourceEntry : -1, i);
        }
        long claimed = 0;
        for (Run r : index.runs("t")) {
            for (long e = r.first(); e <= r.last(); e++) {
                long[] expected = truth.get(e);
                assertTrue(truth.containsKey(e));
                if (expected == null) {
                    assertTrue(!r.hasSource());
                } else {
                    assertEquals(expected[0], r.sourceLedger());
                    assertEquals(expected[1], r.sourceFirst() + (e - r.first()));
                }
                claimed++;
            }
        }
        assertEquals(truth.size(), claimed);
    }

    @Test
    void sourcedRunsAreBoundedToo() {
        OriginIndex index = new OriginIndex(3, 4);
        for (int e = 0; e < 20; e++) {
            index.record("t", 1, e, "b", 9, 2L * e, e);   // every source entry skips one: one run each
        }
        assertEquals(List.of(new Run(1, 16, 1, "b", 9, 32), new Run(1, 17, 1, "b", 9, 34),
                new Run(1, 18, 1, "b", 9, 36), new Run(1, 19, 1, "b", 9, 38)), index.runs("t"));
        assertEquals(BigInteger.valueOf(16), index.stats().get("runs_dropped"));
    }

    @Test
    void wireShapeCarriesTheSourceOnlyWhenKnown() throws Exception {
        OriginIndex index = new OriginIndex(3, 4);
        String topic = "persistent://geo/ab/x";
        index.record(topic, 12, 0, "a", 0);
        index.record(topic, 12, 1, "b", 0);
        index.record(topic, 12, 2, "b", 40, 7, 0);
        index.record(topic, 12, 3, "b", 40, 8, 0);
        assertEquals("{\"dropped_runs\":0,\"region\":\"a\",\"runs\":[[12,0,1,\"a\"],[12,1,1,\"b\"],"
                + "[12,2,2,\"b\",40,7]],\"topic\":\"persistent://geo/ab/x\",\"version\":2}",
                new String(Json.canonical(index.toJson("a", topic, -1, -1)),
                        java.nio.charset.StandardCharsets.UTF_8));
        assertEquals("[[12,2,2,\"b\",40,7]]", new String(Json.canonical(
                index.toJson("a", topic, 12, 2).get("runs")), java.nio.charset.StandardCharsets.UTF_8));
    }

    @Test
    void stampsParseOnlyAsTwoNonNegativeLongs() {
        assertArrayEquals(new long[] {12, 7}, OriginIndex.parseStamp("12:7"));
        assertArrayEquals(new long[] {0, 0}, OriginIndex.parseStamp("0:0"));
        for (String bad : new String[] {null, "", "12", "12:", ":7", "1:2:3", "-1:5", "5:-1", "a:b", "1:99999999999999999999", " 1:2"}) {
            assertNull(OriginIndex.parseStamp(bad), String.valueOf(bad));
        }
    }
}
