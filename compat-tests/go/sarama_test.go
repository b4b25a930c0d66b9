// Sarama (github.com/IBM/sarama) against Millrace. Sarama's default
// Version (V2_8_0_0) with ApiVersionsRequest=true: request versions come
// from Version and are clamped to the broker's maxima.
package compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "millrace-compat-sarama"
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Net.ReadTimeout = 30 * time.Second
	cfg.Net.WriteTimeout = 30 * time.Second
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Timeout = 30 * time.Second
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	cfg.Admin.Timeout = 30 * time.Second
	return cfg
}

func saramaClient(t *testing.T, cfg *sarama.Config) sarama.Client {
	t.Helper()
	if cfg == nil {
		cfg = saramaConfig()
	}
	cl, err := sarama.NewClient([]string{brokerAddr(t)}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func saramaAdmin(t *testing.T) sarama.ClusterAdmin {
	t.Helper()
	adm, err := sarama.NewClusterAdmin([]string{brokerAddr(t)}, saramaConfig())
	if err != nil {
		t.Fatalf("sarama.NewClusterAdmin: %v", err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	return adm
}

func saramaCreateTopic(t *testing.T, topic string, partitions int32) {
	t.Helper()
	adm := saramaAdmin(t)
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
	waitFor(t, "topic "+topic+" with leaders in Metadata", 30*time.Second, func() error {
		md, err := adm.DescribeTopics([]string{topic})
		if err != nil {
			return err
		}
		if len(md) != 1 || md[0].Err != sarama.ErrNoError || len(md[0].Partitions) != int(partitions) {
			return fmt.Errorf("%+v", md)
		}
		for _, p := range md[0].Partitions {
			if p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader", p.ID)
			}
		}
		return nil
	})
}

// saramaConsume reads n messages from the start of one partition.
func saramaConsume(t *testing.T, topic string, partition int32, n int) []*sarama.ConsumerMessage {
	t.Helper()
	cl := saramaClient(t, nil)
	cons, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, partition, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("ConsumePartition: %v", err)
	}
	defer pc.Close()
	timer := time.NewTimer(opTimeout)
	defer timer.Stop()
	var out []*sarama.ConsumerMessage
	for len(out) < n {
		select {
		case m := <-pc.Messages():
			out = append(out, m)
		case e := <-pc.Errors():
			t.Fatalf("consume %s/%d: %v", topic, partition, e)
		case <-timer.C:
			t.Fatalf("consumed %d of %d messages before the %s deadline", len(out), n, opTimeout)
		}
	}
	return out
}

// saramaFetchBatches sends one raw Fetch (v11) from offset 0 and returns the
// record batches of partition 0 (to look at attributes/producer ids as stored).
func saramaFetchBatches(t *testing.T, cl sarama.Client, topic string, wantRecords int) []*sarama.RecordBatch {
	t.Helper()
	leader, err := cl.Leader(topic, 0)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	var batches []*sarama.RecordBatch
	next, n := int64(0), 0
	deadline := time.Now().Add(opTimeout)
	for n < wantRecords {
		if time.Now().After(deadline) {
			t.Fatalf("raw fetch: %d of %d records before the deadline", n, wantRecords)
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 500, MinBytes: 1, MaxBytes: 16 << 20, Isolation: sarama.ReadUncommitted}
		req.AddBlock(topic, 0, next, 8<<20, -1)
		resp, err := leader.Fetch(req)
		if err != nil {
			t.Fatalf("raw Fetch v11: %v", err)
		}
		blk := resp.GetBlock(topic, 0)
		if blk == nil || blk.Err != sarama.ErrNoError {
			t.Fatalf("raw Fetch v11 %s/0: %+v", topic, blk)
		}
		for _, rs := range blk.RecordsSet {
			if rs.RecordBatch == nil {
				t.Fatalf("raw Fetch returned a legacy message set, want v2 record batches")
			}
			b := rs.RecordBatch
			if b.PartialTrailingRecord || len(b.Records) == 0 {
				continue
			}
			batches = append(batches, b)
			n += len(b.Records)
			next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		}
	}
	return batches
}

func saramaProduceSync(t *testing.T, cfg *sarama.Config, msgs []*sarama.ProducerMessage) {
	t.Helper()
	if cfg == nil {
		cfg = saramaConfig()
	}
	p, err := sarama.NewSyncProducer([]string{brokerAddr(t)}, cfg)
	if err != nil {
		t.Fatalf("NewSyncProducer: %v", err)
	}
	defer p.Close()
	if err := p.SendMessages(msgs); err != nil {
		var pe sarama.ProducerErrors
		if errors.As(err, &pe) && len(pe) > 0 {
			t.Fatalf("produce: %d errors, first: %v", len(pe), pe[0].Err)
		}
		t.Fatalf("produce: %v", err)
	}
}

func TestSaramaMetadata(t *testing.T) {
	topic := uniqueTopic("sarama-meta")
	saramaCreateTopic(t, topic, 3)
	cl := saramaClient(t, nil)
	if err := cl.RefreshMetadata(topic); err != nil {
		t.Fatalf("RefreshMetadata: %v", err)
	}
	brokers := cl.Brokers()
	if len(brokers) != 1 {
		t.Fatalf("%d brokers, want 1", len(brokers))
	}
	b := brokers[0]
	if b.Addr() != net.JoinHostPort("127.0.0.1", brokerPort(t)) {
		t.Errorf("broker advertised as %s, want 127.0.0.1:%s", b.Addr(), brokerPort(t))
	}
	ctrl, err := cl.Controller()
	if err != nil || ctrl.ID() != b.ID() {
		t.Errorf("controller = %v (%v), want broker %d", ctrl, err, b.ID())
	}
	parts, err := cl.Partitions(topic)
	if err != nil || len(parts) != 3 {
		t.Fatalf("Partitions = %v, %v; want 3", parts, err)
	}
	for _, p := range parts {
		l, err := cl.Leader(topic, p)
		reps, _ := cl.Replicas(topic, p)
		isr, _ := cl.InSyncReplicas(topic, p)
		if err != nil || l.ID() != b.ID() || len(reps) != 1 || reps[0] != b.ID() || len(isr) != 1 || isr[0] != b.ID() {
			t.Errorf("partition %d: leader %v (%v) replicas %v isr %v, want all = broker %d", p, l, err, reps, isr, b.ID())
		}
	}
	// Raw Metadata at Sarama's default version: cluster id, controller id.
	if err := b.Open(cl.Config()); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
		t.Fatalf("open broker: %v", err)
	}
	md, err := b.GetMetadata(sarama.NewMetadataRequest(sarama.V2_8_0_0, []string{topic}))
	if err != nil {
		t.Fatalf("Metadata: %v", err)
	}
	if md.ClusterID == nil || *md.ClusterID == "" {
		t.Errorf("Metadata v%d: cluster id is null/empty", md.Version)
	}
	if md.ControllerID != b.ID() {
		t.Errorf("Metadata v%d: controller id %d, want %d", md.Version, md.ControllerID, b.ID())
	}
	// DescribeCluster as the admin sees it.
	adm := saramaAdmin(t)
	dbs, cid, err := adm.DescribeCluster()
	if err != nil || len(dbs) != 1 || cid != b.ID() {
		t.Errorf("DescribeCluster: %d brokers controller %d err %v, want 1 broker, controller %d", len(dbs), cid, err, b.ID())
	}
	// A missing topic is not auto-created by the admin's Metadata request.
	missing := uniqueTopic("sarama-missing")
	tm, err := adm.DescribeTopics([]string{missing})
	if err != nil || len(tm) != 1 || tm[0].Err != sarama.ErrUnknownTopicOrPartition {
		t.Errorf("DescribeTopics(missing) = %+v, %v; want UNKNOWN_TOPIC_OR_PARTITION (3)", tm, err)
	}
}

func TestSaramaRoundTrip(t *testing.T) {
	topic := uniqueTopic("sarama-rt")
	saramaCreateTopic(t, topic, 1)
	want := roundTripRecords()
	var msgs []*sarama.ProducerMessage
	for _, r := range want {
		m := &sarama.ProducerMessage{Topic: topic, Partition: 0, Timestamp: r.TS}
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		if r.Value != nil {
			m.Value = sarama.ByteEncoder(r.Value)
		}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		msgs = append(msgs, m)
	}
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Flush.Frequency = 50 * time.Millisecond // several records per batch
	cfg.Producer.MaxMessageBytes = 1 << 20
	saramaProduceSync(t, cfg, msgs)
	got := saramaConsume(t, topic, 0, len(want))
	for i, g := range got {
		if g.Offset != int64(i) {
			t.Errorf("record %d has offset %d", i, g.Offset)
		}
		var hs []hdr
		for _, h := range g.Headers {
			hs = append(hs, hdr{string(h.Key), h.Value})
		}
		compareRecord(t, i, want[i], g.Key, g.Value, hs, g.Timestamp)
	}
}

func TestSaramaCompression(t *testing.T) {
	scodec := map[string]sarama.CompressionCodec{
		"gzip": sarama.CompressionGZIP, "snappy": sarama.CompressionSnappy,
		"lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD,
	}
	for _, c := range codecs {
		c := c
		t.Run(c.name, func(t *testing.T) {
			topic := uniqueTopic("sarama-" + c.name)
			saramaCreateTopic(t, topic, 1)
			cfg := saramaConfig()
			cfg.Producer.Compression = scodec[c.name]
			cfg.Producer.Flush.Frequency = 20 * time.Millisecond
			var msgs []*sarama.ProducerMessage
			for i := 0; i < codecRecords; i++ {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(strconv.Itoa(i)), Value: sarama.ByteEncoder(codecValue(c.name, i))})
			}
			saramaProduceSync(t, cfg, msgs)
			got := saramaConsume(t, topic, 0, codecRecords)
			for i, g := range got {
				if g.Offset != int64(i) || string(g.Key) != strconv.Itoa(i) || string(g.Value) != string(codecValue(c.name, i)) {
					t.Fatalf("record %d: offset %d key %q value %s differs from what was produced", i, g.Offset, g.Key, describeBytes(g.Value))
				}
			}
			// Stored as sent: the fetched batches carry the producer's codec.
			inCodec := 0
			for _, b := range saramaFetchBatches(t, saramaClient(t, nil), topic, codecRecords) {
				if uint8(b.Codec) == c.id {
					inCodec += len(b.Records)
				}
			}
			if inCodec*10 < codecRecords*9 {
				t.Errorf("only %d of %d records came back in %s batches", inCodec, codecRecords, c.name)
			}
		})
	}
}

type saramaGroupHandler struct {
	mu     sync.Mutex
	first  map[int32]int64
	count  map[int32]int
	want   int
	commit map[int32]int64 // if set: mark these offsets and commit once everything is read
	done   chan struct{}
	once   sync.Once
	err    error
}

func (h *saramaGroupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaGroupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaGroupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		if _, ok := h.first[m.Partition]; !ok {
			h.first[m.Partition] = m.Offset
		}
		h.count[m.Partition]++
		total := 0
		for _, c := range h.count {
			total += c
		}
		h.mu.Unlock()
		if total >= h.want {
			h.once.Do(func() {
				if h.commit != nil {
					for p, o := range h.commit {
						// MarkOffset(o) commits o: the next offset to read.
						sess.MarkOffset(m.Topic, p, o, "")
					}
					sess.Commit()
				}
				close(h.done)
			})
		}
	}
	return nil
}

func saramaGroupRun(t *testing.T, group, topic string, h *saramaGroupHandler) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 1 * time.Second
	cg, err := sarama.NewConsumerGroup([]string{brokerAddr(t)}, group, cfg)
	if err != nil {
		t.Fatalf("NewConsumerGroup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		var last error
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				last = err
				if errors.Is(err, sarama.ErrClosedConsumerGroup) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		errc <- last
	}()
	var groupErrs []error
	go func() {
		for e := range cg.Errors() {
			groupErrs = append(groupErrs, e)
		}
	}()
	select {
	case <-h.done:
	case <-time.After(opTimeout):
		cancel()
		_ = cg.Close()
		t.Fatalf("group %s: read %v records (first offsets %v) of %d before the deadline; last Consume error: %v",
			group, h.count, h.first, h.want, <-errc)
	}
	cancel()
	if err := cg.Close(); err != nil { // LeaveGroup
		t.Errorf("close consumer group: %v", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("Consume returned %v", err)
	}
}

func TestSaramaGroupCommitResume(t *testing.T) {
	topic := uniqueTopic("sarama-group")
	group := uniqueTopic("sarama-g")
	saramaCreateTopic(t, topic, 2)
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	var msgs []*sarama.ProducerMessage
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 10; i++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	saramaProduceSync(t, cfg, msgs)
	commit := map[int32]int64{0: 4, 1: 7}

	h1 := &saramaGroupHandler{first: map[int32]int64{}, count: map[int32]int{}, want: 20, commit: commit, done: make(chan struct{})}
	saramaGroupRun(t, group, topic, h1)
	if h1.first[0] != 0 || h1.first[1] != 0 {
		t.Fatalf("first member started at %v, want offset 0 on both partitions", h1.first)
	}

	adm := saramaAdmin(t)
	ofr, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	for p, o := range commit {
		blk := ofr.GetBlock(topic, p)
		if blk == nil || blk.Err != sarama.ErrNoError || blk.Offset != o {
			t.Errorf("OffsetFetch %s/%d = %+v, want %d", topic, p, blk, o)
		}
	}

	h2 := &saramaGroupHandler{first: map[int32]int64{}, count: map[int32]int{}, want: 20 - int(commit[0]) - int(commit[1]), done: make(chan struct{})}
	saramaGroupRun(t, group, topic, h2)
	if h2.first[0] != commit[0] || h2.first[1] != commit[1] {
		t.Errorf("second member started at %v, want the committed %v", h2.first, commit)
	}
	if h2.count[0] != 10-int(commit[0]) || h2.count[1] != 10-int(commit[1]) {
		t.Errorf("second member read %v records per partition, want %d and %d", h2.count, 10-commit[0], 10-commit[1])
	}
	gd, err := adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(gd) != 1 || gd[0].Err != sarama.ErrNoError || gd[0].State != "Empty" || gd[0].ProtocolType != "consumer" {
		t.Errorf("DescribeGroups after both left = %+v, %v; want state Empty, protocol type consumer", gd, err)
	}
}

func TestSaramaAdminTopics(t *testing.T) {
	adm := saramaAdmin(t)
	topic := uniqueTopic("sarama-admin")
	retention := "123456789"
	err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}, false)
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	waitFor(t, "the new topic in DescribeTopics", 30*time.Second, func() error {
		md, err := adm.DescribeTopics([]string{topic})
		if err != nil {
			return err
		}
		if len(md) != 1 || md[0].Err != sarama.ErrNoError || len(md[0].Partitions) != 3 {
			return fmt.Errorf("%+v", md)
		}
		return nil
	})
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if d, ok := topics[topic]; !ok || d.NumPartitions != 3 || d.ReplicationFactor != 1 {
		t.Errorf("ListTopics[%s] = %+v (found %v), want 3 partitions RF 1", topic, d, ok)
	} else if v := d.ConfigEntries["retention.ms"]; v == nil || *v != retention {
		t.Errorf("ListTopics config retention.ms = %v, want %s", v, retention)
	}
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		t.Fatalf("DescribeConfigs: %v", err)
	}
	found := false
	for _, e := range entries {
		if e.Name == "retention.ms" {
			found = true
			if e.Value != retention || e.Default {
				t.Errorf("retention.ms = %q (default %v), want %q set on the topic", e.Value, e.Default, retention)
			}
		}
	}
	if !found {
		t.Errorf("DescribeConfigs has no retention.ms")
	}
	err = adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false)
	if !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Errorf("second CreateTopic: %v, want TOPIC_ALREADY_EXISTS (36)", err)
	}
	if err := adm.DeleteTopic(topic); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	waitFor(t, "the deleted topic to leave Metadata", 30*time.Second, func() error {
		md, err := adm.DescribeTopics([]string{topic})
		if err != nil {
			return err
		}
		if len(md) != 1 || md[0].Err != sarama.ErrUnknownTopicOrPartition {
			return fmt.Errorf("topic still there: %+v", md)
		}
		return nil
	})
	topics, err = adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if _, ok := topics[topic]; ok {
		t.Errorf("ListTopics still lists %s after deletion", topic)
	}
	if err := adm.DeleteTopic(topic); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Errorf("second DeleteTopic: %v, want UNKNOWN_TOPIC_OR_PARTITION (3)", err)
	}
}

func TestSaramaIdempotentProduce(t *testing.T) {
	topic := uniqueTopic("sarama-idem")
	saramaCreateTopic(t, topic, 1)
	cfg := saramaConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 5
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	const n = 3000
	var msgs []*sarama.ProducerMessage
	for i := 0; i < n; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(strconv.Itoa(i))})
	}
	saramaProduceSync(t, cfg, msgs)
	got := saramaConsume(t, topic, 0, n)
	for i, g := range got {
		if g.Offset != int64(i) || string(g.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d: offset %d value %q (duplicate or reordered)", i, g.Offset, g.Value)
		}
	}
	// The batches are stored with the producer id from InitProducerId and
	// consecutive sequence numbers.
	var pid int64 = -2
	nextSeq := int32(0)
	for _, b := range saramaFetchBatches(t, saramaClient(t, nil), topic, n) {
		if b.ProducerID < 0 || b.IsTransactional {
			t.Fatalf("batch at offset %d: producer id %d transactional %v, want an idempotent (id >= 0) batch", b.FirstOffset, b.ProducerID, b.IsTransactional)
		}
		if pid == -2 {
			pid = b.ProducerID
		} else if b.ProducerID != pid {
			t.Errorf("batch at offset %d: producer id %d, want %d", b.FirstOffset, b.ProducerID, pid)
		}
		if b.FirstSequence != nextSeq {
			t.Errorf("batch at offset %d: first sequence %d, want %d", b.FirstOffset, b.FirstSequence, nextSeq)
		}
		nextSeq = b.FirstSequence + int32(len(b.Records))
	}
	hw, err := saramaClient(t, nil).GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil || hw != n {
		t.Errorf("high watermark %d (%v), want %d (duplicates were appended)", hw, err, n)
	}
}
