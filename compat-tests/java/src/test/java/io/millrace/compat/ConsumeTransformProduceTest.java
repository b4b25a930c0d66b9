package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Transactions (KIP-98/KIP-447), end to end with the Java 4.1 clients: a consume-transform-produce
 * loop copies 100,000 records (key {@code k<i>}, value {@code v<i>}, written first by an
 * idempotent acks=all producer to a 4-partition input topic) to an output topic as
 * {@code v<i>-out}. The loop's consumer is a group member ({@code subscribe},
 * {@code isolation.level=read_committed}, no auto commit); per poll its producer
 * ({@code transactional.id}) runs beginTransaction, sends the batch,
 * {@code sendOffsetsToTransaction(offsets, consumer.groupMetadata())} and commitTransaction.
 *
 * <p>The broker is SIGKILLed twice in the middle of a transaction and restarted on the same port
 * and data dir: at ~30% with the transaction's records sent but not flushed (before
 * sendOffsetsToTransaction), at ~60% after sendOffsetsToTransaction and a flush (before
 * commitTransaction). The loop recovers as Kafka's EOS examples do: abortable errors abort the
 * transaction and rewind the consumer to the group's committed offsets; fatal ones
 * (ProducerFenced, OutOfOrderSequence, IllegalState, an abort that fails, a commit that keeps
 * timing out) close producer and consumer and make new ones with the same transactional.id and
 * group, whose initTransactions resolves the old transaction.
 *
 * <p>Proved: the group's committed offsets end at the input's end offsets; no transaction is left
 * open (read_committed end offsets = high watermarks); a read_committed consumer of the whole
 * output topic sees every input record exactly once (no loss, no duplicates, values intact).
 * Output of the run (kills, errors the clients saw, recoveries) goes to stdout (Surefire's
 * {@code *-output.txt}).
 */
@ExtendWith(BrokerExtension.class)
@BrokerExtension.BrokerSettings({
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    "group.initial.rebalance.delay.ms=0"})
class ConsumeTransformProduceTest {
    static final int RECORDS = Integer.getInteger("compat.eos.records", 100_000);
    static final int PARTITIONS = 4;
    static final int MAX_POLL_RECORDS = Integer.getInteger("compat.eos.poll.records", 1000);
    static final double[] KILL_AT = {0.30, 0.60};
    static final Duration LOOP_TIMEOUT = Duration.ofSeconds(Long.getLong("compat.eos.loop.timeout.s", 300));
    static final Duration RESTART_TIMEOUT = Duration.ofSeconds(180);
    static final int MAX_RECOVERIES = 50;

    private BrokerProcess broker;
    private String inTopic;
    private String outTopic;
    private String group;
    private String txnId;
    private List<TopicPartition> inParts;
    private KafkaProducer<String, String> producer;
    private KafkaConsumer<String, String> consumer;
    /** The group's committed input offsets as last known (after a commit, or read after a recovery). */
    private final Map<TopicPartition, Long> committed = new HashMap<>();
    private final List<String> events = new ArrayList<>();
    private final long t0 = System.nanoTime();
    private Thread restarter;
    private final AtomicReference<Throwable> restartError = new AtomicReference<>();
    private int producersCreated;
    private int consumersCreated;

    @Test
    @Timeout(value = 480, unit = TimeUnit.SECONDS)
    void consumeTransformProduceExactlyOnceAcrossTwoBrokerKills(BrokerProcess broker) throws Exception {
        this.broker = broker;
        inTopic = Clients.unique("ctp-in");
        outTopic = Clients.unique("ctp-out");
        group = Clients.unique("ctp-group");
        txnId = Clients.unique("ctp-txn");
        inParts = partitions(inTopic);
        List<TopicPartition> outParts = partitions(outTopic);
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(inTopic, PARTITIONS, (short) 1), new NewTopic(outTopic, PARTITIONS, (short) 1)))
                .all().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (TopicPartition tp : inParts) latest.put(tp, OffsetSpec.latest());
            for (TopicPartition tp : outParts) latest.put(tp, OffsetSpec.latest());
            Clients.waitUntil(Duration.ofSeconds(60), "leaders for all partitions", () -> {
                try {
                    admin.listOffsets(latest).all().get(10, TimeUnit.SECONDS);
                    return true;
                } catch (Exception e) {
                    return false;
                }
            }, null);
            try {
                FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS)
                    .finalizedFeatures().get("transaction.version");
                log("finalized transaction.version: " + (tv == null ? "none" : tv.maxVersionLevel()));
            } catch (Exception e) {
                log("describeFeatures failed: " + Clients.describe(e));
            }
        }

        // 1. The input: RECORDS records, each identified by its number, round-robin over the partitions.
        long t = System.nanoTime();
        AtomicLong sendErrors = new AtomicLong();
        AtomicReference<String> firstSendError = new AtomicReference<>();
        try (KafkaProducer<String, String> p = Clients.producer(broker, Clients.props(
                ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                ProducerConfig.LINGER_MS_CONFIG, "10", ProducerConfig.BATCH_SIZE_CONFIG, "65536"))) {
            for (int i = 0; i < RECORDS; i++) {
                p.send(new ProducerRecord<>(inTopic, i % PARTITIONS, "k" + i, "v" + i), (md, ex) -> {
                    if (ex != null && sendErrors.incrementAndGet() == 1) firstSendError.set(Clients.describe(ex));
                });
            }
            p.flush();
        }
        assertEquals(0, sendErrors.get(), "input sends failed; first: " + firstSendError.get());
        Map<TopicPartition, Long> inEnd;
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null)) {
            inEnd = c.endOffsets(inParts, Duration.ofSeconds(30));
        }
        assertEquals(RECORDS, sum(inEnd), "input end offsets " + inEnd);
        log("input: " + RECORDS + " records in " + ms(t) + " ms, end offsets " + inEnd);

        // 2. The loop, with two kills.
        t = System.nanoTime();
        int txns = 0;
        int aborts = 0;
        int recoveries = 0;
        int kills = 0;
        long progress = 0; // sum of the group's committed input offsets = input records copied
        long deadline = System.nanoTime() + LOOP_TIMEOUT.toNanos();
        newProducer();
        newConsumer();
        try {
            while (progress < RECORDS) {
                if (System.nanoTime() > deadline) {
                    fail("the loop copied " + progress + " of " + RECORDS + " records in " + LOOP_TIMEOUT.toSeconds()
                        + " s (" + txns + " transactions committed, " + kills + " kills); events:\n  "
                        + String.join("\n  ", last(events, 40)) + "\nbroker stderr tail:\n" + broker.stderrTail(20));
                }
                if (recoveries > MAX_RECOVERIES) {
                    fail("more than " + MAX_RECOVERIES + " recoveries; events:\n  " + String.join("\n  ", last(events, 40)));
                }
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (KafkaException e) {
                    event("poll: " + Clients.describe(e) + " -> new producer and consumer");
                    recoveries++;
                    recreate();
                    progress = sum(committed);
                    continue;
                }
                if (records.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<String, String>> l = records.records(tp);
                    offsets.put(tp, new OffsetAndMetadata(l.get(l.size() - 1).offset() + 1));
                }
                int n = records.count();
                String phase = "beginTransaction";
                try {
                    producer.beginTransaction();
                    phase = "send";
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(outTopic, r.key(), r.value() + "-out"));
                    }
                    if (kills == 0 && progress + n >= KILL_AT[0] * RECORDS) {
                        kill(++kills, progress, "transaction open, " + n + " records sent (not flushed), before sendOffsetsToTransaction");
                    }
                    phase = "sendOffsetsToTransaction";
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    if (kills == 1 && progress + n >= KILL_AT[1] * RECORDS) {
                        producer.flush();
                        kill(++kills, progress, "transaction open, " + n + " records flushed and offsets sent, before commitTransaction");
                    }
                    phase = "commitTransaction";
                    commit();
                    txns++;
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) committed.put(e.getKey(), e.getValue().offset());
                    long before = progress;
                    progress = sum(committed);
                    if (before + n != progress) {
                        event("committed " + n + " records but progress went " + before + " -> " + progress);
                    }
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                         | UnsupportedVersionException | IllegalStateException e) {
                    event(phase + ": " + Clients.describe(e) + " -> new producer and consumer");
                    recoveries++;
                    recreate();
                    progress = sum(committed);
                } catch (KafkaException e) {
                    // abortable (TimeoutException included): abort, rewind to the committed offsets
                    event(phase + ": " + Clients.describe(e) + " -> abortTransaction");
                    recoveries++;
                    try {
                        producer.abortTransaction();
                        aborts++;
                        rewind();
                    } catch (Exception e2) {
                        event("abortTransaction/rewind: " + Clients.describe(e2) + " -> new producer and consumer");
                        recreate();
                    }
                    progress = sum(committed);
                }
            }
        } finally {
            closeQuietly();
        }
        awaitRestart();
        long loopMs = ms(t);
        log("loop: " + RECORDS + " records copied in " + loopMs + " ms; " + txns + " transactions committed, " + aborts
            + " aborted, " + recoveries + " recoveries, producers created " + producersCreated + ", consumers created "
            + consumersCreated);
        log("events:\n  " + String.join("\n  ", events));
        assertEquals(2, kills, "broker kills during the loop");
        assertTrue(broker.isAlive(), "broker running after the second restart");

        // 3. The group's committed offsets are the input's end offsets.
        try (Admin admin = Clients.admin(broker)) {
            Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, Long> gotOffsets = got.entrySet().stream()
                .collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
            assertEquals(inEnd, gotOffsets, "group " + group + " committed offsets vs input end offsets");
        }

        // 4. Every input record exactly once in the committed output.
        verifyOutput(outParts);
    }

    private void verifyOutput(List<TopicPartition> outParts) {
        long t = System.nanoTime();
        Map<TopicPartition, Long> committedEnd;
        Map<TopicPartition, Long> hw;
        try (KafkaConsumer<String, String> rc = Clients.consumer(broker, Clients.props(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
             KafkaConsumer<String, String> ru = Clients.consumer(broker, null)) {
            // After the last commit the markers may still be on their way: wait until no transaction is
            // open on the output (last stable offset = high watermark on every partition).
            AtomicReference<String> state = new AtomicReference<>();
            Clients.waitUntil(Duration.ofSeconds(60), "read_committed end offsets = high watermarks on " + outTopic, () -> {
                Map<TopicPartition, Long> lso = rc.endOffsets(outParts, Duration.ofSeconds(10));
                Map<TopicPartition, Long> h = ru.endOffsets(outParts, Duration.ofSeconds(10));
                state.set("LSO " + lso + ", HW " + h);
                return lso.equals(h);
            }, state::get);
            committedEnd = rc.endOffsets(outParts, Duration.ofSeconds(10));
            hw = ru.endOffsets(outParts, Duration.ofSeconds(10));
        }
        int[] seen = new int[RECORDS];
        List<String> corruptSamples = new ArrayList<>();
        long[] read = readAll(outParts, committedEnd, "read_committed", r -> {
            int id = parseId(r.key());
            if (id < 0 || id >= RECORDS || !r.value().equals("v" + id + "-out")) return false;
            seen[id]++;
            return true;
        }, corruptSamples);
        long total = read[0];
        long corrupt = read[1];
        long uncommittedTotal = readAll(outParts, hw, "read_uncommitted", r -> true, new ArrayList<>())[0];
        long missing = 0;
        long duplicates = 0;
        List<Integer> missingSamples = new ArrayList<>();
        List<String> dupSamples = new ArrayList<>();
        for (int i = 0; i < RECORDS; i++) {
            if (seen[i] == 0) {
                missing++;
                if (missingSamples.size() < 10) missingSamples.add(i);
            } else if (seen[i] > 1) {
                duplicates += seen[i] - 1;
                if (dupSamples.size() < 10) dupSamples.add(i + "x" + seen[i]);
            }
        }
        String summary = "output " + outTopic + ": read_committed " + total + " records (end offsets " + committedEnd
            + "), read_uncommitted " + uncommittedTotal + " (aborted records and markers in the log: "
            + (sum(hw) - total) + " offsets); input " + RECORDS + ": missing " + missing + ", duplicates " + duplicates
            + ", corrupt " + corrupt + " (read in " + ms(t) + " ms)";
        log(summary);
        if (missing != 0 || duplicates != 0 || corrupt != 0 || total != RECORDS) {
            fail("not exactly once: " + summary + "; missing e.g. " + missingSamples + "; duplicated e.g. " + dupSamples
                + "; corrupt e.g. " + corruptSamples + "; loop events:\n  " + String.join("\n  ", last(events, 40)));
        }
    }

    /** Reads partitions from the beginning up to {@code end}; returns {records read, records failing check}. */
    private long[] readAll(List<TopicPartition> parts, Map<TopicPartition, Long> end, String isolation,
                         java.util.function.Predicate<ConsumerRecord<String, String>> check, List<String> bad) {
        long n = 0;
        long nBad = 0;
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, Clients.props(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation, ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000"))) {
            c.assign(parts);
            c.seekToBeginning(parts);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!caughtUp(c, end)) {
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> pos = new HashMap<>();
                    for (TopicPartition tp : parts) pos.put(tp, c.position(tp));
                    fail(isolation + " consumer did not reach end offsets " + end + " within 120 s; positions " + pos);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) continue;
                    n++;
                    if (!check.test(r)) {
                        nBad++;
                        if (bad.size() < 10) bad.add(r.partition() + "@" + r.offset() + " " + r.key() + "=" + r.value());
                    }
                }
            }
        }
        return new long[] {n, nBad};
    }

    // ---- the loop's clients and recovery ----

    private void newProducer() {
        producer = Clients.producer(broker, Clients.props(
            ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId,
            ProducerConfig.LINGER_MS_CONFIG, "5",
            ProducerConfig.BATCH_SIZE_CONFIG, "65536"));
        producersCreated++;
        // initTransactions fences the previous producer of this transactional.id and completes or
        // aborts its transaction; it may time out while the broker restarts (then it may be retried).
        for (int attempt = 1; ; attempt++) {
            try {
                producer.initTransactions();
                return;
            } catch (TimeoutException e) {
                event("initTransactions attempt " + attempt + ": " + Clients.describe(e));
                if (attempt >= 3) throw e;
            }
        }
    }

    private void newConsumer() {
        consumer = Clients.consumer(broker, Clients.props(
            ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false",
            ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
            ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(MAX_POLL_RECORDS),
            ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000",
            ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000"));
        consumersCreated++;
        consumer.subscribe(List.of(inTopic));
    }

    /** commitTransaction, retried after a TimeoutException (the Java client allows that) up to 3 times. */
    private void commit() {
        for (int attempt = 1; ; attempt++) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                event("commitTransaction attempt " + attempt + ": " + Clients.describe(e) + (attempt < 3 ? " -> retry" : ""));
                if (attempt >= 3) throw e;
            }
        }
    }

    /** Seeks the consumer's partitions to the group's committed offsets (stable: read_committed). */
    private void rewind() {
        Map<TopicPartition, OffsetAndMetadata> c = consumer.committed(new java.util.HashSet<>(inParts), Duration.ofSeconds(60));
        for (TopicPartition tp : inParts) {
            OffsetAndMetadata om = c.get(tp);
            committed.put(tp, om == null ? 0L : om.offset());
        }
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata om = c.get(tp);
            if (om != null) consumer.seek(tp, om.offset());
            else consumer.seekToBeginning(List.of(tp));
        }
        event("rewound to committed offsets " + committed + " (assignment " + consumer.assignment().size() + " partitions)");
    }

    /** Closes producer and consumer and makes new ones (same transactional.id and group). */
    private void recreate() {
        closeQuietly();
        newConsumer();
        newProducer();
        // A new member gets the committed offsets when it is assigned; read them here for progress.
        for (int attempt = 1; ; attempt++) {
            try {
                Map<TopicPartition, OffsetAndMetadata> c = consumer.committed(new java.util.HashSet<>(inParts), Duration.ofSeconds(60));
                for (TopicPartition tp : inParts) committed.put(tp, c.get(tp) == null ? 0L : c.get(tp).offset());
                event("new producer and consumer; committed offsets " + committed);
                return;
            } catch (TimeoutException e) {
                event("committed() attempt " + attempt + ": " + Clients.describe(e));
                if (attempt >= 3) throw e;
            }
        }
    }

    private void closeQuietly() {
        if (producer != null) {
            try {
                producer.close(Duration.ZERO);
            } catch (Exception e) {
                event("producer.close: " + Clients.describe(e));
            }
            producer = null;
        }
        if (consumer != null) {
            try {
                consumer.close(Duration.ofSeconds(5));
            } catch (Exception e) {
                event("consumer.close: " + Clients.describe(e));
            }
            consumer = null;
        }
    }

    // ---- the broker kills ----

    /** SIGKILLs the broker now (the loop's transaction is open) and restarts it in the background. */
    private void kill(int n, long progress, String when) throws Exception {
        awaitRestart();
        long pid = broker.pid();
        try {
            broker.kill();
        } catch (IllegalStateException e) { // not a client error: keep it out of the loop's recovery
            throw new AssertionError("kill " + n + " failed: " + e.getMessage(), e);
        }
        long killedAt = System.nanoTime();
        event("KILL " + n + ": SIGKILL broker pid " + pid + " at " + progress + " records committed; " + when);
        restarter = new Thread(() -> {
            try {
                broker.restart();
                event("KILL " + n + ": broker restarted (pid " + broker.pid() + ") after " + ms(killedAt) + " ms");
            } catch (Throwable e) {
                restartError.set(e);
            }
        }, "broker-restart-" + n);
        restarter.setDaemon(true);
        restarter.start();
    }

    private void awaitRestart() throws InterruptedException {
        if (restarter == null) return;
        restarter.join(RESTART_TIMEOUT.toMillis());
        if (restarter.isAlive()) fail("broker restart did not finish within " + RESTART_TIMEOUT.toSeconds() + " s");
        if (restartError.get() != null) {
            fail("broker restart failed: " + Clients.describe(restartError.get()) + "\nbroker stderr tail:\n" + broker.stderrTail(20));
        }
        restarter = null;
    }

    // ---- helpers ----

    private synchronized void event(String s) {
        String line = String.format("%7.1f s %s", (System.nanoTime() - t0) / 1e9, s);
        synchronized (events) {
            events.add(line);
        }
        System.out.println(line);
    }

    private static void log(String s) {
        System.out.println("ctp: " + s);
    }

    private static List<String> last(List<String> l, int n) {
        synchronized (l) {
            return new ArrayList<>(l.subList(Math.max(0, l.size() - n), l.size()));
        }
    }

    private static List<TopicPartition> partitions(String topic) {
        return IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toList());
    }

    private static long sum(Map<TopicPartition, Long> m) {
        return m.values().stream().mapToLong(Long::longValue).sum();
    }

    private static long ms(long since) {
        return (System.nanoTime() - since) / 1_000_000;
    }

    private static int parseId(String key) {
        if (key == null || !key.startsWith("k")) return -1;
        try {
            return Integer.parseInt(key.substring(1));
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    private static boolean caughtUp(KafkaConsumer<?, ?> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) return false;
        }
        return true;
    }
}
