package io.geosync.plugin.common;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The strict JSON subset GeoSync's wire formats use, read and written exactly as the Python core does
 * ({@code controller/geosync_core/envelopes.py}).
 *
 * <p>Values are {@code Map<String, Object>} (objects), {@code List<Object>}, {@code String},
 * {@code BigInteger} (integers of any size), {@code Boolean} and {@code null}. Parsing refuses what the
 * Python side refuses: invalid UTF-8, floats, NaN and infinities, duplicate keys, raw control characters
 * in strings, integers longer than Python's 4300 digits, and trailing text. Canonical writing sorts object
 * keys by Unicode code point, uses no whitespace, writes everything raw as UTF-8 except the escapes for
 * the quote, the backslash, backspace, form feed, newline, carriage return and tab (two-character
 * escapes) and the other U+0000..U+001F (six-character escapes in lowercase hex), and refuses lone
 * surrogates.
 */
public final class Json {
    /** Nesting deeper than this is refused (Python's recursion limit refuses it too, a little later). */
    static final int MAX_DEPTH = 900;
    private static final int MAX_DIGITS = 4300;

    private Json() {
    }

    /** Thrown for anything that is not a value of the subset (a value, never a broker-visible error). */
    public static final class JsonException extends Exception {
        public JsonException(String message) {
            super(message, null, false, false);
        }
    }

    public static Object parse(byte[] utf8) throws JsonException {
        String text;
        try {
            CharBuffer chars = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(utf8));
            text = chars.toString();
        } catch (CharacterCodingException e) {
            throw new JsonException("not UTF-8");
        }
        Parser p = new Parser(text);
        p.skipSpace();
        Object value = p.value(0);
        p.skipSpace();
        if (p.pos != text.length()) {
            throw new JsonException("trailing text at " + p.pos);
        }
        return value;
    }

    /** The canonical UTF-8 bytes of {@code value}. */
    public static byte[] canonical(Object value) throws JsonException {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString().getBytes(StandardCharsets.UTF_8);
    }

    @SuppressWarnings("unchecked")
    private static void write(StringBuilder out, Object value) throws JsonException {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean b) {
            out.append(b ? "true" : "false");
        } else if (value instanceof BigInteger || value instanceof Long || value instanceof Integer) {
            out.append(value.toString());
        } else if (value instanceof String s) {
            writeString(out, s);
        } else if (value instanceof List<?> list) {
            out.append('[');
            for (int i = 0; i < list.size(); i++) {
                if (i > 0) {
                    out.append(',');
                }
                write(out, list.get(i));
            }
            out.append(']');
        } else if (value instanceof Map<?, ?> map) {
            List<String> keys = new ArrayList<>();
            for (Object k : map.keySet()) {
                if (!(k instanceof String)) {
                    throw new JsonException("object keys must be strings");
                }
                keys.add((String) k);
            }
            keys.sort(Json::compareCodePoints);
            out.append('{');
            boolean first = true;
            for (String k : keys) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeString(out, k);
                out.append(':');
                write(out, ((Map<String, Object>) map).get(k));
            }
            out.append('}');
        } else {
            throw new JsonException("not a JSON value of the subset: " + value.getClass().getSimpleName());
        }
    }

    private static void writeString(StringBuilder out, String s) throws JsonException {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                    out.append(c).append(s.charAt(++i));
                    continue;
                }
                throw new JsonException("lone surrogate");
            }
            if (Character.isLowSurrogate(c)) {
                throw new JsonException("lone surrogate");
            }
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    /** Python orders str by code point; Java's compareTo by UTF-16 unit differs above U+FFFF. */
    static int compareCodePoints(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int ca = a.codePointAt(i);
            int cb = b.codePointAt(j);
            if (ca != cb) {
                return Integer.compare(ca, cb);
            }
            i += Character.charCount(ca);
            j += Character.charCount(cb);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    private static final class Parser {
        private final String s;
        private int pos;

        Parser(String s) {
            this.s = s;
        }

        void skipSpace() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                    pos++;
                } else {
                    return;
                }
            }
        }

        private JsonException error(String what) {
            return new JsonException(what + " at " + pos);
        }

        Object value(int depth) throws JsonException {
            if (depth > MAX_DEPTH) {
                throw error("nested too deeply");
            }
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            char c = s.charAt(pos);
            switch (c) {
                case '{':
                    return object(depth);
                case '[':
                    return array(depth);
                case '"':
                    return string();
                case 't':
                    return literal("true", Boolean.TRUE);
                case 'f':
                    return literal("false", Boolean.FALSE);
                case 'n':
                    return literal("null", null);
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return number();
                    }
                    throw error("unexpected character");
            }
        }

        private Object literal(String word, Object value) throws JsonException {
            if (!s.startsWith(word, pos)) {
                throw error("unexpected literal");
            }
            pos += word.length();
            return value;
        }

        private Map<String, Object> object(int depth) throws JsonException {
            pos++;
            Map<String, Object> out = new LinkedHashMap<>();
            skipSpace();
            if (pos < s.length() && s.charAt(pos) == '}') {
                pos++;
                return out;
            }
            while (true) {
                skipSpace();
                if (pos >= s.length() || s.charAt(pos) != '"') {
                    throw error("expected a key");
                }
                String key = string();
                skipSpace();
                expect(':');
                skipSpace();
                Object v = value(depth + 1);
                if (out.containsKey(key)) {
                    throw error("duplicate key");
                }
                out.put(key, v);
                skipSpace();
                if (pos < s.length() && s.charAt(pos) == ',') {
                    pos++;
                    continue;
                }
                expect('}');
                return out;
            }
        }

        private List<Object> array(int depth) throws JsonException {
            pos++;
            List<Object> out = new ArrayList<>();
            skipSpace();
            if (pos < s.length() && s.charAt(pos) == ']') {
                pos++;
                return out;
            }
            while (true) {
                skipSpace();
                out.add(value(depth + 1));
                skipSpace();
                if (pos < s.length() && s.charAt(pos) == ',') {
                    pos++;
                    continue;
                }
                expect(']');
                return out;
            }
        }

        private void expect(char c) throws JsonException {
            if (pos >= s.length() || s.charAt(pos) != c) {
                throw error("expected '" + c + "'");
            }
            pos++;
        }

        private String string() throws JsonException {
            pos++;
            StringBuilder out = new StringBuilder();
            while (true) {
                if (pos >= s.length()) {
                    throw error("unterminated string");
                }
                char c = s.charAt(pos++);
                if (c == '"') {
                    return out.toString();
                }
                if (c < 0x20) {
                    throw error("control character in string");
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                if (pos >= s.length()) {
                    throw error("unterminated escape");
                }
                char e = s.charAt(pos++);
                switch (e) {
                    case '"' -> out.append('"');
                    case '\\' -> out.append('\\');
                    case '/' -> out.append('/');
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'u' -> {
                        if (pos + 4 > s.length()) {
                            throw error("short \\u escape");
                        }
                        int code = 0;
                        for (int k = 0; k < 4; k++) {
                            int d = Character.digit(s.charAt(pos + k), 16);
                            if (d < 0 || s.charAt(pos + k) > 'f') {
                                throw error("bad \\u escape");
                            }
                            code = code * 16 + d;
                        }
                        pos += 4;
                        out.append((char) code);
                    }
                    default -> throw error("bad escape");
                }
            }
        }

        private BigInteger number() throws JsonException {
            int start = pos;
            if (s.charAt(pos) == '-') {
                pos++;
            }
            int digitsStart = pos;
            if (pos < s.length() && s.charAt(pos) == '0') {
                pos++;
            } else {
                while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
                    pos++;
                }
            }
            if (pos == digitsStart) {
                throw error("expected digits");
            }
            if (pos < s.length()) {
                char c = s.charAt(pos);
                if (c == '.' || c == 'e' || c == 'E') {
                    throw error("not an integer");
                }
            }
            if (pos - digitsStart > MAX_DIGITS) {
                throw error("integer too long");
            }
            return new BigInteger(s.substring(start, pos));
        }
    }

    /** An unmodifiable, key-sorted copy (for equality and printing; order does not matter on the wire). */
    public static Map<String, Object> sorted(Map<String, Object> map) {
        Map<String, Object> out = new TreeMap<>(Json::compareCodePoints);
        out.putAll(map);
        return Collections.unmodifiableMap(out);
    }
}
