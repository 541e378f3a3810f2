package io.geosync.plugin.broker;

import io.geosync.plugin.common.MarkerKeys;
import io.geosync.plugin.common.Markers;
import io.netty.buffer.ByteBuf;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.plugin.EntryFilter;
import org.apache.pulsar.broker.service.plugin.FilterContext;
import org.apache.pulsar.common.api.proto.KeyValue;
import org.apache.pulsar.common.api.proto.CompressionType;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hides genuine GeoSync snapshot markers from every subscription except the agents' own, and nothing else.
 *
 * <p>A marker is an ordinary, unbatched, uncompressed message whose entry metadata carries the property
 * {@link Markers#PROPERTY} and whose payload is an envelope an agent signed. The property is application
 * data (any producer can set it), and REJECT makes the broker acknowledge the entry: a filter that trusted
 * the property alone let any producer's message vanish from every subscription while counting as
 * acknowledged (issue 45, case 4). So an entry carrying the property is hidden only once its payload
 * verifies against the regions' public keys ({@link MarkerKeys}: version 2 envelope of the property's kind,
 * signed by a key listed for the region it names); everything else is delivered. The keyring is the file
 * the agents use (public keys only), named by the system property {@code geosync.keyringFile} and read
 * again when it changes (key rotation). Without it nothing verifies: markers are then delivered too, and
 * the load line says so.
 *
 * <p>Cheapest check first: no properties, then the property key, then the subscription name (an agent's
 * subscription, prefix {@code geosync-} or the system property {@code geosync.agentSubscriptionPrefix},
 * gets every entry), then batching and compression, and only then the signature. Geo-replicators are not
 * subscriptions and are not filtered, so markers still replicate.
 *
 * <p>On doubt an entry is ACCEPTed: REJECT acknowledges it, which for an application message would be
 * silent loss. Nothing is ever thrown into the broker.
 */
public class GeoSyncEntryFilter implements EntryFilter {
    private static final Logger log = LoggerFactory.getLogger(GeoSyncEntryFilter.class);
    private static final AtomicLong ERRORS = new AtomicLong();

    private static final long RELOAD_CHECK_MILLIS = 1_000;
    private static final short BROKER_ENTRY_METADATA_MAGIC = 0x0e02;
    private static final short CHECKSUM_MAGIC = 0x0e01;

    private final String agentPrefix;
    private final Path keyringFile;
    private final AtomicLong hidden = new AtomicLong();
    private final AtomicLong delivered = new AtomicLong();
    private volatile MarkerKeys keys = MarkerKeys.NONE;
    private volatile FileTime keysModified;
    private volatile long keysCheckedMillis;
    private volatile long lastErrorLogMillis;

    public GeoSyncEntryFilter() {
        this(System.getProperty("geosync.agentSubscriptionPrefix", "geosync-"),
                System.getProperty("geosync.keyringFile"));
    }

    GeoSyncEntryFilter(String prefix, String keyringFile) {
        this.agentPrefix = prefix == null || prefix.isEmpty() ? "geosync-" : prefix;
        this.keyringFile = keyringFile == null || keyringFile.isEmpty() ? null : Path.of(keyringFile);
        keys();
        log.info("GeoSync entry filter loaded: markers carry property '{}' and an envelope signed by a key of "
                + "keyring {} ({} keys now); genuine ones are delivered only to subscriptions starting with "
                + "'{}' and skipped (REJECT) for every other subscription and reader; any other message "
                + "carrying the property is delivered", Markers.PROPERTY,
                this.keyringFile == null ? "(none: geosync.keyringFile unset, no marker is hidden)"
                        : this.keyringFile, keys.size(), agentPrefix);
    }

    @Override
    public FilterResult filterEntry(Entry entry, FilterContext context) {
        try {
            MessageMetadata metadata = context == null ? null : context.getMsgMetadata();
            if (metadata == null) {
                return FilterResult.ACCEPT;
            }
            int count = metadata.getPropertiesCount();
            if (count == 0) {
                return FilterResult.ACCEPT;
            }
            String kind = markerKind(metadata, count);
            if (kind == null || forAgent(context.getSubscription())) {
                return FilterResult.ACCEPT;
            }
            if (metadata.hasNumMessagesInBatch()
                    || metadata.hasCompression() && metadata.getCompression() != CompressionType.NONE
                    || !keys().genuine(kind, payload(entry))) {
                delivered.incrementAndGet();
                return FilterResult.ACCEPT;
            }
            hidden.incrementAndGet();
            return FilterResult.REJECT;
        } catch (Throwable t) {
            logError(t);
            return FilterResult.ACCEPT;
        }
    }

    private static String markerKind(MessageMetadata metadata, int count) {
        for (int i = 0; i < count; i++) {
            KeyValue kv = metadata.getPropertyAt(i);
            if (Markers.PROPERTY.equals(kv.getKey())) {
                return kv.getValue();
            }
        }
        return null;
    }

    private boolean forAgent(Subscription subscription) {
        String name = subscription == null ? null : subscription.getName();
        return name != null && name.startsWith(agentPrefix);
    }

    /**
     * The entry's payload: after the broker entry metadata (magic 0x0e02, if present), the checksum (magic
     * 0x0e01, if present) and the size-prefixed message metadata, as Pulsar's {@code Commands} writes them.
     */
    private static byte[] payload(Entry entry) {
        ByteBuf buffer = entry.getDataBuffer().duplicate();
        if (buffer.getShort(buffer.readerIndex()) == BROKER_ENTRY_METADATA_MAGIC) {
            buffer.skipBytes(2);
            buffer.skipBytes(buffer.readInt());
        }
        if (buffer.getShort(buffer.readerIndex()) == CHECKSUM_MAGIC) {
            buffer.skipBytes(2 + 4);
        }
        buffer.skipBytes(buffer.readInt());
        byte[] out = new byte[buffer.readableBytes()];
        buffer.readBytes(out);
        return out;
    }

    /** The keyring, read again when its file changed (checked at most once a second). */
    private MarkerKeys keys() {
        if (keyringFile == null) {
            return keys;
        }
        long now = System.currentTimeMillis();
        if (now - keysCheckedMillis < RELOAD_CHECK_MILLIS) {
            return keys;
        }
        keysCheckedMillis = now;
        if (!Files.exists(keyringFile)) {
            return keys; // not written yet (the lab writes it when its first agent starts)
        }
        try {
            FileTime modified = Files.getLastModifiedTime(keyringFile);
            if (!modified.equals(keysModified)) {
                keys = MarkerKeys.load(keyringFile);
                keysModified = modified;
                log.info("GeoSync entry filter: keyring {} read, {} keys", keyringFile, keys.size());
            }
        } catch (Exception e) {
            // Keep the last keys: a keyring rewritten in place may be read half-written.
            logError(e);
        }
        return keys;
    }

    private void logError(Throwable t) {
        ERRORS.incrementAndGet();
        long now = System.currentTimeMillis();
        if (now - lastErrorLogMillis > 60_000) {
            lastErrorLogMillis = now;
            log.warn("GeoSync entry filter: unexpected error (entry accepted unless it was a marker; {} so far)",
                    ERRORS.get(), t);
        }
    }

    /** Markers hidden from non-agent subscriptions since this filter was loaded. */
    public long hiddenMarkers() {
        return hidden.get();
    }

    /** Messages carrying the marker property that were not genuine markers, delivered to applications. */
    public long deliveredNotGenuine() {
        return delivered.get();
    }

    @Override
    public void close() {
        log.info("GeoSync entry filter closed after hiding {} marker deliveries and delivering {} messages "
                + "that carried the marker property without being genuine markers", hidden.get(), delivered.get());
    }
}
