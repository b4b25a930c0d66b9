//go:build linux

// franz-go (kgo.SASL with pkg/sasl/plain, kgo.DialTLSConfig for SASL_SSL) over the broker's
// SASL/PLAIN listeners.
//
// Like TestFranzTLS, TestFranzSASL starts its own broker (the one run.sh starts has no SASL
// listeners; startSASLBroker in secure_broker_test.go) with PLAINTEXT (--listen), SASL_PLAINTEXT
// and SASL_SSL listeners from Kafka's config names (sasl.enabled.mechanisms=PLAIN,
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
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const (
	saslJAAS        = `org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";`
	saslBadCredsMsg = "Authentication failed: Invalid username or password"
)

func plainSASL(user, pass string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())
}

func TestFranzSASL(t *testing.T) {
	b := startSASLBroker(t, "SASL",
		"sasl.enabled.mechanisms=PLAIN",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config="+saslJAAS,
		"listener.name.sasl_ssl.plain.sasl.jaas.config="+saslJAAS,
	)
	sslCfg := b.material.tlsConfig(t, "ca", "")
	alice := plainSASL("alice", "alice-secret")

	listeners := []served{
		{"PLAINTEXT", b.plain, b.plainPort, nil, nil},
		{"SASL_PLAINTEXT", b.saslAddr, b.saslPort, nil, []kgo.Opt{alice}},
		{"SASL_SSL", b.saslSSLAddr, b.saslSSLPort, sslCfg, []kgo.Opt{alice}},
	}

	t.Run("SASLPlaintextMetadataNamesSASLPlaintextListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslAddr, nil, alice), b.saslPort)
	})
	t.Run("SASLPlaintextProduceConsume", func(t *testing.T) {
		secureRoundTrip(t, b.saslAddr, nil, "sasl", "plaintext", alice)
	})
	t.Run("SASLSSLMetadataNamesSASLSSLListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslSSLAddr, sslCfg, alice), b.saslSSLPort)
	})
	t.Run("SASLSSLProduceConsume", func(t *testing.T) {
		secureRoundTrip(t, b.saslSSLAddr, sslCfg, "sasl", "ssl", alice)
	})

	badCreds := func(t *testing.T, user, pass string) error {
		t.Helper()
		err := refusedPing(t, franzTLSClient(t, b.saslAddr, nil, plainSASL(user, pass)), kerr.SaslAuthenticationFailed)
		if !strings.HasSuffix(err.Error(), ": "+saslBadCredsMsg) {
			t.Errorf("error %q does not end with the broker's %q", err, saslBadCredsMsg)
		}
		return err
	}
	t.Run("WrongPasswordRefused", func(t *testing.T) {
		badCreds(t, "alice", "not-alice-secret")
		stillServed(t, listeners...)
	})
	t.Run("UnknownUserRefusedLikeWrongPassword", func(t *testing.T) {
		unknown := badCreds(t, "mallory", "alice-secret")
		wrong := badCreds(t, "alice", "not-alice-secret")
		if unknown.Error() != wrong.Error() {
			t.Errorf("unknown user: %q; wrong password: %q; want the same error", unknown, wrong)
		}
		stillServed(t, listeners...)
	})
	t.Run("ScramSHA256RefusedAsUnsupported", func(t *testing.T) {
		scramOpt := kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism())
		refusedPing(t, franzTLSClient(t, b.saslAddr, nil, scramOpt), kerr.UnsupportedSaslMechanism)
		stillServed(t, listeners...)
	})
	t.Run("PlaintextClientOnSASLPortRefused", func(t *testing.T) {
		refusedPing(t, franzTLSClient(t, b.saslAddr, nil), nil)
		stillServed(t, listeners...)
	})
}
