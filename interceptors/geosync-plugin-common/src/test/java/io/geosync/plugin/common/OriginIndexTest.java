package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
                + "\"topic\":\"persistent://geo/ab/x\",\"version\":1}",
                new String(Json.canonical(index.toJson("a", "persistent://geo/ab/x", -1, -1)),
                        java.nio.charset.StandardCharsets.UTF_8));
    }
}
