//go:build linux

// franz-go (kgo.SASL with pkg/sasl/plain, kgo.DialTLSConfig for SASL_SSL) over the broker's
// SASL/PLAIN listeners.
//
// Like TestFranzTLS, TestFranzSASL starts its own broker (the one run.sh starts has no SASL
// listeners): $MILLRACE_BIN (compat-tests/reference/kafka-shim.sh for Apache Kafka) or
// <repo>/target/debug/millrace, with PLAINTEXT (--listen), SASL_PLAINTEXT and SASL_SSL listeners
// from Kafka's config names (sasl.enabled.mechanisms=PLAIN,
// listener.name.<listener>.plain.sasl.jaas.config with user_alice and user_bob, a PEM key store
// from compat-tests/python/tls_material.py for SASL_SSL). It checks: Metadata over each SASL
// listener names that listener's port; records produced and consumed as alice over SASL_PLAINTEXT
// and over SASL_SSL; a wrong password and an unknown user fail with SASL_AUTHENTICATION_FAILED and
// the same broker message ("Authentication failed: Invalid username or password", Apache Kafka
// 4.1.1); SCRAM-SHA-256 fails with UNSUPPORTED_SASL_MECHANISM; a client without SASL on the
// SASL_PLAINTEXT port is refused with a connection-level error (the broker closes the connection
// at its first Metadata); after each refusal PLAINTEXT, SASL_PLAINTEXT and SASL_SSL still serve.
package compat

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const (
	saslRecords     = 100
	saslJAAS        = `org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";`
	saslBadCredsMsg = "Authentication failed: Invalid username or password"
)

type saslBroker struct {
	material                         string // directory of tls_material.py's files
	plain, saslAddr, saslSSLAddr     string
	plainPort, saslPort, saslSSLPort int
}

// startSASLBroker starts the broker (its own process group, SIGTERM on cleanup) with the SASL
// listeners; the same process handling as startTLSBroker.
func startSASLBroker(t *testing.T) *saslBroker {
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
	b := &saslBroker{material: filepath.Join(work, "tls")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "python3", filepath.Join("..", "python", "tls_material.py"), b.material).CombinedOutput(); err != nil {
		t.Fatalf("making the TLS material (python/tls_material.py, openssl): %v\n%s", err, out)
	}
	ports := freeLoopbackPorts(t, 2)
	b.saslPort, b.saslSSLPort = ports[0], ports[1]
	b.saslAddr = fmt.Sprintf("127.0.0.1:%d", b.saslPort)
	b.saslSSLAddr = fmt.Sprintf("127.0.0.1:%d", b.saslSSLPort)

	args := []string{"--data-dir", filepath.Join(work, "data"), "--listen", "127.0.0.1:0"}
	for _, kv := range []string{
		fmt.Sprintf("listeners=SASL_PLAINTEXT://%s,SASL_SSL://%s", b.saslAddr, b.saslSSLAddr),
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
		"sasl.enabled.mechanisms=PLAIN",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config=" + saslJAAS,
		"listener.name.sasl_ssl.plain.sasl.jaas.config=" + saslJAAS,
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + filepath.Join(b.material, "server.pem"),
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
				t.Errorf("the SASL broker exited during the test (%v); stderr tail:\n%s", err, tail())
			}
			return
		default:
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the SASL broker ignored SIGTERM for 30 s; SIGKILL to its process group")
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
	t.Logf("SASL broker pid %d: PLAINTEXT %s, SASL_PLAINTEXT %s, SASL_SSL %s", cmd.Process.Pid, b.plain, b.saslAddr, b.saslSSLAddr)
	return b
}

func plainSASL(user, pass string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())
}

// saslRoundTrip creates a topic, produces saslRecords records and reads them back, all over ADDR
// (TLS when CFG is not nil) as alice.
func saslRoundTrip(t *testing.T, addr string, cfg *tls.Config, label string) {
	t.Helper()
	alice := plainSASL("alice", "alice-secret")
	topic := uniqueTopic("franz-sasl-" + label)
	franzCreateTopic(t, kadm.NewClient(franzTLSClient(t, addr, cfg, alice)), topic, 1)
	prod := franzTLSClient(t, addr, cfg, alice)
	var recs []*kgo.Record
	for i := 0; i < saslRecords; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s record %d", label, i))})
	}
	if err := prod.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce over %s: %v", label, err)
	}
	cons := franzTLSClient(t, addr, cfg, alice, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	got := franzPoll(t, cons, saslRecords)
	if len(got) != saslRecords {
		t.Fatalf("consumed %d records, want %d", len(got), saslRecords)
	}
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) || string(r.Value) != fmt.Sprintf("%s record %d", label, i) {
			t.Errorf("record %d: offset %d key %q value %q", i, r.Offset, r.Key, r.Value)
		}
	}
}

// saslRefused: a Ping through the client fails by itself within 20 s with the Kafka error WANT,
// which it returns.
func saslRefused(t *testing.T, cl *kgo.Client, want error) error {
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
	if !errors.Is(err, want) {
		t.Fatalf("Ping failed with %v (%T), want %v", err, err, want)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

func TestFranzSASL(t *testing.T) {
	b := startSASLBroker(t)
	sslCfg := (&tlsBroker{material: b.material}).tlsConfig(t, "ca", "")
	alice := plainSASL("alice", "alice-secret")

	stillServed := func(t *testing.T) {
		t.Helper()
		for _, l := range []struct {
			name string
			addr string
			port int
			cfg  *tls.Config
			opts []kgo.Opt
		}{
			{"PLAINTEXT", b.plain, b.plainPort, nil, nil},
			{"SASL_PLAINTEXT", b.saslAddr, b.saslPort, nil, []kgo.Opt{alice}},
			{"SASL_SSL", b.saslSSLAddr, b.saslSSLPort, sslCfg, []kgo.Opt{alice}},
		} {
			cl := franzTLSClient(t, l.addr, l.cfg, l.opts...)
			if err := cl.Ping(ctxT(t)); err != nil {
				t.Fatalf("%s no longer serves after the refusal: %v", l.name, err)
			}
			onlyBrokerAt(t, cl, l.port)
		}
	}

	t.Run("SASLPlaintextMetadataNamesSASLPlaintextListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslAddr, nil, alice), b.saslPort)
	})
	t.Run("SASLPlaintextProduceConsume", func(t *testing.T) {
		saslRoundTrip(t, b.saslAddr, nil, "plaintext")
	})
	t.Run("SASLSSLMetadataNamesSASLSSLListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslSSLAddr, sslCfg, alice), b.saslSSLPort)
	})
	t.Run("SASLSSLProduceConsume", func(t *testing.T) {
		saslRoundTrip(t, b.saslSSLAddr, sslCfg, "ssl")
	})

	badCreds := func(t *testing.T, user, pass string) error {
		t.Helper()
		err := saslRefused(t, franzTLSClient(t, b.saslAddr, nil, plainSASL(user, pass)), kerr.SaslAuthenticationFailed)
		if !strings.HasSuffix(err.Error(), ": "+saslBadCredsMsg) {
			t.Errorf("error %q does not end with the broker's %q", err, saslBadCredsMsg)
		}
		return err
	}
	t.Run("WrongPasswordRefused", func(t *testing.T) {
		badCreds(t, "alice", "not-alice-secret")
		stillServed(t)
	})
	t.Run("UnknownUserRefusedLikeWrongPassword", func(t *testing.T) {
		unknown := badCreds(t, "mallory", "alice-secret")
		wrong := badCreds(t, "alice", "not-alice-secret")
		if unknown.Error() != wrong.Error() {
			t.Errorf("unknown user: %q; wrong password: %q; want the same error", unknown, wrong)
		}
		stillServed(t)
	})
	t.Run("ScramSHA256RefusedAsUnsupported", func(t *testing.T) {
		scramOpt := kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism())
		saslRefused(t, franzTLSClient(t, b.saslAddr, nil, scramOpt), kerr.UnsupportedSaslMechanism)
		stillServed(t)
	})
	t.Run("PlaintextClientOnSASLPortRefused", func(t *testing.T) {
		refusedPing(t, franzTLSClient(t, b.saslAddr, nil))
		stillServed(t)
	})
}
