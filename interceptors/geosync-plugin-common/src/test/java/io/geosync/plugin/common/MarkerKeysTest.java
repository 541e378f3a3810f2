package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** Issue 45, case 4: only a marker an agent signed is genuine; the property alone is application data. */
class MarkerKeysTest {
    static Map<String, Object> vectors() throws Exception {
        return Vectors.load("marker-keys");
    }

    @SuppressWarnings("unchecked")
    static MarkerKeys keyring() throws Exception {
        Map<String, Map<String, String>> regions = new LinkedHashMap<>();
        ((Map<String, Object>) vectors().get("keyring")).forEach((region, ids) -> {
            Map<String, String> out = new LinkedHashMap<>();
            ((Map<String, Object>) ids).forEach((k, v) -> out.put(k, (String) v));
            regions.put(region, out);
        });
        return MarkerKeys.of(regions);
    }

    static Stream<Map<String, Object>> genuine() throws Exception {
        return Vectors.list(vectors(), "genuine").stream();
    }

    static Stream<Map<String, Object>> forged() throws Exception {
        return Vectors.list(vectors(), "forged").stream();
    }

    @SuppressWarnings("unchecked")
    static String kind(Map<String, Object> vector) {
        return (String) ((Map<String, Object>) vector.get("properties")).get(Markers.PROPERTY);
    }

    @ParameterizedTest
    @MethodSource("genuine")
    void aMarkerAnAgentSignedIsGenuine(Map<String, Object> vector) throws Exception {
        assertTrue(keyring().genuine(kind(vector), Vectors.hex(vector.get("wire_hex"))), (String) vector.get("name"));
    }

    @ParameterizedTest
    @MethodSource("forged")
    void anApplicationMessageCarryingThePropertyIsNotGenuine(Map<String, Object> vector) throws Exception {
        assertFalse(keyring().genuine(kind(vector), Vectors.hex(vector.get("wire_hex"))), (String) vector.get("name"));
    }

    @Test
    void withoutKeysNothingIsGenuine() throws Exception {
        Map<String, Object> first = Vectors.list(vectors(), "genuine").get(0);
        assertFalse(MarkerKeys.NONE.genuine(kind(first), Vectors.hex(first.get("wire_hex"))));
    }

    @Test
    void randomPayloadsAreNeverGenuineAndNeverThrow() throws Exception {
        MarkerKeys keys = keyring();
        Random random = new Random(45);
        for (int i = 0; i < 2000; i++) {
            byte[] payload = new byte[random.nextInt(300)];
            random.nextBytes(payload);
            assertFalse(keys.genuine("snapshot-request", payload));
        }
    }

    @Test
    void theKeyringFileTheLabWritesLoads(@TempDir Path dir) throws Exception {
        Map<String, Object> first = Vectors.list(vectors(), "genuine").get(0);
        @SuppressWarnings("unchecked")
        Map<String, Map<String, String>> ring = (Map<String, Map<String, String>>) (Map<?, ?>) vectors().get("keyring");
        String aKey = ring.get("a").get("a-1");
        Files.writeString(dir.resolve("b-1.pub"), ring.get("b").get("b-1") + "\n");
        // What yaml.safe_dump writes for {a: {a-1: key}, b: {b-1: file}}, one value quoted.
        Path yaml = dir.resolve("keyring.yaml");
        Files.writeString(yaml, "a:\n  a-1: " + aKey + "\nb:\n  'b-1': b-1.pub\n", StandardCharsets.UTF_8);
        MarkerKeys loaded = MarkerKeys.load(yaml);
        assertTrue(loaded.genuine(kind(first), Vectors.hex(first.get("wire_hex"))));
        Map<String, Object> second = Vectors.list(vectors(), "genuine").get(1);
        assertTrue(loaded.genuine(kind(second), Vectors.hex(second.get("wire_hex"))));
        Path json = dir.resolve("keyring.json");
        Files.writeString(json, "{\"a\": {\"a-1\": \"" + aKey + "\"}}");
        assertTrue(MarkerKeys.load(json).genuine(kind(first), Vectors.hex(first.get("wire_hex"))));
        Files.writeString(yaml, "- not a mapping\n");
        assertThrows(IOException.class, () -> MarkerKeys.load(yaml));
    }
}
