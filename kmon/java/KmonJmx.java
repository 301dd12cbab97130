import com.sun.tools.attach.AttachNotSupportedException;
import com.sun.tools.attach.VirtualMachine;

import java.io.BufferedWriter;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Pattern;

import javax.management.Attribute;
import javax.management.InstanceNotFoundException;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.ReflectionException;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * kmon's JMX helper: streams the Kafka client metrics of one running JVM.
 *
 * <p>Attaches to the JVM by PID with the JDK's attach API, starts (or reuses) its local
 * management agent, connects to it over JMX, then every {@code --interval-ms} prints one JSON
 * line on stdout with every Kafka producer, consumer and admin client MBean it finds:
 * {@code {"ts_ms":..,"poll_ms":..,"clients":[{"domain","client_id","type","metrics","nodes"}]}}.
 * Non-finite values (an average with no samples is NaN) are left out.
 *
 * <p>Usage: {@code java KmonJmx PID [--interval-ms N]}. Exits 0 when stdin closes. Any error
 * (no such process, not a JVM, attach refused, the target gone) prints one line
 * {@code {"error": "..."}} and exits 2. JDK 11+, no third-party jars.
 */
public final class KmonJmx {
    private static final String[] CLIENT_ATTRS = {
        "connection-count", "connection-creation-total", "connection-close-total", "io-wait-ratio"};
    private static final String[] COORDINATOR_ATTRS = {
        "assigned-partitions", "heartbeat-total", "last-heartbeat-seconds-ago"};
    private static final Pattern NODE_ID = Pattern.compile("[+-]?[0-9]{1,10}");
    private static final String[] NODE_ATTRS = {
        "outgoing-byte-total", "incoming-byte-total", "request-total", "response-total",
        "request-latency-avg"};

    /** One MBean type to read: where it lives, the client type it belongs to, what it holds. */
    private static final class Kind {
        final ObjectName pattern;
        final String domain;
        final String clientType;
        final String[] attrs;
        final boolean perNode;

        Kind(String domain, String type, String clientType, String[] attrs, boolean perNode)
                throws Exception {
            this.pattern = new ObjectName(domain + ":type=" + type + ",*");
            this.domain = domain;
            this.clientType = clientType;
            this.attrs = attrs;
            this.perNode = perNode;
        }
    }

    /** What one poll gathers of one client instance. */
    private static final class Client {
        final Map<String, Object> metrics = new TreeMap<>();
        final Map<String, Map<String, Object>> nodes = new TreeMap<>();
        String type;
    }

    private static final Writer OUT = new BufferedWriter(new OutputStreamWriter(
            new FileOutputStream(FileDescriptor.out), StandardCharsets.UTF_8));

    private KmonJmx() {
    }

    public static void main(String[] args) {
        long pid;
        long intervalMs = 1000;
        try {
            pid = Long.parseLong(args[0]);
            for (int i = 1; i < args.length; i += 2) {
                if (!args[i].equals("--interval-ms")) {
                    throw new IllegalArgumentException("unknown option " + args[i]);
                }
                intervalMs = Long.parseLong(args[i + 1]);
            }
        } catch (RuntimeException e) {
            fail("usage: KmonJmx PID [--interval-ms N]");
            return;
        }
        JMXConnector connector;
        try {
            checkTarget(pid);
            watchStdin(); // only now: a refused target is always told, whatever stdin does
            connector = connect(pid);
        } catch (Exception e) {
            fail(e.getMessage() != null ? e.getMessage() : e.toString());
            return;
        }
        try {
            poll(pid, connector.getMBeanServerConnection(), intervalMs, kinds());
        } catch (Exception e) {
            fail(targetGone(pid) ? "PID " + pid + " exited"
                                 : "JMX connection to PID " + pid + " failed: " + e);
        }
    }

    /** Whether the target is gone or going: a JVM shutting down refuses JMX before it exits. */
    private static boolean targetGone(long pid) {
        Optional<ProcessHandle> target = ProcessHandle.of(pid);
        if (target.isEmpty()) {
            return true;
        }
        try {
            target.get().onExit().get(2, TimeUnit.SECONDS);
            return true;
        } catch (TimeoutException | InterruptedException | ExecutionException e) {
            return false;
        }
    }

    private static Kind[] kinds() throws Exception {
        return new Kind[] {
            new Kind("kafka.producer", "producer-metrics", "producer", CLIENT_ATTRS, false),
            new Kind("kafka.producer", "producer-node-metrics", "producer", NODE_ATTRS, true),
            new Kind("kafka.consumer", "consumer-metrics", "consumer", CLIENT_ATTRS, false),
            new Kind("kafka.consumer", "consumer-coordinator-metrics", "consumer",
                     COORDINATOR_ATTRS, false),
            new Kind("kafka.consumer", "consumer-node-metrics", "consumer", NODE_ATTRS, true),
            new Kind("kafka.admin.client", "admin-client-metrics", "admin", CLIENT_ATTRS, false),
            new Kind("kafka.admin.client", "admin-client-node-metrics", "admin", NODE_ATTRS, true),
        };
    }

    /** Exit when our parent closes our stdin. */
    private static void watchStdin() {
        Thread t = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // discard: stdin only tells us when to stop
                }
            } catch (IOException ignored) {
                // a broken stdin means the same as a closed one
            }
            System.exit(0);
        }, "stdin-watch");
        t.setDaemon(true);
        t.start();
    }

    /** Refuse a target that is gone or not a JVM: attach signals SIGQUIT, which kills others. */
    private static void checkTarget(long pid) {
        if (ProcessHandle.of(pid).isEmpty()) {
            throw new IllegalStateException("no such process: PID " + pid);
        }
        Path maps = Paths.get("/proc", Long.toString(pid), "maps");
        if (Files.isDirectory(Paths.get("/proc", "self"))) {
            String text;
            try {
                text = Files.readString(maps, StandardCharsets.ISO_8859_1);
            } catch (IOException e) {
                throw new IllegalStateException("cannot read " + maps + " (" + e
                        + "): attaching needs the target's user");
            }
            if (!text.contains("/libjvm.so")) {
                throw new IllegalStateException("PID " + pid + " is not a JVM (no libjvm.so)");
            }
        }
    }

    /** Attach, start the target's local management agent, and connect to it. */
    private static JMXConnector connect(long pid) throws Exception {
        VirtualMachine vm;
        try {
            vm = VirtualMachine.attach(Long.toString(pid));
        } catch (AttachNotSupportedException | IOException e) {
            throw new IllegalStateException("attach to PID " + pid + " refused: " + e.getMessage());
        }
        String address;
        try {
            address = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        return JMXConnectorFactory.connect(new JMXServiceURL(address));
    }

    /** Print one JSON line per interval until stdin closes or JMX fails. */
    private static void poll(long pid, MBeanServerConnection mbs, long intervalMs, Kind[] kinds)
            throws Exception {
        long next = System.nanoTime();
        while (true) {
            long started = System.nanoTime();
            long tsMs = System.currentTimeMillis();
            Map<String, Client> clients = read(mbs, kinds);
            double pollMs = (System.nanoTime() - started) / 1e6;
            OUT.write(json(tsMs, pollMs, clients));
            OUT.write('\n');
            OUT.flush();
            next += intervalMs * 1_000_000L;
            long sleepNs = next - System.nanoTime();
            if (sleepNs > 0) {
                Thread.sleep(sleepNs / 1_000_000L, (int) (sleepNs % 1_000_000L));
            } else {
                next = System.nanoTime(); // fell behind: do not burst to catch up
            }
        }
    }

    /** Every Kafka client's MBeans, keyed by domain and client id. */
    private static Map<String, Client> read(MBeanServerConnection mbs, Kind[] kinds)
            throws IOException {
        Map<String, Client> clients = new TreeMap<>();
        for (Kind kind : kinds) {
            Set<ObjectName> names = mbs.queryNames(kind.pattern, null);
            for (ObjectName name : names) {
                String clientId = unquote(name.getKeyProperty("client-id"));
                if (clientId == null) {
                    continue;
                }
                Map<String, Object> into;
                Client client = clients.computeIfAbsent(
                        kind.domain + "\u0000" + clientId, k -> new Client());
                client.type = kind.clientType;
                if (kind.perNode) {
                    String node = nodeId(unquote(name.getKeyProperty("node-id")));
                    if (node == null) {
                        continue;
                    }
                    into = client.nodes.computeIfAbsent(node, k -> new TreeMap<>());
                } else {
                    into = client.metrics;
                }
                try {
                    for (Attribute a : mbs.getAttributes(name, kind.attrs).asList()) {
                        if (a.getValue() instanceof Number) {
                            into.put(a.getName(), a.getValue());
                        }
                    }
                } catch (InstanceNotFoundException | ReflectionException e) {
                    // closed between the query and the read, or unreadable: skipped, never fatal
                }
            }
        }
        return clients;
    }

    /**
     * The client's connection id: "node-3" -> "3", "node--1" -> "-1", "node-+3" -> "+3" (a 4.x
     * client's group coordinator connection to broker 3); null for anything else.
     */
    private static String nodeId(String value) {
        if (value == null || !value.startsWith("node-")) {
            return null;
        }
        String id = value.substring(5);
        return NODE_ID.matcher(id).matches() ? id : null;
    }

    /** Kafka's JmxReporter quotes property values holding characters ObjectName reserves. */
    private static String unquote(String value) {
        if (value != null && value.startsWith("\"")) {
            try {
                return ObjectName.unquote(value);
            } catch (IllegalArgumentException e) {
                return value;
            }
        }
        return value;
    }

    private static String json(long tsMs, double pollMs, Map<String, Client> clients) {
        StringBuilder b = new StringBuilder(256 + clients.size() * 512);
        b.append("{\"ts_ms\":").append(tsMs).append(",\"poll_ms\":");
        number(b, Math.round(pollMs * 1000) / 1000.0);
        b.append(",\"clients\":[");
        boolean first = true;
        for (Map.Entry<String, Client> e : clients.entrySet()) {
            String[] key = e.getKey().split("\u0000", 2);
            Client c = e.getValue();
            b.append(first ? "" : ",").append("{\"domain\":");
            string(b, key[0]);
            b.append(",\"client_id\":");
            string(b, key[1]);
            b.append(",\"type\":");
            string(b, c.type);
            b.append(",\"metrics\":");
            values(b, c.metrics);
            b.append(",\"nodes\":{");
            boolean firstNode = true;
            for (Map.Entry<String, Map<String, Object>> n : c.nodes.entrySet()) {
                b.append(firstNode ? "\"" : ",\"").append(n.getKey()).append("\":");
                values(b, n.getValue());
                firstNode = false;
            }
            b.append("}}");
            first = false;
        }
        return b.append("]}").toString();
    }

    private static void values(StringBuilder b, Map<String, Object> values) {
        b.append('{');
        boolean first = true;
        for (Map.Entry<String, Object> e : values.entrySet()) {
            double v = ((Number) e.getValue()).doubleValue();
            if (Double.isNaN(v) || Double.isInfinite(v)) {
                continue; // JSON has no NaN; an absent value means "no samples"
            }
            b.append(first ? "" : ",");
            string(b, e.getKey());
            b.append(':');
            number(b, v);
            first = false;
        }
        b.append('}');
    }

    private static void number(StringBuilder b, double v) {
        if (v == Math.rint(v) && Math.abs(v) < 1e15) {
            b.append((long) v);
        } else {
            b.append(v);
        }
    }

    /** A JSON string literal: quotes, backslashes and control characters escaped. */
    private static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (ch < 0x20 || ch == 0x2028 || ch == 0x2029) {
                        b.append(String.format("\\u%04x", (int) ch));
                    } else {
                        b.append(ch);
                    }
            }
        }
        b.append('"');
    }

    private static void fail(String message) {
        StringBuilder b = new StringBuilder("{\"error\":");
        string(b, message.lines().findFirst().orElse("unknown error").strip());
        try {
            OUT.write(b.append("}\n").toString());
            OUT.flush();
        } catch (IOException ignored) {
            // nobody is listening: the exit code still tells
        }
        System.exit(2);
    }
}
