//go:build linux

// franz-go (kgo.SASL with pkg/sasl/scram, kgo.DialTLSConfig for SASL_SSL; kadm for the users) over
// the broker's SASL/SCRAM listeners.
//
// Like TestFranzSASL, TestFranzSCRAM starts its own broker (startSASLBroker in
// secure_broker_test.go; compat-tests/reference/kafka-shim.sh, for Apache Kafka, adds the SCRAM
// JAAS lines Kafka needs) with PLAINTEXT (--listen), SASL_PLAINTEXT and SASL_SSL listeners from
// Kafka's config names (sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512, a PEM
// key store from compat-tests/python/tls_material.py for SASL_SSL). The users are made over
// PLAINTEXT with kadm's AlterUserSCRAMs (AlterUserScramCredentials, salted client-side): alice
// SCRAM-SHA-256 and bob SCRAM-SHA-512, 8192 iterations, in one request. It checks: kadm's
// DescribeUserSCRAMs lists both with their mechanism and iterations (RESOURCE_NOT_FOUND for a user
// without credentials); records produced and consumed as alice (SCRAM-SHA-256) over SASL_PLAINTEXT
// and as bob (SCRAM-SHA-512) over SASL_SSL, Metadata naming the listener's port, and each mechanism
// on the other listener; a wrong password, an unknown user and alice with SCRAM-SHA-512 (she has no
// such credential) fail with SASL_AUTHENTICATION_FAILED and "Authentication failed during
// authentication due to invalid credentials with SASL mechanism SCRAM-SHA-<n>" (Apache Kafka
// 4.1.1's message; the wrong password and the unknown user word for word the same), and alice and
// bob still log in afterwards; iterations=100 (sent as a ready salted password, so that kadm's own
// 4096..16384 check does not stop it) gets UNACCEPTABLE_CREDENTIAL and two upsertions for one user
// in one request DUPLICATE_RESOURCE, neither creating anything; a deleted credential is refused
// while the other user still logs in. Kafka applies credential changes through its metadata log
// after the admin call returns, so logins after a change are waited for (bounded).
package compat

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const (
	scramIterations = 8192
	scramSettle     = 30 * time.Second // for a credential change to take effect on the broker
)

func scramBadCredsMsg(mechanism string) string {
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism
}

func scramSASL(mechanism kadm.ScramMechanism, user, pass string) kgo.Opt {
	auth := scram.Auth{User: user, Pass: pass}
	if mechanism == kadm.ScramSha512 {
		return kgo.SASL(auth.AsSha512Mechanism())
	}
	return kgo.SASL(auth.AsSha256Mechanism())
}

// scramLogsIn: one bounded login through a fresh client (Ping within 5 s); nil when it got in.
func scramLogsIn(t *testing.T, addr string, cfg *tls.Config, login kgo.Opt) error {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(addr), login, kgo.RetryTimeout(3 * time.Second)}
	if cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// scramCreds: a described user's credentials as MECHANISM=iterations=N strings, sorted by
// mechanism number (SHA-256 first).
func scramCreds(d kadm.DescribedUserSCRAM) []string {
	var out []string
	for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
		for _, c := range d.CredInfos {
			if c.Mechanism == m {
				out = append(out, c.String())
			}
		}
	}
	return out
}

func TestFranzSCRAM(t *testing.T) {
	b := startSASLBroker(t, "SCRAM", "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512")
	sslCfg := b.material.tlsConfig(t, "ca", "")
	adm := kadm.NewClient(franzTLSClient(t, b.plain, nil))
	alice := scramSASL(kadm.ScramSha256, "alice", "alice-secret")
	bob := scramSASL(kadm.ScramSha512, "bob", "bob-secret")

	altered, err := adm.AlterUserSCRAMs(ctxT(t), nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: scramIterations, Password: "alice-secret"},
		{User: "bob", Mechanism: kadm.ScramSha512, Iterations: scramIterations, Password: "bob-secret"},
	})
	if err != nil {
		t.Fatalf("AlterUserSCRAMs (alice SCRAM-SHA-256, bob SCRAM-SHA-512): %v", err)
	}
	for _, u := range []string{"alice", "bob"} {
		if r, ok := altered[u]; !ok || r.Err != nil {
			t.Fatalf("AlterUserSCRAMs result for %s: %+v (present %v); all: %+v", u, r, ok, altered)
		}
	}
	waitFor(t, "alice to log in over SASL_PLAINTEXT", scramSettle, func() error { return scramLogsIn(t, b.saslAddr, nil, alice) })
	waitFor(t, "bob to log in over SASL_SSL", scramSettle, func() error { return scramLogsIn(t, b.saslSSLAddr, sslCfg, bob) })

	stillServed := func(t *testing.T) {
		t.Helper()
		if err := scramLogsIn(t, b.saslAddr, nil, alice); err != nil {
			t.Fatalf("alice no longer logs in over SASL_PLAINTEXT after the refusal: %v", err)
		}
		if err := scramLogsIn(t, b.saslSSLAddr, sslCfg, bob); err != nil {
			t.Fatalf("bob no longer logs in over SASL_SSL after the refusal: %v", err)
		}
	}
	// described: kadm.DescribeUserSCRAMs for USERS (all when none)
	described := func(t *testing.T, users ...string) kadm.DescribedUserSCRAMs {
		t.Helper()
		d, err := adm.DescribeUserSCRAMs(ctxT(t), users...)
		if err != nil {
			t.Fatalf("DescribeUserSCRAMs(%v): %v", users, err)
		}
		return d
	}
	// notCreated: describing USER gives RESOURCE_NOT_FOUND, and describing all does not list USER
	notCreated := func(t *testing.T, user string) {
		t.Helper()
		if d := described(t, user)[user]; !errors.Is(d.Err, kerr.ResourceNotFound) {
			t.Errorf("describing %s: %+v, want RESOURCE_NOT_FOUND (no credential)", user, d)
		}
		if d, ok := described(t)[user]; ok {
			t.Errorf("describing all users lists %s: %+v", user, d)
		}
	}

	t.Run("DescribeUserSCRAMsListsBoth", func(t *testing.T) {
		all := described(t)
		for user, want := range map[string]string{"alice": "SCRAM-SHA-256=iterations=8192", "bob": "SCRAM-SHA-512=iterations=8192"} {
			d, ok := all[user]
			if !ok || d.Err != nil || strings.Join(scramCreds(d), ",") != want {
				t.Errorf("%s: %+v (listed %v), want %s", user, d, ok, want)
			}
		}
		some := described(t, "alice", "nobody")
		if d := some["alice"]; d.Err != nil || strings.Join(scramCreds(d), ",") != "SCRAM-SHA-256=iterations=8192" {
			t.Errorf("alice: %+v", d)
		}
		if d := some["nobody"]; !errors.Is(d.Err, kerr.ResourceNotFound) {
			t.Errorf("nobody: %+v, want RESOURCE_NOT_FOUND", d)
		}
	})
	t.Run("SHA256OverSASLPlaintext", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslAddr, nil, alice), b.saslPort)
		secureRoundTrip(t, b.saslAddr, nil, "scram", "sha256-plaintext", alice)
	})
	t.Run("SHA512OverSASLSSL", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslSSLAddr, sslCfg, bob), b.saslSSLPort)
		secureRoundTrip(t, b.saslSSLAddr, sslCfg, "scram", "sha512-ssl", bob)
	})
	t.Run("EachMechanismOnTheOtherListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.saslSSLAddr, sslCfg, alice), b.saslSSLPort)
		onlyBrokerAt(t, franzTLSClient(t, b.saslAddr, nil, bob), b.saslPort)
	})

	badCreds := func(t *testing.T, login kgo.Opt, mechanism string) error {
		t.Helper()
		err := refusedPing(t, franzTLSClient(t, b.saslAddr, nil, login), kerr.SaslAuthenticationFailed)
		if want := ": " + scramBadCredsMsg(mechanism); !strings.HasSuffix(err.Error(), want) {
			t.Errorf("error %q does not end with the broker's %q", err, want)
		}
		return err
	}
	t.Run("WrongPasswordRefused", func(t *testing.T) {
		badCreds(t, scramSASL(kadm.ScramSha256, "alice", "not-alice-secret"), "SCRAM-SHA-256")
		stillServed(t)
	})
	t.Run("UnknownUserRefusedLikeWrongPassword", func(t *testing.T) {
		unknown := badCreds(t, scramSASL(kadm.ScramSha256, "mallory", "alice-secret"), "SCRAM-SHA-256")
		wrong := badCreds(t, scramSASL(kadm.ScramSha256, "alice", "not-alice-secret"), "SCRAM-SHA-256")
		if unknown.Error() != wrong.Error() {
			t.Errorf("unknown user: %q; wrong password: %q; want the same error", unknown, wrong)
		}
		stillServed(t)
	})
	t.Run("MechanismWithoutCredentialRefused", func(t *testing.T) {
		badCreds(t, scramSASL(kadm.ScramSha512, "alice", "alice-secret"), "SCRAM-SHA-512")
		stillServed(t)
	})

	t.Run("TooFewIterationsRefused", func(t *testing.T) {
		salt, salted := make([]byte, 24), make([]byte, 32)
		_, _ = rand.Read(salt)
		_, _ = rand.Read(salted)
		res, err := adm.AlterUserSCRAMs(ctxT(t), nil, []kadm.UpsertSCRAM{
			{User: "erin", Mechanism: kadm.ScramSha256, Iterations: 100, Salt: salt, SaltedPassword: salted},
		})
		if err != nil {
			t.Fatalf("AlterUserSCRAMs: %v", err)
		}
		if r := res["erin"]; !errors.Is(r.Err, kerr.UnacceptableCredential) || !strings.HasPrefix(r.ErrMessage, "Too few iterations") {
			t.Errorf("iterations=100: %+v, want UNACCEPTABLE_CREDENTIAL \"Too few iterations...\"", r)
		}
		notCreated(t, "erin")
	})
	t.Run("TwoUpsertionsForOneUserRefused", func(t *testing.T) {
		res, err := adm.AlterUserSCRAMs(ctxT(t), nil, []kadm.UpsertSCRAM{
			{User: "dora", Mechanism: kadm.ScramSha256, Iterations: scramIterations, Password: "dora-secret"},
			{User: "dora", Mechanism: kadm.ScramSha512, Iterations: scramIterations, Password: "dora-secret"},
		})
		if err != nil {
			t.Fatalf("AlterUserSCRAMs: %v", err)
		}
		if r := res["dora"]; !errors.Is(r.Err, kerr.DuplicateResource) {
			t.Errorf("two upsertions for dora: %+v, want DUPLICATE_RESOURCE", r)
		}
		notCreated(t, "dora")
	})

	t.Run("DeletedCredentialRefused", func(t *testing.T) {
		res, err := adm.AlterUserSCRAMs(ctxT(t), []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha256}}, nil)
		if err != nil {
			t.Fatalf("AlterUserSCRAMs (delete alice SCRAM-SHA-256): %v", err)
		}
		if r, ok := res["alice"]; !ok || r.Err != nil {
			t.Fatalf("deleting alice's SCRAM-SHA-256: %+v (present %v)", r, ok)
		}
		notCreated(t, "alice")
		waitFor(t, "alice to be refused after her credential's deletion", scramSettle, func() error {
			if err := scramLogsIn(t, b.saslAddr, nil, alice); err == nil {
				return errors.New("alice still logs in")
			}
			return nil
		})
		badCreds(t, alice, "SCRAM-SHA-256")
		if err := scramLogsIn(t, b.saslSSLAddr, sslCfg, bob); err != nil {
			t.Fatalf("bob no longer logs in after alice's deletion: %v", err)
		}
	})
}
