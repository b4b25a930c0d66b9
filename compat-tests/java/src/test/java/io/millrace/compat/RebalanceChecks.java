package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** What the rebalance tests (classic cooperative-sticky and KIP-848) check alike. */
final class RebalanceChecks {
    private RebalanceChecks() {}

    /** Partition numbers, sorted: "[0,2,5]". */
    static String ps(Collection<TopicPartition> parts) {
        return parts.stream().map(TopicPartition::partition).sorted().map(String::valueOf).collect(Collectors.joining(",", "[", "]"));
    }

    /** Writes 100 records per partition, values "r<round>-<i>" to partition i % partitions, and adds them to {@code produced}. */
    static void produceRound(BrokerProcess broker, String topic, int round, int partitions, Set<String> produced) {
        try (KafkaProducer<String, String> p = Clients.producer(broker, null)) {
            for (int i = 0; i < 100 * partitions; i++) {
                String v = "r" + round + "-" + i;
                p.send(new ProducerRecord<>(topic, i % partitions, null, v));
                produced.add(v);
            }
            p.flush();
        }
    }

    /** Null when the members' partitions cover all {@code partitions} exactly once and are balanced, else why not. */
    static String balanceProblem(Map<String, Set<TopicPartition>> ownedByMember, int partitions) {
        Set<TopicPartition> union = new HashSet<>();
        for (Set<TopicPartition> owned : ownedByMember.values()) {
            for (TopicPartition tp : owned) {
                if (!union.add(tp)) return "partition " + tp.partition() + " owned twice";
            }
        }
        if (union.size() != partitions) return "assignment covers " + union.size() + " of " + partitions + " partitions";
        int n = ownedByMember.size();
        int lo = partitions / n, hi = (partitions + n - 1) / n;
        for (Map.Entry<String, Set<TopicPartition>> e : ownedByMember.entrySet()) {
            int size = e.getValue().size();
            if (size < lo || size > hi) return e.getKey() + " owns " + size + " (want " + lo + ".." + hi + ")";
        }
        return null;
    }

    /** Runs {@code pollAll} until {@code problem} says nothing (null) or {@code timeout} passes. */
    static void awaitStable(String step, Duration timeout, Runnable pollAll, Supplier<String> problem, Supplier<String> state) {
        long deadline = System.nanoTime() + timeout.toNanos();
        String why = "";
        while (System.nanoTime() < deadline) {
            pollAll.run();
            why = problem.get();
            if (why == null) {
                System.out.println(step + ": stable: " + state.get());
                return;
            }
        }
        fail(step + ": group not stable/balanced/fully consumed within " + timeout.toSeconds() + " s: " + why
            + "\nmembers: " + state.get());
    }
}
