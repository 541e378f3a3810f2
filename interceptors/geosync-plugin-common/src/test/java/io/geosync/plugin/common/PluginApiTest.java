package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.geosync.plugin.common.PluginApi.AckItem;
import io.geosync.plugin.common.PluginApi.BadRequest;
import io.geosync.plugin.common.PluginApi.BatchAck;
import io.geosync.plugin.common.PluginApi.BatchState;
import io.geosync.plugin.common.PluginApi.Pos;
import io.geosync.plugin.common.PluginApi.Status;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class PluginApiTest {
    static Map<String, Object> vectors() throws Exception {
        return Vectors.load("plugin-api");
    }

    static Stream<Map<String, Object>> named(String key) throws Exception {
        return Vectors.list(vectors(), key).stream();
    }

    static Stream<Map<String, Object>> ackSets() throws Exception {
        return named("ack_sets");
    }

    static Stream<Map<String, Object>> ackItems() throws Exception {
        return named("ack_items");
    }

    static Stream<Map<String, Object>> badItems() throws Exception {
        return named("bad_items");
    }

    static Stream<Map<String, Object>> badBodies() throws Exception {
        return named("bad_bodies");
    }

    static Stream<Map<String, Object>> reports() throws Exception {
        return named("cursor_reports");
    }

    static Stream<Map<String, Object>> results() throws Exception {
        return named("results");
    }

    static Stream<Map<String, Object>> feeds() throws Exception {
        return named("feeds");
    }

    private static Pos pos(Object text) {
        return PluginApi.parsePos((String) text).orElseThrow();
    }

    private static List<Integer> ints(Object list) {
        List<Integer> out = new ArrayList<>();
        for (Object o : (List<?>) list) {
            out.add(((BigInteger) o).intValueExact());
        }
        return out;
    }

    private static long[] longs(Object list) {
        return ((List<?>) list).stream().mapToLong(o -> ((BigInteger) o).longValue()).toArray();
    }

    private static void assertSameJson(Object expected, Object got) throws Exception {
        assertEquals(new String(Json.canonical(expected), StandardCharsets.UTF_8),
                new String(Json.canonical(got), StandardCharsets.UTF_8));
    }

    @Test
    void statusStringsAreTheSharedOnes() throws Exception {
        List<String> wire = Arrays.stream(Status.values()).map(Status::wire).toList();
        assertEquals(vectors().get("statuses"), wire);
        assertEquals(BigInteger.valueOf(PluginApi.MAX_BATCH_SIZE), vectors().get("max_batch_size"));
    }

    @ParameterizedTest
    @MethodSource("ackSets")
    void ackSetsConvertBothWays(Map<String, Object> v) {
        int size = ((BigInteger) v.get("size")).intValueExact();
        long[] words = PluginApi.ackSet(size, ints(v.get("acked")));
        assertArrayEquals(longs(v.get("ack_set")), words, (String) v.get("name"));
        assertEquals(ints(v.get("unacked")), PluginApi.unacked(words), (String) v.get("name"));
    }

    @Test
    void ackSetsRoundTripForRandomBatches() {
        Random random = new Random(7);
        for (int round = 0; round < 2000; round++) {
            int size = 1 + random.nextInt(300);
            TreeSet<Integer> acked = new TreeSet<>();
            for (int i = 0; i < size; i++) {
                if (random.nextInt(3) == 0) {
                    acked.add(i);
                }
            }
            long[] words = PluginApi.ackSet(size, acked);
            assertEquals((size + 63) / 64, words.length);
            List<Integer> unacked = PluginApi.unacked(words);
            assertEquals(size - acked.size(), unacked.size());
            for (int i : unacked) {
                assertTrue(i < size && !acked.contains(i));
            }
        }
        assertEquals(List.of(), PluginApi.unacked(null));
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("ackItems")
    void validItemsParse(Map<String, Object> v) throws Exception {
        AckItem item = PluginApi.parseItem(v.get("item"));
        AckItem canonical = PluginApi.parseItem(v.get("canonical"));
        assertEquals(canonical, item);
        Map<String, Object> c = (Map<String, Object>) v.get("canonical");
        assertEquals(c.get("topic"), item.topic());
        assertEquals(c.get("subscription"), item.subscription());
        assertEquals(c.get("mark_delete"), item.markDelete() == null ? null : item.markDelete().toString());
        assertEquals(c.get("positions"), item.positions().stream().map(Pos::toString).toList());
        assertEquals(c.get("planned_from"), item.plannedFrom() == null ? null : item.plannedFrom().toString());
        List<Map<String, Object>> sets = (List<Map<String, Object>>) v.get("ack_sets");
        assertEquals(sets.size(), item.batches().size());
        for (int i = 0; i < sets.size(); i++) {
            BatchAck b = item.batches().get(i);
            assertEquals(sets.get(i).get("position"), b.position().toString());
            assertEquals(sets.get(i).get("whole"), b.whole());
            assertArrayEquals(longs(sets.get(i).get("ack_set")), b.ackSet());
        }
    }

    @ParameterizedTest
    @MethodSource("badItems")
    void badItemsAreRefusedWithAReason(Map<String, Object> v) {
        BadRequest e = assertThrows(BadRequest.class, () -> PluginApi.parseItem(v.get("item")), (String) v.get("name"));
        assertTrue(e.getMessage().contains((String) v.get("error_contains")), v.get("name") + ": " + e.getMessage());
        Map<String, Object> answer = e.answer();
        assertEquals("bad_request", answer.get("status"));
        assertEquals(e.getMessage(), answer.get("error"));
    }

    @ParameterizedTest
    @MethodSource("badBodies")
    void badBodiesAreRefusedWhole(Map<String, Object> v) {
        byte[] body = ((String) v.get("body")).getBytes(StandardCharsets.UTF_8);
        BadRequest e = assertThrows(BadRequest.class, () -> PluginApi.parseRequest(body, 1 << 20));
        assertTrue(e.getMessage().contains((String) v.get("error_contains")), e.getMessage());
    }

    @Test
    void oversizedBodiesAreRefused() throws Exception {
        byte[] body = "{\"acks\": []}".getBytes(StandardCharsets.UTF_8);
        assertEquals(List.of(), PluginApi.parseRequest(body, body.length));
        BadRequest e = assertThrows(BadRequest.class, () -> PluginApi.parseRequest(body, body.length - 1));
        assertTrue(e.getMessage().contains("smaller batches"));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> rebuild(Map<String, Object> wire) {
        List<BatchState> batches = new ArrayList<>();
        for (Object b : (List<Object>) wire.get("batches")) {
            Map<String, Object> m = (Map<String, Object>) b;
            batches.add(new BatchState(pos(m.get("position")), ints(m.get("unacked"))));
        }
        return PluginApi.report((String) wire.get("topic"), (String) wire.get("subscription"),
                (String) wire.get("mark_delete"), (String) wire.get("individually_deleted"), batches,
                Boolean.TRUE.equals(wire.get("batches_truncated")));
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("reports")
    void reportsAreBuiltAsTheVectorsSay(Map<String, Object> v) throws Exception {
        Map<String, Object> wire = (Map<String, Object>) v.get("wire");
        assertSameJson(wire, rebuild(wire));
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("feeds")
    void feedsAreBuiltAsTheVectorsSay(Map<String, Object> v) throws Exception {
        Map<String, Object> wire = (Map<String, Object>) v.get("wire");
        List<Map<String, Object>> reports = new ArrayList<>();
        for (Object r : (List<Object>) wire.get("cursors")) {
            reports.add(rebuild((Map<String, Object>) r));
        }
        assertSameJson(wire, PluginApi.feed((String) wire.get("epoch"), ((BigInteger) wire.get("seq")).longValue(),
                reports));
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("results")
    void resultsAreBuiltAsTheVectorsSay(Map<String, Object> v) throws Exception {
        Map<String, Object> wire = (Map<String, Object>) v.get("wire");
        Object built;
        if (Boolean.TRUE.equals(wire.get("stale"))) {
            built = PluginApi.stale(rebuild(wire));
        } else if ("ok".equals(wire.get("status"))) {
            built = PluginApi.written(rebuild(wire), ((BigInteger) wire.get("acknowledged")).longValue());
        } else {
            Status status = Arrays.stream(Status.values()).filter(s -> s.wire().equals(wire.get("status")))
                    .findFirst().orElseThrow();
            built = PluginApi.refusal(status, (String) wire.get("topic"), (String) wire.get("subscription"),
                    (String) wire.get("error"));
        }
        assertSameJson(wire, built);
    }

    // -- the clamp rules, as a table and against a brute-force reading of the rule ------------------------

    @Test
    void markDeleteNeverMovesBackwardsNorPastTheLastEntry() {
        Pos floor = new Pos(12, 4);
        Pos last = new Pos(12, 9);
        assertEquals(Optional.of(new Pos(12, 6)), PluginApi.markDeleteTarget(new Pos(12, 6), floor, last));
        assertEquals(Optional.empty(), PluginApi.markDeleteTarget(new Pos(12, 4), floor, last));
        assertEquals(Optional.empty(), PluginApi.markDeleteTarget(new Pos(12, 3), floor, last));
        assertEquals(Optional.empty(), PluginApi.markDeleteTarget(new Pos(11, 50), floor, last));
        assertEquals(Optional.of(last), PluginApi.markDeleteTarget(new Pos(13, 0), floor, last));
        assertEquals(Optional.of(new Pos(13, 0)), PluginApi.markDeleteTarget(new Pos(13, 0), floor, null));
        assertEquals(Optional.empty(), PluginApi.markDeleteTarget(null, floor, last));
        // The last entry at or below the mark-delete: nothing moves at all.
        assertEquals(Optional.empty(), PluginApi.markDeleteTarget(new Pos(13, 0), floor, new Pos(12, 4)));
        assertEquals(Optional.of(new Pos(12, 0)),
                PluginApi.markDeleteTarget(new Pos(12, 0), new Pos(12, -1), last));
    }

    @Test
    void anItemPlannedAboveTheCursorIsStale() {
        Pos planned = new Pos(12, 41);
        assertTrue(PluginApi.stale(planned, new Pos(12, -1)), "reset to the earliest since the plan");
        assertTrue(PluginApi.stale(planned, new Pos(12, 40)));
        assertTrue(PluginApi.stale(planned, new Pos(11, 90)));
        assertFalse(PluginApi.stale(planned, planned), "the cursor the plan was made from");
        assertFalse(PluginApi.stale(planned, new Pos(12, 42)), "consumers acknowledged further meanwhile");
        assertFalse(PluginApi.stale(null, new Pos(12, -1)), "an older writer: no check");
    }

    @Test
    void theFeedSaysWritesMayCarryPlannedFrom() {
        assertEquals(BigInteger.TWO, PluginApi.feed("e", 1, List.of(), List.of(), 0).get("write_version"));
        assertNull(PluginApi.feed("e", 1, List.of()).get("write_version"), "an older plugin's feed shape");
    }

    @Test
    void clampRulesHoldForRandomPositions() {
        Random random = new Random(11);
        for (int round = 0; round < 5000; round++) {
            Pos floor = new Pos(random.nextInt(3), random.nextInt(6) - 1);
            Pos last = random.nextInt(5) == 0 ? null : new Pos(random.nextInt(3), random.nextInt(6));
            Pos target = new Pos(random.nextInt(3), random.nextInt(6));
            Optional<Pos> moved = PluginApi.markDeleteTarget(target, floor, last);
            moved.ifPresent(m -> {
                assertTrue(m.compareTo(floor) > 0, "backwards");
                assertTrue(m.compareTo(target) <= 0, "further than asked");
                assertTrue(last == null || m.compareTo(last) <= 0, "past the last entry");
            });
            boolean expectMove = target.compareTo(floor) > 0 && (last == null || last.compareTo(floor) > 0);
            assertEquals(expectMove, moved.isPresent(), target + " " + floor + " " + last);
            boolean ok = PluginApi.acknowledgeable(target, floor, last);
            assertEquals(target.compareTo(floor) > 0 && (last == null || target.compareTo(last) <= 0), ok);
        }
    }

    @Test
    void positionsParseAsPulsarWritesThem() {
        assertEquals(Optional.of(new Pos(12, -1)), PluginApi.parsePos("12:-1"));
        assertEquals(Optional.empty(), PluginApi.parsePos("12"));
        assertEquals(Optional.empty(), PluginApi.parsePos("12:-2"));
        assertEquals(Optional.empty(), PluginApi.parsePos("a:b"));
        assertEquals("12:3", new Pos(12, 3).toString());
        assertFalse(new BatchAck(new Pos(1, 1), 3, new TreeSet<>(List.of(0, 1))).whole());
        assertTrue(new BatchAck(new Pos(1, 1), 2, new TreeSet<>(List.of(0, 1))).whole());
        assertNull(PluginApi.refusal(Status.NOT_LOADED, null, null, null).get("topic"));
    }
}
