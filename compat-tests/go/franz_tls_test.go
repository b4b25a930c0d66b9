//go:build linux

// franz-go (kgo.DialTLSConfig, crypto/tls) over the broker's TLS listeners.
//
// Unlike the other tests, TestFranzTLS starts its own broker (the one run.sh starts has no TLS
// listeners): $MILLRACE_BIN (compat-tests/reference/kafka-shim.sh for Apache Kafka) or
// <repo>/target/debug/millrace, which run.sh builds, with PLAINTEXT (--listen), SSL and MTLS
// (ssl.client.auth=required) listeners from Kafka's config names and throwaway certificates made
// by compat-tests/python/tls_material.py (openssl CLI). It checks: Metadata over SSL and MTLS
// names that listener's port; records produced and consumed over SSL, and over MTLS with the
// trusted client certificate; a client that does not trust the server's CA fails the handshake
// (x509 unknown authority); MTLS clients with an untrusted certificate or none are refused with a
// connection-level error (Apache Kafka 4.1.1: "remote error: tls: certificate required" / "bad
// certificate" on the first read after Go's side of the TLS 1.3 handshake), after which PLAINTEXT,
// SSL and MTLS with the trusted certificate still serve.
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

const tlsRecords = 100

var listeningRE = regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+)`)

type tlsBroker struct {
	material                     string // directory of tls_material.py's files
	plain, sslAddr, mtlsAddr     string
	sslPort, mtlsPort, plainPort int
}

func (b *tlsBroker) pem(name string) string { return filepath.Join(b.material, name+".pem") }

// tlsConfig trusts CA (a tls_material.py name) and, when CERT is not empty, presents that client
// certificate (CERT-cert.pem, CERT-key.pem).
func (b *tlsBroker) tlsConfig(t *testing.T, ca, cert string) *tls.Config {
	t.Helper()
	pemBytes, err := os.ReadFile(b.pem(ca))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("no certificate in %s", b.pem(ca))
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(b.pem(cert+"-cert"), b.pem(cert+"-key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
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

func startTLSBroker(t *testing.T) *tlsBroker {
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
	startTimeout := 10 * time.Second
	if s := os.Getenv("MILLRACE_START_TIMEOUT"); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			startTimeout = time.Duration(f * float64(time.Second))
		}
	}

	work := t.TempDir()
	b := &tlsBroker{material: filepath.Join(work, "tls")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "python3", filepath.Join("..", "python", "tls_material.py"), b.material).CombinedOutput(); err != nil {
		t.Fatalf("making the TLS material (python/tls_material.py, openssl): %v\n%s", err, out)
	}
	ports := freeLoopbackPorts(t, 2)
	b.sslPort, b.mtlsPort = ports[0], ports[1]
	b.sslAddr = fmt.Sprintf("127.0.0.1:%d", b.sslPort)
	b.mtlsAddr = fmt.Sprintf("127.0.0.1:%d", b.mtlsPort)

	args := []string{"--data-dir", filepath.Join(work, "data"), "--listen", "127.0.0.1:0"}
	for _, kv := range []string{
		fmt.Sprintf("listeners=SSL://%s,MTLS://%s", b.sslAddr, b.mtlsAddr),
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + b.pem("server"),
		"ssl.truststore.type=PEM",
		"ssl.truststore.location=" + b.pem("ca"),
		"listener.name.mtls.ssl.client.auth=required",
	} {
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
	tail := func() string {
		data, _ := os.ReadFile(stderrPath)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		return strings.Join(lines, "\n")
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
	stopped := false
	t.Cleanup(func() {
		defer stderr.Close()
		select {
		case err := <-exited:
			if !stopped {
				t.Errorf("the TLS broker exited during the test (%v); stderr tail:\n%s", err, tail())
			}
			return
		default:
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the TLS broker ignored SIGTERM for 30 s; SIGKILL to its process group")
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	select {
	case p := <-portCh:
		b.plainPort = p
		b.plain = fmt.Sprintf("127.0.0.1:%d", p)
	case err := <-exited:
		stopped = true
		t.Fatalf("the broker exited (%v) before 'listening on'; stderr tail:\n%s", err, tail())
	case <-time.After(startTimeout):
		t.Fatalf("no 'listening on 127.0.0.1:PORT' within %s; stderr tail:\n%s", startTimeout, tail())
	}
	t.Logf("TLS broker pid %d: PLAINTEXT %s, SSL %s, MTLS %s", cmd.Process.Pid, b.plain, b.sslAddr, b.mtlsAddr)
	return b
}

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

// tlsRoundTrip creates a topic, produces tlsRecords records and reads them back, all over ADDR.
func tlsRoundTrip(t *testing.T, addr string, cfg *tls.Config, label string) {
	t.Helper()
	topic := uniqueTopic("franz-tls-" + label)
	franzCreateTopic(t, kadm.NewClient(franzTLSClient(t, addr, cfg)), topic, 1)
	prod := franzTLSClient(t, addr, cfg)
	var recs []*kgo.Record
	for i := 0; i < tlsRecords; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s record %d", label, i))})
	}
	if err := prod.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce over %s: %v", label, err)
	}
	cons := franzTLSClient(t, addr, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	got := franzPoll(t, cons, tlsRecords)
	if len(got) != tlsRecords {
		t.Fatalf("consumed %d records, want %d", len(got), tlsRecords)
	}
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) || string(r.Value) != fmt.Sprintf("%s record %d", label, i) {
			t.Errorf("record %d: offset %d key %q value %q", i, r.Offset, r.Key, r.Value)
		}
	}
}

// refusedPing: a Ping through the client fails within 20 s with a connection-level error (not a
// Kafka error code), which it returns.
func refusedPing(t *testing.T, cl *kgo.Client) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := cl.Ping(ctx)
	if err == nil {
		t.Fatalf("Ping succeeded: the connection was accepted")
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		t.Fatalf("Ping failed with a Kafka error %v, want a TLS/connection failure", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Ping did not fail by itself within 20 s (%v)", err)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

func TestFranzTLS(t *testing.T) {
	b := startTLSBroker(t)
	sslCfg := b.tlsConfig(t, "ca", "")
	mtlsCfg := b.tlsConfig(t, "ca", "client")

	stillServed := func(t *testing.T) {
		t.Helper()
		for _, l := range []struct {
			name string
			addr string
			port int
			cfg  *tls.Config
		}{{"PLAINTEXT", b.plain, b.plainPort, nil}, {"SSL", b.sslAddr, b.sslPort, sslCfg}, {"MTLS", b.mtlsAddr, b.mtlsPort, mtlsCfg}} {
			cl := franzTLSClient(t, l.addr, l.cfg)
			if err := cl.Ping(ctxT(t)); err != nil {
				t.Fatalf("%s no longer serves after the refusal: %v", l.name, err)
			}
			onlyBrokerAt(t, cl, l.port)
		}
	}

	t.Run("SSLMetadataNamesSSLListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.sslAddr, sslCfg), b.sslPort)
	})
	t.Run("SSLProduceConsume", func(t *testing.T) {
		tlsRoundTrip(t, b.sslAddr, sslCfg, "ssl")
	})
	t.Run("MTLSMetadataNamesMTLSListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.mtlsAddr, mtlsCfg), b.mtlsPort)
	})
	t.Run("MTLSProduceConsume", func(t *testing.T) {
		tlsRoundTrip(t, b.mtlsAddr, mtlsCfg, "mtls")
	})
	t.Run("SSLUntrustedServerCARefused", func(t *testing.T) {
		err := refusedPing(t, franzTLSClient(t, b.sslAddr, b.tlsConfig(t, "other-ca", "")))
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("error %v (%T) is not x509.UnknownAuthorityError", err, err)
		}
		stillServed(t)
	})
	t.Run("MTLSUntrustedClientCertRefused", func(t *testing.T) {
		refusedPing(t, franzTLSClient(t, b.mtlsAddr, b.tlsConfig(t, "ca", "untrusted")))
		stillServed(t)
	})
	t.Run("MTLSNoClientCertRefused", func(t *testing.T) {
		refusedPing(t, franzTLSClient(t, b.mtlsAddr, sslCfg))
		stillServed(t)
	})
}
