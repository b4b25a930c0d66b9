#!/usr/bin/env bash
# The fault harness (compat-tests/cluster) with every Kafka listener SASL_SSL, the brokers' own
# links included (issue 36: a cluster with no PLAINTEXT Kafka listener passes the fault harness):
# cluster/run.sh --secure, ending with "N passed, M failed". About 5.5 minutes. Extra args go to
# the harness (--seed, --system kafka for the reference run, ...); see cluster/secure.py.
set -euo pipefail
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../cluster/run.sh" --secure "$@"
