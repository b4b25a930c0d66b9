package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Issue 5 item 4: a classic consumer group with the cooperative-sticky assignor, members
 * joining (1 → 2 → 3) and leaving (3 → 2 → 1). After each change: the assignment covers all 6
 * partitions, no partition is owned twice, the split is balanced, every record produced so far
 * has been consumed, and rebalances are incremental (a member that stays never loses all its
 * partitions at once, as the eager protocol would make it).
 */
@ExtendWith(BrokerExtension.class)
class CooperativeStickyRebalanceTest {
    static final int PARTITIONS = 6;
    static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);

    final Set<String> consumed = ConcurrentHashMap.newKeySet();
    final Set<String> produced = new HashSet<>();

    final class Member implements ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> consumer;
        final Set<TopicPartition> owned = new TreeSet<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        final List<String> events = new ArrayList<>();
        boolean assignedOnce;
        int minOwnedAfterFirstAssignment = Integer.MAX_VALUE;
        boolean closing;

        Member(BrokerProcess broker, String group, String topic, String name) {
            this.name = name;
            this.consumer = Clients.consumer(broker, Clients.props(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic",
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName(),
                ConsumerConfig.CLIENT_ID_CONFIG, name,
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "true",
                ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "500",
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000",
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "15000"));
            consumer.subscribe(List.of(topic), this);
        }

        void poll() {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) consumed.add(r.value());
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            owned.addAll(parts);
            if (!parts.isEmpty() || !assignedOnce) events.add("+" + RebalanceChecks.ps(parts));
            assignedOnce |= !owned.isEmpty();
            track();
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            owned.removeAll(parts);
            if (!parts.isEmpty()) events.add("-" + RebalanceChecks.ps(parts));
            track();
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
            owned.removeAll(parts);
            events.add("lost" + RebalanceChecks.ps(parts));
            track();
        }

        private void track() {
            if (assignedOnce && !closing) minOwnedAfterFirstAssignment = Math.min(minOwnedAfterFirstAssignment, owned.size());
        }

        @Override
        public String toString() {
            return name + " owns " + RebalanceChecks.ps(owned) + " gen " + consumer.groupMetadata().generationId() + " events " + events;
        }

        void close() {
            closing = true;
            consumer.close(Duration.ofSeconds(15));
        }
    }

    void produce(BrokerProcess broker, String topic, int round) {
        RebalanceChecks.produceRound(broker, topic, round, PARTITIONS, produced);
    }

    /** Polls every member until the group is stable over exactly {@code members} and everything is consumed. */
    void awaitStable(String step, List<Member> members) {
        RebalanceChecks.awaitStable(step, STEP_TIMEOUT, () -> members.forEach(Member::poll), () -> problem(members), members::toString);
    }

    String problem(List<Member> members) {
        Map<String, Set<TopicPartition>> owned = new LinkedHashMap<>();
        for (Member m : members) owned.put(m.name, m.owned);
        String unbalanced = RebalanceChecks.balanceProblem(owned, PARTITIONS);
        if (unbalanced != null) return unbalanced;
        Set<Integer> gens = members.stream().map(m -> m.consumer.groupMetadata().generationId()).collect(Collectors.toSet());
        if (gens.size() != 1 || gens.contains(-1)) return "members on generations " + gens;
        if (!consumed.containsAll(produced)) {
            return "consumed " + produced.stream().filter(consumed::contains).count() + " of " + produced.size() + " produced records";
        }
        return null;
    }

    @Test
    @Timeout(value = 300, unit = TimeUnit.SECONDS)
    void cooperativeStickyGroupRebalancesAsMembersJoinAndLeave(BrokerProcess broker) throws Exception {
        String topic = Clients.unique("coop"), group = Clients.unique("coop-group");
        try (Admin admin = Clients.admin(broker)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        List<Member> members = new ArrayList<>();
        try {
            produce(broker, topic, 0);
            Member c1 = new Member(broker, group, topic, "c1");
            members.add(c1);
            awaitStable("1 member", members);

            produce(broker, topic, 1);
            Member c2 = new Member(broker, group, topic, "c2");
            members.add(c2);
            awaitStable("c2 joined (2 members)", members);

            produce(broker, topic, 2);
            Member c3 = new Member(broker, group, topic, "c3");
            members.add(c3);
            awaitStable("c3 joined (3 members)", members);

            members.remove(c2);
            c2.close();
            produce(broker, topic, 3);
            awaitStable("c2 left (2 members)", members);

            members.remove(c3);
            c3.close();
            produce(broker, topic, 4);
            awaitStable("c3 left (1 member)", members);

            // Cooperative: c1 stayed through four rebalances and never gave up everything at once.
            assertTrue(c1.minOwnedAfterFirstAssignment > 0,
                "c1 lost all its partitions during a rebalance (eager-style revocation): " + c1.events);
            assertTrue(c1.consumer.groupMetadata().generationId() >= 5,
                "generation after 5 membership changes: " + c1.consumer.groupMetadata().generationId());
        } finally {
            for (Member m : members) {
                try {
                    m.close();
                } catch (RuntimeException e) {
                    System.err.println("closing " + m.name + ": " + Clients.describe(e));
                }
            }
        }
    }

}
