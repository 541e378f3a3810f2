package io.geosync.plugin.broker;

import io.geosync.plugin.common.Markers;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.plugin.EntryFilter;
import org.apache.pulsar.broker.service.plugin.FilterContext;
import org.apache.pulsar.common.api.proto.KeyValue;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hides GeoSync snapshot markers from every subscription except the agents' own.
 *
 * <p>A marker is an ordinary message whose entry metadata carries the property {@link Markers#PROPERTY}
 * (any value: the key alone decides, so a marker with a garbled value is still hidden). The filter looks at
 * the already parsed metadata only, never at the payload, cheapest check first: no properties at all,
 * then the property key, then the subscription name. A marker is delivered to subscriptions whose name
 * starts with the agent prefix ({@code geosync-} by default; the system property
 * {@code geosync.agentSubscriptionPrefix} changes it) and REJECTed (skipped and acknowledged by the broker)
 * for every other subscription, readers included. Geo-replicators are not subscriptions and are not
 * filtered, so markers still replicate.
 *
 * <p>On doubt: an entry that may not be a marker is ACCEPTed (REJECT acknowledges it, which for an
 * application message would be silent loss); an entry known to be a marker whose subscription cannot be
 * named is REJECTed (the worst case is an agent missing one marker, which the snapshot protocol survives
 * by timing the snapshot out and starting another; an application never receives bytes it cannot parse).
 * Nothing is ever thrown into the broker. Markers must be published unbatched: a batch's per-message
 * properties are not in the entry metadata, and a batch is filtered as a whole.
 */
public class GeoSyncEntryFilter implements EntryFilter {
    private static final Logger log = LoggerFactory.getLogger(GeoSyncEntryFilter.class);
    private static final AtomicLong ERRORS = new AtomicLong();

    private final String agentPrefix;
    private final AtomicLong hidden = new AtomicLong();
    private volatile long lastErrorLogMillis;

    public GeoSyncEntryFilter() {
        String prefix = System.getProperty("geosync.agentSubscriptionPrefix", "geosync-");
        this.agentPrefix = prefix == null || prefix.isEmpty() ? "geosync-" : prefix;
        log.info("GeoSync entry filter loaded: markers carry property '{}'; delivered only to subscriptions "
                + "starting with '{}'; every other subscription and reader has them skipped (REJECT)",
                Markers.PROPERTY, agentPrefix);
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
            if (!hasMarkerProperty(metadata, count)) {
                return FilterResult.ACCEPT;
            }
            return forMarker(context.getSubscription());
        } catch (Throwable t) {
            logError(t);
            return FilterResult.ACCEPT;
        }
    }

    private static boolean hasMarkerProperty(MessageMetadata metadata, int count) {
        for (int i = 0; i < count; i++) {
            KeyValue kv = metadata.getPropertyAt(i);
            if (Markers.PROPERTY.equals(kv.getKey())) {
                return true;
            }
        }
        return false;
    }

    private FilterResult forMarker(Subscription subscription) {
        try {
            String name = subscription == null ? null : subscription.getName();
            if (name != null && name.startsWith(agentPrefix)) {
                return FilterResult.ACCEPT;
            }
        } catch (Throwable t) {
            logError(t);
        }
        hidden.incrementAndGet();
        return FilterResult.REJECT;
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

    @Override
    public void close() {
        log.info("GeoSync entry filter closed after hiding {} marker deliveries", hidden.get());
    }
}
