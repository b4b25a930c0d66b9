package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Issue 5 item 4: the Java producer with its DEFAULT settings (enable.idempotence=true,
 * acks=all, 5 in flight) sends 100,000 records across 6 partitions while the broker is
 * SIGKILLed (as soon as a quarter is acknowledged, with requests in flight) and restarted once
 * on the same port and data dir; a group-less consumer then reads every record exactly
 * once and in order per partition (each value carries its per-partition sequence number).
 */
@ExtendWith(BrokerExtension.class)
class IdempotentProducerCrashTest {
    static final int RECORDS = Integer.getInteger("compat.idempotence.records", 100_000);
    static final int PARTITIONS = 6;

    @Test
    @Timeout(value = 420, unit = TimeUnit.SECONDS)
    void idempotentProducerSurvivesBrokerKillExactlyOnceInOrder(BrokerProcess broker) throws Exception {
        String topic = Clients.unique("idem");
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all()
                .get(30, TimeUnit.SECONDS);
            // Wait until every partition has a serving leader (ListOffsets answers), so that the first
            // batches do not get NOT_LEADER_OR_FOLLOWER: a retried first batch behind an accepted
            // second one is an OUT_OF_ORDER_SEQUENCE dead end on Kafka itself, unrelated to the kill.
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
            Clients.waitUntil(Duration.ofSeconds(60), "leaders for all " + PARTITIONS + " partitions", () -> {
                try {
                    admin.listOffsets(latest).all().get(10, TimeUnit.SECONDS);
                    return true;
                } catch (Exception e) {
                    return false;
                }
            }, null);
        }

        long[] sent = new long[PARTITIONS];
        AtomicLong queued = new AtomicLong();
        AtomicLong acked = new AtomicLong();
        AtomicLong unackedAtKill = new AtomicLong(-1);
        AtomicLong killedPid = new AtomicLong(-1);
        CountDownLatch quarterAcked = new CountDownLatch(1);
        ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
        long retries;
        // The crash: as soon as a quarter of the records is acknowledged, while the main thread is
        // still sending (so produce requests are in flight), SIGKILL the broker and restart it on the
        // same port and data dir. The producer keeps sending and retrying throughout.
        Thread crasher = new Thread(() -> {
            try {
                if (!quarterAcked.await(120, TimeUnit.SECONDS)) {
                    errors.add("a quarter of the records was not acknowledged within 120 s (" + acked.get() + " acked)");
                    return;
                }
                unackedAtKill.set(queued.get() - acked.get());
                killedPid.set(broker.pid());
                broker.kill();
                broker.restart();
            } catch (Exception e) {
                errors.add("broker kill/restart failed: " + Clients.describe(e));
            }
        }, "broker-crasher");
        crasher.setDaemon(true);
        try (KafkaProducer<String, String> producer = Clients.producer(broker, null)) {
            // DEFAULT settings: nothing but bootstrap + serializers. Prove what the defaults are.
            assertEquals("true", String.valueOf(ProducerConfig.configDef().defaultValues().get(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG)));
            assertEquals("all", String.valueOf(ProducerConfig.configDef().defaultValues().get(ProducerConfig.ACKS_CONFIG)));
            crasher.start();
            for (int i = 0; i < RECORDS; i++) {
                int p = i % PARTITIONS;
                long seq = sent[p]++;
                String value = p + ":" + seq;
                producer.send(new ProducerRecord<>(topic, p, "k" + seq, value), (md, ex) -> {
                    if (ex != null) {
                        if (errors.size() < 20) errors.add(value + " -> " + Clients.describe(ex));
                    } else if (acked.incrementAndGet() == RECORDS / 4) {
                        quarterAcked.countDown();
                    }
                });
                queued.incrementAndGet();
            }
            // flush() is bounded by delivery.timeout.ms (120 s default): every send completes or fails by then.
            // It cannot complete before the restart: three quarters of the records need the new broker.
            producer.flush();
            retries = (long) metric(producer.metrics(), "record-retry-total");
        }
        crasher.join(TimeUnit.SECONDS.toMillis(60));
        if (!errors.isEmpty()) {
            fail("sends failed (broker killed was pid " + killedPid.get() + "); first errors:\n  "
                + String.join("\n  ", errors) + "\nbroker stderr tail:\n" + broker.stderrTail(20));
        }
        assertTrue(killedPid.get() > 0, "the broker was killed midway");
        assertFalse(crasher.isAlive(), "kill + restart finished");
        assertEquals(RECORDS, acked.get(), "acknowledged sends");
        assertTrue(broker.isAlive(), "broker is running again after the restart");
        System.out.println("killed pid " + killedPid.get() + " with " + unackedAtKill.get()
            + " records sent but not yet acknowledged; producer record-retry-total=" + retries);

        // Read everything back with assign + seekToBeginning (no group).
        List<TopicPartition> tps = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toList());
        long[] next = new long[PARTITIONS];
        List<String> anomalies = new ArrayList<>();
        long[] duplicates = new long[PARTITIONS];
        long[] gaps = new long[PARTITIONS];
        try (KafkaConsumer<String, String> consumer = Clients.consumer(broker, null)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(30));
            long totalEnd = end.values().stream().mapToLong(Long::longValue).sum();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!caughtUp(consumer, end)) {
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> pos = new HashMap<>();
                    for (TopicPartition tp : tps) pos.put(tp, consumer.position(tp));
                    fail("consumer did not reach the end offsets " + end + " within 120 s; positions " + pos);
                }
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    int p = r.partition();
                    String[] parts = r.value().split(":");
                    assertEquals(String.valueOf(p), parts[0], "record for partition " + parts[0] + " found in " + p);
                    long seq = Long.parseLong(parts[1]);
                    if (seq == next[p]) {
                        next[p]++;
                    } else if (seq < next[p]) {
                        duplicates[p]++;
                        if (anomalies.size() < 20) anomalies.add("p" + p + " offset " + r.offset() + ": seq " + seq + " again (duplicate; expected " + next[p] + ")");
                    } else {
                        gaps[p] += seq - next[p];
                        if (anomalies.size() < 20) anomalies.add("p" + p + " offset " + r.offset() + ": seq " + seq + " after " + (next[p] - 1) + " (gap of " + (seq - next[p]) + ")");
                        next[p] = seq + 1;
                    }
                }
            }
            StringBuilder sb = new StringBuilder();
            for (int p = 0; p < PARTITIONS; p++) {
                sb.append(String.format("p%d: sent %d, log end %d, in order %d, duplicates %d, missing %d%n",
                    p, sent[p], end.get(tps.get(p)), next[p], duplicates[p], gaps[p] + (sent[p] - next[p])));
            }
            System.out.print(sb);
            boolean ok = anomalies.isEmpty() && totalEnd == RECORDS;
            for (int p = 0; p < PARTITIONS; p++) ok &= next[p] == sent[p];
            if (!ok) {
                fail("records not exactly once / in order after the kill (log holds " + totalEnd + " records, sent "
                    + RECORDS + "):\n" + sb + "first anomalies:\n  " + String.join("\n  ", anomalies));
            }
        }
    }

    private static boolean caughtUp(KafkaConsumer<?, ?> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) return false;
        }
        return true;
    }

    private static double metric(Map<MetricName, ? extends Metric> metrics, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            if (e.getKey().name().equals(name) && e.getKey().group().equals("producer-metrics")) {
                Object v = e.getValue().metricValue();
                if (v instanceof Number) return ((Number) v).doubleValue();
            }
        }
        return -1;
    }

}
