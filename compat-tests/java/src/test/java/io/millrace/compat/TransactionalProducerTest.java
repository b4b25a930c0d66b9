package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Transactions with the Java 4.1 producer, one partition, each step checked by what
 * {@code read_committed} and {@code read_uncommitted} consumers read from the start:
 * <ol>
 *   <li>one transaction committed, one aborted: read_committed sees exactly the committed records,
 *       read_uncommitted both;
 *   <li>a producer left mid-transaction (as if killed: never closed) is fenced by a successor with
 *       the same {@code transactional.id}: the successor's initTransactions aborts the open
 *       transaction, and the old producer's commit fails with ProducerFencedException;
 *   <li>a transaction left open past its {@code transaction.timeout.ms} is aborted by the
 *       coordinator: read_committed moves past it without its records.
 * </ol>
 */
@ExtendWith(BrokerExtension.class)
@BrokerExtension.BrokerSettings({
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500"})
class TransactionalProducerTest {
    static final Duration READ_TIMEOUT = Duration.ofSeconds(30);
    /** How long the last stable offset may take to pass a transaction the coordinator aborts. */
    static final Duration TIMEOUT_ABORT_WITHIN = Duration.ofSeconds(30);

    private BrokerProcess broker;
    private String topic;
    private TopicPartition tp;

    private KafkaProducer<String, String> transactional(String id, int timeoutMs) {
        KafkaProducer<String, String> p = Clients.producer(broker, Clients.props(
            ProducerConfig.TRANSACTIONAL_ID_CONFIG, id,
            ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(timeoutMs),
            ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(Math.max(timeoutMs, 30000)),
            ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(timeoutMs, 30000))));
        p.initTransactions();
        return p;
    }

    private void send(KafkaProducer<String, String> p, String... values) throws Exception {
        for (String v : values) p.send(new ProducerRecord<>(topic, 0, v, v)).get(30, TimeUnit.SECONDS);
    }

    /** Every value from the start up to the end offset at {@code isolation}. */
    private List<String> read(String isolation) {
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, Clients.props(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long end = c.endOffsets(List.of(tp)).get(tp);
            List<String> got = new ArrayList<>();
            long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
            while (c.position(tp) < end) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError(isolation + ": position " + c.position(tp) + " < end " + end + "; read " + got);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
            }
            return got;
        }
    }

    /** The read_committed end offset (the last stable offset). */
    private long lastStable() {
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, Clients.props(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            return c.endOffsets(List.of(tp)).get(tp);
        }
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void commitAbortFencingAndTimeoutAsKafka(BrokerProcess broker) throws Exception {
        this.broker = broker;
        topic = Clients.unique("txn-java");
        tp = new TopicPartition(topic, 0);
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }

        // 1. Commit one, abort one.
        String id = Clients.unique("txn-java-id");
        KafkaProducer<String, String> first = transactional(id, 60000);
        first.beginTransaction();
        send(first, "c1", "c2");
        first.commitTransaction();
        first.beginTransaction();
        send(first, "a1", "a2");
        first.abortTransaction();
        assertEquals(List.of("c1", "c2"), read("read_committed"));
        assertEquals(List.of("c1", "c2", "a1", "a2"), read("read_uncommitted"));

        // 2. Left open mid-transaction, then fenced by a successor, which aborts it.
        first.beginTransaction();
        send(first, "open1");
        KafkaProducer<String, String> second = transactional(id, 60000);
        assertThrows(ProducerFencedException.class, first::commitTransaction);
        first.close(Duration.ZERO);
        second.beginTransaction();
        send(second, "c3");
        second.commitTransaction();
        second.close();
        assertEquals(List.of("c1", "c2", "c3"), read("read_committed"));
        assertEquals(List.of("c1", "c2", "a1", "a2", "open1", "c3"), read("read_uncommitted"));

        // 3. Left open past its timeout: the coordinator aborts it.
        KafkaProducer<String, String> lazy = transactional(Clients.unique("txn-java-timeout"), 3000);
        lazy.beginTransaction();
        send(lazy, "timed-out");
        long stuck = lastStable();
        Clients.waitUntil(TIMEOUT_ABORT_WITHIN, "the coordinator to abort the timed-out transaction",
            () -> lastStable() > stuck, () -> "last stable offset " + lastStable());
        KafkaException late = assertThrows(KafkaException.class, lazy::commitTransaction);
        System.out.println("commit after the timeout abort: " + Clients.describe(late));
        lazy.close(Duration.ZERO);
        assertEquals(List.of("c1", "c2", "c3"), read("read_committed"));
        assertEquals(List.of("c1", "c2", "a1", "a2", "open1", "c3", "timed-out"), read("read_uncommitted"));
    }
}
