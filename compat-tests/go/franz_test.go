// franz-go (github.com/twmb/franz-go/pkg/kgo + kadm) against Millrace.
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func franzClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(brokerAddr(t)),
		kgo.RequestTimeoutOverhead(10 * time.Second),
		kgo.RetryTimeout(30 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func franzAdmin(t *testing.T) *kadm.Client {
	return kadm.NewClient(franzClient(t))
}

// franzCreateTopic creates a topic and waits until Metadata shows a leader
// for every partition.
func franzCreateTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := adm.CreateTopic(ctxT(t), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("CreateTopics %s: %v", topic, err)
	}
	waitFor(t, "topic "+topic+" with leaders in Metadata", 30*time.Second, func() error {
		md, err := adm.Metadata(ctxT(t), topic)
		if err != nil {
			return err
		}
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil {
			return fmt.Errorf("topic missing: %v", td.Err)
		}
		if len(td.Partitions) != int(partitions) {
			return fmt.Errorf("%d partitions", len(td.Partitions))
		}
		for _, p := range td.Partitions {
			if p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader", p.Partition)
			}
		}
		return nil
	})
}

// franzConsumeAll reads n records from the start of the given partitions
// without a group.
func franzConsumeAll(t *testing.T, topic string, partitions int32, n int) []*kgo.Record {
	t.Helper()
	offs := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		offs[p] = kgo.NewOffset().AtStart()
	}
	cl := franzClient(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}))
	return franzPoll(t, cl, n)
}

func franzPoll(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the %s deadline", len(out), n, opTimeout)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch error on %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func TestFranzMetadata(t *testing.T) {
	adm := franzAdmin(t)
	topic := uniqueTopic("franz-meta")
	franzCreateTopic(t, adm, topic, 3)
	md, err := adm.Metadata(ctxT(t), topic)
	if err != nil {
		t.Fatalf("Metadata: %v", err)
	}
	if len(md.Brokers) != 1 {
		t.Fatalf("brokers = %v, want exactly one", md.Brokers)
	}
	b := md.Brokers[0]
	if b.Host != "127.0.0.1" || strconv.Itoa(int(b.Port)) != brokerPort(t) {
		t.Errorf("broker advertised as %s, want 127.0.0.1:%s", net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), brokerPort(t))
	}
	if md.Controller != b.NodeID {
		t.Errorf("controller = %d, want the broker %d", md.Controller, b.NodeID)
	}
	if md.Cluster == "" {
		t.Errorf("cluster id is empty")
	}
	td := md.Topics[topic]
	if td.ID == [16]byte{} {
		t.Errorf("topic id is all zeroes")
	}
	if len(td.Partitions) != 3 {
		t.Fatalf("partitions = %d, want 3", len(td.Partitions))
	}
	for _, p := range td.Partitions.Sorted() {
		if p.Err != nil || p.Leader != b.NodeID || len(p.Replicas) != 1 || p.Replicas[0] != b.NodeID ||
			len(p.ISR) != 1 || p.ISR[0] != b.NodeID {
			t.Errorf("partition %d: leader %d replicas %v isr %v err %v, want all = broker %d",
				p.Partition, p.Leader, p.Replicas, p.ISR, p.Err, b.NodeID)
		}
	}
	// A topic that does not exist is reported as such (no auto-creation
	// from a kadm Metadata request).
	missing := uniqueTopic("franz-missing")
	md2, err := adm.Metadata(ctxT(t), missing)
	if err != nil {
		t.Fatalf("Metadata(missing): %v", err)
	}
	if td2, ok := md2.Topics[missing]; !ok || !errors.Is(td2.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("Metadata for a missing topic: %+v, want UNKNOWN_TOPIC_OR_PARTITION (3)", td2.Err)
	}
}

func TestFranzRoundTrip(t *testing.T) {
	topic := uniqueTopic("franz-rt")
	franzCreateTopic(t, franzAdmin(t), topic, 1)
	// Linger so that several records share a batch: timestamp deltas inside
	// one batch are then negative for the non-monotonic ones.
	cl := franzClient(t, kgo.ProducerLinger(50*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20))
	want := roundTripRecords()
	var wg sync.WaitGroup
	errs := make([]error, len(want))
	for i, r := range want {
		kr := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.TS}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		wg.Add(1)
		cl.Produce(ctxT(t), kr, func(_ *kgo.Record, err error) { errs[i] = err; wg.Done() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("produce record %d: %v", i, err)
		}
	}
	got := franzConsumeAll(t, topic, 1, len(want))
	if len(got) != len(want) {
		t.Fatalf("consumed %d records, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.Offset != int64(i) {
			t.Errorf("record %d has offset %d", i, g.Offset)
		}
		var hs []hdr
		for _, h := range g.Headers {
			hs = append(hs, hdr{h.Key, h.Value})
		}
		compareRecord(t, i, want[i], g.Key, g.Value, hs, g.Timestamp)
		if g.Attrs.TimestampType() != 0 {
			t.Errorf("record %d: timestamp type %d, want 0 (CreateTime)", i, g.Attrs.TimestampType())
		}
	}
}

func TestFranzCompression(t *testing.T) {
	adm := franzAdmin(t)
	kcodec := map[string]kgo.CompressionCodec{
		"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for _, c := range codecs {
		c := c
		t.Run(c.name, func(t *testing.T) {
			topic := uniqueTopic("franz-" + c.name)
			franzCreateTopic(t, adm, topic, 1)
			cl := franzClient(t, kgo.ProducerBatchCompression(kcodec[c.name]), kgo.ProducerLinger(20*time.Millisecond))
			var wg sync.WaitGroup
			var mu sync.Mutex
			var firstErr error
			for i := 0; i < codecRecords; i++ {
				wg.Add(1)
				cl.Produce(ctxT(t), &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: codecValue(c.name, i)},
					func(_ *kgo.Record, err error) {
						if err != nil {
							mu.Lock()
							if firstErr == nil {
								firstErr = err
							}
							mu.Unlock()
						}
						wg.Done()
					})
			}
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("produce with %s: %v", c.name, firstErr)
			}
			got := franzConsumeAll(t, topic, 1, codecRecords)
			inCodec := 0
			for i, g := range got {
				if g.Offset != int64(i) || string(g.Key) != strconv.Itoa(i) || string(g.Value) != string(codecValue(c.name, i)) {
					t.Fatalf("record %d: offset %d key %q value %s differs from what was produced", i, g.Offset, g.Key, describeBytes(g.Value))
				}
				if g.Attrs.CompressionType() == c.id {
					inCodec++
				}
			}
			// The fetched batches carry the codec they were produced with
			// (the broker stores the producer's batches as they are).
			if inCodec*10 < codecRecords*9 {
				t.Errorf("only %d of %d records came back in %s batches (attributes codec %d)", inCodec, codecRecords, c.name, c.id)
			}
		})
	}
}

func TestFranzGroupCommitResume(t *testing.T) {
	adm := franzAdmin(t)
	topic := uniqueTopic("franz-group")
	group := uniqueTopic("franz-g")
	franzCreateTopic(t, adm, topic, 2)
	prod := franzClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 10; i++ {
			r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))}
			if err := prod.ProduceSync(ctxT(t), r).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
	}
	commit := map[int32]int64{0: 4, 1: 7}

	// First member: no committed offsets yet, so it starts at the beginning
	// (ConsumeResetOffset AtStart), reads everything, commits 4 and 7, leaves.
	c1 := franzClient(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(10*time.Second))
	got1 := franzPoll(t, c1, 20)
	first := map[int32]int64{0: -1, 1: -1}
	for _, r := range got1 {
		if first[r.Partition] < 0 {
			first[r.Partition] = r.Offset
		}
	}
	if first[0] != 0 || first[1] != 0 {
		t.Fatalf("first member started at %v, want offset 0 on both partitions", first)
	}
	toCommit := map[string]map[int32]kgo.EpochOffset{topic: {}}
	for p, o := range commit {
		toCommit[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	var commitErr error
	c1.CommitOffsetsSync(ctxT(t), toCommit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, tp := range resp.Topics {
			for _, pp := range tp.Partitions {
				if e := kerr.ErrorForCode(pp.ErrorCode); e != nil && commitErr == nil {
					commitErr = fmt.Errorf("OffsetCommit %s/%d: %w", tp.Topic, pp.Partition, e)
				}
			}
		}
	})
	if commitErr != nil {
		t.Fatalf("commit: %v", commitErr)
	}
	c1.Close() // LeaveGroup

	// The committed offsets are visible through OffsetFetch.
	offs, err := adm.FetchOffsets(ctxT(t), group)
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	for p, o := range commit {
		r, ok := offs.Lookup(topic, p)
		if !ok || r.Err != nil || r.At != o {
			t.Errorf("OffsetFetch %s/%d = %+v (found %v), want %d", topic, p, r, ok, o)
		}
	}

	// Second member of the same group resumes at the committed offsets.
	c2 := franzClient(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(10*time.Second))
	got2 := franzPoll(t, c2, 20-int(commit[0])-int(commit[1]))
	first = map[int32]int64{0: -1, 1: -1}
	count := map[int32]int{}
	for _, r := range got2 {
		if first[r.Partition] < 0 {
			first[r.Partition] = r.Offset
		}
		count[r.Partition]++
	}
	if first[0] != commit[0] || first[1] != commit[1] {
		t.Errorf("second member started at %v, want the committed %v", first, commit)
	}
	if count[0] != 10-int(commit[0]) || count[1] != 10-int(commit[1]) {
		t.Errorf("second member read %v records per partition, want %d and %d", count, 10-commit[0], 10-commit[1])
	}
	// The group is known to ListGroups/DescribeGroups while c2 is a member.
	dg, err := adm.DescribeGroups(ctxT(t), group)
	if err != nil {
		t.Fatalf("DescribeGroups: %v", err)
	}
	if g, ok := dg[group]; !ok || g.Err != nil || g.State != "Stable" || len(g.Members) != 1 || g.ProtocolType != "consumer" {
		t.Errorf("DescribeGroups %s = %+v, want Stable with 1 member, protocol type consumer", group, dg[group])
	}
}

func TestFranzAdminTopics(t *testing.T) {
	adm := franzAdmin(t)
	topic := uniqueTopic("franz-admin")
	retention := "123456789"
	resp, err := adm.CreateTopic(ctxT(t), 3, 1, map[string]*string{"retention.ms": &retention}, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("CreateTopics: %v / %v", err, resp.Err)
	}
	if resp.NumPartitions != 3 || resp.ReplicationFactor != 1 {
		t.Errorf("CreateTopics response: %d partitions RF %d, want 3 and 1", resp.NumPartitions, resp.ReplicationFactor)
	}
	waitFor(t, "the new topic in ListTopics", 30*time.Second, func() error {
		tds, err := adm.ListTopics(ctxT(t), topic)
		if err != nil {
			return err
		}
		if td, ok := tds[topic]; !ok || td.Err != nil || len(td.Partitions) != 3 {
			return fmt.Errorf("%+v", tds[topic])
		}
		return nil
	})
	rcs, err := adm.DescribeTopicConfigs(ctxT(t), topic)
	if err != nil {
		t.Fatalf("DescribeConfigs: %v", err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("DescribeConfigs %s: %v / %v", topic, err, rc.Err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			found = true
			if c.MaybeValue() != retention {
				t.Errorf("retention.ms = %q, want %q", c.MaybeValue(), retention)
			}
		}
	}
	if !found {
		t.Errorf("DescribeConfigs has no retention.ms")
	}
	// Creating it again: TOPIC_ALREADY_EXISTS (36).
	// (kadm.CreateTopic returns the topic's error as its error too.)
	again, _ := adm.CreateTopic(ctxT(t), 3, 1, nil, topic)
	if !errors.Is(again.Err, kerr.TopicAlreadyExists) {
		t.Errorf("second CreateTopics: %v, want TOPIC_ALREADY_EXISTS (36)", again.Err)
	}
	dresp, err := adm.DeleteTopics(ctxT(t), topic)
	if err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	if d, err := dresp.On(topic, nil); err != nil || d.Err != nil {
		t.Fatalf("DeleteTopics %s: %v / %v", topic, err, d.Err)
	}
	waitFor(t, "the deleted topic to leave Metadata", 30*time.Second, func() error {
		md, err := adm.Metadata(ctxT(t), topic)
		if err != nil {
			return err
		}
		if td := md.Topics[topic]; !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("topic still there: err %v, %d partitions", td.Err, len(td.Partitions))
		}
		return nil
	})
	all, err := adm.ListTopics(ctxT(t))
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if all.Has(topic) {
		t.Errorf("ListTopics still lists %s after deletion", topic)
	}
	// Deleting it again: UNKNOWN_TOPIC_OR_PARTITION (3).
	dresp2, err := adm.DeleteTopics(ctxT(t), topic)
	if err == nil {
		d2, _ := dresp2.On(topic, nil)
		err = d2.Err
	}
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("second DeleteTopics: %v, want UNKNOWN_TOPIC_OR_PARTITION (3)", err)
	}
}

func TestFranzIdempotentProduce(t *testing.T) {
	topic := uniqueTopic("franz-idem")
	franzCreateTopic(t, franzAdmin(t), topic, 1)
	// Idempotence is franz-go's default (acks=all, up to 5 in flight).
	cl := franzClient(t, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(10000))
	const n = 3000
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		cl.Produce(ctxT(t), &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("idempotent produce: %v", firstErr)
	}
	// franz-go silently falls back to a non-idempotent producer (id -1)
	// when InitProducerId fails: require a real producer id.
	pid, epoch, err := cl.ProducerID(ctxT(t))
	if err != nil || pid < 0 || epoch < 0 {
		t.Fatalf("ProducerID = %d epoch %d err %v, want an id >= 0 from InitProducerId", pid, epoch, err)
	}
	got := franzConsumeAll(t, topic, 1, n)
	if len(got) != n {
		t.Fatalf("consumed %d, want %d", len(got), n)
	}
	for i, g := range got {
		if g.Offset != int64(i) || string(g.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d: offset %d value %q (duplicate or reordered)", i, g.Offset, g.Value)
		}
		if g.ProducerID != pid || g.ProducerEpoch != epoch {
			t.Fatalf("record %d stored with producer %d/%d, want %d/%d", i, g.ProducerID, g.ProducerEpoch, pid, epoch)
		}
	}
	hw := franzEndOffset(t, topic)
	if hw != n {
		t.Errorf("high watermark %d, want %d (duplicates were appended)", hw, n)
	}
}

func franzEndOffset(t *testing.T, topic string) int64 {
	t.Helper()
	lo, err := franzAdmin(t).ListEndOffsets(ctxT(t), topic)
	if err != nil {
		t.Fatalf("ListOffsets: %v", err)
	}
	o, ok := lo.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("ListOffsets %s/0: %+v", topic, o)
	}
	return o.Offset
}
