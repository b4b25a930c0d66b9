package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Kafka Streams with {@code processing.guarantee=exactly_once_v2} across broker restarts: the
 * WordCountDemo topology (flatMapValues: lower-case and split on non-word characters; groupBy
 * word, which repartitions through {@code <app>-by-word-repartition}; count in a RocksDB store
 * with a changelog; toStream to the output topic) with {@code commit.interval.ms=100},
 * replication factor 1 for its internal topics, its state dir in a temp dir, one stream thread
 * and a 10 s consumer session timeout.
 *
 * <p>A known text (30,000 lines from a fixed seed; ~195,000 words from a 60-word vocabulary with
 * a skewed distribution, random capitals and punctuation) is fed in three parts by an idempotent
 * producer: after the first part the broker is stopped cleanly (SIGTERM) once the application has
 * committed some input, and restarted on the same port and data dir; after the second part it is
 * SIGKILLed once the application has started on that part, and restarted. Then the third part.
 * Each part is fed once every input partition is served (ListOffsets answers) after the restart.
 * Streams' own producer has {@code transaction.timeout.ms=10000} under EOS, so a transaction open
 * across the restart may be rolled back by the coordinator ("due to timeout"); Streams then
 * recovers (InvalidProducerEpochException, TaskMigratedException, the thread rejoins the group,
 * state restored from the changelog). A thread that dies is replaced (at most 10 times).
 *
 * <p>Proved: once the application has processed everything (its committed offsets on the input
 * and the repartition topic leave no record unread) and no transaction is open on the output, a
 * read_committed consumer of the output topic sees, as the last value per word, exactly the
 * expected count of every word (no update lost, none counted twice), and no other key. The
 * application is RUNNING at the end.
 */
@ExtendWith(BrokerExtension.class)
@BrokerExtension.BrokerSettings({
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    "group.initial.rebalance.delay.ms=0"})
class StreamsExactlyOnceTest {
    static final int LINES = Integer.getInteger("compat.streams.lines", 30_000);
    static final int VOCABULARY = 60;
    static final int PARTITIONS = 3;
    static final Duration PHASE_TIMEOUT = Duration.ofSeconds(120);
    static final Duration DRAIN_TIMEOUT = Duration.ofSeconds(Long.getLong("compat.streams.drain.timeout.s", 180));

    @TempDir
    Path stateDir;

    private final long t0 = System.nanoTime();
    private final List<String> events = new ArrayList<>();

    @Test
    @Timeout(value = 540, unit = TimeUnit.SECONDS)
    void wordCountExactlyOnceAcrossBrokerStopAndKill(BrokerProcess broker) throws Exception {
        String appId = Clients.unique("wordcount");
        String inTopic = Clients.unique("wc-in");
        String outTopic = Clients.unique("wc-out");
        String repartition = appId + "-by-word-repartition";
        List<TopicPartition> inParts = partitions(inTopic);
        List<TopicPartition> outParts = partitions(outTopic);

        // The text and the expected counts, from the generator's own choice of words.
        List<String> lines = new ArrayList<>(LINES);
        Map<String, Long> expected = new TreeMap<>();
        long words = generate(lines, expected);
        log("text: " + LINES + " lines, " + words + " words, " + expected.size() + " distinct; e.g. \"" + lines.get(0) + "\"");

        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(inTopic, PARTITIONS, (short) 1), new NewTopic(outTopic, PARTITIONS, (short) 1)))
                .all().get(30, TimeUnit.SECONDS);
            List<TopicPartition> all = new ArrayList<>(inParts);
            all.addAll(outParts);
            awaitLeaders(admin, all);
        }

        // The application.
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> source = builder.stream(inTopic);
        KTable<String, Long> counts = source
            .flatMapValues(value -> Arrays.asList(value.toLowerCase(Locale.ROOT).split("\\W+")))
            .groupBy((key, word) -> word, Grouped.as("by-word"))
            .count(Materialized.as("counts"));
        counts.toStream().to(outTopic, Produced.with(Serdes.String(), Serdes.Long()));

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // A fenced thread (TaskMigratedException) rejoins as a new member; the group then waits for
        // the old member's session to expire (45 s by default) before it is RUNNING again.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);

        AtomicReference<KafkaStreams.State> state = new AtomicReference<>(KafkaStreams.State.CREATED);
        AtomicInteger replaced = new AtomicInteger();
        long t;
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        try {
            streams.setStateListener((now, before) -> {
                state.set(now);
                event("streams " + before + " -> " + now);
            });
            streams.setUncaughtExceptionHandler(e -> {
                int n = replaced.incrementAndGet();
                event("streams thread died (" + n + "): " + Clients.describe(e) + (n <= 10 ? " -> REPLACE_THREAD" : " -> SHUTDOWN_CLIENT"));
                return n <= 10 ? StreamThreadExceptionResponse.REPLACE_THREAD : StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            t = System.nanoTime();
            streams.start();
            Clients.waitUntil(Duration.ofSeconds(120), "the streams application RUNNING", () -> state.get() == KafkaStreams.State.RUNNING,
                () -> state.get().toString());
            log("streams RUNNING after " + ms(t) + " ms");

            try (Admin admin = Clients.admin(broker)) {
                int a = LINES / 3;
                int b = 2 * LINES / 3;

                // Part 1, then a clean stop (SIGTERM) once the application has committed some input.
                feed(broker, inTopic, lines, 0, a);
                waitCommittedInput(admin, appId, inParts, 1, "some of part 1 committed");
                long lag = a - committedInput(admin, appId, inParts);
                t = System.nanoTime();
                int rc = broker.stop();
                event("STOP: SIGTERM, broker exited " + rc + " after " + ms(t) + " ms; input lines not yet committed by the app: " + lag);
                assertTrue(rc == 0 || rc == 143, "broker exit code on SIGTERM: " + rc + "\n" + broker.stderrTail(20));
                t = System.nanoTime();
                broker.restart();
                event("STOP: broker restarted after " + ms(t) + " ms");
                awaitLeaders(admin, inParts);

                // Part 2, then kill -9 once the application has started on it.
                feed(broker, inTopic, lines, a, b);
                waitCommittedInput(admin, appId, inParts, a + 1, "part 2 started (committed input past line " + a + ")");
                lag = b - committedInput(admin, appId, inParts);
                long pid = broker.pid();
                broker.kill();
                event("KILL: SIGKILL broker pid " + pid + "; input lines not yet committed by the app: " + lag);
                t = System.nanoTime();
                broker.restart();
                event("KILL: broker restarted after " + ms(t) + " ms");
                awaitLeaders(admin, inParts);

                // Part 3.
                feed(broker, inTopic, lines, b, LINES);

                // Everything processed: the app's committed offsets leave no record unread on the input
                // and on the repartition topic.
                t = System.nanoTime();
                TopicDescription rd = admin.describeTopics(List.of(repartition)).allTopicNames().get(30, TimeUnit.SECONDS).get(repartition);
                Set<TopicPartition> consumed = new HashSet<>(inParts);
                rd.partitions().forEach(i -> consumed.add(new TopicPartition(repartition, i.partition())));
                AtomicReference<String> drainState = new AtomicReference<>("");
                try (KafkaConsumer<byte[], byte[]> probe = probe(broker)) {
                    Clients.waitUntil(DRAIN_TIMEOUT, "the application to process all input", () -> {
                        KafkaStreams.State s = state.get();
                        if (s == KafkaStreams.State.ERROR || s == KafkaStreams.State.NOT_RUNNING) {
                            throw new AssertionError("the streams application is " + s + "; events:\n  " + eventsText());
                        }
                        return drained(admin, probe, appId, consumed, drainState);
                    }, () -> drainState.get() + "; streams " + state.get() + "; events:\n  " + eventsText());
                }
                log("all input processed " + ms(t) + " ms after the last line was fed");
            }

            // The output: the last count of every word.
            Map<String, Long> got = readOutput(broker, outParts);
            KafkaStreams.State end = state.get();
            log("events:\n  " + eventsText());
            log("stream threads replaced: " + replaced.get() + "; state at the end: " + end);
            List<String> wrong = new ArrayList<>();
            long over = 0;
            long under = 0;
            for (Map.Entry<String, Long> e : expected.entrySet()) {
                Long g = got.get(e.getKey());
                long gv = g == null ? 0 : g;
                if (gv != e.getValue()) {
                    wrong.add(e.getKey() + ": expected " + e.getValue() + ", got " + (g == null ? "none" : g));
                    if (gv > e.getValue()) over += gv - e.getValue(); else under += e.getValue() - gv;
                }
            }
            Set<String> extra = new HashSet<>(got.keySet());
            extra.removeAll(expected.keySet());
            log("output: " + got.size() + " words; " + wrong.size() + " wrong counts (" + over + " counted twice, " + under
                + " lost); unexpected keys " + extra);
            if (!wrong.isEmpty() || !extra.isEmpty()) {
                fail("word counts not exactly once: " + wrong.size() + " of " + expected.size() + " words wrong (" + over
                    + " occurrences over, " + under + " under), unexpected keys " + extra + ":\n  "
                    + String.join("\n  ", wrong.subList(0, Math.min(20, wrong.size()))));
            }
            assertEquals(KafkaStreams.State.RUNNING, end, "streams state at the end");
        } finally {
            if (!streams.close(Duration.ofSeconds(60))) System.out.println("wordcount: streams did not close within 60 s");
        }
    }

    /**
     * Waits until every partition has a serving leader (ListOffsets answers). Kafka answers
     * NOT_LEADER_OR_FOLLOWER for a few seconds after a restart; a new idempotent producer whose
     * first batch is refused so while its second is accepted loses the first batch to
     * OUT_OF_ORDER_SEQUENCE_NUMBER retries until delivery.timeout.ms (KAFKA-15591), so the input is
     * fed only once the partitions are served.
     */
    private void awaitLeaders(Admin admin, List<TopicPartition> parts) {
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (TopicPartition tp : parts) latest.put(tp, OffsetSpec.latest());
        long t = System.nanoTime();
        AtomicReference<String> last = new AtomicReference<>("");
        Clients.waitUntil(Duration.ofSeconds(60), "leaders for " + parts, () -> {
            try {
                admin.listOffsets(latest).all().get(10, TimeUnit.SECONDS);
                return true;
            } catch (Exception e) {
                last.set(Clients.describe(e));
                return false;
            }
        }, last::get);
        event("partitions served (ListOffsets answers) after " + ms(t) + " ms" + (last.get().isEmpty() ? "" : "; before: " + last.get()));
    }

    /** 30,000 lines of 1-12 words; returns the number of words and fills the expected counts. */
    private static long generate(List<String> lines, Map<String, Long> expected) {
        String[] vocab = new String[VOCABULARY];
        for (int i = 0; i < VOCABULARY; i++) vocab[i] = "word" + (char) ('a' + i % 26) + i;
        Random r = new Random(20_261_202L);
        String[] seps = {" ", " ", " ", ", ", " - ", "; ", "  "};
        long n = 0;
        for (int l = 0; l < LINES; l++) {
            int count = 1 + r.nextInt(12);
            StringBuilder sb = new StringBuilder();
            for (int j = 0; j < count; j++) {
                double x = r.nextDouble();
                String w = vocab[(int) (x * x * VOCABULARY)]; // skewed: low indexes much more frequent
                expected.merge(w, 1L, Long::sum);
                n++;
                if (j > 0) sb.append(seps[r.nextInt(seps.length)]);
                sb.append(r.nextInt(4) == 0 ? w.toUpperCase(Locale.ROOT) : r.nextInt(4) == 0 ? Character.toUpperCase(w.charAt(0)) + w.substring(1) : w);
            }
            if (r.nextInt(3) == 0) sb.append(r.nextBoolean() ? "." : "!");
            lines.add(sb.toString());
        }
        return n;
    }

    private void feed(BrokerProcess broker, String topic, List<String> lines, int from, int to) {
        long t = System.nanoTime();
        AtomicLong errors = new AtomicLong();
        AtomicReference<String> first = new AtomicReference<>();
        try (KafkaProducer<String, String> producer = Clients.producer(broker, null)) {
            for (int i = from; i < to; i++) {
                producer.send(new ProducerRecord<>(topic, "line-" + i, lines.get(i)), (md, ex) -> {
                    if (ex != null && errors.incrementAndGet() == 1) first.set(Clients.describe(ex));
                });
            }
            producer.flush();
        }
        assertEquals(0, errors.get(), "feeding lines " + from + ".." + to + " failed; first error: " + first.get());
        event("fed lines " + from + ".." + (to - 1) + " in " + ms(t) + " ms");
    }

    /** The application's committed offsets on the input (= input lines processed and committed). */
    private static long committedInput(Admin admin, String appId, List<TopicPartition> inParts) {
        try {
            Map<TopicPartition, OffsetAndMetadata> c = admin.listConsumerGroupOffsets(appId).partitionsToOffsetAndMetadata()
                .get(10, TimeUnit.SECONDS);
            long s = 0;
            for (TopicPartition tp : inParts) {
                OffsetAndMetadata om = c.get(tp);
                if (om != null) s += om.offset();
            }
            return s;
        } catch (Exception e) {
            return -1;
        }
    }

    private void waitCommittedInput(Admin admin, String appId, List<TopicPartition> inParts, long atLeast, String what) {
        AtomicLong last = new AtomicLong();
        long t = System.nanoTime();
        Clients.waitUntil(PHASE_TIMEOUT, what, () -> {
            last.set(committedInput(admin, appId, inParts));
            return last.get() >= atLeast;
        }, () -> "committed input " + last.get() + "; events:\n  " + eventsText());
        event(what + ": committed input " + last.get() + " after " + ms(t) + " ms");
    }

    /**
     * True when, for every partition in {@code parts}, no record lies between the application's
     * committed offset (0 if none) and the partition's last stable offset. Records a description
     * of what is left in {@code why}.
     */
    private static boolean drained(Admin admin, KafkaConsumer<byte[], byte[]> probe, String appId, Set<TopicPartition> parts,
                                   AtomicReference<String> why) {
        Map<TopicPartition, OffsetAndMetadata> c;
        Map<TopicPartition, Long> lso;
        try {
            c = admin.listConsumerGroupOffsets(appId).partitionsToOffsetAndMetadata().get(10, TimeUnit.SECONDS);
            lso = probe.endOffsets(parts, Duration.ofSeconds(10));
        } catch (Exception e) {
            why.set("offsets not available: " + Clients.describe(e));
            return false;
        }
        Map<TopicPartition, Long> pending = new HashMap<>();
        for (TopicPartition tp : parts) {
            long committed = c.get(tp) == null ? 0 : c.get(tp).offset();
            if (committed < lso.get(tp)) pending.put(tp, committed);
        }
        if (pending.isEmpty()) return true;
        // committed < LSO may be only a transaction marker (a read_committed position skips it): look.
        probe.assign(pending.keySet());
        pending.forEach(probe::seek);
        long records = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (records == 0 && System.nanoTime() < deadline) {
            records += probe.poll(Duration.ofMillis(200)).count();
            boolean atEnd = true;
            for (TopicPartition tp : pending.keySet()) atEnd &= probe.position(tp) >= lso.get(tp);
            if (atEnd) break;
        }
        Map<TopicPartition, String> left = new TreeMap<>((x, y) -> x.toString().compareTo(y.toString()));
        pending.forEach((tp, off) -> left.put(tp, off + "/" + lso.get(tp)));
        why.set("committed/LSO where behind " + left + ", unprocessed records seen " + records);
        if (records > 0) return false;
        for (TopicPartition tp : pending.keySet()) {
            if (probe.position(tp) < lso.get(tp)) return false;
        }
        return true;
    }

    private static KafkaConsumer<byte[], byte[]> probe(BrokerProcess broker) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) Clients.API_TIMEOUT.toMillis());
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** The last value per key of the whole output topic, read_committed, once no transaction is open on it. */
    private Map<String, Long> readOutput(BrokerProcess broker, List<TopicPartition> outParts) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) Clients.API_TIMEOUT.toMillis());
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10000);
        Properties rcp = new Properties();
        rcp.putAll(p);
        rcp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        Map<String, Long> last = new HashMap<>();
        long t = System.nanoTime();
        try (KafkaConsumer<String, Long> rc = new KafkaConsumer<>(rcp, new StringDeserializer(), new LongDeserializer());
             KafkaConsumer<String, Long> ru = new KafkaConsumer<>(p, new StringDeserializer(), new LongDeserializer())) {
            AtomicReference<String> st = new AtomicReference<>();
            Clients.waitUntil(Duration.ofSeconds(60), "no open transaction on the output (LSO = HW)", () -> {
                Map<TopicPartition, Long> lso = rc.endOffsets(outParts, Duration.ofSeconds(10));
                Map<TopicPartition, Long> hw = ru.endOffsets(outParts, Duration.ofSeconds(10));
                st.set("LSO " + lso + ", HW " + hw);
                return lso.equals(hw);
            }, st::get);
            Map<TopicPartition, Long> end = rc.endOffsets(outParts, Duration.ofSeconds(10));
            rc.assign(outParts);
            rc.seekToBeginning(outParts);
            long n = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (true) {
                boolean done = true;
                for (TopicPartition tp : outParts) done &= rc.position(tp) >= end.get(tp);
                if (done) break;
                if (System.nanoTime() > deadline) fail("output not read to " + end + " within 120 s");
                for (ConsumerRecord<String, Long> r : rc.poll(Duration.ofMillis(500))) {
                    n++;
                    last.put(r.key(), r.value());
                }
            }
            log("output: " + n + " committed count updates read in " + ms(t) + " ms (end offsets " + end + ")");
        }
        return last;
    }

    private synchronized void event(String s) {
        String line = String.format("%7.1f s %s", (System.nanoTime() - t0) / 1e9, s);
        events.add(line);
        System.out.println(line);
    }

    private synchronized String eventsText() {
        return String.join("\n  ", events);
    }

    private static void log(String s) {
        System.out.println("wordcount: " + s);
    }

    private static List<TopicPartition> partitions(String topic) {
        return IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toList());
    }

    private static long ms(long since) {
        return (System.nanoTime() - since) / 1_000_000;
    }
}
