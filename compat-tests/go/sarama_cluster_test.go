// Sarama on the 3-node cluster that run.sh starts for the cluster stage (MILLRACE_CLUSTER_NODES):
// a 6-partition topic has leaders on several brokers, and acks=all sends to every partition are
// acknowledged by the right leader and read back at the offsets they were given. Issue 12's
// Done-when: "producing to it with every client in compat-tests reaches the right leaders".
// It runs after TestFranzLeaderChangeRoundTrip, which kills one broker, so the topic has
// replication factor 2: two live brokers suffice.
package compat

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestSaramaClusterProducesToEveryLeader(t *testing.T) {
	const partitions, perPartition = 6, 100
	nodes := clusterNodes(t)
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.addr)
	}
	cfg := saramaConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Retry.Max = 20
	cfg.Producer.Retry.Backoff = 250 * time.Millisecond
	cfg.Metadata.Retry.Max = 30
	cl, err := sarama.NewClient(seeds, cfg)
	if err != nil {
		t.Fatalf("sarama.NewClient: %v", err)
	}
	defer cl.Close()
	adm, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		t.Fatalf("NewClusterAdminFromClient: %v", err)
	}
	topic := uniqueTopic("sarama-leaders")
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 2}, false); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	leaders := map[int32]int32{}
	waitFor(t, "a leader for every partition", 30*time.Second, func() error {
		if err := cl.RefreshMetadata(topic); err != nil {
			return err
		}
		for p := int32(0); p < partitions; p++ {
			b, err := cl.Leader(topic, p)
			if err != nil {
				return fmt.Errorf("partition %d: %v", p, err)
			}
			leaders[p] = b.ID()
		}
		return nil
	})
	distinct := map[int32]bool{}
	for _, l := range leaders {
		distinct[l] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("every partition led by one broker: %v", leaders)
	}

	prod, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		t.Fatalf("NewSyncProducerFromClient: %v", err)
	}
	defer prod.Close()
	acked := map[string]int64{}
	for i := 0; i < perPartition; i++ {
		for p := int32(0); p < partitions; p++ {
			v := fmt.Sprintf("%d-%d", p, i)
			part, off, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(v)})
			if err != nil {
				t.Fatalf("send %s: %v", v, err)
			}
			if part != p {
				t.Fatalf("send %s went to partition %d", v, part)
			}
			acked[v] = off
		}
	}
	cons, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		t.Fatalf("NewConsumerFromClient: %v", err)
	}
	defer cons.Close()
	for p := int32(0); p < partitions; p++ {
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("ConsumePartition %d: %v", p, err)
		}
		timer := time.NewTimer(30 * time.Second)
		for got := 0; got < perPartition; got++ {
			select {
			case m := <-pc.Messages():
				if off, ok := acked[string(m.Value)]; !ok || off != m.Offset {
					t.Fatalf("partition %d: read %q at offset %d, acknowledged at %d (known: %v)", p, m.Value, m.Offset, off, ok)
				}
			case e := <-pc.Errors():
				t.Fatalf("consume partition %d: %v", p, e)
			case <-timer.C:
				t.Fatalf("partition %d: read %d of %d records in 30 s", p, got, perPartition)
			}
		}
		timer.Stop()
		pc.Close()
	}
	t.Logf("sarama: %d records acknowledged by leaders %v and read back at their offsets", len(acked), leaders)
}
