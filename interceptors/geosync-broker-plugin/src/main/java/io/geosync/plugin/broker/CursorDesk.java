package io.geosync.plugin.broker;

import io.geosync.plugin.common.PluginApi;
import io.geosync.plugin.common.PluginApi.AckItem;
import io.geosync.plugin.common.PluginApi.BadRequest;
import io.geosync.plugin.common.PluginApi.BatchAck;
import io.geosync.plugin.common.PluginApi.BatchState;
import io.geosync.plugin.common.PluginApi.Pos;
import io.geosync.plugin.common.PluginApi.Status;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.mledger.AsyncCallbacks;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.ManagedCursor;
import org.apache.bookkeeper.mledger.ManagedLedger;
import org.apache.bookkeeper.mledger.ManagedLedgerException;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.bookkeeper.mledger.impl.AckSetStateUtil;
import org.apache.bookkeeper.mledger.impl.ManagedCursorImpl;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.common.api.proto.CommandAck.AckType;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.protocol.Commands;

/**
 * Reads and moves the cursors of subscriptions on topics this broker has loaded, for the region's agent.
 *
 * <p>Reading gives what {@code internalStats} gives for one cursor ({@code markDeletePosition} and
 * {@code individuallyDeletedMessages}, same text forms) without building a whole topic's statistics, plus
 * the entries above the mark-delete that consumers acknowledged only partly (batch-index acknowledgements:
 * the cursor's batch-deleted indexes, whose set bits are the messages still unacknowledged). Moving
 * acknowledges through the subscription, as a consumer's acknowledgement would: a cumulative acknowledgement
 * for the mark-delete, individual ones for positions above it, and ack sets for batch indexes. The rules
 * (never backwards, never past the topic's last confirmed entry, request shapes) are
 * {@link PluginApi}'s. Topics owned by another broker are answered {@code not_loaded}: the agent then uses
 * the admin API, which finds the owner.
 *
 * <p>A batch write names the batch's size. A wrong size would be dangerous (too small clears the ack bits
 * of the messages beyond it: they would count as acknowledged), so it is checked against the cursor's
 * batch-deleted indexes when it has them, and otherwise against the entry's own metadata (one entry read,
 * on the agent's write path only).
 */
final class CursorDesk {
    /**
     * At most this many partly acknowledged entries are reported per subscription and answer; the rest are
     * read page by page ({@code GET /admin/v2/geosync/cursor?topic=T&subscription=S&after=L:E}).
     */
    static final int MAX_REPORTED_BATCHES = 1000;
    private static final long ENTRY_READ_TIMEOUT_MS = 10_000;

    private final PulsarService pulsar;

    CursorDesk(PulsarService pulsar) {
        this.pulsar = pulsar;
    }

    private sealed interface Found permits Sub, Refused {
    }

    private record Sub(PersistentSubscription ps) implements Found {
    }

    private record Refused(Map<String, Object> answer) implements Found {
    }

    private Found subscription(String topic, String name) {
        Optional<Topic> loaded = pulsar.getBrokerService().getTopicReference(topic);
        if (loaded.isEmpty()) {
            return new Refused(PluginApi.refusal(Status.NOT_LOADED, topic, name, null));
        }
        Subscription sub = loaded.get().getSubscription(name);
        if (!(sub instanceof PersistentSubscription ps) || !ps.getCursor().isDurable()) {
            return new Refused(PluginApi.refusal(Status.NO_SUBSCRIPTION, topic, name, null));
        }
        return new Sub(ps);
    }

    /** One cursor's state, or a refusal saying why there is none. */
    Map<String, Object> read(String topic, String name) {
        return read(topic, name, null);
    }

    /**
     * One cursor's state with only the partly acknowledged entries strictly above {@code after} (null: above
     * the mark-delete), or a refusal: the next page of an answer whose batches were truncated.
     */
    Map<String, Object> read(String topic, String name, Pos after) {
        Found found = subscription(topic, name);
        return found instanceof Sub s ? describe(topic, name, s.ps().getCursor(), after)
                : ((Refused) found).answer();
    }

    private static Map<String, Object> describe(String topic, String name, ManagedCursor cursor) {
        return describe(topic, name, cursor, null);
    }

    private static Map<String, Object> describe(String topic, String name, ManagedCursor cursor, Pos after) {
        // Batches, then ranges, then the mark-delete: a concurrent acknowledgement can then only make the
        // answer claim less than is acknowledged, never more (ack bits are only ever cleared; an entry
        // acknowledged whole meanwhile shows up in the ranges or under the mark-delete, which win).
        List<BatchState> batches = new ArrayList<>();
        boolean truncated = false;
        String ranges = "[]";
        if (cursor instanceof ManagedCursorImpl impl) {
            NavigableMap<Position, BitSet> partial = impl.getBatchDeletedIndexes();
            if (partial != null) {
                Position from = cursor.getMarkDeletedPosition();
                if (after != null && position(after).compareTo(from) > 0) {
                    from = position(after);
                }
                for (Map.Entry<Position, BitSet> e : partial.tailMap(from, false).entrySet()) {
                    if (batches.size() == MAX_REPORTED_BATCHES) {
                        truncated = true;
                        break;
                    }
                    long[] words = impl.getDeletedBatchIndexesAsLongArray(e.getKey());
                    if (words != null) {
                        batches.add(new BatchState(pos(e.getKey()), PluginApi.unacked(words)));
                    }
                }
            }
            ranges = impl.getIndividuallyDeletedMessages();
        }
        Pos markDelete = pos(cursor.getMarkDeletedPosition());
        batches.removeIf(b -> b.position().compareTo(markDelete) <= 0);
        return PluginApi.report(topic, name, markDelete.toString(), ranges, batches, truncated);
    }

    /**
     * Acknowledge on one subscription as {@code raw} (one item of the request) asks. Returns the cursor's
     * state afterwards with the number of acknowledgements applied, or why nothing was done. An item whose
     * {@code planned_from} is above the cursor's mark-delete is not applied at all ({@link PluginApi#stale}).
     */
    Map<String, Object> acknowledge(Object raw) {
        AckItem item;
        try {
            item = PluginApi.parseItem(raw);
        } catch (BadRequest e) {
            return e.answer();
        }
        Found found = subscription(item.topic(), item.subscription());
        if (found instanceof Refused r) {
            return r.answer();
        }
        PersistentSubscription ps = ((Sub) found).ps();
        ManagedCursor cursor = ps.getCursor();
        ManagedCursorImpl impl = cursor instanceof ManagedCursorImpl i ? i : null;
        boolean batchAcks = impl != null && impl.getBatchDeletedIndexes() != null;
        if (!batchAcks && item.batches().stream().anyMatch(b -> !b.whole())) {
            return PluginApi.refusal(Status.BATCH_ACKS_OFF, item.topic(), item.subscription(),
                    "this broker runs with acknowledgmentAtBatchIndexLevelEnabled=false; acknowledge whole "
                            + "entries only");
        }
        Pos last = cursor.getManagedLedger().getLastConfirmedEntry() == null ? null
                : pos(cursor.getManagedLedger().getLastConfirmedEntry());
        Pos floor = pos(cursor.getMarkDeletedPosition());
        if (PluginApi.stale(item.plannedFrom(), floor)) {
            // Planned over a cursor that has been moved back since (a reset-cursor the writer has not seen):
            // nothing applied, the cursor answered as it is, so the writer sees the reset and plans again.
            return PluginApi.stale(describe(item.topic(), item.subscription(), cursor));
        }
        // Batch sizes first: a wrong one refuses the whole item before anything moved.
        List<Position> batchAckPositions = new ArrayList<>();
        for (BatchAck b : item.batches()) {
            if (!PluginApi.acknowledgeable(b.position(), floor, last) || cursor.isMessageDeleted(position(b.position()))) {
                continue;
            }
            String wrong = checkSize(impl, cursor.getManagedLedger(), b);
            if (wrong != null) {
                return PluginApi.refusal(Status.BAD_REQUEST, item.topic(), item.subscription(), wrong);
            }
            if (b.whole()) {
                batchAckPositions.add(position(b.position()));
            } else if (!b.acked().isEmpty()) {
                batchAckPositions.add(AckSetStateUtil.createPositionWithAckSet(b.position().ledger(),
                        b.position().entry(), b.ackSet()));
            }
        }
        long acked = 0;
        Optional<Pos> target = PluginApi.markDeleteTarget(item.markDelete(), floor, last);
        if (target.isPresent()) {
            ps.acknowledgeMessage(List.of(position(target.get())), AckType.Cumulative, Map.of());
            floor = target.get();
            acked++;
        }
        List<Position> above = new ArrayList<>();
        for (Pos p : item.positions()) {
            if (PluginApi.acknowledgeable(p, floor, last)) {
                above.add(position(p));
            }
        }
        for (Position p : batchAckPositions) {
            if (PluginApi.acknowledgeable(pos(p), floor, last)) {
                above.add(p);
            }
        }
        if (!above.isEmpty()) {
            ps.acknowledgeMessage(above, AckType.Individual, Map.of());
            acked += above.size();
        }
        return PluginApi.written(describe(item.topic(), item.subscription(), cursor), acked);
    }

    /** Why {@code b.size()} cannot be the batch's size, or null when it is safe to use. */
    private static String checkSize(ManagedCursorImpl impl, ManagedLedger ledger, BatchAck b) {
        long[] words = impl == null ? null : impl.getDeletedBatchIndexesAsLongArray(position(b.position()));
        if (words != null) {
            // The cursor already tracks this batch: the size is safe unless a still unacknowledged index
            // lies at or beyond it (a larger size only sets bits the cursor ANDs away).
            List<Integer> unacked = PluginApi.unacked(words);
            if (!unacked.isEmpty() && unacked.get(unacked.size() - 1) >= b.size()) {
                return "batch " + b.position() + ": size " + b.size() + " is smaller than the batch (index "
                        + unacked.get(unacked.size() - 1) + " is still unacknowledged)";
            }
            return null;
        }
        int actual;
        try {
            actual = batchSize(ledger, position(b.position()));
        } catch (Exception e) {
            return "batch " + b.position() + ": could not read the entry to check its size: " + e;
        }
        return actual == b.size() ? null
                : "batch " + b.position() + ": size " + b.size() + " does not match the entry, which holds "
                        + actual + " message(s)";
    }

    private static int batchSize(ManagedLedger ledger, Position position) throws Exception {
        CompletableFuture<Integer> size = new CompletableFuture<>();
        ledger.asyncReadEntry(position, new AsyncCallbacks.ReadEntryCallback() {
            @Override
            public void readEntryComplete(Entry entry, Object ctx) {
                try {
                    MessageMetadata md = Commands.peekMessageMetadata(entry.getDataBuffer(), "geosync", -1);
                    if (md == null) {
                        size.completeExceptionally(new IllegalStateException("unreadable message metadata"));
                    } else {
                        size.complete(md.hasNumMessagesInBatch() ? md.getNumMessagesInBatch() : 1);
                    }
                } catch (Throwable t) {
                    size.completeExceptionally(t);
                } finally {
                    entry.release();
                }
            }

            @Override
            public void readEntryFailed(ManagedLedgerException exception, Object ctx) {
                size.completeExceptionally(exception);
            }
        }, null);
        return size.get(ENTRY_READ_TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }

    static Pos pos(Position p) {
        return new Pos(p.getLedgerId(), p.getEntryId());
    }

    static Position position(Pos p) {
        return PositionFactory.create(p.ledger(), p.entry());
    }
}
