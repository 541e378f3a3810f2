package io.geosync.plugin.common;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

/** The shared wire-format vectors under the repository's {@code testdata/} (also read by the Python tests). */
final class Vectors {
    private Vectors() {
    }

    static Path testdata() {
        String given = System.getProperty("geosync.testdata");
        Path path = given != null ? Path.of(given) : Path.of("..", "..", "testdata");
        if (!Files.isDirectory(path)) {
            throw new IllegalStateException("shared vectors not found at " + path.toAbsolutePath());
        }
        return path;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> load(String name) throws IOException, Json.JsonException {
        return (Map<String, Object>) Json.parse(Files.readAllBytes(testdata().resolve(name).resolve("vectors.json")));
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> list(Map<String, Object> vectors, String key) {
        return (List<Map<String, Object>>) vectors.get(key);
    }

    static byte[] hex(Object text) {
        return HexFormat.of().parseHex((String) text);
    }
}
