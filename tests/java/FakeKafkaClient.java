import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.DoubleSupplier;
import java.util.regex.Pattern;

import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.ReflectionException;

/**
 * A stand-in for a Java Kafka client (kafka-clients' KafkaProducer / classic KafkaConsumer),
 * kept for benchmarks/jmx_cost.py only.
 *
 * <p>Why it is kept: the benchmark needs one JVM holding many client instances' MBean sets
 * (--instances N) on the instant mock cluster, which no real client does on demand. kmon's
 * tests use the real client instead (tests/java/KafkaClientProgram.java on kafka-clients 4.4.0
 * and 3.9.1), and where the two differ the real one is right: a 4.x client names its group
 * coordinator connection "+B" (node-+B), where this program uses 2147483647 - B as 3.x does;
 * a real producer connects to one or two bootstrap addresses, not every one. This program
 * makes real three things kmon's Java path reads:
 * <ul>
 * <li><b>TCP connections</b> to the brokers, in a simplified order with the client's node ids.
 *     Producer: every bootstrap address first (-1, -2, ...), then every broker (its id).
 *     Consumer: bootstrap -1, then a separate connection to the group coordinator with node id
 *     2147483647 - coordinatorId, then one per partition leader. Every new connection sends a
 *     valid ApiVersions v0 request (as the client's "Fetching API versions" does), which the mock
 *     brokers answer, so bytes flow both ways; the active ones send their role's request every
 *     --send-ms, with an empty body: Heartbeat on the coordinator connection, Fetch (consumer)
 *     or Produce (producer) on the leaders'. Connections idle for --idle-ms
 *     (connections.max.idle.ms) are closed, as the client's Selector does; that is how the
 *     bootstrap connections go away.</li>
 * <li><b>MBeans</b> under the Kafka clients' exact ObjectNames and attribute names
 *     (kafka.producer:type=producer-metrics,client-id=X; ...-node-metrics,...,node-id=node-N;
 *     kafka.consumer:type=consumer-metrics / consumer-coordinator-metrics / consumer-node-metrics),
 *     whose counters are this program's own socket counts.</li>
 * <li><b>Log lines</b> in the NetworkClient / Selector / AbstractCoordinator formats (Kafka's
 *     log4j layout "[%d] %p %m (%c)") that kmon/sources/java_log.py parses.</li>
 * </ul>
 * It does not speak the rest of the protocol (no real metadata, fetch or produce).
 *
 * <p>Usage: {@code java FakeKafkaClient.java --bootstrap H:P,H:P --brokers 1=H:P,2=H:P
 * --role consumer|producer --client-id X [--group G] [--coordinator 2] [--leaders 1,3]
 * [--idle-ms 540000] [--send-ms 500] [--instances 1] [--log FILE]}. With --instances N, N client
 * ids (X, X-1, ...) register their MBean sets over the same sockets (the log speaks for X only).
 * Prints READY when its connections are open; runs until stdin closes.
 */
public final class FakeKafkaClient {
    private static final int MAX_INT = Integer.MAX_VALUE;
    private static final Pattern JMX_SAFE = Pattern.compile("[\\w-%\\. \t]*");
    private static final DateTimeFormatter TIME =
            DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss,SSS");
    private static final String NETWORK_CLIENT = "org.apache.kafka.clients.NetworkClient";
    private static final String SELECTOR = "org.apache.kafka.common.network.Selector";
    private static final String COORDINATOR =
            "org.apache.kafka.clients.consumer.internals.ConsumerCoordinator";

    private final Map<String, String> opts;
    private final boolean consumer;
    private final String clientId;
    private final List<String> clientIds = new ArrayList<>();
    private final long idleMs;
    private final PrintWriter log;
    private final String logContext;
    private final MBeanServer mbeans = ManagementFactory.getPlatformMBeanServer();
    private final List<Conn> conns = new CopyOnWriteArrayList<>();
    private final AtomicLong created = new AtomicLong();
    private final AtomicLong closed = new AtomicLong();
    private final AtomicLong busyNs = new AtomicLong();
    private final long startNs = System.nanoTime();
    private final AtomicInteger correlationId = new AtomicInteger();
    private final long sendMs;
    private final String group;

    /** One TCP connection of the client, with the counters its node metrics show. */
    private final class Conn {
        final int nodeId;
        final String host;
        final int port;
        final boolean active;
        final Socket socket = new Socket();
        final AtomicLong outBytes = new AtomicLong();
        final AtomicLong inBytes = new AtomicLong();
        final AtomicLong requests = new AtomicLong();
        final AtomicLong responses = new AtomicLong();
        final AtomicLong latencyNs = new AtomicLong();
        final ConcurrentLinkedQueue<Long> inFlight = new ConcurrentLinkedQueue<>();
        volatile long lastActiveNs = System.nanoTime();
        volatile long lastSendNs = System.nanoTime();
        volatile boolean open = true;
        OutputStream out;

        Conn(int nodeId, String host, int port, boolean active) {
            this.nodeId = nodeId;
            this.host = host;
            this.port = port;
            this.active = active;
        }

        String node() {
            return host + ":" + port + " (id: " + nodeId + " rack: null)";
        }

        /** Send ApiVersions v0: size, api_key 18, version 0, correlation id, client id. */
        synchronized void sendRequest() throws IOException {
            sendRequest((short) 18, new byte[0]);
        }

        /** The request this connection's role sends again and again, as the real client does:
         *  Heartbeat v0 to the group coordinator, Fetch v0 (consumer) or Produce v0 (producer)
         *  to a partition leader, each with an empty body the mock brokers answer. */
        synchronized void sendRoleRequest() throws IOException {
            if (nodeId > MAX_INT / 2) {
                byte[] g = group.getBytes(StandardCharsets.UTF_8);
                sendRequest((short) 12, ByteBuffer.allocate(2 + g.length + 4 + 2)
                        .putShort((short) g.length).put(g).putInt(-1).putShort((short) 0).array());
            } else if (consumer) {
                sendRequest((short) 1, ByteBuffer.allocate(16).putInt(-1).putInt(0).putInt(0)
                        .putInt(0).array());
            } else {
                sendRequest((short) 0, ByteBuffer.allocate(10).putShort((short) 1).putInt(1000)
                        .putInt(0).array());
            }
        }

        private void sendRequest(short apiKey, byte[] body) throws IOException {
            byte[] id = clientId.getBytes(StandardCharsets.UTF_8);
            ByteBuffer frame = ByteBuffer.allocate(4 + 2 + 2 + 4 + 2 + id.length + body.length);
            frame.putInt(frame.capacity() - 4).putShort(apiKey).putShort((short) 0)
                    .putInt(correlationId.incrementAndGet()).putShort((short) id.length).put(id)
                    .put(body);
            long now = System.nanoTime();
            inFlight.add(now);
            out.write(frame.array());
            out.flush();
            outBytes.addAndGet(frame.capacity());
            requests.incrementAndGet();
            lastActiveNs = lastSendNs = now;
        }

        /** Count the broker's bytes and response frames until the socket closes. */
        void readLoop() {
            byte[] buf = new byte[8192];
            long frameLeft = 0; // bytes still to come of the current response
            int sizeRead = 0;
            int size = 0;
            try {
                InputStream in = socket.getInputStream();
                for (int n; (n = in.read(buf)) > 0; ) {
                    inBytes.addAndGet(n);
                    lastActiveNs = System.nanoTime();
                    for (int i = 0; i < n; ) {
                        if (sizeRead < 4) { // reading the 4-byte size of the next frame
                            size = (size << 8) | (buf[i++] & 0xff);
                            if (++sizeRead == 4) {
                                frameLeft = size;
                            }
                        } else {
                            int take = (int) Math.min(frameLeft, n - i);
                            i += take;
                            frameLeft -= take;
                        }
                        if (sizeRead == 4 && frameLeft == 0) {
                            Long sent = inFlight.poll();
                            if (sent != null) {
                                latencyNs.addAndGet(lastActiveNs - sent);
                            }
                            responses.incrementAndGet();
                            sizeRead = 0;
                            size = 0;
                        }
                    }
                }
            } catch (IOException e) {
                // closed by us (expected) or reset by the broker (handled below)
            }
            if (open) { // the broker closed it
                close();
                log("INFO", NETWORK_CLIENT, "Node " + nodeId + " disconnected.");
            }
        }

        void close() {
            synchronized (this) {
                if (!open) {
                    return;
                }
                open = false;
            }
            closed.incrementAndGet();
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }

        double latencyAvgMs() {
            long count = responses.get();
            return count == 0 ? Double.NaN : latencyNs.get() / 1e6 / count;
        }
    }

    private FakeKafkaClient(Map<String, String> opts) throws IOException {
        this.opts = opts;
        this.consumer = "consumer".equals(opts.get("role"));
        if (!consumer && !"producer".equals(opts.get("role"))) {
            throw new IllegalArgumentException("--role must be consumer or producer");
        }
        this.clientId = opts.getOrDefault("client-id", consumer ? "consumer-1" : "producer-1");
        int instances = Integer.parseInt(opts.getOrDefault("instances", "1"));
        for (int i = 0; i < instances; i++) {
            clientIds.add(i == 0 ? clientId : clientId + "-" + i);
        }
        this.idleMs = Long.parseLong(opts.getOrDefault("idle-ms", "540000"));
        this.sendMs = Long.parseLong(opts.getOrDefault("send-ms", "500"));
        this.group = opts.getOrDefault("group", "kmon-fake-group");
        this.logContext = consumer ? "[Consumer clientId=" + clientId + ", groupId=" + group + "] "
                                   : "[Producer clientId=" + clientId + "] ";
        String logPath = opts.get("log");
        this.log = logPath == null ? null : new PrintWriter(Files.newBufferedWriter(
                Paths.get(logPath), StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                StandardOpenOption.APPEND));
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --option value, got " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        new FakeKafkaClient(opts).run();
    }

    private void run() throws Exception {
        String[] bootstrap = opts.get("bootstrap").split(",");
        Map<Integer, String> brokers = new LinkedHashMap<>();
        for (String b : opts.get("brokers").split(",")) {
            String[] kv = b.split("=", 2);
            brokers.put(Integer.parseInt(kv[0]), kv[1]);
        }
        List<Integer> leaders = new ArrayList<>();
        for (String id : opts.getOrDefault("leaders", "").split(",")) {
            if (!id.isEmpty()) {
                leaders.add(Integer.parseInt(id));
            }
        }
        if (leaders.isEmpty()) {
            leaders.addAll(brokers.keySet());
        }
        registerClientMBeans();
        if (consumer) {
            openConsumer(bootstrap[0], brokers, leaders);
        } else {
            openProducer(bootstrap, brokers, leaders);
        }
        ScheduledExecutorService ticker = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "fake-kafka-ticker");
            t.setDaemon(true);
            return t;
        });
        ticker.scheduleWithFixedDelay(this::tick, sendMs, Math.min(sendMs, 100),
                                      TimeUnit.MILLISECONDS);
        System.out.println("READY");
        System.out.flush();
        while (System.in.read() >= 0) {
            // run until stdin closes
        }
        ticker.shutdownNow();
        for (Conn c : conns) {
            c.close();
        }
        if (log != null) {
            log.close();
        }
    }

    /** Classic consumer: bootstrap, FindCoordinator, coordinator connection, leaders. */
    private void openConsumer(String bootstrap, Map<Integer, String> brokers, List<Integer> leaders)
            throws Exception {
        Conn boot = connect(-1, bootstrap, false);
        awaitResponses(boot, 1);
        metadataRequest(boot);
        boot.sendRequest(); // FindCoordinator's bytes
        awaitResponses(boot, 3);
        int coordinatorId = Integer.parseInt(opts.getOrDefault("coordinator", "1"));
        String coordinator = brokers.get(coordinatorId);
        String[] hp = coordinator.split(":");
        log("INFO", COORDINATOR, "Discovered group coordinator " + hp[0] + ":" + hp[1]
                + " (id: " + (MAX_INT - coordinatorId) + " rack: null)");
        connect(MAX_INT - coordinatorId, coordinator, true);
        for (int id : leaders) {
            connect(id, brokers.get(id), true);
        }
    }

    /** Producer: every bootstrap address at construction, metadata over -1, then the brokers. */
    private void openProducer(String[] bootstrap, Map<Integer, String> brokers,
                              List<Integer> leaders) throws Exception {
        List<Conn> boots = new ArrayList<>();
        for (int i = 0; i < bootstrap.length; i++) {
            boots.add(connect(-1 - i, bootstrap[i], false));
        }
        awaitResponses(boots.get(0), 1);
        metadataRequest(boots.get(0));
        awaitResponses(boots.get(0), 2);
        for (Map.Entry<Integer, String> b : brokers.entrySet()) {
            connect(b.getKey(), b.getValue(), leaders.contains(b.getKey()));
        }
    }

    private void metadataRequest(Conn c) throws IOException {
        log("DEBUG", NETWORK_CLIENT, "Sending metadata request MetadataRequestData(topics=[], "
                + "allowAutoTopicCreation=true, includeClusterAuthorizedOperations=false, "
                + "includeTopicAuthorizedOperations=false) for topics [] to node " + c.node());
        c.sendRequest();
    }

    /** Open a connection, log it as NetworkClient does, register node MBeans, send ApiVersions. */
    private Conn connect(int nodeId, String hostPort, boolean active) throws IOException {
        int colon = hostPort.lastIndexOf(':');
        String host = hostPort.substring(0, colon);
        int port = Integer.parseInt(hostPort.substring(colon + 1));
        Conn c = new Conn(nodeId, host, port, active);
        InetAddress address = InetAddress.getByName(host);
        log("DEBUG", NETWORK_CLIENT, "Initiating connection to node " + c.node()
                + " using address " + address);
        c.socket.setTcpNoDelay(true);
        c.socket.connect(new InetSocketAddress(address, port), 10_000);
        c.out = c.socket.getOutputStream();
        created.incrementAndGet();
        conns.add(c);
        Thread reader = new Thread(c::readLoop, "reader-node-" + nodeId);
        reader.setDaemon(true);
        reader.start();
        log("DEBUG", NETWORK_CLIENT, "Completed connection to node " + nodeId
                + ". Fetching API versions.");
        registerNodeMBeans(c);
        c.sendRequest();
        return c;
    }

    private static void awaitResponses(Conn c, long count) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (c.responses.get() < count && c.open && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
    }

    /** Every --send-ms: send on active connections; close those idle past --idle-ms. */
    private void tick() {
        long started = System.nanoTime();
        long sendNs = TimeUnit.MILLISECONDS.toNanos(sendMs);
        for (Conn c : conns) {
            if (!c.open) {
                continue;
            }
            long idleNs = started - c.lastActiveNs;
            try {
                if (c.active && started - c.lastSendNs >= sendNs) {
                    c.sendRoleRequest();
                } else if (!c.active && idleNs > TimeUnit.MILLISECONDS.toNanos(idleMs)) {
                    log("TRACE", SELECTOR, "About to close the idle connection from " + c.nodeId
                            + " due to being idle for " + idleNs / 1_000_000 + " millis");
                    c.close();
                    log("INFO", NETWORK_CLIENT, "Node " + c.nodeId + " disconnected.");
                }
            } catch (IOException e) {
                c.close();
                log("INFO", NETWORK_CLIENT, "Node " + c.nodeId + " disconnected.");
            }
        }
        busyNs.addAndGet(System.nanoTime() - started);
    }

    private void registerClientMBeans() throws Exception {
        String domain = consumer ? "kafka.consumer" : "kafka.producer";
        String type = consumer ? "consumer-metrics" : "producer-metrics";
        for (String id : clientIds) {
            Metrics m = new Metrics();
            m.put("connection-count", () -> conns.stream().filter(c -> c.open).count());
            m.put("connection-creation-total", created::get);
            m.put("connection-close-total", closed::get);
            m.put("io-wait-ratio", () -> 1.0 - (double) busyNs.get()
                    / Math.max(1, System.nanoTime() - startNs));
            register(domain + ":type=" + type + ",client-id=" + sanitize(id), m);
            if (consumer) {
                Metrics coordinator = new Metrics();
                coordinator.put("assigned-partitions", () -> conns.stream()
                        .filter(c -> c.active && c != coordinatorConn()).count());
                coordinator.put("heartbeat-total", () -> coordinatorConn() == null
                        ? 0 : coordinatorConn().requests.get());
                coordinator.put("last-heartbeat-seconds-ago", () -> coordinatorConn() == null
                        ? Double.NaN
                        : (System.nanoTime() - coordinatorConn().lastSendNs) / 1e9);
                register(domain + ":type=consumer-coordinator-metrics,client-id=" + sanitize(id),
                         coordinator);
            }
        }
    }

    private Conn coordinatorConn() {
        for (Conn c : conns) {
            if (c.nodeId > MAX_INT - (1 << 20)) {
                return c;
            }
        }
        return null;
    }

    /** Node metrics stay registered after a close, as the client's Selector sensors do. */
    private void registerNodeMBeans(Conn c) {
        String prefix = consumer ? "kafka.consumer:type=consumer-node-metrics"
                                 : "kafka.producer:type=producer-node-metrics";
        for (String id : clientIds) {
            Metrics m = new Metrics();
            m.put("outgoing-byte-total", c.outBytes::get);
            m.put("incoming-byte-total", c.inBytes::get);
            m.put("request-total", c.requests::get);
            m.put("response-total", c.responses::get);
            m.put("request-latency-avg", c::latencyAvgMs);
            try {
                register(prefix + ",client-id=" + sanitize(id) + ",node-id=node-" + c.nodeId, m);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }
    }

    private void register(String name, Metrics m) throws Exception {
        mbeans.registerMBean(m, new ObjectName(name));
    }

    /** Kafka's Sanitizer.jmxSanitize: quote a value holding characters ObjectName reserves. */
    private static String sanitize(String value) {
        return JMX_SAFE.matcher(value).matches() ? value : ObjectName.quote(value);
    }

    private synchronized void log(String level, String logger, String message) {
        if (log != null) {
            log.println("[" + LocalDateTime.now().format(TIME) + "] " + level + " " + logContext
                    + message + " (" + logger + ")");
            log.flush();
        }
    }

    /** A read-only MBean of double attributes, like Kafka's JmxReporter.KafkaMbean. */
    private static final class Metrics implements DynamicMBean {
        private final Map<String, DoubleSupplier> attrs = new LinkedHashMap<>();

        void put(String name, DoubleSupplier value) {
            attrs.put(name, value);
        }

        @Override
        public Object getAttribute(String name) throws AttributeNotFoundException {
            DoubleSupplier value = attrs.get(name);
            if (value == null) {
                throw new AttributeNotFoundException("Could not find attribute " + name);
            }
            return value.getAsDouble();
        }

        @Override
        public AttributeList getAttributes(String[] names) {
            AttributeList list = new AttributeList();
            for (String name : names) {
                DoubleSupplier value = attrs.get(name);
                if (value != null) {
                    list.add(new Attribute(name, value.getAsDouble()));
                }
            }
            return list;
        }

        @Override
        public void setAttribute(Attribute attribute) {
            throw new UnsupportedOperationException("read-only");
        }

        @Override
        public AttributeList setAttributes(AttributeList list) {
            return new AttributeList();
        }

        @Override
        public Object invoke(String action, Object[] params, String[] signature)
                throws ReflectionException {
            throw new ReflectionException(new NoSuchMethodException(action));
        }

        @Override
        public MBeanInfo getMBeanInfo() {
            MBeanAttributeInfo[] infos = attrs.keySet().stream()
                    .map(n -> new MBeanAttributeInfo(n, double.class.getName(), n, true, false,
                                                     false))
                    .toArray(MBeanAttributeInfo[]::new);
            return new MBeanInfo(Metrics.class.getName(), "kafka client metrics", infos, null,
                                 null, null);
        }
    }
}
