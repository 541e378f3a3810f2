package io.geosync.plugin.common;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.X509EncodedKeySpec;
import java.util.Base64;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The regions' public keys, as the agents' keyring lists them, and the one question the entry filter asks
 * of them: is this message a genuine GeoSync marker?
 *
 * <p>Why the filter needs keys: it REJECTs a marker for application subscriptions, and the broker then
 * acknowledges it. A message property is application data, so a filter that trusted the property alone
 * would let any producer make its own messages vanish from every subscription while they count as
 * acknowledged (issue 45, case 4). Only an agent holds a region's private key, so a marker is genuine
 * exactly when its payload is an envelope signed (version 2, Ed25519, {@code controller/geosync_core/
 * envelopes.py}) by a key the keyring lists for the region the envelope names, and the envelope's kind is
 * the property's value. Anything else carrying the property is an application message and is delivered.
 * {@code controller/geosync_core/markers.py}'s {@code is_genuine} answers the same question;
 * {@code testdata/marker-keys/vectors.json} holds both to the same bytes.
 *
 * <p>Keyring text: JSON, or the YAML {@code geoctl} and the lab write ({@code region:} lines, each followed by
 * indented {@code key_id: ed25519:BASE64} lines, or a public key file relative to the keyring's directory).
 * Nothing here throws at a caller that asks {@link #genuine}; loading a bad file throws {@link IOException}
 * with the file's name, never key material.
 */
public final class MarkerKeys {
    /** The keyring with no keys: nothing verifies, so the filter hides nothing. */
    public static final MarkerKeys NONE = new MarkerKeys(Map.of());

    private static final String PUBLIC_PREFIX = "ed25519:";
    private static final byte[] X509_PREFIX = HexFormat.of().parseHex("302a300506032b6570032100");
    private static final BigInteger KEYED_VERSION = BigInteger.TWO;

    /** key id -> (region, public key). */
    private final Map<String, Owned> keys;

    private record Owned(String region, PublicKey key) {
    }

    private MarkerKeys(Map<String, Owned> keys) {
        this.keys = Map.copyOf(keys);
    }

    /** How many keys it holds (for the filter's log line: counts, never keys). */
    public int size() {
        return keys.size();
    }

    /** A keyring from {@code {region: {key_id: public key text}}} (tests and the loader). */
    public static MarkerKeys of(Map<String, Map<String, String>> regions) {
        Map<String, Owned> out = new HashMap<>();
        regions.forEach((region, ids) -> ids.forEach((keyId, text) -> {
            Owned previous = out.put(keyId, new Owned(region, publicKey(text)));
            if (previous != null && !previous.region().equals(region)) {
                throw new IllegalArgumentException("key id " + keyId + " is listed under two regions");
            }
        }));
        return new MarkerKeys(out);
    }

    /** The keyring in {@code file}. */
    public static MarkerKeys load(Path file) throws IOException {
        String text = Files.readString(file, StandardCharsets.UTF_8);
        Map<String, Map<String, String>> regions;
        try {
            regions = text.stripLeading().startsWith("{") ? fromJson(text) : fromYaml(text);
        } catch (RuntimeException | Json.JsonException e) {
            throw new IOException("keyring file " + file + " is not a mapping {region: {key_id: public key}}");
        }
        Map<String, Map<String, String>> resolved = new LinkedHashMap<>();
        for (var region : regions.entrySet()) {
            Map<String, String> ids = new LinkedHashMap<>();
            for (var id : region.getValue().entrySet()) {
                String value = id.getValue();
                if (!value.startsWith(PUBLIC_PREFIX)) {
                    Path keyFile = file.toAbsolutePath().getParent().resolve(value);
                    value = Files.readString(keyFile, StandardCharsets.UTF_8).strip();
                }
                ids.put(id.getKey(), value);
            }
            resolved.put(region.getKey(), ids);
        }
        try {
            return of(resolved);
        } catch (IllegalArgumentException e) {
            throw new IOException("keyring file " + file + ": a key is not an Ed25519 public key or is listed twice");
        }
    }

    /**
     * Whether {@code payload}, the payload of a message whose property {@link Markers#PROPERTY} is
     * {@code kind}, is a marker an agent wrote: a version 2 envelope of that kind, signed by a key listed for
     * the region it names. Never throws.
     */
    @SuppressWarnings("unchecked")
    public boolean genuine(String kind, byte[] payload) {
        if (keys.isEmpty() || kind == null || payload == null) {
            return false;
        }
        try {
            if (!(Json.parse(payload) instanceof Map<?, ?> parsed)) {
                return false;
            }
            Map<String, Object> fields = new HashMap<>((Map<String, Object>) parsed);
            if (!(fields.remove("sig") instanceof String sig) || !KEYED_VERSION.equals(fields.get("version"))
                    || !kind.equals(fields.get("kind")) || !(fields.get("key_id") instanceof String keyId)) {
                return false;
            }
            Owned owner = keys.get(keyId);
            if (owner == null || !owner.region().equals(fields.get("region"))) {
                return false;
            }
            Signature verifier = Signature.getInstance("Ed25519");
            verifier.initVerify(owner.key());
            verifier.update(Json.canonical(fields));
            return verifier.verify(HexFormat.of().parseHex(sig));
        } catch (Json.JsonException | GeneralSecurityException | RuntimeException | StackOverflowError e) {
            return false;
        }
    }

    private static PublicKey publicKey(String text) {
        String t = text.strip();
        if (!t.startsWith(PUBLIC_PREFIX)) {
            throw new IllegalArgumentException("not an Ed25519 public key");
        }
        byte[] raw = Base64.getDecoder().decode(t.substring(PUBLIC_PREFIX.length()));
        if (raw.length != 32) {
            throw new IllegalArgumentException("not an Ed25519 public key");
        }
        byte[] der = new byte[X509_PREFIX.length + raw.length];
        System.arraycopy(X509_PREFIX, 0, der, 0, X509_PREFIX.length);
        System.arraycopy(raw, 0, der, X509_PREFIX.length, raw.length);
        try {
            return KeyFactory.getInstance("Ed25519").generatePublic(new X509EncodedKeySpec(der));
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException("not an Ed25519 public key", e);
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Map<String, String>> fromJson(String text) throws Json.JsonException {
        Map<String, Map<String, String>> out = new LinkedHashMap<>();
        for (var region : ((Map<String, Object>) Json.parse(text.getBytes(StandardCharsets.UTF_8))).entrySet()) {
            Map<String, String> ids = new LinkedHashMap<>();
            ((Map<String, Object>) region.getValue()).forEach((k, v) -> ids.put(k, (String) v));
            out.put(region.getKey(), ids);
        }
        return out;
    }

    /** The two-level block mapping {@code yaml.safe_dump} writes for a keyring (plain or quoted scalars). */
    private static Map<String, Map<String, String>> fromYaml(String text) {
        Map<String, Map<String, String>> out = new LinkedHashMap<>();
        Map<String, String> current = null;
        for (String line : List.of(text.split("\n"))) {
            String content = line.stripTrailing();
            if (content.isBlank() || content.stripLeading().startsWith("#")) {
                continue;
            }
            int colon = content.indexOf(':');
            if (colon < 0) {
                throw new IllegalArgumentException("not a mapping line");
            }
            String key = scalar(content.substring(0, colon));
            String value = scalar(content.substring(colon + 1));
            if (!Character.isWhitespace(content.charAt(0))) {
                if (!value.isEmpty()) {
                    throw new IllegalArgumentException("a region must map key ids to keys");
                }
                current = new LinkedHashMap<>();
                out.put(key, current);
            } else if (current == null || value.isEmpty()) {
                throw new IllegalArgumentException("a key id outside a region");
            } else {
                current.put(key, value);
            }
        }
        return out;
    }

    private static String scalar(String raw) {
        String s = raw.strip();
        if (s.length() >= 2 && (s.startsWith("'") && s.endsWith("'") || s.startsWith("\"") && s.endsWith("\""))) {
            return s.substring(1, s.length() - 1);
        }
        return s;
    }
}
