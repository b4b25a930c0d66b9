"""Ours, copied to the sdist's test/conftest.py by run.sh: one client setting for every test.

kafka-python 3.0.12 loses a metadata update asked for while an older metadata request is in
flight (``ClusterMetadata.set_topics`` says so in a TODO): a consumer that subscribes while its
bootstrap request (no topics) is still out clears the refresh on that answer and learns its topic
only when ``metadata_max_age_ms`` (5 minutes) runs out. Under load that made
``test_kafka_consumer`` read nothing in its 30 s, once in CI (2026-12-07) and once in the first
Millrace run; ``test_idempotent_producer_max_in_flight`` the same way on Kafka 4.1.1. With the
age at ``METADATA_MAX_AGE_MS`` a lost refresh costs seconds; the tests' assertions are unchanged.
"""

from test.integration.fixtures import KafkaFixture

METADATA_MAX_AGE_MS = 5000

_enrich = KafkaFixture._enrich_client_params


def _enrich_client_params(self, params, **defaults):
    params = _enrich(self, params, **defaults)
    params.setdefault("metadata_max_age_ms", METADATA_MAX_AGE_MS)
    return params


KafkaFixture._enrich_client_params = _enrich_client_params
