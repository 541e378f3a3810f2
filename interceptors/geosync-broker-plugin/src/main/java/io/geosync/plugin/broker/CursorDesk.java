package io.geosync.plugin.broker;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.bookkeeper.mledger.impl.ManagedCursorImpl;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.common.api.proto.CommandAck.AckType;

/**
 * Reads and moves the cursors of subscriptions on topics this broker has loaded, for the region's agent.
 *
 * <p>Reading gives what {@code internalStats} gives for one cursor ({@code markDeletePosition} and
 * {@code individuallyDeletedMessages}, same text forms) without building a whole topic's statistics.
 * Moving acknowledges through the subscription, as a consumer's acknowledgement would: a cumulative
 * acknowledgement for the mark-delete and individual ones for positions above it. It never moves a cursor
 * backwards and never acknowledges past the topic's last confirmed entry. Topics owned by another broker
 * are answered {@code not_loaded}: the agent then uses the admin API, which finds the owner.
 */
final class CursorDesk {
    private final PulsarService pulsar;

    CursorDesk(PulsarService pulsar) {
        this.pulsar = pulsar;
    }

    private Optional<PersistentSubscription> subscription(String topic, String name, Map<String, Object> out) {
        Optional<Topic> loaded = pulsar.getBrokerService().getTopicReference(topic);
        if (loaded.isEmpty()) {
            out.put("status", "not_loaded");
            return Optional.empty();
        }
        Subscription sub = loaded.get().getSubscription(name);
        if (!(sub instanceof PersistentSubscription ps) || !ps.getCursor().isDurable()) {
            out.put("status", "no_subscription");
            return Optional.empty();
        }
        return Optional.of(ps);
    }

    /** One cursor's state, or a status saying why there is none. */
    Map<String, Object> read(String topic, String name) {
        Map<String, Object> out = new HashMap<>();
        out.put("topic", topic);
        out.put("subscription", name);
        subscription(topic, name, out).ifPresent(ps -> describe(ps.getCursor(), out));
        return out;
    }

    private static void describe(ManagedCursor cursor, Map<String, Object> out) {
        // Ranges first, then the mark-delete: a concurrent acknowledgement can then only make the answer
        // claim less than is acknowledged, never more.
        String ranges = cursor instanceof ManagedCursorImpl impl ? impl.getIndividuallyDeletedMessages() : "[]";
        out.put("individually_deleted", ranges);
        out.put("mark_delete", format(cursor.getMarkDeletedPosition()));
        out.put("status", "ok");
    }

    /**
     * Acknowledge on one subscription: {@code item} holds topic, subscription, mark_delete ("L:E" or null)
     * and positions (a list of "L:E"). Returns the cursor's state afterwards, or why nothing was done.
     */
    Map<String, Object> acknowledge(Map<?, ?> item) {
        Map<String, Object> out = new HashMap<>();
        Object topic = item.get("topic");
        Object name = item.get("subscription");
        if (!(topic instanceof String t) || !(name instanceof String n)) {
            out.put("status", "bad_request");
            out.put("error", "each item needs string fields 'topic' and 'subscription'");
            return out;
        }
        out.put("topic", t);
        out.put("subscription", n);
        List<Position> individual = new ArrayList<>();
        Position target = null;
        try {
            if (item.get("mark_delete") != null) {
                target = parse(item.get("mark_delete"));
            }
            if (item.get("positions") instanceof List<?> given) {
                for (Object p : given) {
                    individual.add(parse(p));
                }
            }
        } catch (IllegalArgumentException e) {
            out.put("status", "bad_request");
            out.put("error", e.getMessage());
            return out;
        }
        Optional<PersistentSubscription> found = subscription(t, n, out);
        if (found.isEmpty()) {
            return out;
        }
        PersistentSubscription ps = found.get();
        ManagedCursor cursor = ps.getCursor();
        Position last = cursor.getManagedLedger().getLastConfirmedEntry();
        Position floor = cursor.getMarkDeletedPosition();
        long acked = 0;
        if (target != null && target.compareTo(floor) > 0) {
            if (last != null && target.compareTo(last) > 0) {
                target = last;  // never past what this region has: the rest is not here yet
            }
            if (target.compareTo(floor) > 0) {
                ps.acknowledgeMessage(List.of(target), AckType.Cumulative, Map.of());
                floor = target;
                acked++;
            }
        }
        List<Position> above = new ArrayList<>();
        for (Position p : individual) {
            if (p.compareTo(floor) > 0 && (last == null || p.compareTo(last) <= 0)) {
                above.add(p);
            }
        }
        if (!above.isEmpty()) {
            ps.acknowledgeMessage(above, AckType.Individual, Map.of());
            acked += above.size();
        }
        describe(cursor, out);
        out.put("acknowledged", BigInteger.valueOf(acked));
        return out;
    }

    static String format(Position p) {
        return p.getLedgerId() + ":" + p.getEntryId();
    }

    static Position parse(Object text) {
        long[] le = {-1, -1};
        if (!(text instanceof String s) || !GeoSyncInterceptor.parsePosition(s, le) || le[0] < 0 || le[1] < 0) {
            throw new IllegalArgumentException("a position must be a string L:E with L, E >= 0, not " + text);
        }
        return PositionFactory.create(le[0], le[1]);
    }
}
