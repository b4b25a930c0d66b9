// Shared helpers for the franz-go and Sarama compatibility tests.
//
// The tests talk to one broker whose address run.sh puts in MILLRACE_ADDR
// (127.0.0.1:PORT). Every test creates its own uniquely named topics, so the
// tests of both clients can share that broker.
package compat

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// opTimeout bounds every single client call or wait in the tests.
const opTimeout = 60 * time.Second

func brokerAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("MILLRACE_ADDR")
	if addr == "" {
		t.Fatal("MILLRACE_ADDR is not set (run the tests through compat-tests/go/run.sh)")
	}
	return addr
}

func brokerPort(t *testing.T) string {
	addr := brokerAddr(t)
	return addr[strings.LastIndex(addr, ":")+1:]
}

func uniqueTopic(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---- the round-trip data set, the same for both clients --------------------

type hdr struct {
	Key   string
	Value []byte
}

type rec struct {
	Key     []byte // nil = null key
	Value   []byte // nil = null value
	Headers []hdr
	TS      time.Time
}

// roundTripRecords: keys (null, empty, text, binary), values (null, empty,
// UTF-8, binary, 200 KB), headers (none, several, duplicate keys in order,
// empty value), explicit non-monotonic millisecond timestamps.
func roundTripRecords() []rec {
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 200*1024/16)
	big[0], big[len(big)-1] = 'B', 'E'
	recs := []rec{
		{Key: []byte("k0"), Value: []byte("plain value"), TS: base},
		{Key: nil, Value: []byte("null key"), TS: base.Add(5 * time.Second)},
		{Key: []byte{}, Value: []byte("empty key"), TS: base.Add(-3 * time.Second)},
		{Key: []byte("null-value"), Value: nil, TS: base.Add(1 * time.Second)},
		{Key: []byte("empty-value"), Value: []byte{}, TS: base.Add(2 * time.Second)},
		{Key: bin[:17], Value: bin, TS: base.Add(-10 * time.Minute)},
		{Key: []byte("utf8"), Value: []byte("grüße — 日本語 — 🚀"), TS: base.Add(7 * time.Second)},
		{Key: []byte("headers"), Value: []byte("with headers"), TS: base.Add(8 * time.Second), Headers: []hdr{
			{"h1", []byte("v1")}, {"dup", []byte("first")}, {"h2", bin[:5]}, {"dup", []byte("second")}, {"empty", []byte{}},
		}},
		{Key: []byte("big"), Value: big, TS: base.Add(9 * time.Second), Headers: []hdr{{"size", []byte("200KB")}}},
		{Key: []byte("last"), Value: []byte("last"), TS: base.Add(-1 * time.Millisecond)},
	}
	return recs
}

func describeBytes(b []byte) string {
	if b == nil {
		return "<null>"
	}
	if len(b) > 40 {
		return fmt.Sprintf("%d bytes %q...", len(b), b[:40])
	}
	return fmt.Sprintf("%q", b)
}

// sameNullable compares two byte slices and tells null from empty.
func sameNullable(a, b []byte) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return bytes.Equal(a, b)
}

// compareRecord checks one consumed record against what was produced.
// Headers compare keys and values in order; an empty header value may come
// back as either empty or null (the clients differ, the wire form is the same
// length-0 bytes for both encodings here).
func compareRecord(t *testing.T, i int, want rec, gotKey, gotValue []byte, gotHeaders []hdr, gotTS time.Time) {
	t.Helper()
	if !sameNullable(want.Key, gotKey) {
		t.Errorf("record %d: key = %s, want %s", i, describeBytes(gotKey), describeBytes(want.Key))
	}
	if !sameNullable(want.Value, gotValue) {
		t.Errorf("record %d: value = %s, want %s", i, describeBytes(gotValue), describeBytes(want.Value))
	}
	if !gotTS.Equal(want.TS) {
		t.Errorf("record %d: timestamp = %d ms, want %d ms", i, gotTS.UnixMilli(), want.TS.UnixMilli())
	}
	if len(gotHeaders) != len(want.Headers) {
		t.Errorf("record %d: %d headers %v, want %d %v", i, len(gotHeaders), gotHeaders, len(want.Headers), want.Headers)
		return
	}
	for j := range want.Headers {
		if gotHeaders[j].Key != want.Headers[j].Key || !bytes.Equal(gotHeaders[j].Value, want.Headers[j].Value) {
			t.Errorf("record %d header %d: %q=%s, want %q=%s", i, j, gotHeaders[j].Key,
				describeBytes(gotHeaders[j].Value), want.Headers[j].Key, describeBytes(want.Headers[j].Value))
		}
	}
}

// compressible values for the codec tests: ~300 bytes each, very repetitive.
func codecValue(codec string, i int) []byte {
	return []byte(fmt.Sprintf("%06d %s", i, strings.Repeat("millrace compression test "+codec+" ", 12)))
}

const codecRecords = 2000

var codecs = []struct {
	name string
	id   uint8 // attributes & 0x07 in the record batch
}{{"gzip", 1}, {"snappy", 2}, {"lz4", 3}, {"zstd", 4}}
