package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.geosync.plugin.common.Envelopes.Opened;
import io.geosync.plugin.common.Envelopes.Reason;
import io.geosync.plugin.common.Envelopes.Rejected;
import io.geosync.plugin.common.Markers.Marker;
import io.geosync.plugin.common.Markers.Position;
import io.geosync.plugin.common.Markers.Snapshot;
import io.geosync.plugin.common.Markers.SnapshotRequest;
import io.geosync.plugin.common.Markers.SnapshotResponse;
import io.geosync.plugin.common.Markers.Update;
import java.math.BigInteger;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class MarkersTest {
    static Map<String, Object> vectors() throws Exception {
        return Vectors.load("markers");
    }

    static byte[] key() throws Exception {
        return Vectors.hex(vectors().get("key_hex"));
    }

    static String topic() throws Exception {
        return (String) vectors().get("topic");
    }

    static Stream<Map<String, Object>> valid() throws Exception {
        return Vectors.list(vectors(), "valid").stream();
    }

    static Stream<Map<String, Object>> rejected() throws Exception {
        return Vectors.list(vectors(), "rejected").stream();
    }

    @SuppressWarnings("unchecked")
    static Map<String, String> properties(Map<String, Object> vector) {
        Map<String, String> out = new HashMap<>();
        ((Map<String, Object>) vector.get("properties")).forEach((k, v) -> out.put(k, (String) v));
        return out;
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("valid")
    void validVectorsDecodeAndEncodeToTheSameBytes(Map<String, Object> vector) throws Exception {
        byte[] wire = Vectors.hex(vector.get("wire_hex"));
        Opened got = Markers.decode(key(), properties(vector), wire, topic());
        Marker marker = assertInstanceOf(Marker.class, got, String.valueOf(got));
        assertEquals(vector.get("kind"), marker.kind());
        assertEquals(vector.get("region"), marker.sender());
        Map<String, Object> body = new HashMap<>(marker.body());
        body.put("topic", topic());
        assertEquals(Json.sorted((Map<String, Object>) vector.get("body")), Json.sorted(body));
        long seq = ((BigInteger) vector.get("seq")).longValueExact();
        long sentAt = ((BigInteger) vector.get("sent_at_ms")).longValueExact();
        Map.Entry<Map<String, String>, byte[]> encoded = Markers.encode(key(), marker, topic(), seq, sentAt);
        assertEquals(properties(vector), encoded.getKey());
        assertArrayEquals(wire, encoded.getValue(), (String) vector.get("name"));
    }

    @ParameterizedTest
    @MethodSource("rejected")
    void rejectedVectorsGiveThePythonReason(Map<String, Object> vector) throws Exception {
        Opened got = Markers.decode(key(), properties(vector), Vectors.hex(vector.get("wire_hex")), topic());
        assertEquals(new Rejected(Reason.fromWire((String) vector.get("reason"))), got, (String) vector.get("name"));
    }

    @Test
    void vectorsCoverEveryKind() throws Exception {
        Set<Object> kinds = valid().map(v -> v.get("kind")).collect(Collectors.toSet());
        assertEquals(Set.of("snapshot-request", "snapshot-response", "snapshot", "update"), kinds);
        assertEquals(Markers.PROPERTY, vectors().get("property"));
    }

    @Test
    void randomMarkersRoundTrip() throws Exception {
        Random random = new Random(3);
        byte[] k = key();
        for (int i = 0; i < 300; i++) {
            TreeMap<String, Position> positions = new TreeMap<>();
            for (int j = random.nextInt(4); j > 0; j--) {
                positions.put("r" + random.nextInt(5), new Position(random.nextLong() >>> 1, random.nextInt(1000)));
            }
            Marker m = switch (random.nextInt(4)) {
                case 0 -> new SnapshotRequest("s" + i, "a", 1 + random.nextInt(2));
                case 1 -> new SnapshotResponse("s" + i, "a", "b", new Position(i, random.nextInt(9)));
                case 2 -> new Snapshot("s" + i, "c", new Position(3, i), positions);
                default -> new Update("sub-" + i, "zürich", positions);
            };
            Map.Entry<Map<String, String>, byte[]> wire = Markers.encode(k, m, "t-" + i, i, 1000L * i);
            assertTrue(Markers.isMarker(wire.getKey()));
            assertEquals(m, Markers.decode(k, wire.getKey(), wire.getValue(), "t-" + i));
            assertEquals(new Rejected(Reason.MISPLACED), Markers.decode(k, wire.getKey(), wire.getValue(), "t"));
        }
    }

    @Test
    void garbageNeverThrows() throws Exception {
        Random random = new Random(5);
        byte[] k = key();
        for (int i = 0; i < 3000; i++) {
            byte[] data = new byte[random.nextInt(100)];
            random.nextBytes(data);
            assertInstanceOf(Rejected.class, Markers.decode(k, Map.of(Markers.PROPERTY, "x"), data, "t"));
        }
    }

    @Test
    void isMarkerLooksAtTheKeyOnly() {
        assertTrue(Markers.isMarker(Map.of(Markers.PROPERTY, "")));
        assertFalse(Markers.isMarker(Map.of("__geosync_markers", "update")));
    }

    @Test
    void invalidMarkersCannotBeBuilt() {
        assertThrows(IllegalArgumentException.class, () -> new SnapshotRequest("s", "a", 3));
        assertThrows(IllegalArgumentException.class, () -> new SnapshotRequest("", "a", 1));
        assertThrows(IllegalArgumentException.class, () -> new Position(1, -1));
    }
}
