//go:build linux

// franz-go (kgo.DialTLSConfig, crypto/tls) over the broker's TLS listeners.
//
// Unlike the other tests, TestFranzTLS starts its own broker (the one run.sh starts has no TLS
// listeners; startBrokerWith in secure_broker_test.go) with PLAINTEXT (--listen), SSL and MTLS
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
	"crypto/x509"
	"errors"
	"fmt"
	"testing"
)

type tlsBroker struct {
	material                     tlsMaterial
	plain, sslAddr, mtlsAddr     string
	sslPort, mtlsPort, plainPort int
}

func startTLSBroker(t *testing.T) *tlsBroker {
	t.Helper()
	b := &tlsBroker{material: makeTLSMaterial(t)}
	addrs, ports := loopbackListeners(t, 2)
	b.sslAddr, b.mtlsAddr = addrs[0], addrs[1]
	b.sslPort, b.mtlsPort = ports[0], ports[1]
	b.plain, b.plainPort = startBrokerWith(t, "TLS", []string{
		fmt.Sprintf("listeners=SSL://%s,MTLS://%s", b.sslAddr, b.mtlsAddr),
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + b.material.pem("server"),
		"ssl.truststore.type=PEM",
		"ssl.truststore.location=" + b.material.pem("ca"),
		"listener.name.mtls.ssl.client.auth=required",
	})
	t.Logf("TLS broker: SSL %s, MTLS %s", b.sslAddr, b.mtlsAddr)
	return b
}

func TestFranzTLS(t *testing.T) {
	b := startTLSBroker(t)
	sslCfg := b.material.tlsConfig(t, "ca", "")
	mtlsCfg := b.material.tlsConfig(t, "ca", "client")

	listeners := []served{
		{"PLAINTEXT", b.plain, b.plainPort, nil, nil},
		{"SSL", b.sslAddr, b.sslPort, sslCfg, nil},
		{"MTLS", b.mtlsAddr, b.mtlsPort, mtlsCfg, nil},
	}

	t.Run("SSLMetadataNamesSSLListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.sslAddr, sslCfg), b.sslPort)
	})
	t.Run("SSLProduceConsume", func(t *testing.T) {
		secureRoundTrip(t, b.sslAddr, sslCfg, "tls", "ssl")
	})
	t.Run("MTLSMetadataNamesMTLSListener", func(t *testing.T) {
		onlyBrokerAt(t, franzTLSClient(t, b.mtlsAddr, mtlsCfg), b.mtlsPort)
	})
	t.Run("MTLSProduceConsume", func(t *testing.T) {
		secureRoundTrip(t, b.mtlsAddr, mtlsCfg, "tls", "mtls")
	})
	t.Run("SSLUntrustedServerCARefused", func(t *testing.T) {
		err := refusedPing(t, franzTLSClient(t, b.sslAddr, b.material.tlsConfig(t, "other-ca", "")), nil)
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("error %v (%T) is not x509.UnknownAuthorityError", err, err)
		}
		stillServed(t, listeners...)
	})
	t.Run("MTLSUntrustedClientCertRefused", func(t *testing.T) {
		refusedPing(t, franzTLSClient(t, b.mtlsAddr, b.material.tlsConfig(t, "ca", "untrusted")), nil)
		stillServed(t, listeners...)
	})
	t.Run("MTLSNoClientCertRefused", func(t *testing.T) {
		refusedPing(t, franzTLSClient(t, b.mtlsAddr, sslCfg), nil)
		stillServed(t, listeners...)
	})
}
