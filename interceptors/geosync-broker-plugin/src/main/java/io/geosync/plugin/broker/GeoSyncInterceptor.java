package io.geosync.plugin.broker;

import io.geosync.plugin.common.AckFeed;
import io.geosync.plugin.common.Json;
import io.geosync.plugin.common.OriginIndex;
import io.geosync.plugin.common.PluginAccess;
import io.geosync.plugin.common.PluginApi;
import io.netty.buffer.ByteBuf;
import java.io.IOException;
import java.math.BigInteger;
import java.net.InetAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import javax.servlet.FilterChain;
import javax.servlet.ServletException;
import javax.servlet.ServletRequest;
import javax.servlet.ServletResponse;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.intercept.BrokerInterceptor;
import org.apache.pulsar.broker.service.Consumer;
import org.apache.pulsar.broker.service.Producer;
import org.apache.pulsar.broker.service.ServerCnx;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.KeyValue;
import org.apache.pulsar.common.api.proto.MessageIdData;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.protocol.Commands;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Records, as entries are persisted, which region each local entry came from, and serves it to the
 * region's agent.
 *
 * <p>Why: a replicated copy carries its origin position ({@code __MSG_PROP_REPL_SOURCE_POSITION}) but not
 * its origin region. With three or more regions the agent must otherwise guess from producer names or ask
 * the admin API once per entry. The broker knows exactly: a replicated entry is published by the
 * replicator producer of its origin region ({@link Producer#isRemote()}, {@link Producer#getRemoteCluster()}),
 * and Pulsar never re-replicates a replicated message, so the remote cluster is the origin.
 *
 * <p>{@code messageProduced} appends {@code (ledger, entry, origin)} to a bounded {@link OriginIndex}
 * (local entries under the local region), and for a replicated entry also its source position: the
 * broker's deduplication step parses the entry's {@code __MSG_PROP_REPL_SOURCE_POSITION} into the publish
 * context ({@code long[] {ledger, entry}}) for every replicator producer, whether deduplication is on or not
 * (Pulsar 4.0). The agent needs it for batched entries, whose stamp its client does not show. A replicated
 * entry without that property is recorded without a source, never with a guessed one. The agent reads runs
 * of {@code (ledger, first entry, count, origin[, source ledger, source first entry])} with {@code GET
 * /admin/v2/geosync/origins?topic=persistent://t/ns/x[&from=L:E]}; {@code GET
 * /admin/v2/geosync/status} shows the configuration and counters. Both are answered in {@code onFilter},
 * which runs before the broker's authentication filter, so the interceptor checks callers itself ({@link
 * PluginAccess}): reads are served to loopback clients only (the agent is a sidecar) unless {@code
 * geosyncOriginIndexAllowRemoteReads=true}, cursor writes to loopback clients only, always; and where the
 * broker has {@code authenticationEnabled}, the request must authenticate with the broker's own
 * authentication service (401 otherwise) as a superuser or a role of {@code geosyncAdminRoles} (403
 * otherwise). Entries the index does not
 * hold (written before this broker owned the topic, evicted, or broker-written PIP-33 markers) are simply
 * absent: the agent falls back to its own resolution for them.
 *
 * <p>It also gives the agent a change feed of acknowledgements: {@code messageAcked} records which durable
 * subscription a consumer acknowledged on ({@link AckFeed}), and {@code GET
 * /admin/v2/geosync/cursors?since=N} answers the cursor state of the subscriptions acknowledged since the
 * feed's sequence number {@code N} (plus those acknowledged within the last {@code
 * geosyncAckFeedSettleMillis}), with the feed's {@code epoch} (new at each broker start) and current {@code
 * seq}: one cheap call per agent round instead of polling every topic's internal stats. Beside the cursor
 * states, the answer carries what consumers acknowledged ({@code acked}, {@code acked_version} 1: ranges,
 * batch indexes and the highest cumulative position per subscription, recorded from each acknowledgement
 * command; see {@link PluginApi#feed(String, long, List, List, long)}), handed over again in every answer
 * until a read's {@code since} (and {@code epoch}, when given) names an answer that carried it. Each cursor state
 * includes its partly acknowledged batch entries ({@code batches}: position and the indexes still
 * unacknowledged) when the broker runs with {@code acknowledgmentAtBatchIndexLevelEnabled=true}, at most
 * {@link CursorDesk#MAX_REPORTED_BATCHES} per answer ({@code "batches_truncated": true} beyond): {@code GET
 * /admin/v2/geosync/cursor?topic=T&subscription=S&after=L:E} answers one cursor's state with the partly
 * acknowledged entries above {@code after}, the next page. With {@code
 * geosyncAllowCursorWrites=true}, {@code POST /admin/v2/geosync/acks} acknowledges on subscriptions of
 * topics this broker has loaded ({@link CursorDesk}): a batch of mark-delete moves, individual
 * acknowledgements and batch-index acknowledgements in one call (shapes and rules: {@link PluginApi}), where the admin API has one {@code expireMessages} per subscription and,
 * before PIP-423, no way at all to acknowledge one message. {@code GET
 * /admin/v2/geosync/subscriptions?namespace=t/ns} lists the subscriptions and replicators of the namespace's
 * topics this broker has loaded ({@link TopicLister}): the agent's discovery reads it instead of every
 * topic's stats.
 *
 * <p>Every hook is implemented and none throws into the broker: our own work is wrapped and counted; the
 * broker's own filter chain is called outside that wrapping so its errors stay its own.
 *
 * <p>standalone.conf / broker.conf keys (all optional): {@code geosyncOriginIndexMaxTopics} (1000),
 * {@code geosyncOriginIndexMaxRunsPerTopic} (1024), {@code geosyncOriginIndexAllowRemoteReads} (false, also
 * governs the cursor feed and status; never the writes), {@code geosyncAckFeedMaxSubscriptions} (100000),
 * {@code geosyncAckFeedSettleMillis} (500), {@code geosyncAckedMaxItemsPerSubscription} (10000: ranges plus
 * partly acknowledged batches one subscription's acknowledged set holds before it is marked
 * {@code overflowed}), {@code geosyncAckedMaxItems} (1000000, the same over all subscriptions: about 90 bytes of heap each), {@code
 * geosyncAllowCursorWrites} (false), {@code
 * geosyncAdminRoles} (none: superusers only, where the broker authenticates).
 */
public class GeoSyncInterceptor implements BrokerInterceptor {
    static final String PREFIX = "/admin/v2/geosync/";
    static final int MAX_ACKS_BODY = 4 * 1024 * 1024;
    /** The publish-context property Pulsar's deduplication sets for replicator producers. */
    static final String SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION";
    /** Publish-context key for the last source-position property of a replicated entry (the replicator's). */
    static final String REPLICATOR_SOURCE = "geosync.replicatorSourcePosition";
    private static final Logger log = LoggerFactory.getLogger(GeoSyncInterceptor.class);

    private volatile OriginIndex index = new OriginIndex(1000, 1024);
    private volatile String region = "unknown";
    private volatile boolean allowRemoteReads;
    private volatile Map<String, Object> configuration = Map.of();
    private volatile AckFeed feed = new AckFeed(100_000);
    private volatile CursorDesk desk;
    private volatile TopicLister lister;
    private volatile boolean allowCursorWrites;
    private volatile PulsarService pulsar;
    private volatile boolean authenticate;
    private volatile Set<String> superUsers = Set.of();
    private volatile Set<String> adminRoles = Set.of();
    private volatile long settleNanos = 500_000_000L;
    private final String epoch = UUID.randomUUID().toString();
    private final AtomicLong cursorWrites = new AtomicLong();
    private final AtomicLong replicatedRecorded = new AtomicLong();
    private final AtomicLong replicatedWithoutSource = new AtomicLong();
    private final AtomicLong requestsServed = new AtomicLong();
    private final AtomicLong requestsRefused = new AtomicLong();
    private final AtomicLong errors = new AtomicLong();
    private final AtomicLong repliesAbandoned = new AtomicLong();
    private final AtomicLong transactionalAcksSkipped = new AtomicLong();
    private final AtomicLong acksBeyondLastEntry = new AtomicLong();
    private volatile boolean batchIndexAcks;
    private volatile long lastErrorLogMillis;

    @Override
    public void initialize(PulsarService pulsar) {
        try {
            Properties props = pulsar.getConfiguration().getProperties();
            int maxTopics = intProperty(props, "geosyncOriginIndexMaxTopics", 1000);
            int maxRuns = intProperty(props, "geosyncOriginIndexMaxRunsPerTopic", 1024);
            allowRemoteReads = Boolean.parseBoolean(props.getProperty("geosyncOriginIndexAllowRemoteReads", "false")
                    .trim());
            index = new OriginIndex(maxTopics, maxRuns);
            feed = new AckFeed(intProperty(props, "geosyncAckFeedMaxSubscriptions", 100_000),
                    intProperty(props, "geosyncAckedMaxItemsPerSubscription", 10_000),
                    intProperty(props, "geosyncAckedMaxItems", 1_000_000));
            batchIndexAcks = pulsar.getConfiguration().isAcknowledgmentAtBatchIndexLevelEnabled();
            settleNanos = intProperty(props, "geosyncAckFeedSettleMillis", 500) * 1_000_000L;
            allowCursorWrites = Boolean.parseBoolean(props.getProperty("geosyncAllowCursorWrites", "false").trim());
            desk = new CursorDesk(pulsar);
            lister = new TopicLister(pulsar);
            region = pulsar.getConfiguration().getClusterName();
            this.pulsar = pulsar;
            authenticate = pulsar.getConfiguration().isAuthenticationEnabled();
            superUsers = Set.copyOf(pulsar.getConfiguration().getSuperUserRoles());
            adminRoles = PluginAccess.roles(props.getProperty(PluginAccess.ADMIN_ROLES_KEY));
            Map<String, Object> conf = new HashMap<>();
            conf.put("geosyncOriginIndexMaxTopics", BigInteger.valueOf(maxTopics));
            conf.put("geosyncOriginIndexMaxRunsPerTopic", BigInteger.valueOf(maxRuns));
            conf.put("geosyncOriginIndexAllowRemoteReads", allowRemoteReads);
            conf.put("geosyncAllowCursorWrites", allowCursorWrites);
            conf.put("authenticationEnabled", authenticate);
            conf.put(PluginAccess.ADMIN_ROLES_KEY, String.join(",", new TreeSet<>(adminRoles)));
            conf.put("geosyncAckFeedSettleMillis", BigInteger.valueOf(settleNanos / 1_000_000L));
            conf.put("acknowledgmentAtBatchIndexLevelEnabled",
                    pulsar.getConfiguration().isAcknowledgmentAtBatchIndexLevelEnabled());
            conf.put("entryFilterNames", String.join(",", pulsar.getConfiguration().getEntryFilterNames()));
            configuration = conf;
            log.info("GeoSync interceptor loaded in region '{}': origin index of at most {} topics x {} runs; "
                    + "reads served at {} to {} clients, cursor writes {} to loopback clients; callers {}; "
                    + "entry filters configured: {}",
                    region, maxTopics, maxRuns, PREFIX, allowRemoteReads ? "all" : "loopback",
                    allowCursorWrites ? "on," : "off,",
                    authenticate ? "authenticated as a superuser or one of " + PluginAccess.ADMIN_ROLES_KEY + "="
                            + conf.get(PluginAccess.ADMIN_ROLES_KEY) : "not authenticated (authenticationEnabled=false)",
                    conf.get("entryFilterNames"));
        } catch (Throwable t) {
            error("initialize (running with defaults)", t);
        }
    }

    private static int intProperty(Properties props, String key, int fallback) {
        String value = props.getProperty(key);
        if (value == null || value.isBlank()) {
            return fallback;
        }
        try {
            int n = Integer.parseInt(value.trim());
            return n > 0 ? n : fallback;
        } catch (NumberFormatException e) {
            log.warn("GeoSync interceptor: {}={} is not a positive integer; using {}", key, value, fallback);
            return fallback;
        }
    }

    // -- the hooks that pay their way --------------------------------------------------------------------

    @Override
    public void messageProduced(ServerCnx cnx, Producer producer, long startTimeNs, long ledgerId, long entryId,
                                Topic.PublishContext publishContext) {
        try {
            if (producer == null || ledgerId < 0 || entryId < 0) {
                return;
            }
            String topic = producer.getTopic().getName();
            if (!producer.isRemote()) {
                index.record(topic, ledgerId, entryId, region, startTimeNs);
                return;
            }
            String origin = producer.getRemoteCluster();
            if (origin == null || origin.isEmpty()) {
                return;   // a shadow-topic copy or an unparseable replicator name: leave a gap, no guess
            }
            long[] source = sourcePosition(publishContext);
            if (source == null) {
                replicatedWithoutSource.incrementAndGet();
                index.record(topic, ledgerId, entryId, origin, startTimeNs);
            } else {
                index.record(topic, ledgerId, entryId, origin, source[0], source[1], startTimeNs);
            }
            replicatedRecorded.incrementAndGet();
        } catch (Throwable t) {
            error("messageProduced", t);
        }
    }

    /** The replicated entry's position in its origin region, or null if the broker did not parse one. */
    static long[] sourcePosition(Topic.PublishContext publishContext) {
        if (publishContext == null) {
            return null;
        }
        Object value = publishContext.getProperty(REPLICATOR_SOURCE);
        if (!(value instanceof long[])) {
            value = publishContext.getProperty(SOURCE_POSITION);   // the broker's parse (the first stamp)
        }
        if (value instanceof long[] p && p.length >= 2 && p[0] >= 0 && p[1] >= 0) {
            return p;
        }
        return null;
    }

    @Override
    public void messageAcked(ServerCnx cnx, Consumer consumer, CommandAck ackCmd) {
        // Pulsar 4.0 (ServerCnx.handleAck) calls this once Consumer.messageAcked's future completed without
        // error, with a copy of the command made before it was handed on (new CommandAck().copyFrom(ack)
        // when an interceptor is configured): ackCmd is ours to read, not the connection's reusable object.
        try {
            if (consumer != null && consumer.getSubscription() instanceof PersistentSubscription ps
                    && ps.getCursor().isDurable()) {
                String topic = ps.getTopicName();
                String name = ps.getName();
                feed.record(topic, name, System.nanoTime());
                recordAcked(topic, name, ps, ackCmd);
            }
        } catch (Throwable t) {
            error("messageAcked", t);
        }
    }

    /**
     * What the consumer acknowledged, into the subscription's {@link io.geosync.plugin.common.AckedPositions}:
     * never a transactional acknowledgement (it counts only once its transaction commits, which no hook
     * shows: re-delivery, never loss), never a position above the topic's last entry (the cursor ignores
     * those; a cumulative one is clamped to it), and batch indexes only where the broker keeps them
     * ({@code acknowledgmentAtBatchIndexLevelEnabled}; otherwise the cursor ignores a partial ack set too).
     */
    private void recordAcked(String topic, String name, PersistentSubscription ps, CommandAck ack) {
        if (ack == null || ack.getMessageIdsCount() == 0) {
            return;
        }
        if (ack.hasTxnidMostBits() || ack.hasTxnidLeastBits()) {
            transactionalAcksSkipped.incrementAndGet();
            return;
        }
        org.apache.bookkeeper.mledger.Position lac = ps.getCursor().getManagedLedger().getLastConfirmedEntry();
        if (lac == null) {
            return;
        }
        long lacLedger = lac.getLedgerId();
        long lacEntry = lac.getEntryId();
        boolean cumulative = ack.getAckType() == CommandAck.AckType.Cumulative;
        boolean batchIndexes = batchIndexAcks;
        feed.withAcked(topic, name, acked -> {
            int n = cumulative ? 1 : ack.getMessageIdsCount();
            for (int i = 0; i < n; i++) {
                MessageIdData id = ack.getMessageIdAt(i);
                long ledger = id.getLedgerId();
                long entry = id.getEntryId();
                boolean beyond = ledger > lacLedger || (ledger == lacLedger && entry > lacEntry);
                long[] ackSet = null;
                if (id.getAckSetsCount() > 0 && batchIndexes) {
                    ackSet = new long[id.getAckSetsCount()];
                    for (int w = 0; w < ackSet.length; w++) {
                        ackSet[w] = id.getAckSetAt(w);
                    }
                }
                if (cumulative) {
                    if (beyond) {
                        acked.cumulative(lacLedger, lacEntry, null);
                    } else {
                        acked.cumulative(ledger, entry, ackSet);
                    }
                } else if (beyond) {
                    acksBeyondLastEntry.incrementAndGet();
                } else if (ackSet != null) {
                    acked.batch(ledger, entry, ackSet);
                } else if (id.getAckSetsCount() == 0) {
                    acked.entry(ledger, entry);
                }
                // else: a partial ack set on a broker that keeps no batch indexes: the cursor ignored it.
            }
        });
    }

    // -- serving the index --------------------------------------------------------------------------------

    @Override
    public void onFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        boolean ours = false;
        try {
            ours = request instanceof HttpServletRequest http && http.getRequestURI() != null
                    && http.getRequestURI().startsWith(PREFIX);
            if (ours) {
                serve((HttpServletRequest) request, (HttpServletResponse) response);
            }
        } catch (IOException e) {
            // The client went away while its request or our reply was in transit (an agent stopped or
            // restarted mid-call): nothing is lost (the feed hands items over again until a read confirms
            // them) and nothing here failed, so it is counted apart from the plugin's own errors.
            repliesAbandoned.incrementAndGet();
        } catch (Throwable t) {
            error("serving " + PREFIX, t);
            if (ours && !response.isCommitted()) {
                ((HttpServletResponse) response).sendError(500, "GeoSync interceptor error");
            }
        }
        if (!ours) {
            chain.doFilter(request, response);
        }
    }

    private void serve(HttpServletRequest request, HttpServletResponse response) throws Exception {
        String what = request.getRequestURI().substring(PREFIX.length());
        boolean loopback = InetAddress.getByName(request.getRemoteAddr()).isLoopbackAddress();
        PluginAccess.Decision access = PluginAccess.network("acks".equals(what), loopback, allowRemoteReads);
        if (access.allowed() && authenticate) {
            access = PluginAccess.role(authenticatedRole(request), superUsers, adminRoles);
        }
        if (!access.allowed()) {
            requestsRefused.incrementAndGet();
            reply(response, access.status(), Map.of("error", access.error()));
            return;
        }
        String method = "acks".equals(what) ? "POST" : "GET";
        if (!method.equals(request.getMethod())) {
            reply(response, 405, Map.of("error", PREFIX + what + " answers " + method + " only"));
            return;
        }
        switch (what) {
            case "cursors" -> {
                long since = 0;
                String given = request.getParameter("since");
                if (given != null) {
                    try {
                        since = Long.parseLong(given.trim());
                    } catch (NumberFormatException e) {
                        reply(response, 400, Map.of("error", "'since' must be an integer (the seq of the last read)"));
                        return;
                    }
                }
                String epochGiven = request.getParameter("epoch");
                reply(response, 200, cursors(since, epochGiven == null || epoch.equals(epochGiven)));
            }
            case "cursor" -> {
                String topic = request.getParameter("topic");
                String sub = request.getParameter("subscription");
                if (topic == null || topic.isEmpty() || sub == null || sub.isEmpty()) {
                    reply(response, 400, Map.of("error", "query parameters 'topic' and 'subscription' are "
                            + "required ('after=L:E' optionally: only partly acknowledged entries above it)"));
                    return;
                }
                long[] after = {-1, -1};
                String given = request.getParameter("after");
                if (given != null && !parsePosition(given, after)) {
                    reply(response, 400, Map.of("error", "'after' must be a position L:E (the last partly "
                            + "acknowledged entry of the previous page)"));
                    return;
                }
                CursorDesk d = desk;
                if (notStarted(d, response)) {
                    return;
                }
                reply(response, 200, d.read(topic, sub,
                        given == null ? null : new PluginApi.Pos(after[0], after[1])));
            }
            case "subscriptions" -> {
                String namespace = request.getParameter("namespace");
                if (!TopicLister.isNamespace(namespace)) {
                    reply(response, 400, Map.of("error", "query parameter 'namespace' is required: tenant/namespace "
                            + "(e.g. public/default)"));
                    return;
                }
                TopicLister l = lister;
                if (notStarted(l, response)) {
                    return;
                }
                reply(response, 200, l.list(namespace));
            }
            case "acks" -> acks(request, response);
            case "status" -> reply(response, 200, status());
            case "origins" -> {
                String topic = request.getParameter("topic");
                if (topic == null || topic.isEmpty()) {
                    reply(response, 400, Map.of("error", "query parameter 'topic' is required "
                            + "(the full name, e.g. persistent://tenant/ns/topic-partition-0)"));
                    return;
                }
                long[] from = {-1, -1};
                String given = request.getParameter("from");
                if (given != null && !parsePosition(given, from)) {
                    reply(response, 400, Map.of("error", "'from' must be a position L:E"));
                    return;
                }
                reply(response, 200, index.toJson(region, topic, from[0], from[1]));
            }
            default -> reply(response, 404, Map.of("error", "unknown GeoSync path; try origins, cursors, cursor, subscriptions, acks or status"));
        }
        requestsServed.incrementAndGet();
    }

    /** Answers 503 and says so when a part the broker sets up at start is not there yet. */
    private static boolean notStarted(Object part, HttpServletResponse response) throws Exception {
        if (part != null) {
            return false;
        }
        reply(response, 503, Map.of("error", "the broker is not started yet; ask again in a few seconds"));
        return true;
    }

    /** The role the broker's authentication service gives the request, or null if it refuses it. */
    private String authenticatedRole(HttpServletRequest request) {
        PulsarService p = pulsar;
        if (p == null || p.getBrokerService() == null) {
            return null;
        }
        try {
            return p.getBrokerService().getAuthenticationService().authenticateHttpRequest(request);
        } catch (Exception e) {
            log.debug("GeoSync interceptor: request from {} not authenticated: {}", request.getRemoteAddr(),
                    e.getMessage());
            return null;
        }
    }

    /**
     * The feed's answer: cursor states of the subscriptions acknowledged since {@code since}, and what
     * consumers acknowledged ({@code acked}, handed over until a read with {@code since} at or past the
     * answer that carried it confirms it; {@code sameEpoch}: the reader's {@code epoch} parameter names this
     * broker's run, or it gave none).
     */
    Map<String, Object> cursors(long since, boolean sameEpoch) {
        long seq = feed.seq();
        // The acknowledged sets are taken after seq is read: an acknowledgement recorded in between is in
        // this answer, and a read naming this seq confirms it, which is right: the answer carried it.
        List<Map<String, Object>> acked = feed.takeAcked(since, seq, sameEpoch);
        List<Map<String, Object>> out = new ArrayList<>();
        CursorDesk d = desk;
        if (d != null) {
            for (AckFeed.Mark m : feed.since(since, System.nanoTime(), settleNanos)) {
                Map<String, Object> state = d.read(m.topic(), m.subscription());
                if (PluginApi.Status.OK.wire().equals(state.get("status"))) {
                    out.add(state);
                }
            }
        }
        return PluginApi.feed(epoch, seq, out, acked, feed.ackedLost());
    }

    private void acks(HttpServletRequest request, HttpServletResponse response) throws Exception {
        CursorDesk d = desk;
        if (!allowCursorWrites || d == null) {
            reply(response, 403, Map.of("error", "cursor writes are off in this broker "
                    + "(geosyncAllowCursorWrites=true turns them on)"));
            return;
        }
        List<?> items;
        try {
            items = PluginApi.parseRequest(request.getInputStream().readNBytes(MAX_ACKS_BODY + 1), MAX_ACKS_BODY);
        } catch (PluginApi.BadRequest e) {
            reply(response, 400, Map.of("error", e.getMessage()));
            return;
        }
        List<Object> results = new ArrayList<>();
        for (Object item : items) {
            results.add(d.acknowledge(item));
        }
        cursorWrites.addAndGet(items.size());
        reply(response, 200, Map.of("results", results));
    }

    static boolean parsePosition(String text, long[] out) {
        int colon = text.indexOf(':');
        if (colon < 0) {
            return false;
        }
        try {
            out[0] = Long.parseLong(text.substring(0, colon));
            out[1] = Long.parseLong(text.substring(colon + 1));
            return out[0] >= -1 && out[1] >= -1;
        } catch (NumberFormatException e) {
            return false;
        }
    }

    Map<String, Object> status() {
        Map<String, Object> out = new HashMap<>();
        out.put("version", BigInteger.valueOf(OriginIndex.WIRE_VERSION));
        out.put("plugin", "geosync");
        out.put("region", region);
        out.put("configuration", configuration);
        out.put("index", index.stats());
        out.put("replicated_entries_recorded", BigInteger.valueOf(replicatedRecorded.get()));
        out.put("replicated_entries_without_source", BigInteger.valueOf(replicatedWithoutSource.get()));
        out.put("requests_served", BigInteger.valueOf(requestsServed.get()));
        out.put("requests_refused", BigInteger.valueOf(requestsRefused.get()));
        out.put("errors", BigInteger.valueOf(errors.get()));
        out.put("replies_abandoned", BigInteger.valueOf(repliesAbandoned.get()));
        Map<String, Object> ackFeed = new HashMap<>();
        ackFeed.put("seq", BigInteger.valueOf(feed.seq()));
        ackFeed.put("tracked", BigInteger.valueOf(feed.tracked()));
        ackFeed.put("recorded", BigInteger.valueOf(feed.recorded()));
        ackFeed.put("forgotten", BigInteger.valueOf(feed.forgotten()));
        ackFeed.put("acked_version", BigInteger.valueOf(io.geosync.plugin.common.AckedPositions.WIRE_VERSION));
        ackFeed.put("acked_tracked", BigInteger.valueOf(feed.ackedTracked()));
        ackFeed.put("acked_items", BigInteger.valueOf(feed.ackedItems()));
        ackFeed.put("acked_lost", BigInteger.valueOf(feed.ackedLost()));
        ackFeed.put("transactional_acks_skipped", BigInteger.valueOf(transactionalAcksSkipped.get()));
        ackFeed.put("acks_beyond_last_entry", BigInteger.valueOf(acksBeyondLastEntry.get()));
        out.put("ack_feed", ackFeed);
        out.put("cursor_writes", BigInteger.valueOf(cursorWrites.get()));
        return out;
    }

    private static void reply(HttpServletResponse response, int status, Map<String, Object> body)
            throws Exception {
        byte[] bytes = Json.canonical(body);
        response.setStatus(status);
        response.setContentType("application/json");
        response.setContentLength(bytes.length);
        response.getOutputStream().write(bytes);
        response.flushBuffer();
    }

    private void error(String where, Throwable t) {
        errors.incrementAndGet();
        long now = System.currentTimeMillis();
        if (now - lastErrorLogMillis > 60_000) {
            lastErrorLogMillis = now;
            log.warn("GeoSync interceptor: error in {} ({} so far); the broker is unaffected", where, errors.get(), t);
        }
    }

    OriginIndex index() {
        return index;
    }

    // -- every other hook: deliberately nothing (no cost on the broker's hot paths) -----------------------

    @Override
    public void beforeSendMessage(Subscription subscription, Entry entry, long[] ackSet, MessageMetadata msgMetadata) {
    }

    @Override
    public void beforeSendMessage(Subscription subscription, Entry entry, long[] ackSet, MessageMetadata msgMetadata,
                                  Consumer consumer) {
    }

    @Override
    public void onConnectionCreated(ServerCnx cnx) {
    }

    @Override
    public void producerCreated(ServerCnx cnx, Producer producer, Map<String, String> metadata) {
    }

    @Override
    public void producerClosed(ServerCnx cnx, Producer producer, Map<String, String> metadata) {
    }

    @Override
    public void consumerCreated(ServerCnx cnx, Consumer consumer, Map<String, String> metadata) {
    }

    @Override
    public void consumerClosed(ServerCnx cnx, Consumer consumer, Map<String, String> metadata) {
    }

    @Override
    public void onMessagePublish(Producer producer, ByteBuf headersAndPayload, Topic.PublishContext publishContext) {
        // A replicated entry may carry two source-position properties: one an application set on the message
        // in its origin region (brokers keep it) and the one the replicator appended last. The broker's own
        // parse (the publish context's property) takes the first; the genuine one is the last.
        try {
            if (producer == null || !producer.isRemote() || headersAndPayload == null || publishContext == null) {
                return;
            }
            MessageMetadata metadata = Commands.peekMessageMetadata(headersAndPayload, null, -1);
            if (metadata == null) {
                return;
            }
            String last = null;
            for (KeyValue kv : metadata.getPropertiesList()) {
                if (SOURCE_POSITION.equals(kv.getKey())) {
                    last = kv.getValue();
                }
            }
            long[] source = OriginIndex.parseStamp(last);
            if (source != null) {
                publishContext.setProperty(REPLICATOR_SOURCE, source);
            }
        } catch (Throwable t) {
            error("onMessagePublish", t);
        }
    }

    @Override
    public void messageDispatched(ServerCnx cnx, Consumer consumer, long ledgerId, long entryId, ByteBuf headersAndPayload) {
    }

    @Override
    public void txnOpened(long tcId, String txnID) {
    }

    @Override
    public void txnEnded(String txnID, long txnAction) {
    }

    @Override
    public void onPulsarCommand(BaseCommand command, ServerCnx cnx) {
    }

    @Override
    public void onConnectionClosed(ServerCnx cnx) {
    }

    @Override
    public void onWebserviceRequest(ServletRequest request) {
    }

    @Override
    public void onWebserviceResponse(ServletRequest request, ServletResponse response) {
    }

    @Override
    public void close() {
        log.info("GeoSync interceptor closed: {}", status());
    }

    static List<String> paths() {
        return List.of(PREFIX + "origins", PREFIX + "cursors", PREFIX + "acks", PREFIX + "status");
    }
}
