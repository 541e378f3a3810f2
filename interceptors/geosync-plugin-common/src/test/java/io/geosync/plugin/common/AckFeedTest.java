package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.geosync.plugin.common.AckFeed.Mark;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

class AckFeedTest {
    private static Set<String> names(List<Mark> marks) {
        return marks.stream().map(m -> m.topic() + "/" + m.subscription()).collect(Collectors.toSet());
    }

    @Test
    void reportsWhatChangedSinceTheLastRead() {
        AckFeed feed = new AckFeed(100);
        feed.record("t1", "s", 0);
        feed.record("t2", "s", 0);
        long seen = feed.seq();
        assertEquals(2, seen);
        feed.record("t1", "s", 0);
        feed.record("t1", "x", 0);
        long now = 10_000_000_000L;
        assertEquals(Set.of("t1/s", "t1/x"), names(feed.since(seen, now, 0)));
        assertEquals(Set.of(), names(feed.since(feed.seq(), now, 0)));
        assertEquals(Set.of("t1/s", "t2/s", "t1/x"), names(feed.since(0, now, 0)));
    }

    @Test
    void recentAcknowledgementsAreReportedAgainWithinTheSettleWindow() {
        AckFeed feed = new AckFeed(100);
        feed.record("t", "old", 1_000);
        feed.record("t", "new", 9_000);
        assertEquals(Set.of("t/new"), names(feed.since(feed.seq(), 10_000, 1_000)));
        assertEquals(Set.of(), names(feed.since(feed.seq(), 10_001 + 1_000, 1_000)));
    }

    @Test
    void memoryIsBoundedAndTheQuietestAreForgotten() {
        AckFeed feed = new AckFeed(20);
        for (int i = 0; i < 100; i++) {
            feed.record("t", "s" + i, i);
        }
        assertTrue(feed.tracked() <= 20, "tracked " + feed.tracked());
        assertEquals(100 - feed.tracked(), feed.forgotten());
        assertTrue(names(feed.since(0, 0, 0)).contains("t/s99"), "the latest is kept");
        assertThrows(IllegalArgumentException.class, () -> new AckFeed(0));
    }

    @Test
    void concurrentRecordsEachGetTheirOwnSequenceNumber() throws Exception {
        AckFeed feed = new AckFeed(10_000);
        ExecutorService pool = Executors.newFixedThreadPool(4);
        for (int t = 0; t < 4; t++) {
            int thread = t;
            pool.submit(() -> {
                for (int i = 0; i < 1000; i++) {
                    feed.record("t" + thread, "s" + (i % 50), i);
                }
            });
        }
        pool.shutdown();
        assertTrue(pool.awaitTermination(30, TimeUnit.SECONDS));
        assertEquals(4000, feed.seq());
        assertEquals(4000, feed.recorded());
        assertEquals(200, feed.tracked());
        List<Mark> all = feed.since(0, 0, 0);
        for (int i = 1; i < all.size(); i++) {
            assertTrue(all.get(i - 1).seq() < all.get(i).seq());
        }
    }
}
