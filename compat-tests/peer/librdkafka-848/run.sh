#!/usr/bin/env bash
# librdkafka's group and commit tests again, with group.protocol=consumer on every test consumer
# (KIP-848; librdkafka's test framework reads TEST_CONSUMER_GROUP_PROTOCOL): the Done-when of issue
# 19 that librdkafka with group.protocol=consumer consumes every record once per committed position.
# Same build, broker and result line as ../librdkafka/run.sh; the test numbers are those of its
# ALLOWLIST that run consumer groups, less 0084 and 0132, which skip themselves in this mode. See
# ../librdkafka/FINDINGS.md.
#
#   compat-tests/peer/librdkafka-848/run.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GROUP_TESTS=(0018 0019 0020 0026 0030 0033 0040 0042 0045 0050 0056 0083 0093 0099 0113 0118 0122 0130 0140)
TEST_CONSUMER_GROUP_PROTOCOL=consumer exec bash "$HERE/../librdkafka/run.sh" "${GROUP_TESTS[@]}"
