#!/usr/bin/env bash
# Goal: kcat (librdkafka 2.0.2) over the broker's SASL/PLAIN listeners. One broker with PLAINTEXT
# (--listen), SASL_PLAINTEXT and SASL_SSL listeners from Kafka's config names (listeners,
# listener.security.protocol.map, sasl.enabled.mechanisms=PLAIN,
# listener.name.<listener>.plain.sasl.jaas.config with user_alice/user_bob, ssl.keystore.* as a
# PEM file from python/tls_material.py for SASL_SSL). Checks: kcat -L over SASL_PLAINTEXT and
# over SASL_SSL (as alice) names that listener's port; 1,000 lines produced and read back
# byte-identical over each; a wrong password gets no metadata within its 5 s, with the broker's
# "SASL authentication error: Authentication failed: Invalid username or password" in librdkafka's
# log and "Broker transport failure" from kcat (what Apache Kafka 4.1.1 gives); PLAINTEXT,
# SASL_PLAINTEXT and SASL_SSL still serve afterwards. No re-authentication here
# (connections.max.reauth.ms stays 0): librdkafka 2.0.2 predates KIP-368 support (2.2.0).
#
#   compat-tests/kcat/sasl.sh      (run by kcat/run.sh)
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

JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";'

secure_init sasl
secure_material
secure_start_sasl \
  --set sasl.enabled.mechanisms=PLAIN \
  --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=$JAAS" \
  --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS"

ALICE=(-X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password=alice-secret)
SASL_OPTS=(-X security.protocol=sasl_plaintext "${ALICE[@]}")
SASL_SSL_OPTS=(-X security.protocol=sasl_ssl "${ALICE[@]}" -X "ssl.ca.location=$M/ca.pem" -X ssl.endpoint.identification.algorithm=https)
WRONG_OPTS=(-X security.protocol=sasl_plaintext -X sasl.mechanisms=PLAIN -X sasl.username=alice -X sasl.password=not-alice-secret)

metadata_check sasl-plaintext-metadata SASL_PLAINTEXT "as alice" "$SASL_PORT" "${SASL_OPTS[@]}"
roundtrip sasl-plaintext "127.0.0.1:$SASL_PORT" "${SASL_OPTS[@]}"

metadata_check sasl-ssl-metadata SASL_SSL "as alice" "$SASL_SSL_PORT" "${SASL_SSL_OPTS[@]}"
roundtrip sasl-ssl "127.0.0.1:$SASL_SSL_PORT" "${SASL_SSL_OPTS[@]}"

# A wrong password: no metadata, and the broker's authentication error in librdkafka's log.
refused wrong-password-refused kc "127.0.0.1:$SASL_PORT" "kcat -L got metadata with a wrong password" \
  "SASL authentication error: Authentication failed: Invalid username or password" "${WRONG_OPTS[@]}"

still_served still-served-after-refusal "PLAINTEXT, SASL_PLAINTEXT, SASL_SSL" \
  "SASL_PLAINTEXT $SASL_PORT SASL_OPTS" "SASL_SSL $SASL_SSL_PORT SASL_SSL_OPTS"

secure_finish
