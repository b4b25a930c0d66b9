// Apache Kafka 4.4's KafkaShareConsumer (KIP-932 share groups) against one broker: the checks
// share.sh runs, each on its own topic and group, printing "PASS <name>" or "FAIL <name>: <why>"
// and a last line "N passed, M failed".
//
//   java -cp <kafka-clients 4.4 classpath>:<classes> ShareConsumerCheck BOOTSTRAP DELIVERY_LIMIT LOCK_MS
//
// DELIVERY_LIMIT and LOCK_MS are the broker's group.share.delivery.count.limit and
// group.share.record.lock.duration.ms. A share group starts at the log end
// (share.auto.offset.reset=latest), so each check first polls while producing "warm-up" records
// until a consumer sees one: the share partition then exists, and every record produced after
// that must be delivered.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ShareConsumerCheck {
    private static final String WARM = "warm-up";
    private static String bootstrap;
    private static int deliveryLimit;
    private static long lockMs;
    private static int passed;
    private static int failed;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        deliveryLimit = Integer.parseInt(args[1]);
        lockMs = Long.parseLong(args[2]);
        run("members-split-a-partition", ShareConsumerCheck::membersSplitAPartition);
        run("release-redelivers-reject-does-not", ShareConsumerCheck::releaseAndReject);
        run("delivery-limit-archives", ShareConsumerCheck::deliveryLimitArchives);
        run("stopped-member-loses-its-locks", ShareConsumerCheck::stoppedMemberLosesLocks);
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    interface Check {
        void run(String topic, String group) throws Exception;
    }

    private static void run(String name, Check check) {
        String topic = "share-" + name + "-" + System.nanoTime();
        try {
            createTopic(topic);
            check.run(topic, "group-" + topic);
            System.out.println("PASS " + name);
            passed++;
        } catch (Throwable e) {
            System.out.println("FAIL " + name + ": " + e);
            e.printStackTrace(System.out);
            failed++;
        }
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    private static void createTopic(String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
    }

    private static KafkaProducer<String, String> producer() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        return new KafkaProducer<>(p);
    }

    private static KafkaShareConsumer<String, String> consumer(String group, String mode) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", mode);
        p.put("max.poll.records", "100");
        return new KafkaShareConsumer<>(p);
    }

    /** Produces warm-up records while `c` polls, until it receives one (accepting it). */
    private static void warmUp(KafkaShareConsumer<String, String> c, String topic,
            KafkaProducer<String, String> producer, boolean explicit) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (System.currentTimeMillis() < deadline) {
            producer.send(new ProducerRecord<>(topic, WARM)).get();
            ConsumerRecords<String, String> got = c.poll(Duration.ofMillis(500));
            boolean seen = false;
            for (ConsumerRecord<String, String> r : got) {
                seen |= WARM.equals(r.value());
                if (explicit) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
            }
            if (seen) {
                if (explicit) {
                    c.commitSync();
                }
                return;
            }
        }
        throw new AssertionError("no warm-up record reached the share consumer in 60 s");
    }

    private static void produce(KafkaProducer<String, String> producer, String topic, String prefix,
            int n) throws Exception {
        for (int i = 0; i < n; i++) {
            producer.send(new ProducerRecord<>(topic, prefix + i));
        }
        producer.flush();
    }

    /** Three members in implicit mode share one partition: every record delivered exactly once. */
    private static void membersSplitAPartition(String topic, String group) throws Exception {
        int n = 3000;
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        Map<Integer, AtomicInteger> perMember = new ConcurrentHashMap<>();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer()) {
            try (KafkaShareConsumer<String, String> first = consumer(group, "implicit")) {
                first.subscribe(List.of(topic));
                warmUp(first, topic, producer, false);
            }
            for (int m = 0; m < 3; m++) {
                int member = m;
                perMember.put(member, new AtomicInteger());
                Thread t = new Thread(() -> {
                    try (KafkaShareConsumer<String, String> c = consumer(group, "implicit")) {
                        c.subscribe(List.of(topic));
                        while (!stop.get()) {
                            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                                if (!WARM.equals(r.value())) {
                                    seen.merge(r.value(), 1, Integer::sum);
                                    perMember.get(member).incrementAndGet();
                                }
                            }
                        }
                    }
                });
                t.start();
                threads.add(t);
            }
            // Every member joins before the records come: Kafka hands a new member its
            // partitions one heartbeat interval (5 s) after it joins.
            Thread.sleep(7000);
            // In many small batches, so that no member's one fetch can take them all.
            for (int i = 0; i < n; i += 100) {
                for (int j = i; j < i + 100; j++) {
                    producer.send(new ProducerRecord<>(topic, "r" + j));
                }
                producer.flush();
                Thread.sleep(20);
            }
            long deadline = System.currentTimeMillis() + 90_000;
            while (seen.size() < n && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            // Stay a moment longer: a duplicate would show up now.
            Thread.sleep(1000);
        } finally {
            stop.set(true);
            for (Thread t : threads) {
                t.join(30_000);
            }
        }
        check(seen.size() == n, "records delivered: " + seen.size() + " of " + n);
        List<String> twice = new ArrayList<>();
        seen.forEach((k, v) -> {
            if (v > 1) {
                twice.add(k);
            }
        });
        check(twice.isEmpty(), "records delivered more than once: " + twice.size());
        int busy = 0;
        for (AtomicInteger c : perMember.values()) {
            busy += c.get() > 0 ? 1 : 0;
        }
        check(busy >= 2, "records went to " + busy + " member(s): " + perMember);
    }

    /** Explicit mode: RELEASE redelivers with a higher delivery count; REJECT never redelivers. */
    private static void releaseAndReject(String topic, String group) throws Exception {
        try (KafkaProducer<String, String> producer = producer();
                KafkaShareConsumer<String, String> c = consumer(group, "explicit")) {
            c.subscribe(List.of(topic));
            warmUp(c, topic, producer, true);
            produce(producer, topic, "x", 10);
            Map<String, Integer> firstDelivery = new HashMap<>();
            Map<String, Integer> secondDelivery = new HashMap<>();
            Set<String> accepted = new HashSet<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (accepted.size() < 5 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    int n = Integer.parseInt(r.value().substring(1));
                    int count = r.deliveryCount().orElse((short) -1);
                    if (!firstDelivery.containsKey(r.value())) {
                        firstDelivery.put(r.value(), count);
                        // Even records are released once, odd ones rejected.
                        c.acknowledge(r, n % 2 == 0 ? AcknowledgeType.RELEASE : AcknowledgeType.REJECT);
                    } else {
                        secondDelivery.merge(r.value(), count, Math::max);
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.add(r.value());
                    }
                }
                c.commitSync();
            }
            // Nothing more comes: the rejected records are gone for good.
            long quiet = System.currentTimeMillis() + 2000;
            while (System.currentTimeMillis() < quiet) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    throw new AssertionError("delivered again after accept/reject: " + r.value());
                }
            }
            check(firstDelivery.size() == 10, "first deliveries: " + firstDelivery);
            check(Collections.max(firstDelivery.values()) == 1 && Collections.min(firstDelivery.values()) == 1,
                    "first delivery counts: " + firstDelivery);
            check(secondDelivery.keySet().equals(Set.of("x0", "x2", "x4", "x6", "x8")),
                    "redelivered: " + secondDelivery.keySet());
            check(secondDelivery.values().stream().allMatch(v -> v == 2), "second delivery counts: " + secondDelivery);
        }
    }

    /** Released every time, a record is delivered DELIVERY_LIMIT times, then archived. */
    private static void deliveryLimitArchives(String topic, String group) throws Exception {
        try (KafkaProducer<String, String> producer = producer();
                KafkaShareConsumer<String, String> c = consumer(group, "explicit")) {
            c.subscribe(List.of(topic));
            warmUp(c, topic, producer, true);
            produce(producer, topic, "p", 1);
            List<Integer> counts = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) {
                    counts.add((int) r.deliveryCount().orElse((short) -1));
                    c.acknowledge(r, AcknowledgeType.RELEASE);
                    if (counts.size() == deliveryLimit) {
                        quietUntil = System.currentTimeMillis() + 2000;
                    }
                }
                c.commitSync();
            }
            List<Integer> want = new ArrayList<>();
            for (int i = 1; i <= deliveryLimit; i++) {
                want.add(i);
            }
            check(counts.equals(want), "delivery counts " + counts + ", expected " + want);
        }
    }

    /** A member that stops polling keeps its records only until their locks end. */
    private static void stoppedMemberLosesLocks(String topic, String group) throws Exception {
        try (KafkaProducer<String, String> producer = producer();
                KafkaShareConsumer<String, String> stalled = consumer(group, "implicit");
                KafkaShareConsumer<String, String> other = consumer(group, "explicit")) {
            stalled.subscribe(List.of(topic));
            warmUp(stalled, topic, producer, false);
            produce(producer, topic, "s", 5);
            // The records of one poll, never acknowledged: implicit mode accepts them only at the
            // next poll, which never comes.
            Set<String> held = new HashSet<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (held.isEmpty() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : stalled.poll(Duration.ofMillis(300))) {
                    held.add(r.value());
                }
            }
            long heldAt = System.currentTimeMillis();
            check(!held.isEmpty(), "the stalled member got nothing");
            other.subscribe(List.of(topic));
            Map<String, Integer> taken = new HashMap<>();
            Map<String, Long> takenAfter = new HashMap<>();
            long until = heldAt + lockMs + 30_000;
            while (!taken.keySet().containsAll(held) && System.currentTimeMillis() < until) {
                for (ConsumerRecord<String, String> r : other.poll(Duration.ofMillis(300))) {
                    taken.put(r.value(), (int) r.deliveryCount().orElse((short) -1));
                    takenAfter.put(r.value(), System.currentTimeMillis() - heldAt);
                    other.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                other.commitSync();
            }
            check(taken.keySet().containsAll(held), "held " + held + ", the other member took " + taken.keySet());
            // At least one lock ended before the other member got it. More than one may have: the
            // stalled member's client can have a ShareFetch already waiting at the broker, which
            // takes the records again the moment their first lock ends (Kafka does the same).
            for (String v : held) {
                check(taken.get(v) >= 2, "delivery count of " + v + ": " + taken.get(v));
                check(takenAfter.get(v) >= lockMs - 500,
                        v + " taken after " + takenAfter.get(v) + " ms, before its " + lockMs + " ms lock ended");
            }
        }
    }
}
