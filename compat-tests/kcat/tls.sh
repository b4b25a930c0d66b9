#!/usr/bin/env bash
# Goal: kcat (librdkafka 2.0.2 + OpenSSL) over the broker's TLS listeners. One broker with
# PLAINTEXT (--listen), SSL and MTLS (ssl.client.auth=required) listeners from Kafka's config
# names (listeners, listener.security.protocol.map, ssl.keystore.* / ssl.truststore.* as PEM
# files, listener.name.mtls.ssl.client.auth) and throwaway certificates from
# python/tls_material.py (openssl CLI). Checks: kcat -L over SSL and over MTLS names that
# listener's port; 1,000 lines produced and read back byte-identical over SSL, and over MTLS with
# the trusted client certificate (CN=alice); an MTLS client with a certificate from an unrelated CA,
# and one with no certificate, get no metadata (librdkafka: "Broker transport failure") within
# their 5 s; PLAINTEXT, SSL and MTLS still serve afterwards.
#
#   compat-tests/kcat/tls.sh      (run by kcat/run.sh)
#
# Env: MILLRACE_BIN (compat-tests/reference/kafka-shim.sh for Apache Kafka), MILLRACE_START_TIMEOUT,
#      KCAT (default kcat), KCAT_TIMEOUT (seconds per kcat call, default 60),
#      KEEP_WORK=1 (keep the work dir; kept anyway on failure).
# Prints "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=../lib/millrace.sh
source "$ROOT/compat-tests/lib/millrace.sh"
# shellcheck source=secure-lib.sh
source "$HERE/secure-lib.sh"

secure_init tls
secure_material
secure_start SSL MTLS \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL" \
  --set ssl.keystore.type=PEM --set "ssl.keystore.location=$M/server.pem" \
  --set ssl.truststore.type=PEM --set "ssl.truststore.location=$M/ca.pem" \
  --set listener.name.mtls.ssl.client.auth=required
SSL_PORT="$PORT1" MTLS_PORT="$PORT2"

SSL_OPTS=(-X security.protocol=ssl -X "ssl.ca.location=$M/ca.pem" -X ssl.endpoint.identification.algorithm=https)
MTLS_OPTS=("${SSL_OPTS[@]}" -X "ssl.certificate.location=$M/client-cert.pem" -X "ssl.key.location=$M/client-key.pem")
UNTRUSTED_OPTS=("${SSL_OPTS[@]}" -X "ssl.certificate.location=$M/untrusted-cert.pem" -X "ssl.key.location=$M/untrusted-key.pem")

metadata_check ssl-metadata SSL "" "$SSL_PORT" "${SSL_OPTS[@]}"
roundtrip ssl "127.0.0.1:$SSL_PORT" "${SSL_OPTS[@]}"

metadata_check mtls-metadata MTLS "" "$MTLS_PORT" "${MTLS_OPTS[@]}"
roundtrip mtls "127.0.0.1:$MTLS_PORT" "${MTLS_OPTS[@]}"

ACCEPTED="kcat -L got metadata: the connection was accepted"
refused mtls-untrusted-cert-refused kc "127.0.0.1:$MTLS_PORT" "$ACCEPTED" "" "${UNTRUSTED_OPTS[@]}"
refused mtls-no-cert-refused kc "127.0.0.1:$MTLS_PORT" "$ACCEPTED" "" "${SSL_OPTS[@]}"

still_served still-served-after-refusals "PLAINTEXT, SSL, MTLS" "SSL $SSL_PORT SSL_OPTS" "MTLS $MTLS_PORT MTLS_OPTS"

secure_finish
