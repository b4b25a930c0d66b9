// What the Java AdminClient (kafka-clients 4.1.1) sees of a cluster: describeCluster (brokers,
// controller) and, per topic named on the command line, describeTopics (leader, replicas, ISR).
// Run as a single-file program with the Kafka tools classpath:
//   java -cp "$DIST_CP" ClusterInfo.java BOOTSTRAP [TOPIC ...]
// Output lines: "broker ID HOST:PORT", "controller ID",
//               "partition TOPIC P leader ID replicas A,B,C isr A,B".
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;

public class ClusterInfo {
    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        try (Admin admin = Admin.create(p)) {
            DescribeClusterResult c = admin.describeCluster();
            for (Node n : c.nodes().get(20, TimeUnit.SECONDS)) {
                System.out.println("broker " + n.id() + " " + n.host() + ":" + n.port());
            }
            Node controller = c.controller().get(20, TimeUnit.SECONDS);
            System.out.println("controller " + (controller == null ? -1 : controller.id()));
            if (args.length > 1) {
                List<String> topics = List.of(args).subList(1, args.length);
                Map<String, TopicDescription> d = admin.describeTopics(topics).allTopicNames().get(20, TimeUnit.SECONDS);
                for (String t : topics) {
                    for (TopicPartitionInfo pi : d.get(t).partitions()) {
                        System.out.println("partition " + t + " " + pi.partition() + " leader "
                            + (pi.leader() == null ? -1 : pi.leader().id()) + " replicas " + ids(pi.replicas())
                            + " isr " + ids(pi.isr()));
                    }
                }
            }
        }
    }
}
