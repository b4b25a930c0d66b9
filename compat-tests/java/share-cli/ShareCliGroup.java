// The share group that share-cli.sh looks at with kafka-share-groups.sh: Apache Kafka 4.4's
// KafkaShareConsumer and producer, one mode per call.
//
//   java -cp <share-cli classpath>:<classes> ShareCliGroup BOOTSTRAP TOPIC GROUP MODE ARGS...
//
// Modes:
//   create                 creates TOPIC with one partition
//   member N STOP_FILE     joins GROUP (implicit acknowledgement), warms up (produces "warm-up"
//                          records while polling until one arrives: the share partition then
//                          exists, at share.auto.offset.reset=latest), produces N records and
//                          polls until it has them all (accepted), prints "READY <end offset>",
//                          then keeps polling (a Stable member) until STOP_FILE exists (60 s at
//                          most) and closes (the group is Empty again)
//   produce N              produces N records
//   drain N                a member of GROUP that polls until it has N records (30 s at most),
//                          accepts them, prints "GOT <n> FIRST <lowest offset>" and closes
import java.io.File;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ShareCliGroup {
    private static final String WARM = "warm-up";

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        switch (args[3]) {
            case "create" -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                try (Admin admin = Admin.create(p)) {
                    admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
                }
            }
            case "member" -> member(bootstrap, topic, group, Integer.parseInt(args[4]), new File(args[5]));
            case "produce" -> {
                try (KafkaProducer<String, String> producer = producer(bootstrap)) {
                    produce(producer, topic, Integer.parseInt(args[4]));
                }
            }
            case "drain" -> drain(bootstrap, topic, group, Integer.parseInt(args[4]));
            default -> throw new IllegalArgumentException("unknown mode " + args[3]);
        }
    }

    private static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        return new KafkaProducer<>(p);
    }

    private static KafkaShareConsumer<String, String> consumer(String bootstrap, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", "share-cli-member");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", "implicit");
        return new KafkaShareConsumer<>(p);
    }

    private static void produce(KafkaProducer<String, String> producer, String topic, int n)
            throws Exception {
        for (int i = 0; i < n; i++) {
            producer.send(new ProducerRecord<>(topic, "r" + i));
        }
        producer.flush();
    }

    private static void member(String bootstrap, String topic, String group, int n, File stop)
            throws Exception {
        try (KafkaProducer<String, String> producer = producer(bootstrap);
                KafkaShareConsumer<String, String> c = consumer(bootstrap, group)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            long end = -1;
            boolean warm = false;
            while (!warm) {
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("no warm-up record reached the share consumer in 60 s");
                }
                producer.send(new ProducerRecord<>(topic, WARM)).get();
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    warm |= WARM.equals(r.value());
                    end = Math.max(end, r.offset());
                }
            }
            produce(producer, topic, n);
            int got = 0;
            while (got < n) {
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("only " + got + " of " + n + " records in 60 s");
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (!WARM.equals(r.value())) {
                        got++;
                    }
                    end = Math.max(end, r.offset());
                }
            }
            c.commitSync();
            System.out.println("READY " + (end + 1));
            System.out.flush();
            long hold = System.currentTimeMillis() + 60_000;
            while (!stop.exists() && System.currentTimeMillis() < hold) {
                c.poll(Duration.ofMillis(200));
            }
        }
    }

    private static void drain(String bootstrap, String topic, String group, int n) throws Exception {
        try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            int got = 0;
            long first = Long.MAX_VALUE;
            while (got < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    got++;
                    first = Math.min(first, r.offset());
                }
            }
            c.commitSync();
            System.out.println("GOT " + got + " FIRST " + first);
        }
    }
}
