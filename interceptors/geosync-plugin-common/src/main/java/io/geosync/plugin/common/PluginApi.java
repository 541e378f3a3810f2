package io.geosync.plugin.common;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SortedSet;
import java.util.TreeSet;

/**
 * The rules and wire shapes of the interceptor's cursor endpoints, free of the broker so they can be unit
 * tested and checked against the shared vectors ({@code testdata/plugin-api/vectors.json}, also read by
 * {@code controller/geosync_core/pluginapi.py} and {@code pluginwrites.py}).
 *
 * <p>{@code GET /admin/v2/geosync/cursors?since=N} answers {@code {"epoch", "seq", "cursors": [report]}};
 * a report is {@code {"topic", "subscription", "status": "ok", "mark_delete": "L:E", "individually_deleted":
 * "[(L:E..L:E]...]", "batches": [{"position": "L:E", "unacked": [i, ...]}]}} plus {@code
 * "batches_truncated": true} when more partly acknowledged entries exist than one answer carries. {@code
 * POST /admin/v2/geosync/acks} takes {@code {"acks": [item]}}, an item being {@code {"topic", "subscription",
 * "mark_delete": "L:E" or null, "positions": ["L:E"], "batches": [{"position", "size", "acked": [i]}]}}
 * (plus, from {@link #WRITE_VERSION} 2, {@code "planned_from": "L:E"}: the mark-delete the writer planned
 * from), and answers {@code {"results": [result]}}: a report plus {@code "acknowledged"} (how many
 * acknowledgements were applied; with {@code "stale": true} and 0 when the cursor's mark-delete is below
 * {@code planned_from}: nothing was applied, {@link #stale}), or {@code {"status", "error"}} (with topic and
 * subscription when known) for a refusal. The feed says {@code "write_version": 2}: a writer sends {@code
 * planned_from} only to a plugin that says so (older plugins refuse unknown fields).
 *
 * <p>Invariants:
 * <ul>
 *   <li>a mark-delete never moves backwards and never past the topic's last entry ({@link #markDeleteTarget});
 *       an individual or batch-index acknowledgement is applied only strictly above the mark-delete and at
 *       or below the last entry ({@link #acknowledgeable});
 *   <li>an ack set has bit {@code i} set for each index {@code 0 <= i < size} that is not acknowledged, as in
 *       Pulsar (the cursor ANDs ack sets, so a write can only clear bits: it never un-acknowledges);
 *       {@code unacked(ackSet(size, acked))} is {@code [0, size)} minus {@code acked};
 *   <li>a batch with every index acknowledged is acknowledged as a whole entry, never as an empty ack set;
 *   <li>parsing an item refuses, with a reason, anything that is not exactly the documented shape.
 * </ul>
 */
public final class PluginApi {
    /** The largest batch an item may describe (Pulsar clients default to 1000 messages per batch). */
    public static final int MAX_BATCH_SIZE = 1 << 20;
    /** The write items this plugin takes (2: they may carry {@code planned_from}), as its feed says. */
    public static final int WRITE_VERSION = 2;
    private static final List<String> ITEM_KEYS =
            List.of("topic", "subscription", "mark_delete", "positions", "batches", "planned_from");

    private PluginApi() {
    }

    /** Per-item outcome of a cursor read or write, as written on the wire. */
    public enum Status {
        OK("ok"),
        NOT_LOADED("not_loaded"),
        NO_SUBSCRIPTION("no_subscription"),
        BAD_REQUEST("bad_request"),
        BATCH_ACKS_OFF("batch_acks_off");

        private final String wire;

        Status(String wire) {
            this.wire = wire;
        }

        public String wire() {
            return wire;
        }
    }

    /** A position {@code ledger:entry}; {@code entry == -1} (before a ledger's first entry) only as a floor. */
    public record Pos(long ledger, long entry) implements Comparable<Pos> {
        @Override
        public int compareTo(Pos o) {
            int c = Long.compare(ledger, o.ledger);
            return c != 0 ? c : Long.compare(entry, o.entry);
        }

        @Override
        public String toString() {
            return ledger + ":" + entry;
        }
    }

    /** Acknowledge indexes {@code acked} of the batch entry at {@code position} holding {@code size} messages. */
    public record BatchAck(Pos position, int size, SortedSet<Integer> acked) {
        public BatchAck {
            acked = Collections.unmodifiableSortedSet(new TreeSet<>(acked));
        }

        /** Every message of the batch acknowledged: the entry is acknowledged whole. */
        public boolean whole() {
            return acked.size() == size;
        }

        public long[] ackSet() {
            return PluginApi.ackSet(size, acked);
        }
    }

    /** A partly acknowledged entry above the mark-delete and the indexes still unacknowledged in it. */
    public record BatchState(Pos position, List<Integer> unacked) {
        public BatchState {
            unacked = List.copyOf(unacked);
        }

        Map<String, Object> wire() {
            List<Object> indexes = new ArrayList<>(unacked);
            return Map.of("position", position.toString(), "unacked", indexes);
        }
    }

    /**
     * One parsed item of {@code POST /admin/v2/geosync/acks}; {@code plannedFrom} (null: not given) is the
     * cursor's mark-delete the writer planned it from.
     */
    public record AckItem(String topic, String subscription, Pos markDelete, List<Pos> positions,
                          List<BatchAck> batches, Pos plannedFrom) {
        public AckItem {
            positions = List.copyOf(positions);
            batches = List.copyOf(batches);
        }
    }

    /** A request or item that is not the documented shape; {@code topic}/{@code subscription} when known. */
    public static final class BadRequest extends Exception {
        private final String topic;
        private final String subscription;

        public BadRequest(String message, String topic, String subscription) {
            super(message, null, false, false);
            this.topic = topic;
            this.subscription = subscription;
        }

        public Map<String, Object> answer() {
            return refusal(Status.BAD_REQUEST, topic, subscription, getMessage());
        }
    }

    // -- the clamp rules -----------------------------------------------------------------------------

    /**
     * Where a requested mark-delete {@code target} moves a cursor whose mark-delete is {@code floor}, on a
     * topic whose last entry is {@code last} (null if unknown): never backwards, never past {@code last};
     * empty when it does not move.
     */
    public static Optional<Pos> markDeleteTarget(Pos target, Pos floor, Pos last) {
        if (target == null || target.compareTo(floor) <= 0) {
            return Optional.empty();
        }
        Pos clamped = last != null && target.compareTo(last) > 0 ? last : target;
        return clamped.compareTo(floor) > 0 ? Optional.of(clamped) : Optional.empty();
    }

    /**
     * Whether an item planned from mark-delete {@code plannedFrom} (null: not given) must be left unapplied
     * on a cursor whose mark-delete is {@code floor}: the cursor is below what the writer saw, so it was
     * moved back since (a reset-cursor); moving it forward from there would acknowledge again everything
     * the writer's plan took as acknowledged. A cursor at or above it is written as always.
     */
    public static boolean stale(Pos plannedFrom, Pos floor) {
        return plannedFrom != null && floor.compareTo(plannedFrom) < 0;
    }

    /** Whether an entry may be acknowledged individually: above the mark-delete, at or below the last entry. */
    public static boolean acknowledgeable(Pos p, Pos floor, Pos last) {
        return p.compareTo(floor) > 0 && (last == null || p.compareTo(last) <= 0);
    }

    // -- ack sets ------------------------------------------------------------------------------------

    /** Pulsar's ack set for a batch of {@code size}: bits {@code 0..size-1} set, the acknowledged ones cleared. */
    public static long[] ackSet(int size, Iterable<Integer> acked) {
        BitSet bits = new BitSet(size);
        bits.set(0, size);
        for (int i : acked) {
            bits.clear(i);
        }
        long[] words = bits.toLongArray();
        // toLongArray drops trailing zero words; Pulsar sizes ack sets by the batch, keep one word at least.
        long[] out = new long[Math.max(1, (size + 63) / 64)];
        System.arraycopy(words, 0, out, 0, Math.min(words.length, out.length));
        return out;
    }

    /** The indexes an ack set (or a cursor's batch-deleted-indexes words) leaves unacknowledged, ascending. */
    public static List<Integer> unacked(long[] words) {
        List<Integer> out = new ArrayList<>();
        if (words == null) {
            return out;
        }
        BitSet bits = BitSet.valueOf(words);
        for (int i = bits.nextSetBit(0); i >= 0; i = bits.nextSetBit(i + 1)) {
            out.add(i);
        }
        return out;
    }

    // -- parsing requests ----------------------------------------------------------------------------

    /** The items of a request body {@code {"acks": [...]}}; a BadRequest is answered with HTTP 400. */
    public static List<?> parseRequest(byte[] body, int maxBytes) throws BadRequest {
        if (body.length > maxBytes) {
            throw new BadRequest("body larger than " + maxBytes + " bytes; send smaller batches", null, null);
        }
        Object parsed;
        try {
            parsed = Json.parse(body);
        } catch (Json.JsonException e) {
            throw new BadRequest("the body must be JSON {\"acks\": [...]}: " + e.getMessage(), null, null);
        }
        if (!(parsed instanceof Map<?, ?> m) || !(m.get("acks") instanceof List<?> items)) {
            throw new BadRequest("the body must be a JSON object with a list 'acks'", null, null);
        }
        return items;
    }

    /** One item of the request, checked field by field. */
    public static AckItem parseItem(Object raw) throws BadRequest {
        if (!(raw instanceof Map<?, ?> item)) {
            throw new BadRequest("each item must be an object", null, null);
        }
        if (!(item.get("topic") instanceof String t) || !(item.get("subscription") instanceof String s)
                || t.isEmpty() || s.isEmpty()) {
            throw new BadRequest("each item needs non-empty string fields 'topic' and 'subscription'", null, null);
        }
        for (Object key : item.keySet()) {
            if (!ITEM_KEYS.contains(key)) {
                throw new BadRequest("unknown field '" + key + "' (known: " + String.join(", ", ITEM_KEYS) + ")",
                        t, s);
            }
        }
        Pos markDelete = item.get("mark_delete") == null ? null : position(item.get("mark_delete"), t, s);
        Pos plannedFrom = item.get("planned_from") == null ? null : floor(item.get("planned_from"), t, s);
        List<Pos> positions = new ArrayList<>();
        for (Object p : list(item, "positions", t, s)) {
            positions.add(position(p, t, s));
        }
        List<BatchAck> batches = new ArrayList<>();
        for (Object b : list(item, "batches", t, s)) {
            batches.add(batch(b, t, s));
        }
        return new AckItem(t, s, markDelete, positions, batches, plannedFrom);
    }

    private static List<?> list(Map<?, ?> item, String key, String t, String s) throws BadRequest {
        Object value = item.get(key);
        if (value == null) {
            return List.of();
        }
        if (!(value instanceof List<?> given)) {
            throw new BadRequest("'" + key + "' must be a list", t, s);
        }
        return given;
    }

    private static BatchAck batch(Object raw, String t, String s) throws BadRequest {
        if (!(raw instanceof Map<?, ?> b) || b.size() != 3 || !b.containsKey("position")) {
            throw new BadRequest("each batch must be an object {\"position\": \"L:E\", \"size\": n, \"acked\": "
                    + "[indexes]}", t, s);
        }
        Pos position = position(b.get("position"), t, s);
        if (!(b.get("size") instanceof BigInteger size) || size.signum() <= 0
                || size.compareTo(BigInteger.valueOf(MAX_BATCH_SIZE)) > 0) {
            throw new BadRequest("batch " + position + ": 'size' must be an integer in 1.." + MAX_BATCH_SIZE, t, s);
        }
        int n = size.intValueExact();
        if (!(b.get("acked") instanceof List<?> acked)) {
            throw new BadRequest("batch " + position + ": 'acked' must be a list of indexes", t, s);
        }
        SortedSet<Integer> indexes = new TreeSet<>();
        for (Object i : acked) {
            if (!(i instanceof BigInteger index) || index.signum() < 0 || index.compareTo(size) >= 0) {
                throw new BadRequest("batch " + position + ": an acked index must be an integer in 0.." + (n - 1)
                        + ", not " + i, t, s);
            }
            if (!indexes.add(index.intValueExact())) {
                throw new BadRequest("batch " + position + ": index " + i + " is listed twice", t, s);
            }
        }
        return new BatchAck(position, n, indexes);
    }

    /** A request position: {@code "L:E"} with {@code L, E >= 0}. */
    public static Pos position(Object text, String t, String s) throws BadRequest {
        Optional<Pos> p = text instanceof String str ? parsePos(str) : Optional.empty();
        if (p.isEmpty() || p.get().ledger() < 0 || p.get().entry() < 0) {
            throw new BadRequest("a position must be a string L:E with L, E >= 0, not " + text, t, s);
        }
        return p.get();
    }

    /** A mark-delete in a request: {@code "L:E"} with {@code L >= 0, E >= -1}. */
    public static Pos floor(Object text, String t, String s) throws BadRequest {
        Optional<Pos> p = text instanceof String str ? parsePos(str) : Optional.empty();
        if (p.isEmpty() || p.get().ledger() < 0) {
            throw new BadRequest("a mark-delete must be a string L:E with L >= 0, E >= -1, not " + text, t, s);
        }
        return p.get();
    }

    /** {@code "L:E"} with {@code L, E >= -1}, as Pulsar writes positions, or empty. */
    public static Optional<Pos> parsePos(String text) {
        int colon = text.indexOf(':');
        if (colon < 0) {
            return Optional.empty();
        }
        try {
            long ledger = Long.parseLong(text.substring(0, colon));
            long entry = Long.parseLong(text.substring(colon + 1));
            return ledger >= -1 && entry >= -1 ? Optional.of(new Pos(ledger, entry)) : Optional.empty();
        } catch (NumberFormatException e) {
            return Optional.empty();
        }
    }

    // -- building answers ----------------------------------------------------------------------------

    /** A cursor's state as the feed and the writes report it. */
    public static Map<String, Object> report(String topic, String subscription, String markDelete,
                                             String individuallyDeleted, List<BatchState> batches,
                                             boolean truncated) {
        Map<String, Object> out = new HashMap<>();
        out.put("topic", topic);
        out.put("subscription", subscription);
        out.put("status", Status.OK.wire());
        out.put("mark_delete", markDelete);
        out.put("individually_deleted", individuallyDeleted);
        List<Object> wire = new ArrayList<>();
        for (BatchState b : batches) {
            wire.add(b.wire());
        }
        out.put("batches", wire);
        if (truncated) {
            out.put("batches_truncated", true);
        }
        return out;
    }

    /** The answer to one written item: the cursor's state afterwards and how many acknowledgements applied. */
    public static Map<String, Object> written(Map<String, Object> report, long acknowledged) {
        Map<String, Object> out = new HashMap<>(report);
        out.put("acknowledged", BigInteger.valueOf(acknowledged));
        return out;
    }

    /**
     * The answer to an item left unapplied because the cursor is below its {@code planned_from} ({@link
     * #stale}): the cursor as it is, nothing acknowledged, {@code "stale": true}.
     */
    public static Map<String, Object> stale(Map<String, Object> report) {
        Map<String, Object> out = written(report, 0);
        out.put("stale", true);
        return out;
    }

    /** Why an item was not read or written; topic and subscription are included when known. */
    public static Map<String, Object> refusal(Status status, String topic, String subscription, String error) {
        Map<String, Object> out = new HashMap<>();
        out.put("status", status.wire());
        if (topic != null) {
            out.put("topic", topic);
        }
        if (subscription != null) {
            out.put("subscription", subscription);
        }
        if (error != null) {
            out.put("error", error);
        }
        return out;
    }

    /** The body of {@code GET /admin/v2/geosync/cursors} from a plugin without acknowledged sets. */
    public static Map<String, Object> feed(String epoch, long seq, List<Map<String, Object>> reports) {
        Map<String, Object> body = new HashMap<>();
        body.put("epoch", epoch);
        body.put("seq", BigInteger.valueOf(seq));
        body.put("cursors", new ArrayList<Object>(reports));
        return body;
    }

    /**
     * The body of {@code GET /admin/v2/geosync/cursors} with what consumers acknowledged ({@code acked},
     * version {@code acked_version}): per subscription {@code {"topic", "subscription", "ranges":
     * "[(L:E..L:E],...]", "cumulative": "L:E" or null, "batches": [{"position": "L:E", "unacked": [i]}],
     * "overflowed": bool}} (built by {@link AckedPositions}), and {@code acked_lost}, how many records were
     * dropped holding undelivered acknowledgements since the broker started. A reader tells a plugin without
     * them by the absence of {@code acked_version}. {@code write_version} ({@link #WRITE_VERSION}) says write
     * items may carry {@code planned_from}; absent (older plugins), they may not.
     */
    public static Map<String, Object> feed(String epoch, long seq, List<Map<String, Object>> reports,
                                           List<Map<String, Object>> acked, long ackedLost) {
        Map<String, Object> body = feed(epoch, seq, reports);
        body.put("write_version", BigInteger.valueOf(WRITE_VERSION));
        body.put("acked_version", BigInteger.valueOf(AckedPositions.WIRE_VERSION));
        body.put("acked", new ArrayList<Object>(acked));
        body.put("acked_lost", BigInteger.valueOf(ackedLost));
        return body;
    }
}
