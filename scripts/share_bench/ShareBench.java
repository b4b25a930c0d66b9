// Share-consumer throughput (issue 33's benchmark): N KafkaShareConsumer members of one share group
// drain one partition. Run by scripts/share_bench.py against each broker in the same run.
//
//   java -cp <kafka-clients 4.4> ShareBench BOOTSTRAP TOPIC MEMBERS RECORDS RECORD_BYTES
//
// Creates the topic (1 partition), sets the group's share.auto.offset.reset=earliest (a GROUP
// config), produces RECORDS records (not timed), then starts MEMBERS members (implicit
// acknowledgement, one thread each) and times them from the first record any member receives to
// the moment every record was delivered. Prints one line:
//   RESULT members=M records=R seconds=S records_per_s=X deliveries=D redeliveries=E per_member=a,b,...
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ShareBench {
    static final Duration POLL = Duration.ofMillis(100);
    static final long DEADLINE_MS = 180_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int members = Integer.parseInt(args[2]);
        long records = Long.parseLong(args[3]);
        int size = Integer.parseInt(args[4]);
        String group = topic + "-group";

        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(res, List.of(earliest))).all().get();
        }

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("linger.ms", "5");
        pp.put("batch.size", "1000000");
        pp.put("acks", "1");
        byte[] value = new byte[size];
        try (KafkaProducer<byte[], byte[]> p =
                new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (long i = 0; i < records; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, value));
            }
            p.flush();
        }

        AtomicLong delivered = new AtomicLong();
        AtomicLong redelivered = new AtomicLong();
        AtomicLong firstNs = new AtomicLong(0);
        AtomicLongArray perMember = new AtomicLongArray(members);
        ConcurrentHashMap<Long, Boolean> seen = new ConcurrentHashMap<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        List<Thread> threads = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            final int idx = m;
            Thread t = new Thread(() -> {
                Properties cp = new Properties();
                cp.put("bootstrap.servers", bootstrap);
                cp.put("group.id", group);
                cp.put("client.id", "bench-" + idx);
                try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(
                        cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    c.subscribe(List.of(topic));
                    while (seen.size() < records && System.currentTimeMillis() < deadline) {
                        ConsumerRecords<byte[], byte[]> got = c.poll(POLL);
                        if (got.isEmpty()) {
                            continue;
                        }
                        firstNs.compareAndSet(0, System.nanoTime());
                        for (ConsumerRecord<byte[], byte[]> r : got) {
                            delivered.incrementAndGet();
                            perMember.incrementAndGet(idx);
                            if (r.deliveryCount().orElse((short) 1) > 1) {
                                redelivered.incrementAndGet();
                            }
                            seen.put(r.offset(), Boolean.TRUE);
                        }
                    }
                    c.commitSync();
                }
            });
            t.start();
            threads.add(t);
        }
        long lastNs = 0;
        while (seen.size() < records && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
        lastNs = System.nanoTime();
        for (Thread t : threads) {
            t.join(60_000);
        }
        double seconds = firstNs.get() == 0 ? -1 : (lastNs - firstNs.get()) / 1e9;
        StringBuilder per = new StringBuilder();
        for (int m = 0; m < members; m++) {
            per.append(m == 0 ? "" : ",").append(perMember.get(m));
        }
        System.out.printf("RESULT members=%d records=%d seconds=%.3f records_per_s=%.0f deliveries=%d redeliveries=%d complete=%b per_member=%s%n",
                members, seen.size(), seconds, seen.size() / seconds, delivered.get(), redelivered.get(),
                seen.size() >= records, per);
    }
}
