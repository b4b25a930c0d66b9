package io.millrace.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** Issue 5 item 4: the Java AdminClient against one broker. */
@ExtendWith(BrokerExtension.class)
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class AdminClientTest {
    static final long T = 30; // seconds per Admin future
    static Admin admin;

    @BeforeAll
    static void open(BrokerProcess broker) {
        admin = Clients.admin(broker);
    }

    @AfterAll
    static void close() {
        if (admin != null) admin.close(Duration.ofSeconds(10));
    }

    static <V> V get(org.apache.kafka.common.KafkaFuture<V> f) throws Exception {
        return f.get(T, TimeUnit.SECONDS);
    }

    /** The cause of a failed Admin future (fails the test if it did not fail). */
    static Throwable failure(org.apache.kafka.common.KafkaFuture<?> f) throws Exception {
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(T, TimeUnit.SECONDS));
        return e.getCause();
    }

    static void createTopic(String name, int partitions, Map<String, String> configs) throws Exception {
        get(admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs))).all());
    }

    static Map<String, ConfigEntry> topicConfig(String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = get(admin.describeConfigs(List.of(r)).all()).get(r);
        return c.entries().stream().collect(Collectors.toMap(ConfigEntry::name, e -> e));
    }

    static void produce(BrokerProcess broker, String topic, int partition, int n, long firstTs) throws Exception {
        try (KafkaProducer<String, String> p = Clients.producer(broker, null)) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, partition, firstTs + i * 1000L, "k" + i, "v" + i)).get(T, TimeUnit.SECONDS);
            }
        }
    }

    // ---------------------------------------------------------------- cluster

    @Test
    void describeCluster(BrokerProcess broker) throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        String clusterId = get(r.clusterId());
        Collection<Node> nodes = get(r.nodes());
        Node controller = get(r.controller());
        assertNotNull(clusterId, "cluster id");
        assertFalse(clusterId.isBlank(), "cluster id");
        assertEquals(1, nodes.size(), "one broker: " + nodes);
        Node n = nodes.iterator().next();
        assertEquals("127.0.0.1", n.host());
        assertEquals(broker.port(), n.port());
        assertNotNull(controller, "controller");
        assertEquals(n.id(), controller.id(), "the only broker is the controller (as the Admin sees it)");
    }

    // ---------------------------------------------------------------- topics

    /** Issue 19: ApiVersions v3+ features (KIP-584) as Kafka 4.1 finalizes them by default. */
    @Test
    void describeFeatures() throws Exception {
        FeatureMetadata f = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS);
        FinalizedVersionRange group = f.finalizedFeatures().get("group.version");
        assertNotNull(group, "group.version finalized: " + f);
        assertEquals(1, group.maxVersionLevel(), "group.version (KIP-848)");
        FinalizedVersionRange metadata = f.finalizedFeatures().get("metadata.version");
        assertNotNull(metadata, "metadata.version finalized: " + f);
        // Millrace reports Kafka 4.1's level (27); the reference run's Kafka 4.4 finalizes 33.
        boolean reference = BrokerProcess.binary().toString().endsWith("kafka-shim.sh");
        assertEquals(reference ? 33 : 27, metadata.maxVersionLevel(), "metadata.version");
        SupportedVersionRange supported = f.supportedFeatures().get("group.version");
        assertNotNull(supported, "group.version supported: " + f);
        assertTrue(supported.minVersion() == 0 && supported.maxVersion() >= 1, "group.version range: " + supported);
        assertTrue(f.finalizedFeaturesEpoch().orElse(-1L) >= 0, "finalized epoch: " + f);
    }

    @Test
    void createListDescribeDeleteTopics() throws Exception {
        String a = Clients.unique("adm-a"), b = Clients.unique("adm-b");
        get(admin.createTopics(List.of(new NewTopic(a, 3, (short) 1),
            new NewTopic(b, java.util.Optional.empty(), java.util.Optional.empty()))).all()); // broker defaults (-1/-1)
        Set<String> names = get(admin.listTopics().names());
        assertTrue(names.containsAll(List.of(a, b)), "listTopics " + names);

        Map<String, TopicDescription> d = get(admin.describeTopics(List.of(a, b)).allTopicNames());
        TopicDescription da = d.get(a);
        assertEquals(3, da.partitions().size());
        assertFalse(da.isInternal());
        assertNotEquals(Uuid.ZERO_UUID, da.topicId(), "topic id");
        int nodeId = get(admin.describeCluster().nodes()).iterator().next().id();
        for (TopicPartitionInfo p : da.partitions()) {
            assertEquals(nodeId, p.leader().id(), "leader of " + a + "-" + p.partition());
            assertEquals(1, p.replicas().size());
            assertEquals(1, p.isr().size());
        }
        assertEquals(1, d.get(b).partitions().size(), "num.partitions default is 1");

        Throwable exists = failure(admin.createTopics(List.of(new NewTopic(a, 1, (short) 1))).all());
        assertInstanceOf(TopicExistsException.class, exists, Clients.describe(exists));

        get(admin.deleteTopics(List.of(a, b)).all());
        Clients.waitUntil(Duration.ofSeconds(30), "deleted topics to leave listTopics", () -> {
            try {
                Set<String> now = get(admin.listTopics().names());
                return !now.contains(a) && !now.contains(b);
            } catch (Exception e) {
                return false;
            }
        }, null);
        Throwable gone = failure(admin.describeTopics(List.of(a)).allTopicNames());
        assertInstanceOf(UnknownTopicOrPartitionException.class, gone, Clients.describe(gone));
        Throwable del = failure(admin.deleteTopics(List.of(a)).all());
        assertInstanceOf(UnknownTopicOrPartitionException.class, del, Clients.describe(del));
    }

    @Test
    void createPartitions() throws Exception {
        String t = Clients.unique("adm-parts");
        createTopic(t, 2, Map.of());
        get(admin.createPartitions(Map.of(t, NewPartitions.increaseTo(5))).all());
        Clients.waitUntil(Duration.ofSeconds(30), "5 partitions in describeTopics", () -> {
            try {
                return get(admin.describeTopics(List.of(t)).allTopicNames()).get(t).partitions().size() == 5;
            } catch (Exception e) {
                return false;
            }
        }, null);
        Throwable shrink = failure(admin.createPartitions(Map.of(t, NewPartitions.increaseTo(3))).all());
        assertInstanceOf(InvalidPartitionsException.class, shrink, Clients.describe(shrink));
    }

    // ---------------------------------------------------------------- configs

    @Test
    void describeConfigsReportsCompactExactly() throws Exception {
        String compact = Clients.unique("adm-compact"), plain = Clients.unique("adm-plain");
        createTopic(compact, 1, Map.of("cleanup.policy", "compact"));
        createTopic(plain, 1, Map.of());
        ConfigEntry c = topicConfig(compact).get("cleanup.policy");
        assertNotNull(c, "cleanup.policy entry");
        assertEquals("compact", c.value(), "cleanup.policy of a topic created compacted");
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.source());
        ConfigEntry p = topicConfig(plain).get("cleanup.policy");
        assertNotNull(p, "cleanup.policy entry of a default topic");
        assertEquals("delete", p.value());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, p.source());
        // and the broker resource answers too
        String nodeId = String.valueOf(get(admin.describeCluster().nodes()).iterator().next().id());
        ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, nodeId);
        Config bc = get(admin.describeConfigs(List.of(br)).all()).get(br);
        assertFalse(bc.entries().isEmpty(), "broker configs");
    }

    @Test
    void incrementalAlterConfigs() throws Exception {
        String t = Clients.unique("adm-alter");
        createTopic(t, 1, Map.of());
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, t);
        get(admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "123456789"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)))).all());
        Map<String, ConfigEntry> c = topicConfig(t);
        assertEquals("123456789", c.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("retention.ms").source());
        assertEquals("delete,compact", c.get("cleanup.policy").value());

        get(admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT)))).all());
        c = topicConfig(t);
        assertEquals("604800000", c.get("retention.ms").value(), "retention.ms back to the default");
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("retention.ms").source());
        assertEquals("compact", c.get("cleanup.policy").value());

        Throwable bad = failure(admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "bogus"), AlterConfigOp.OpType.SET)))).all());
        assertInstanceOf(org.apache.kafka.common.errors.InvalidConfigurationException.class, bad, Clients.describe(bad));
    }

    // ---------------------------------------------------------------- offsets and records

    @Test
    void listOffsets(BrokerProcess broker) throws Exception {
        String t = Clients.unique("adm-offsets");
        createTopic(t, 2, Map.of());
        long ts0 = System.currentTimeMillis() - 3_600_000L;
        produce(broker, t, 0, 10, ts0); // timestamps ts0, ts0+1s, ... ts0+9s
        TopicPartition p0 = new TopicPartition(t, 0), p1 = new TopicPartition(t, 1);
        assertEquals(0, get(admin.listOffsets(Map.of(p0, OffsetSpec.earliest())).partitionResult(p0)).offset());
        assertEquals(10, get(admin.listOffsets(Map.of(p0, OffsetSpec.latest())).partitionResult(p0)).offset());
        assertEquals(0, get(admin.listOffsets(Map.of(p1, OffsetSpec.latest())).partitionResult(p1)).offset(), "empty partition");
        ListOffsetsResultInfo max = get(admin.listOffsets(Map.of(p0, OffsetSpec.maxTimestamp())).partitionResult(p0));
        assertEquals(9, max.offset(), "max timestamp offset");
        assertEquals(ts0 + 9000, max.timestamp());
        ListOffsetsResultInfo byTs = get(admin.listOffsets(Map.of(p0, OffsetSpec.forTimestamp(ts0 + 4500))).partitionResult(p0));
        assertEquals(5, byTs.offset(), "first offset with timestamp >= ts0+4.5s");
        ListOffsetsResultInfo after = get(admin.listOffsets(Map.of(p0, OffsetSpec.forTimestamp(ts0 + 60_000))).partitionResult(p0));
        assertEquals(-1, after.offset(), "no record at or after the timestamp");
    }

    @Test
    void deleteRecords(BrokerProcess broker) throws Exception {
        String t = Clients.unique("adm-delrec");
        createTopic(t, 1, Map.of());
        produce(broker, t, 0, 10, System.currentTimeMillis());
        TopicPartition tp = new TopicPartition(t, 0);
        long low = get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(5))).lowWatermarks().get(tp)).lowWatermark();
        assertEquals(5, low, "low watermark after deleting before offset 5");
        assertEquals(5, get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp)).offset(), "earliest offset");
        assertEquals(10, get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp)).offset(), "latest offset");
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<Long> offsets = new ArrayList<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (offsets.size() < 5 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) offsets.add(r.offset());
            }
            assertEquals(List.of(5L, 6L, 7L, 8L, 9L), offsets, "records left after deleteRecords");
        }
    }

    @Test
    void describeProducersAfterIdempotentSends(BrokerProcess broker) throws Exception {
        String t = Clients.unique("adm-producers");
        createTopic(t, 1, Map.of());
        produce(broker, t, 0, 3, System.currentTimeMillis()); // default producer: idempotent, 3 batches, seq 0..2
        TopicPartition tp = new TopicPartition(t, 0);
        List<ProducerState> ps = get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers();
        assertEquals(1, ps.size(), "active producers " + ps);
        ProducerState p = ps.get(0);
        assertTrue(p.producerId() >= 0, "producer id " + p);
        assertEquals(0, p.producerEpoch(), "epoch " + p);
        assertEquals(2, p.lastSequence(), "last sequence " + p);
        assertTrue(p.lastTimestamp() > 0, "last timestamp " + p);
        assertFalse(p.currentTransactionStartOffset().isPresent(), "no transaction " + p);
    }

    @Test
    void describeLogDirs(BrokerProcess broker) throws Exception {
        String t = Clients.unique("adm-logdirs");
        createTopic(t, 2, Map.of());
        produce(broker, t, 1, 5, System.currentTimeMillis());
        int nodeId = get(admin.describeCluster().nodes()).iterator().next().id();
        Map<String, LogDirDescription> dirs = get(admin.describeLogDirs(List.of(nodeId)).allDescriptions()).get(nodeId);
        assertEquals(1, dirs.size(), "log dirs " + dirs.keySet());
        LogDirDescription d = dirs.values().iterator().next();
        assertTrue(d.error() == null, "log dir error " + d.error());
        ReplicaInfo p0 = d.replicaInfos().get(new TopicPartition(t, 0));
        ReplicaInfo p1 = d.replicaInfos().get(new TopicPartition(t, 1));
        assertNotNull(p0, t + "-0 in " + d.replicaInfos().keySet());
        assertNotNull(p1, t + "-1 in " + d.replicaInfos().keySet());
        assertEquals(0, p0.size(), "empty partition size");
        assertTrue(p1.size() > 0, "partition with 5 records has size " + p1.size());
    }

    // ---------------------------------------------------------------- consumer groups

    /** A subscribed consumer in a group, polled until it owns every partition, with offsets committed. */
    static KafkaConsumer<String, String> activeMember(BrokerProcess broker, String group, String topic, int partitions) {
        KafkaConsumer<String, String> c = Clients.consumer(broker, Clients.props("group.id", group));
        try {
            c.subscribe(List.of(topic));
            Clients.waitUntil(Duration.ofSeconds(45), "member of " + group + " to be assigned " + partitions + " partitions",
                () -> {
                    c.poll(Duration.ofMillis(200));
                    return c.assignment().size() == partitions;
                }, () -> "assignment " + c.assignment());
            // consume what is there, then commit the positions
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            Map<TopicPartition, Long> end = c.endOffsets(c.assignment());
            while (System.nanoTime() < deadline && end.entrySet().stream().anyMatch(e -> c.position(e.getKey()) < e.getValue())) {
                c.poll(Duration.ofMillis(200));
            }
            c.commitSync(Duration.ofSeconds(T));
            return c;
        } catch (RuntimeException | Error e) {
            c.close(Duration.ofSeconds(5));
            throw e;
        }
    }

    @Test
    void listAndDescribeConsumerGroups(BrokerProcess broker) throws Exception {
        String t = Clients.unique("adm-grp"), g = Clients.unique("adm-group");
        createTopic(t, 3, Map.of());
        produce(broker, t, 1, 4, System.currentTimeMillis());
        try (KafkaConsumer<String, String> c = activeMember(broker, g, t, 3)) {
            Collection<GroupListing> groups = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
            GroupListing gl = groups.stream().filter(x -> x.groupId().equals(g)).findFirst()
                .orElseThrow(() -> new AssertionError("listGroups(consumer) lacks " + g + ": " + groups));
            assertEquals(java.util.Optional.of(GroupState.STABLE), gl.groupState(), "listed state");

            ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(g)).describedGroups().get(g));
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals(1, d.members().size(), "members " + d.members());
            MemberDescription m = d.members().iterator().next();
            assertEquals(Set.of(new TopicPartition(t, 0), new TopicPartition(t, 1), new TopicPartition(t, 2)),
                m.assignment().topicPartitions(), "member assignment as described");
            assertFalse(d.partitionAssignor().isEmpty(), "assignor name");
            assertEquals(get(admin.describeCluster().nodes()).iterator().next().id(), d.coordinator().id(), "coordinator");

            Map<TopicPartition, OffsetAndMetadata> committed = get(admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata());
            assertEquals(4, committed.get(new TopicPartition(t, 1)).offset(), "committed offset of p1: " + committed);
            assertEquals(0, committed.get(new TopicPartition(t, 0)).offset(), "committed offset of p0: " + committed);
        }
    }

    @Test
    void deleteConsumerGroups(BrokerProcess broker) throws Exception {
        String t = Clients.unique("adm-grpdel"), g = Clients.unique("adm-delgroup");
        createTopic(t, 1, Map.of());
        produce(broker, t, 0, 3, System.currentTimeMillis());
        try (KafkaConsumer<String, String> c = activeMember(broker, g, t, 1)) {
            Throwable busy = failure(admin.deleteConsumerGroups(List.of(g)).all());
            assertInstanceOf(GroupNotEmptyException.class, busy, Clients.describe(busy));
        }
        // the member has left (close -> LeaveGroup): the group is empty, with its offsets
        Clients.waitUntil(Duration.ofSeconds(30), g + " to be EMPTY after the member closed", () -> {
            try {
                return get(admin.describeConsumerGroups(List.of(g)).describedGroups().get(g)).groupState() == GroupState.EMPTY;
            } catch (Exception e) {
                return false;
            }
        }, null);
        assertEquals(3, get(admin.listConsumerGroupOffsets(g).partitionsToOffsetAndMetadata()).get(new TopicPartition(t, 0)).offset());
        get(admin.deleteConsumerGroups(List.of(g)).all());
        Collection<GroupListing> groups = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
        assertTrue(groups.stream().noneMatch(x -> x.groupId().equals(g)), "deleted group still listed: " + groups);
        Throwable again = failure(admin.deleteConsumerGroups(List.of(g)).all());
        assertInstanceOf(GroupIdNotFoundException.class, again, Clients.describe(again));
    }

}
