import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A plain application of the real Apache Kafka Java client (kafka-clients from Maven Central),
 * for kmon's tests: nothing in it knows of kmon.
 *
 * <p>Usage: {@code java -cp JARS KafkaClientProgram.java MODE BOOTSTRAP [--client-id X]
 * [--group G] [--topic T] [--config FILE] [-X key=value ...]}; MODE is producer, consumer or
 * admin. {@code --config} reads client properties from a file (security settings), {@code -X}
 * sets one. Logging is slf4j-simple's, set by its system properties on the command line.
 *
 * <p>Prints {@code READY} once its connections are settled: the producer after its first
 * record is acknowledged, the consumer once it has partitions and has polled, the admin client
 * after describing the cluster. Then obeys one command per line on stdin: {@code produce N}
 * (prints {@code PRODUCED N}), {@code describe} (admin: prints {@code DESCRIBED ids}),
 * {@code exit}. A closed stdin is {@code exit}.
 */
public final class KafkaClientProgram {
    private static final ConcurrentLinkedQueue<String> COMMANDS = new ConcurrentLinkedQueue<>();
    private static volatile boolean stdinOpen = true;

    private KafkaClientProgram() {
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        String topic = "kmon-java";
        String group = "kmon-java-group";
        for (int i = 2; i < args.length; i += 2) {
            String value = args[i + 1];
            switch (args[i]) {
                case "--client-id": props.put("client.id", value); break;
                case "--group": group = value; break;
                case "--topic": topic = value; break;
                case "--config":
                    try (FileInputStream in = new FileInputStream(value)) {
                        props.load(in);
                    }
                    break;
                case "-X":
                    String[] pair = value.split("=", 2);
                    props.put(pair[0], pair[1]);
                    break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        readStdin();
        switch (mode) {
            case "producer": produce(props, topic); break;
            case "consumer": consume(props, topic, group); break;
            case "admin": administer(props); break;
            default: throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.exit(0);
    }

    private static void produce(Properties props, String topic) throws Exception {
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.send(new ProducerRecord<>(topic, "hello")).get(60, TimeUnit.SECONDS);
            say("READY");
            for (String command = next(); !command.equals("exit"); command = next()) {
                if (command.startsWith("produce ")) {
                    int count = Integer.parseInt(command.substring(8).trim());
                    for (int n = 0; n < count; n++) {
                        producer.send(new ProducerRecord<>(topic, Integer.toString(n), "m" + n));
                    }
                    producer.flush();
                    say("PRODUCED " + count);
                }
            }
        }
    }

    private static void consume(Properties props, String topic, String group) {
        props.put("group.id", group);
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        List<TopicPartition> owned = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    owned.removeAll(partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    owned.addAll(partitions);
                }
            });
            boolean ready = false;
            long consumed = 0;
            while (true) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                consumed += records.count();
                if (!ready && !owned.isEmpty()) {
                    ready = true;
                    say("READY " + owned);
                }
                String command = COMMANDS.poll();
                if (command != null && command.equals("consumed")) {
                    say("CONSUMED " + consumed);
                }
                if ((command != null && command.equals("exit")) || (!stdinOpen && COMMANDS.isEmpty())) {
                    return;
                }
            }
        }
    }

    private static void administer(Properties props) throws Exception {
        try (Admin admin = Admin.create(props)) {
            String ids = describe(admin);
            say("READY " + ids);
            for (String command = next(); !command.equals("exit"); command = next()) {
                if (command.equals("describe")) {
                    say("DESCRIBED " + describe(admin));
                }
            }
        }
    }

    private static String describe(Admin admin) throws Exception {
        List<Integer> ids = new ArrayList<>();
        admin.describeCluster().nodes().get(60, TimeUnit.SECONDS).forEach(n -> ids.add(n.id()));
        ids.sort(null);
        return ids.toString();
    }

    /** The next command; "exit" once stdin has closed. */
    private static String next() throws InterruptedException {
        while (true) {
            String command = COMMANDS.poll();
            if (command != null) {
                return command;
            }
            if (!stdinOpen) {
                return "exit";
            }
            Thread.sleep(50);
        }
    }

    private static void readStdin() {
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line = in.readLine(); line != null; line = in.readLine()) {
                    COMMANDS.add(line.trim());
                }
            } catch (IOException ignored) {
                // a broken stdin is a closed one
            }
            stdinOpen = false;
        }, "stdin");
        reader.setDaemon(true);
        reader.start();
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
