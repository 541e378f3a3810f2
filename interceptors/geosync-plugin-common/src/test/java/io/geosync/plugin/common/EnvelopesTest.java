package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.geosync.plugin.common.Envelopes.Envelope;
import io.geosync.plugin.common.Envelopes.Opened;
import io.geosync.plugin.common.Envelopes.Reason;
import io.geosync.plugin.common.Envelopes.Rejected;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

class EnvelopesTest {
    static Map<String, Object> vectors() throws Exception {
        return Vectors.load("envelopes");
    }

    static byte[] key() throws Exception {
        return Vectors.hex(vectors().get("key_hex"));
    }

    static Stream<Map<String, Object>> valid() throws Exception {
        return Vectors.list(vectors(), "valid").stream();
    }

    static Stream<Map<String, Object>> rejected() throws Exception {
        return Vectors.list(vectors(), "rejected").stream();
    }

    @SuppressWarnings("unchecked")
    static Envelope envelopeOf(Map<String, Object> e) {
        return new Envelope((String) e.get("kind"), (String) e.get("region"),
                ((BigInteger) e.get("seq")).longValueExact(), ((BigInteger) e.get("sent_at_ms")).longValueExact(),
                (Map<String, Object>) e.get("payload"), ((BigInteger) e.get("version")).longValueExact());
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest
    @MethodSource("valid")
    void validVectorsSealAndOpenToTheSameBytes(Map<String, Object> vector) throws Exception {
        byte[] wire = Vectors.hex(vector.get("wire_hex"));
        assertArrayEquals(((String) vector.get("wire")).getBytes(StandardCharsets.UTF_8), wire);
        Envelope envelope = envelopeOf((Map<String, Object>) vector.get("envelope"));
        assertArrayEquals(wire, Envelopes.seal(key(), envelope), (String) vector.get("name"));
        assertEquals(envelope, Envelopes.open(key(), wire));
        assertEquals(vector.get("signing_input"),
                new String(Json.canonical(envelope.fields()), StandardCharsets.UTF_8));
        assertEquals(vector.get("signature"), Envelopes.signature(key(), envelope.fields()));
    }

    @ParameterizedTest
    @MethodSource("rejected")
    void rejectedVectorsGiveThePythonReason(Map<String, Object> vector) throws Exception {
        Opened got = Envelopes.open(key(), Vectors.hex(vector.get("wire_hex")));
        assertEquals(new Rejected(Reason.fromWire((String) vector.get("reason"))), got, (String) vector.get("name"));
    }

    @ParameterizedTest
    @ValueSource(strings = {
        "{\"sig\":\"00\",\"version\":1,\"payload\":\"\\ud800\"}",
        "{\"sig\":\"\\ud800\",\"version\":1}",
        "{\"sig\":1,\"version\":1}",
        "{\"sig\":\"00\",\"version\":true}",
        "{\"sig\":\"00\",\"version\":NaN}",
        "{\"sig\":\"00\",\"version\":1e0}",
        "{\"sig\":\"00\",\"version\":01}",
        "{\"sig\":\"00\",\"version\":1} x",
        "\ufeff{}",
        "",
    })
    void edgeCasesAreValues(String text) throws Exception {
        assertInstanceOf(Rejected.class, Envelopes.open(key(), text.getBytes(StandardCharsets.UTF_8)));
    }

    @Test
    void deepNestingIsAValue() throws Exception {
        byte[] deep = ("[".repeat(100_000) + "]".repeat(100_000)).getBytes(StandardCharsets.UTF_8);
        assertEquals(new Rejected(Reason.MALFORMED), Envelopes.open(key(), deep));
    }

    @Test
    void keysSortByCodePointNotUtf16Unit() {
        assertEquals(-1, Integer.signum(Json.compareCodePoints("\ufb01", "\ud83d\ude00")));
        assertEquals(1, Integer.signum("\ufb01".compareTo("\ud83d\ude00")));
    }

    @Test
    void invalidEnvelopesCannotBeBuilt() {
        assertThrows(IllegalArgumentException.class, () -> new Envelope("", "a", 1, 0, Map.of()));
        assertThrows(IllegalArgumentException.class, () -> new Envelope("k", "a", -1, 0, Map.of()));
    }

    @Test
    void garbageNeverThrows() throws Exception {
        Random random = new Random(7);
        byte[] k = key();
        for (int i = 0; i < 5000; i++) {
            byte[] data = new byte[random.nextInt(120)];
            random.nextBytes(data);
            assertInstanceOf(Rejected.class, Envelopes.open(k, data));
        }
    }

    @Test
    void randomEnvelopesRoundTripAndAnyFlippedByteIsRefusedOrInsignificant() throws Exception {
        Random random = new Random(11);
        byte[] k = key();
        for (int i = 0; i < 300; i++) {
            Map<String, Object> payload = new HashMap<>();
            for (int j = random.nextInt(4); j > 0; j--) {
                payload.put(text(random), value(random, 2));
            }
            Envelope e = new Envelope(text(random) + "k", text(random) + "r", random.nextLong() >>> 1,
                    random.nextLong() >>> 1, payload);
            byte[] wire = Envelopes.seal(k, e);
            assertEquals(e, Envelopes.open(k, wire));
            assertEquals(new Rejected(Reason.BAD_SIGNATURE), Envelopes.open("other".getBytes(), wire));
            byte[] altered = wire.clone();
            altered[random.nextInt(altered.length)] ^= (byte) (1 + random.nextInt(255));
            Opened got = Envelopes.open(k, altered);
            if (!(got instanceof Rejected)) {
                assertEquals(e, got);
            }
        }
    }

    private static String text(Random random) {
        int[] pool = {'a', 'z', '"', '\\', '\n', 0x1f, 0x7f, 0xe9, 0xfb01, 0x1f600};
        StringBuilder out = new StringBuilder();
        for (int i = random.nextInt(5); i > 0; i--) {
            out.appendCodePoint(pool[random.nextInt(pool.length)]);
        }
        return out.toString();
    }

    private static Object value(Random random, int depth) {
        int pick = random.nextInt(depth > 0 ? 7 : 5);
        return switch (pick) {
            case 0 -> null;
            case 1 -> random.nextBoolean();
            case 2 -> BigInteger.valueOf(random.nextLong()).multiply(BigInteger.valueOf(random.nextInt(1000)));
            case 3, 4 -> text(random);
            case 5 -> {
                List<Object> list = new ArrayList<>();
                for (int i = random.nextInt(3); i > 0; i--) {
                    list.add(value(random, depth - 1));
                }
                yield list;
            }
            default -> {
                Map<String, Object> map = new HashMap<>();
                for (int i = random.nextInt(3); i > 0; i--) {
                    map.put(text(random), value(random, depth - 1));
                }
                yield map;
            }
        };
    }
}
