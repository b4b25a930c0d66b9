//go:build linux

// Shared by the TLS, SASL/PLAIN and SASL/SCRAM tests (franz_tls_test.go, franz_sasl_test.go,
// franz_scram_test.go): each starts a broker of its own (the one run.sh starts has no such
// listeners) with extra listeners from Kafka's config names and throwaway certificates from
// compat-tests/python/tls_material.py, and talks to it with franz-go over TLS and SASL.
//
// The broker: $MILLRACE_BIN (compat-tests/reference/kafka-shim.sh for Apache Kafka) or
// <repo>/target/debug/millrace, which run.sh builds; its PLAINTEXT listener is --listen
// 127.0.0.1:0, read from its "listening on 127.0.0.1:PORT" line (within MILLRACE_START_TIMEOUT
// seconds, default 10). It runs in its own process group and gets SIGTERM on cleanup.
package compat

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// secureRecords: records per round trip (secureRoundTrip).
const secureRecords = 100

var listeningRE = regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+)`)

// tlsMaterial: a directory of tls_material.py's files.
type tlsMaterial string

// makeTLSMaterial writes tls_material.py's files into a new directory (openssl CLI).
func makeTLSMaterial(t *testing.T) tlsMaterial {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "python3", filepath.Join("..", "python", "tls_material.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("making the TLS material (python/tls_material.py, openssl): %v\n%s", err, out)
	}
	return tlsMaterial(dir)
}

func (m tlsMaterial) pem(name string) string { return filepath.Join(string(m), name+".pem") }

// tlsConfig trusts CA (a tls_material.py name) and, when CERT is not empty, presents that client
// certificate (CERT-cert.pem, CERT-key.pem).
func (m tlsMaterial) tlsConfig(t *testing.T, ca, cert string) *tls.Config {
	t.Helper()
	pemBytes, err := os.ReadFile(m.pem(ca))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("no certificate in %s", m.pem(ca))
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(m.pem(cert+"-cert"), m.pem(cert+"-key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// loopbackListeners: N free loopback ports and their 127.0.0.1:PORT addresses, for the listeners
// setting.
func loopbackListeners(t *testing.T, n int) (addrs []string, ports []int) {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		ports = append(ports, port)
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	return addrs, ports
}

// brokerEnv: the environment without MILLRACE_* (but MILLRACE_LOG): Millrace reads those as
// config keys and refuses unknown ones (run.sh exports MILLRACE_ADDR).
func brokerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MILLRACE_") && !strings.HasPrefix(kv, "MILLRACE_LOG=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// brokerBin: $MILLRACE_BIN, else the debug build run.sh makes, as an absolute path.
func brokerBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MILLRACE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "target", "debug", "millrace")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("broker binary %s missing (run through compat-tests/go/run.sh, which builds it, or set MILLRACE_BIN)", bin)
	}
	return bin
}

func brokerStartTimeout() time.Duration {
	if s := os.Getenv("MILLRACE_START_TIMEOUT"); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(f * float64(time.Second))
		}
	}
	return 10 * time.Second
}

// tailOf: the last 30 lines of the file at PATH.
func tailOf(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// startBrokerWith starts the broker with a data dir of its own, its PLAINTEXT listener on a free
// loopback port and SETTINGS (name=value, each passed as --set), and returns that listener's
// address and port once the broker printed it. WHAT names the broker in messages ("TLS"). The
// test's cleanup stops it (SIGTERM, then SIGKILL to its process group after 30 s) and fails the
// test if it exited before.
func startBrokerWith(t *testing.T, what string, settings []string) (plainAddr string, plainPort int) {
	t.Helper()
	bin := brokerBin(t)
	startTimeout := brokerStartTimeout()
	work := t.TempDir()
	args := []string{"--data-dir", filepath.Join(work, "data"), "--listen", "127.0.0.1:0"}
	for _, kv := range settings {
		args = append(args, "--set", kv)
	}
	stderrPath := filepath.Join(work, "broker.stderr")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = brokerEnv()
	cmd.Stderr = stderr
	// its own process group (the Kafka shim's java child goes with it), killed with the test
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	portCh := make(chan int, 1)
	go func() { // reads stdout to its end, so that the broker never blocks on it
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil && !found {
				found = true
				p, _ := strconv.Atoi(m[1])
				portCh <- p
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	gone := false // exited before 'listening on', reported below
	t.Cleanup(func() {
		defer stderr.Close()
		if gone {
			return
		}
		select {
		case err := <-exited:
			t.Errorf("the %s broker exited during the test (%v); stderr tail:\n%s", what, err, tailOf(stderrPath))
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the %s broker ignored SIGTERM for 30 s; SIGKILL to its process group", what)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	select {
	case plainPort = <-portCh:
	case err := <-exited:
		gone = true
		t.Fatalf("the broker exited (%v) before 'listening on'; stderr tail:\n%s", err, tailOf(stderrPath))
	case <-time.After(startTimeout):
		t.Fatalf("no 'listening on 127.0.0.1:PORT' within %s; stderr tail:\n%s", startTimeout, tailOf(stderrPath))
	}
	plainAddr = fmt.Sprintf("127.0.0.1:%d", plainPort)
	t.Logf("%s broker pid %d: PLAINTEXT %s", what, cmd.Process.Pid, plainAddr)
	return plainAddr, plainPort
}

// saslBroker: a broker with PLAINTEXT (--listen), SASL_PLAINTEXT and SASL_SSL listeners.
type saslBroker struct {
	material                         tlsMaterial // its SASL_SSL key store is material's server.pem
	plain, saslAddr, saslSSLAddr     string
	plainPort, saslPort, saslSSLPort int
}

// startSASLBroker starts the broker (startBrokerWith) with SASL_PLAINTEXT and SASL_SSL listeners
// and SETTINGS besides (sasl.enabled.mechanisms, JAAS lines).
func startSASLBroker(t *testing.T, what string, settings ...string) *saslBroker {
	t.Helper()
	b := &saslBroker{material: makeTLSMaterial(t)}
	addrs, ports := loopbackListeners(t, 2)
	b.saslAddr, b.saslSSLAddr = addrs[0], addrs[1]
	b.saslPort, b.saslSSLPort = ports[0], ports[1]
	b.plain, b.plainPort = startBrokerWith(t, what, append([]string{
		fmt.Sprintf("listeners=SASL_PLAINTEXT://%s,SASL_SSL://%s", b.saslAddr, b.saslSSLAddr),
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + b.material.pem("server"),
	}, settings...))
	t.Logf("%s broker: SASL_PLAINTEXT %s, SASL_SSL %s", what, b.saslAddr, b.saslSSLAddr)
	return b
}

// ---- clients ----------------------------------------------------------------------------------

// franzTLSClient: a franz-go client of the listener at ADDR, over TLS when CFG is not nil.
func franzTLSClient(t *testing.T, addr string, cfg *tls.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.RequestTimeoutOverhead(10 * time.Second),
		kgo.RetryTimeout(30 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
	if cfg != nil {
		base = append(base, kgo.DialTLSConfig(cfg))
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// onlyBrokerAt: Metadata through the client names exactly one broker, at 127.0.0.1:PORT.
func onlyBrokerAt(t *testing.T, cl *kgo.Client, port int) {
	t.Helper()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctxT(t))
	if err != nil {
		t.Fatalf("Metadata: %v", err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Host != "127.0.0.1" || int(md.Brokers[0].Port) != port {
		t.Fatalf("Metadata brokers = %v, want exactly one at 127.0.0.1:%d (the listener the client came in on)", md.Brokers, port)
	}
}

// secureRoundTrip creates a topic (franz-SUITE-LABEL-...), produces secureRecords records and
// reads them back, all over ADDR (TLS when CFG is not nil) with OPTS (a SASL login).
func secureRoundTrip(t *testing.T, addr string, cfg *tls.Config, suite, label string, opts ...kgo.Opt) {
	t.Helper()
	topic := uniqueTopic("franz-" + suite + "-" + label)
	franzCreateTopic(t, kadm.NewClient(franzTLSClient(t, addr, cfg, opts...)), topic, 1)
	prod := franzTLSClient(t, addr, cfg, opts...)
	var recs []*kgo.Record
	for i := 0; i < secureRecords; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s record %d", label, i))})
	}
	if err := prod.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce over %s: %v", label, err)
	}
	consume := kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}})
	cons := franzTLSClient(t, addr, cfg, append([]kgo.Opt{consume}, opts...)...)
	got := franzPoll(t, cons, secureRecords)
	if len(got) != secureRecords {
		t.Fatalf("consumed %d records, want %d", len(got), secureRecords)
	}
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) || string(r.Value) != fmt.Sprintf("%s record %d", label, i) {
			t.Errorf("record %d: offset %d key %q value %q", i, r.Offset, r.Key, r.Value)
		}
	}
}

// refusedPing: a Ping through the client fails by itself within 20 s, which it returns: with the
// Kafka error WANT, or, when WANT is nil, with a connection-level error (not a Kafka error code).
func refusedPing(t *testing.T, cl *kgo.Client, want error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := cl.Ping(ctx)
	if err == nil {
		t.Fatalf("Ping succeeded: the client was let in")
	}
	if ctx.Err() != nil {
		t.Fatalf("Ping did not fail by itself within 20 s (%v)", err)
	}
	var ke *kerr.Error
	if want == nil && errors.As(err, &ke) {
		t.Fatalf("Ping failed with a Kafka error %v, want a TLS/connection failure", err)
	}
	if want != nil && !errors.Is(err, want) {
		t.Fatalf("Ping failed with %v (%T), want %v", err, err, want)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

// served: a listener that must still serve after a refusal, and how a client reaches it.
type served struct {
	name string
	addr string
	port int
	cfg  *tls.Config // nil: no TLS
	opts []kgo.Opt   // a SASL login, for instance
}

// stillServed: each listener answers a Ping, and Metadata through it names its own port.
func stillServed(t *testing.T, listeners ...served) {
	t.Helper()
	for _, l := range listeners {
		cl := franzTLSClient(t, l.addr, l.cfg, l.opts...)
		if err := cl.Ping(ctxT(t)); err != nil {
			t.Fatalf("%s no longer serves after the refusal: %v", l.name, err)
		}
		onlyBrokerAt(t, cl, l.port)
	}
}
