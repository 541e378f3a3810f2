package io.geosync.plugin.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.geosync.plugin.common.Json;
import io.geosync.plugin.common.Markers;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.service.plugin.EntryFilter.FilterResult;
import org.apache.pulsar.broker.service.plugin.FilterContext;
import org.apache.pulsar.common.api.proto.CompressionType;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue 45, case 4: the filter hides a message only if it is a genuine marker. An application message that
 * carries the marker property is delivered (REJECT would acknowledge it: silent loss).
 */
class GeoSyncEntryFilterTest {
    @SuppressWarnings("unchecked")
    static Map<String, Object> vectors() throws Exception {
        Path testdata = Path.of(System.getProperty("geosync.testdata", "../../testdata"));
        return (Map<String, Object>) Json.parse(Files.readAllBytes(testdata.resolve("marker-keys/vectors.json")));
    }

    @SuppressWarnings("unchecked")
    static Path keyringFile(Path dir) throws Exception {
        StringBuilder yaml = new StringBuilder();
        ((Map<String, Object>) vectors().get("keyring")).forEach((region, ids) -> {
            yaml.append(region).append(":\n");
            ((Map<String, Object>) ids).forEach((k, v) -> yaml.append("  ").append(k).append(": ").append(v).append('\n'));
        });
        Path file = dir.resolve("keyring.yaml");
        Files.writeString(file, yaml, StandardCharsets.UTF_8);
        return file;
    }

    @SuppressWarnings("unchecked")
    static byte[] genuinePayload() throws Exception {
        Map<String, Object> first = ((List<Map<String, Object>>) vectors().get("genuine")).get(0);
        return HexFormat.of().parseHex((String) first.get("wire_hex"));
    }

    /** An entry as a bookie stores it: magic, checksum, metadata size, metadata, payload. */
    static FilterResult filter(GeoSyncEntryFilter filter, String property, byte[] payload, boolean compressed) {
        MessageMetadata metadata = new MessageMetadata().setProducerName("app").setSequenceId(1).setPublishTime(1);
        if (property != null) {
            metadata.addProperty().setKey(Markers.PROPERTY).setValue(property);
        }
        metadata.addProperty().setKey("order").setValue("42");
        if (compressed) {
            metadata.setCompression(CompressionType.LZ4);
        }
        ByteBuf buffer = Unpooled.buffer();
        buffer.writeShort(0x0e01);
        buffer.writeInt(0);
        buffer.writeInt(metadata.getSerializedSize());
        metadata.writeTo(buffer);
        buffer.writeBytes(payload);
        FilterContext context = new FilterContext();
        context.setMsgMetadata(metadata);
        return filter.filterEntry(new FakeEntry(buffer), context);
    }

    @Test
    void anApplicationMessageCarryingTheMarkerPropertyIsDelivered(@TempDir Path dir) throws Exception {
        GeoSyncEntryFilter filter = new GeoSyncEntryFilter("geosync-", keyringFile(dir).toString());
        byte[] text = "order 42 shipped".getBytes(StandardCharsets.UTF_8);
        assertEquals(FilterResult.ACCEPT, filter(filter, "snapshot-request", text, false));
        assertEquals(FilterResult.ACCEPT, filter(filter, "", new byte[0], false));
        assertEquals(FilterResult.ACCEPT, filter(filter, "update", genuinePayload(), false));
        assertEquals(FilterResult.ACCEPT, filter(filter, "snapshot-request", genuinePayload(), true));
        assertEquals(FilterResult.ACCEPT, filter(filter, null, text, false));
        assertEquals(5, filter.deliveredNotGenuine() + 1);
        assertEquals(0, filter.hiddenMarkers());
    }

    @Test
    void aGenuineMarkerIsHiddenFromApplications(@TempDir Path dir) throws Exception {
        GeoSyncEntryFilter filter = new GeoSyncEntryFilter("geosync-", keyringFile(dir).toString());
        assertEquals(FilterResult.REJECT, filter(filter, "snapshot-request", genuinePayload(), false));
        assertEquals(1, filter.hiddenMarkers());
    }

    @Test
    void withoutAKeyringNothingIsHidden() throws Exception {
        GeoSyncEntryFilter filter = new GeoSyncEntryFilter("geosync-", null);
        assertEquals(FilterResult.ACCEPT, filter(filter, "snapshot-request", genuinePayload(), false));
    }

    private record FakeEntry(ByteBuf buffer) implements Entry {
        public byte[] getData() {
            byte[] out = new byte[buffer.readableBytes()];
            buffer.getBytes(buffer.readerIndex(), out);
            return out;
        }

        public byte[] getDataAndRelease() {
            return getData();
        }

        public int getLength() {
            return buffer.readableBytes();
        }

        public ByteBuf getDataBuffer() {
            return buffer;
        }

        public Position getPosition() {
            return null;
        }

        public long getLedgerId() {
            return 1;
        }

        public long getEntryId() {
            return 1;
        }

        public boolean release() {
            return true;
        }
    }
}
