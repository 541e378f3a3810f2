package io.geosync.plugin.common;

import io.geosync.plugin.common.Envelopes.Envelope;
import io.geosync.plugin.common.Envelopes.Opened;
import io.geosync.plugin.common.Envelopes.Reason;
import io.geosync.plugin.common.Envelopes.Rejected;
import java.math.BigInteger;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Snapshot markers (PIP-33 style request / response / snapshot / update records) carried as ordinary
 * messages in data topics, as the Python core defines them ({@code controller/geosync_core/markers.py},
 * whose docstring is the spec; {@code testdata/markers/vectors.json} pins the bytes).
 *
 * <p>A marker message carries the property {@link #PROPERTY} (its presence alone makes it a marker; the
 * value is the kind) and a payload that is a sealed {@link Envelopes envelope} whose kind equals the
 * property, whose region is the sender, and whose payload is the versioned marker body. The body names the
 * topic partition the marker was written into (version 2); a marker read from another topic is misplaced.
 */
public final class Markers {
    public static final String PROPERTY = "__geosync_marker";
    public static final int MARKER_VERSION = 2;
    public static final String SNAPSHOT_REQUEST = "snapshot-request";
    public static final String SNAPSHOT_RESPONSE = "snapshot-response";
    public static final String SNAPSHOT = "snapshot";
    public static final String UPDATE = "update";

    private static final Map<String, Set<String>> FIELDS = Map.of(
            SNAPSHOT_REQUEST, Set.of("snapshot_id", "source_region", "round"),
            SNAPSHOT_RESPONSE, Set.of("snapshot_id", "source_region", "region", "position"),
            SNAPSHOT, Set.of("snapshot_id", "region", "local_position", "positions"),
            UPDATE, Set.of("subscription", "region", "positions"));

    private Markers() {
    }

    /** An entry position in one region's log (ledger and entry both non-negative). */
    public record Position(long ledger, long entry) {
        public Position {
            if (ledger < 0 || entry < 0) {
                throw new IllegalArgumentException("marker positions must be entries: " + ledger + ":" + entry);
            }
        }

        List<Object> wire() {
            return Envelopes.pair(ledger, entry);
        }
    }

    /** One of the four marker records. */
    public sealed interface Marker extends Opened permits SnapshotRequest, SnapshotResponse, Snapshot, Update {
        String kind();

        String sender();

        Map<String, Object> body();
    }

    public record SnapshotRequest(String snapshotId, String sourceRegion, int round) implements Marker {
        public SnapshotRequest {
            text(snapshotId, sourceRegion);
            if (round != 1 && round != 2) {
                throw new IllegalArgumentException("round must be 1 or 2");
            }
        }

        public String kind() {
            return SNAPSHOT_REQUEST;
        }

        public String sender() {
            return sourceRegion;
        }

        public Map<String, Object> body() {
            return Markers.body("snapshot_id", snapshotId, "source_region", sourceRegion, "round", BigInteger.valueOf(round));
        }
    }

    public record SnapshotResponse(String snapshotId, String sourceRegion, String region, Position position)
            implements Marker {
        public SnapshotResponse {
            text(snapshotId, sourceRegion, region);
            Objects.requireNonNull(position, "position");
        }

        public String kind() {
            return SNAPSHOT_RESPONSE;
        }

        public String sender() {
            return region;
        }

        public Map<String, Object> body() {
            return Markers.body("snapshot_id", snapshotId, "source_region", sourceRegion, "region", region,
                    "position", position.wire());
        }
    }

    public record Snapshot(String snapshotId, String region, Position localPosition,
                           SortedMap<String, Position> positions) implements Marker {
        public Snapshot {
            text(snapshotId, region);
            Objects.requireNonNull(localPosition, "localPosition");
            positions = regions(positions);
        }

        public String kind() {
            return SNAPSHOT;
        }

        public String sender() {
            return region;
        }

        public Map<String, Object> body() {
            return Markers.body("snapshot_id", snapshotId, "region", region, "local_position", localPosition.wire(),
                    "positions", wire(positions));
        }
    }

    public record Update(String subscription, String region, SortedMap<String, Position> positions)
            implements Marker {
        public Update {
            text(subscription, region);
            positions = regions(positions);
        }

        public String kind() {
            return UPDATE;
        }

        public String sender() {
            return region;
        }

        public Map<String, Object> body() {
            return Markers.body("subscription", subscription, "region", region, "positions", wire(positions));
        }
    }

    /** The cheap check the entry filter makes: the property's presence, whatever its value. */
    public static boolean isMarker(Map<String, String> properties) {
        return properties.containsKey(PROPERTY);
    }

    /** The properties and payload of the message that carries {@code marker} into {@code topic} (publish it
     * unbatched). */
    public static Map.Entry<Map<String, String>, byte[]> encode(
            byte[] key, Marker marker, String topic, long seq, long sentAtMs) {
        text(topic);
        Map<String, Object> body = new HashMap<>(marker.body());
        body.put("topic", topic);
        Envelope envelope = new Envelope(marker.kind(), marker.sender(), seq, sentAtMs, body);
        return Map.entry(Map.of(PROPERTY, marker.kind()), Envelopes.seal(key, envelope));
    }

    /** Verify and decode a marker message read from {@code topic}: a {@link Marker} or a {@link Rejected};
     * never throws. */
    public static Opened decode(byte[] key, Map<String, String> properties, byte[] data, String topic) {
        try {
            String kind = properties.get(PROPERTY);
            if (kind == null) {
                return new Rejected(Reason.MALFORMED);
            }
            Opened opened = Envelopes.open(key, data);
            if (!(opened instanceof Envelope envelope)) {
                return opened;
            }
            if (!envelope.kind().equals(kind)) {
                return new Rejected(Reason.MALFORMED);
            }
            return decodeBody(envelope, topic);
        } catch (RuntimeException e) {
            return new Rejected(Reason.MALFORMED);
        }
    }

    /** The marker in an opened envelope read from {@code topic}; never throws. */
    public static Opened decodeBody(Envelope envelope, String topic) {
        Map<String, Object> body = envelope.payload();
        Object version = body.get("version");
        if (!Envelopes.isCount(version)) {
            return new Rejected(Reason.MALFORMED);
        }
        if (!BigInteger.valueOf(MARKER_VERSION).equals(version)) {
            return new Rejected(Reason.UNSUPPORTED_VERSION);
        }
        Map<String, Object> fields = new HashMap<>(body);
        fields.remove("version");
        Object bound = fields.remove("topic");
        Marker marker;
        try {
            marker = build(envelope.kind(), fields);
        } catch (IllegalArgumentException | NullPointerException | ClassCastException e) {
            return new Rejected(Reason.MALFORMED);
        }
        if (marker == null || !marker.sender().equals(envelope.region()) || !Envelopes.isText(bound)) {
            return new Rejected(Reason.MALFORMED);
        }
        return bound.equals(topic) ? marker : new Rejected(Reason.MISPLACED);
    }

    private static Marker build(String kind, Map<String, Object> f) {
        Set<String> expected = FIELDS.get(kind);
        if (expected == null || !f.keySet().equals(expected)) {
            return null;
        }
        switch (kind) {
            case SNAPSHOT_REQUEST -> {
                Long round = Envelopes.count(f.get("round"));
                if (round == null || round < 1 || round > 2) {
                    throw new IllegalArgumentException("round must be 1 or 2");
                }
                return new SnapshotRequest(str(f.get("snapshot_id")), str(f.get("source_region")), round.intValue());
            }
            case SNAPSHOT_RESPONSE -> {
                return new SnapshotResponse(str(f.get("snapshot_id")), str(f.get("source_region")),
                        str(f.get("region")), position(f.get("position")));
            }
            case SNAPSHOT -> {
                return new Snapshot(str(f.get("snapshot_id")), str(f.get("region")),
                        position(f.get("local_position")), positions(f.get("positions")));
            }
            default -> {
                return new Update(str(f.get("subscription")), str(f.get("region")), positions(f.get("positions")));
            }
        }
    }

    private static String str(Object value) {
        if (!Envelopes.isText(value)) {
            throw new IllegalArgumentException("expected a non-empty string");
        }
        return (String) value;
    }

    private static Position position(Object value) {
        if (!(value instanceof List<?> pair) || pair.size() != 2) {
            throw new IllegalArgumentException("not a position");
        }
        Long ledger = Envelopes.count(pair.get(0));
        Long entry = Envelopes.count(pair.get(1));
        if (ledger == null || entry == null) {
            throw new IllegalArgumentException("not a position");
        }
        return new Position(ledger, entry);
    }

    private static SortedMap<String, Position> positions(Object value) {
        if (!(value instanceof Map<?, ?> map)) {
            throw new IllegalArgumentException("positions must be an object");
        }
        SortedMap<String, Position> out = new TreeMap<>(Json::compareCodePoints);
        for (Map.Entry<?, ?> e : map.entrySet()) {
            out.put(str(e.getKey()), position(e.getValue()));
        }
        return out;
    }

    private static SortedMap<String, Position> regions(SortedMap<String, Position> positions) {
        SortedMap<String, Position> out = new TreeMap<>(Json::compareCodePoints);
        for (Map.Entry<String, Position> e : Objects.requireNonNull(positions, "positions").entrySet()) {
            text(e.getKey());
            out.put(e.getKey(), Objects.requireNonNull(e.getValue(), "position"));
        }
        return java.util.Collections.unmodifiableSortedMap(out);
    }

    private static Map<String, Object> wire(SortedMap<String, Position> positions) {
        Map<String, Object> out = new HashMap<>();
        positions.forEach((region, p) -> out.put(region, p.wire()));
        return out;
    }

    private static void text(String... values) {
        for (String v : values) {
            if (v == null || v.isEmpty()) {
                throw new IllegalArgumentException("ids, subscriptions and regions must be non-empty strings");
            }
        }
    }

    private static Map<String, Object> body(Object... keysAndValues) {
        Map<String, Object> out = new HashMap<>();
        out.put("version", BigInteger.valueOf(MARKER_VERSION));
        for (int i = 0; i < keysAndValues.length; i += 2) {
            out.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return out;
    }
}
