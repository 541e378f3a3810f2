/*
 * A Java consumer whose Pulsar client takes its service URL from a PIP-121 provider
 * (ControlledClusterFailover), for integration_tests/test_client_failover.py.
 *
 * Why a program of its own: the Python client has no HTTP-polling provider, and the point of the test
 * is that an unmodified Java client moves between regions by itself. The test drives it with one command
 * per line on stdin and reads one answer per command on stdout, on lines starting with "GEOSYNC " (the
 * client's own log lines go to the same stream):
 *
 *   consume N SKIP   receive N distinct messages "m<i>", acknowledge each except i % SKIP == SKIP - 1
 *   drain QUIET_MS   receive (and acknowledge) until nothing came for QUIET_MS; answer what came, in order
 *   where            the service URL the provider last gave the client, and whether the consumer is connected
 *   quit             close and exit
 *
 * Arguments: PROVIDER_URL DEFAULT_SERVICE_URL TOPIC SUBSCRIPTION CONSUMER_NAME CHECK_INTERVAL_MS [TOKEN]
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.ServiceUrlProvider;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.impl.ControlledClusterFailover;

public final class ControlledFailoverConsumer {
    private ControlledFailoverConsumer() {}

    public static void main(String[] args) throws Exception {
        String providerUrl = args[0];
        long intervalMs = Long.parseLong(args[5]);
        var builder = ControlledClusterFailover.builder()
                .defaultServiceUrl(args[1])
                .urlProvider(providerUrl)
                .checkInterval(intervalMs, TimeUnit.MILLISECONDS);
        if (args.length > 6) {
            builder.urlProviderHeader(Map.of("Authorization", "Bearer " + args[6]));
        }
        ServiceUrlProvider provider = builder.build();
        PulsarClient client = PulsarClient.builder().serviceUrlProvider(provider).build();
        // The provider's first poll applies what it gets even when that is the default URL, closing the
        // client's connections once: subscribe after it, so that reconnection is not part of the test.
        Thread.sleep(2 * intervalMs + 500);
        Consumer<byte[]> consumer = client.newConsumer()
                .topic(args[2])
                .subscriptionName(args[3])
                .consumerName(args[4])
                .subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .acknowledgmentGroupTime(0, TimeUnit.MILLISECONDS)
                .subscribe();
        answer("{\"ready\":true,\"serviceUrl\":" + quote(provider.getServiceUrl()) + "}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] cmd = line.trim().split("\\s+");
            switch (cmd[0]) {
                case "consume" -> consume(consumer, Integer.parseInt(cmd[1]), Integer.parseInt(cmd[2]));
                case "drain" -> drain(consumer, Long.parseLong(cmd[1]));
                case "where" -> answer("{\"serviceUrl\":" + quote(provider.getServiceUrl())
                        + ",\"connected\":" + consumer.isConnected() + "}");
                case "quit" -> {
                    consumer.close();
                    client.close();
                    answer("{\"closed\":true}");
                    return;
                }
                default -> answer("{\"error\":" + quote("unknown command " + cmd[0]) + "}");
            }
        }
    }

    private static void consume(Consumer<byte[]> consumer, int count, int skip) throws Exception {
        Set<String> seen = new LinkedHashSet<>();
        List<String> acked = new ArrayList<>();
        List<String> held = new ArrayList<>();
        int again = 0;
        while (seen.size() < count) {
            Message<byte[]> msg = consumer.receive(20, TimeUnit.SECONDS);
            if (msg == null) {
                break;
            }
            String payload = new String(msg.getData(), StandardCharsets.UTF_8);
            if (!seen.add(payload)) {
                again++;  // redelivered (a reconnection): already decided
                continue;
            }
            int index = Integer.parseInt(payload.substring(1));
            if (index % skip == skip - 1) {
                held.add(payload);
            } else {
                consumer.acknowledge(msg);
                acked.add(payload);
            }
        }
        answer("{\"acked\":" + list(acked) + ",\"held\":" + list(held) + ",\"redelivered\":" + again + "}");
    }

    private static void drain(Consumer<byte[]> consumer, long quietMs) throws Exception {
        List<String> got = new ArrayList<>();
        for (Message<byte[]> msg = consumer.receive((int) quietMs, TimeUnit.MILLISECONDS); msg != null;
                msg = consumer.receive((int) quietMs, TimeUnit.MILLISECONDS)) {
            got.add(new String(msg.getData(), StandardCharsets.UTF_8));
            consumer.acknowledge(msg);
        }
        answer("{\"got\":" + list(got) + "}");
    }

    private static void answer(String json) {
        System.out.println("GEOSYNC " + json);
        System.out.flush();
    }

    private static String list(List<String> items) {
        List<String> quoted = new ArrayList<>();
        for (String item : items) {
            quoted.add(quote(item));
        }
        return "[" + String.join(",", quoted) + "]";
    }

    private static String quote(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
