package io.millrace.compat;

import java.time.Duration;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client builders and bounded waits shared by the tests. */
final class Clients {
    static final Duration API_TIMEOUT = Duration.ofSeconds(30);
    private static final AtomicInteger COUNTER = new AtomicInteger();

    private Clients() {}

    static String unique(String prefix) {
        return prefix + "-" + COUNTER.incrementAndGet() + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static Admin admin(BrokerProcess b) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) API_TIMEOUT.toMillis());
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        return Admin.create(p);
    }

    /** A producer with Kafka's default settings (idempotent, acks=all) plus String serializers. */
    static KafkaProducer<String, String> producer(BrokerProcess b, Properties extra) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        if (extra != null) p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    /** A consumer without a group (assign/seek only) unless extra sets group.id. */
    static KafkaConsumer<String, String> consumer(BrokerProcess b, Properties extra) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) API_TIMEOUT.toMillis());
        if (extra != null) p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static Properties props(Object... kv) {
        Properties p = new Properties();
        for (int i = 0; i < kv.length; i += 2) p.put(kv[i], kv[i + 1]);
        return p;
    }

    /**
     * Evaluates {@code cond} until it holds or {@code timeout} passes; then fails with
     * {@code what} and the last state reported by {@code state}.
     */
    static void waitUntil(Duration timeout, String what, BooleanSupplier cond, Supplier<String> state) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            if (cond.getAsBoolean()) return;
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout.toSeconds() + " s waiting for " + what
                    + (state == null ? "" : "; last state: " + state.get()));
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted waiting for " + what);
            }
        }
    }

    /** The root cause chain of an exception as "Class: message <- Class: message". */
    static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (sb.length() > 0) sb.append(" <- ");
            sb.append(c.getClass().getName()).append(": ").append(c.getMessage());
            if (c.getCause() == c) break;
        }
        return sb.toString();
    }
}
