package io.geosync.plugin.common;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.InvalidKeyException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Control-message envelopes: the signed, versioned JSON objects agents exchange, byte for byte as the
 * Python core writes them ({@code controller/geosync_core/envelopes.py}, whose docstring is the spec;
 * {@code testdata/envelopes/vectors.json} pins the bytes).
 *
 * <p>{@link #open} never throws: any input yields an {@link Envelope} or a {@link Rejected} with the same
 * reason the Python side gives, checked in the same order (unsigned, version, signature, fields).
 */
public final class Envelopes {
    public static final int VERSION = 1;
    private static final Set<String> FIELDS = Set.of("version", "kind", "region", "seq", "sent_at_ms", "payload");
    private static final BigInteger LIMIT = BigInteger.ONE.shiftLeft(63);

    private Envelopes() {
    }

    /** Why a control message changes nothing (the Python {@code Reason} values). */
    public enum Reason {
        UNSIGNED("unsigned"),
        BAD_SIGNATURE("bad-signature"),
        MALFORMED("malformed"),
        UNSUPPORTED_VERSION("unsupported-version"),
        REPLAYED("replayed"),
        /** Genuine, but read where it was not written (a marker copied into another topic). */
        MISPLACED("misplaced");

        private final String wire;

        Reason(String wire) {
            this.wire = wire;
        }

        public String wire() {
            return wire;
        }

        public static Reason fromWire(String wire) {
            for (Reason r : values()) {
                if (r.wire.equals(wire)) {
                    return r;
                }
            }
            throw new IllegalArgumentException("unknown reason " + wire);
        }
    }

    /** What opening or decoding yields: a value or the reason it was refused. */
    public sealed interface Opened permits Envelope, Rejected, Markers.Marker {
    }

    public record Rejected(Reason reason) implements Opened {
    }

    /** A verified envelope. {@code payload} holds {@link Json} values. */
    public record Envelope(String kind, String region, long seq, long sentAtMs, Map<String, Object> payload,
                           long version) implements Opened {
        public Envelope {
            if (kind == null || kind.isEmpty() || region == null || region.isEmpty()) {
                throw new IllegalArgumentException("kind and region must be non-empty strings");
            }
            if (seq < 0 || sentAtMs < 0 || version < 0) {
                throw new IllegalArgumentException("seq, sent_at_ms and version must be in [0, 2**63)");
            }
            payload = Json.sorted(Objects.requireNonNull(payload, "payload"));
        }

        public Envelope(String kind, String region, long seq, long sentAtMs, Map<String, Object> payload) {
            this(kind, region, seq, sentAtMs, payload, VERSION);
        }

        Map<String, Object> fields() {
            Map<String, Object> out = new HashMap<>();
            out.put("version", BigInteger.valueOf(version));
            out.put("kind", kind);
            out.put("region", region);
            out.put("seq", BigInteger.valueOf(seq));
            out.put("sent_at_ms", BigInteger.valueOf(sentAtMs));
            out.put("payload", payload);
            return out;
        }
    }

    /** The lowercase hex HMAC-SHA256 of the canonical encoding of {@code fields}. */
    public static String signature(byte[] key, Map<String, Object> fields) throws Json.JsonException {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            // HMAC pads keys with zeros, so an empty key equals a one-byte zero key (JCE refuses empty ones).
            mac.init(new SecretKeySpec(key.length == 0 ? new byte[1] : key, "HmacSHA256"));
            return HexFormat.of().formatHex(mac.doFinal(Json.canonical(fields)));
        } catch (NoSuchAlgorithmException | InvalidKeyException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    /** The signed wire bytes of {@code envelope}. */
    public static byte[] seal(byte[] key, Envelope envelope) {
        Map<String, Object> fields = envelope.fields();
        try {
            Map<String, Object> signed = new HashMap<>(fields);
            signed.put("sig", signature(key, fields));
            return Json.canonical(signed);
        } catch (Json.JsonException e) {
            throw new IllegalArgumentException("cannot encode envelope: " + e.getMessage(), e);
        }
    }

    /** Verify and decode wire bytes; never throws. */
    public static Opened open(byte[] key, byte[] data) {
        try {
            return openOrThrow(key, data);
        } catch (RuntimeException | StackOverflowError e) {
            return new Rejected(Reason.MALFORMED);
        }
    }

    @SuppressWarnings("unchecked")
    private static Opened openOrThrow(byte[] key, byte[] data) {
        Object parsed;
        try {
            parsed = Json.parse(data);
        } catch (Json.JsonException e) {
            return new Rejected(Reason.MALFORMED);
        }
        if (!(parsed instanceof Map)) {
            return new Rejected(Reason.MALFORMED);
        }
        Map<String, Object> message = new LinkedHashMap<>((Map<String, Object>) parsed);
        Object sig = message.remove("sig");
        if (sig == null) {
            return new Rejected(Reason.UNSIGNED);
        }
        Object version = message.get("version");
        if (!isCount(version)) {
            return new Rejected(Reason.MALFORMED);
        }
        if (!BigInteger.valueOf(VERSION).equals(version)) {
            return new Rejected(Reason.UNSUPPORTED_VERSION);
        }
        String expected;
        try {
            expected = signature(key, message);
        } catch (Json.JsonException e) {
            return new Rejected(Reason.MALFORMED);
        }
        if (!(sig instanceof String s) || !MessageDigest.isEqual(
                expected.getBytes(StandardCharsets.UTF_8), s.getBytes(StandardCharsets.UTF_8))) {
            return new Rejected(Reason.BAD_SIGNATURE);
        }
        if (!message.keySet().equals(FIELDS)) {
            return new Rejected(Reason.MALFORMED);
        }
        Object kind = message.get("kind");
        Object region = message.get("region");
        Object seq = message.get("seq");
        Object sentAt = message.get("sent_at_ms");
        Object payload = message.get("payload");
        if (!(kind instanceof String k) || k.isEmpty() || !(region instanceof String r) || r.isEmpty()
                || !isCount(seq) || !isCount(sentAt) || !(payload instanceof Map)) {
            return new Rejected(Reason.MALFORMED);
        }
        return new Envelope(k, r, ((BigInteger) seq).longValueExact(), ((BigInteger) sentAt).longValueExact(),
                (Map<String, Object>) payload, ((BigInteger) version).longValueExact());
    }

    /** An integer in [0, 2**63) (JSON booleans are not integers here, unlike in Python). */
    public static boolean isCount(Object value) {
        return value instanceof BigInteger n && n.signum() >= 0 && n.compareTo(LIMIT) < 0;
    }

    /** A JSON integer as a long, if it is a count; else null. */
    static Long count(Object value) {
        return isCount(value) ? ((BigInteger) value).longValueExact() : null;
    }

    static boolean isText(Object value) {
        return value instanceof String s && !s.isEmpty();
    }

    static List<Object> pair(long a, long b) {
        return List.of(BigInteger.valueOf(a), BigInteger.valueOf(b));
    }
}
