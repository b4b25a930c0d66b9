// franz-go across a forced leader change on a 3-node cluster: an idempotent acks=all producer keeps
// sending while the partition's leader is killed with kill -9; every record is acknowledged and read
// back exactly once and in order, and franz-go reported only retriable errors.
//
// run.sh starts the cluster (lib/millrace.sh millrace_cluster_start) for this test alone and passes
// it in MILLRACE_CLUSTER_NODES ("1=127.0.0.1:K1=PID1,2=..."); without it the test skips.
package compat

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type clusterNode struct {
	id   int32
	addr string
	pid  int
}

func clusterNodes(t *testing.T) map[int32]clusterNode {
	t.Helper()
	spec := os.Getenv("MILLRACE_CLUSTER_NODES")
	if spec == "" {
		t.Skip("MILLRACE_CLUSTER_NODES is not set: run.sh starts a 3-node cluster for this test")
	}
	nodes := map[int32]clusterNode{}
	for _, part := range strings.Split(spec, ",") {
		f := strings.Split(part, "=")
		if len(f) != 3 {
			t.Fatalf("MILLRACE_CLUSTER_NODES entry %q: want ID=HOST:PORT=PID", part)
		}
		id, err1 := strconv.Atoi(f[0])
		pid, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || pid <= 0 {
			t.Fatalf("MILLRACE_CLUSTER_NODES entry %q: bad id or pid", part)
		}
		nodes[int32(id)] = clusterNode{int32(id), f[1], pid}
	}
	return nodes
}

// warnLogger keeps franz-go's warn and error log lines (what the client saw go wrong).
type warnLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *warnLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }
func (l *warnLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%s %s %v", level, msg, kv))
}

func TestFranzLeaderChangeRoundTrip(t *testing.T) {
	const records = 6000
	const killAfter = 1500 // acknowledged records before the leader is killed
	start := time.Now()
	nodes := clusterNodes(t)
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.addr)
	}
	logs := &warnLogger{}
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.RequestTimeoutOverhead(10 * time.Second),
		kgo.RetryTimeout(60 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.WithLogger(logs),
	}
	adminCl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)

	topic := uniqueTopic("franz-leader-change")
	minISR := "2"
	resp, err := adm.CreateTopic(ctxT(t), 1, 3, map[string]*string{"min.insync.replicas": &minISR}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("CreateTopics %s (1 partition, RF 3): %v", topic, err)
	}
	leaderOf := func() (int32, int, error) {
		md, err := adm.Metadata(ctxT(t), topic)
		if err != nil {
			return -1, 0, err
		}
		p, ok := md.Topics[topic].Partitions[0]
		if !ok || p.Err != nil {
			return -1, 0, fmt.Errorf("partition 0: %v", p.Err)
		}
		return p.Leader, len(p.ISR), nil
	}
	var oldLeader int32
	waitFor(t, "a leader with a full ISR", 30*time.Second, func() error {
		l, isr, err := leaderOf()
		if err != nil {
			return err
		}
		if l < 0 || isr != 3 {
			return fmt.Errorf("leader %d, ISR size %d", l, isr)
		}
		oldLeader = l
		return nil
	})
	victim, ok := nodes[oldLeader]
	if !ok {
		t.Fatalf("leader %d is not one of the cluster's nodes %v", oldLeader, nodes)
	}

	// Idempotence and acks=all are franz-go's defaults.
	prod, err := kgo.NewClient(append(opts, kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordDeliveryTimeout(60*time.Second), kgo.MaxBufferedRecords(2000))...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer prod.Close()

	var acked atomic.Int64
	var mu sync.Mutex
	var produceErrs []string
	offsets := make([]int64, records)
	var killedAt time.Time
	killOnce := sync.Once{}
	var killErr error
	kill := func() { // from a produce callback; wg.Wait orders it before the reads below
		killOnce.Do(func() {
			killedAt = time.Now()
			killErr = syscall.Kill(victim.pid, syscall.SIGKILL)
		})
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i := 0; i < records; i++ {
		i := i
		wg.Add(1)
		prod.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(strconv.Itoa(i))},
			func(r *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					produceErrs = append(produceErrs, fmt.Sprintf("record %d: %v (retriable: %v)", i, err, kerr.IsRetriable(err)))
					mu.Unlock()
					return
				}
				offsets[i] = r.Offset
				if acked.Add(1) == killAfter {
					kill()
				}
			})
		if i%100 == 0 {
			time.Sleep(10 * time.Millisecond) // a steady stream: requests are in flight at the kill
		}
	}
	wg.Wait()
	flushed := time.Now()
	if killedAt.IsZero() {
		t.Fatalf("the leader was never killed (%d acknowledged)", acked.Load())
	}
	if killErr != nil {
		t.Fatalf("kill -9 of node %d (pid %d): %v", victim.id, victim.pid, killErr)
	}
	if len(produceErrs) > 0 {
		t.Fatalf("%d records failed; first: %v", len(produceErrs), produceErrs[:min(5, len(produceErrs))])
	}
	for i, o := range offsets {
		if o != int64(i) {
			t.Fatalf("record %d acknowledged at offset %d, want %d (reordered or duplicated)", i, o, i)
		}
	}
	var newLeader int32 = -1
	waitFor(t, "a new leader", 30*time.Second, func() error {
		l, _, err := leaderOf()
		if err != nil {
			return err
		}
		if l < 0 || l == oldLeader {
			return fmt.Errorf("leader %d", l)
		}
		newLeader = l
		return nil
	})
	logs.mu.Lock()
	seen := append([]string(nil), logs.lines...)
	logs.mu.Unlock()
	t.Logf("leader %d (pid %d) killed after %d acknowledged records; all %d acknowledged %.1fs after the kill; "+
		"new leader %d; franz-go warn/error log lines: %d", victim.id, victim.pid, killAfter, records,
		flushed.Sub(killedAt).Seconds(), newLeader, len(seen))
	for i, l := range seen {
		if i == 8 {
			break
		}
		t.Logf("  client log: %.200s", l)
	}
	// Only retriable errors: franz-go retries those itself; a non-retriable produce error
	// (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, ...) shows up in its log.
	for _, l := range seen {
		for _, bad := range []*kerr.Error{kerr.OutOfOrderSequenceNumber, kerr.InvalidProducerEpoch,
			kerr.UnknownProducerID, kerr.InvalidTxnState, kerr.CorruptMessage} {
			if strings.Contains(l, bad.Message) {
				t.Errorf("franz-go saw a non-retriable error: %s", l)
			}
		}
	}

	// Read back from the survivors: every record once, in order.
	var survivors []string
	for id, n := range nodes {
		if id != victim.id {
			survivors = append(survivors, n.addr)
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(survivors...), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer cons.Close()
	got := franzPoll(t, cons, records)
	if len(got) != records {
		t.Fatalf("consumed %d records, want %d", len(got), records)
	}
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d: offset %d value %q (lost, duplicated or reordered)", i, r.Offset, r.Value)
		}
	}
	t.Logf("%d records read back exactly once, in order (%.1fs in all)", records, time.Since(start).Seconds())
}
