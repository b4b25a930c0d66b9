"""Batches written by one client library, read by the other, per codec.

The broker must hand back the producer's batches as stored (only the base
offset rewritten), whatever the codec and framing each library uses
(e.g. kafka-python's xerial-framed snappy vs librdkafka's).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

import test_confluent_kafka as ck
from compat_data import roundtrip_records
from millrace import unique_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records():
    # the subset both libraries can send
    return roundtrip_records(both_null=False, null_header_values=False)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_writes_confluent_reads(broker, codec):
    topic = unique_topic(f"x-kp2ck-{codec}")
    ck.create_topic(ck.admin(broker), topic)
    recs = _records()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all",
                      linger_ms=5, compression_type=None if codec == "none" else codec,
                      request_timeout_ms=15000, max_block_ms=15000)
    try:
        futs = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers) or None,
                       timestamp_ms=r.timestamp, partition=0) for r in recs]
        p.flush(timeout=30)
        assert [f.get(timeout=15).offset for f in futs] == list(range(len(recs)))
    finally:
        p.close(timeout=5)
    c = ck.consumer(broker)
    try:
        msgs = ck.consume(c, [CkTopicPartition(topic, 0, 0)], len(recs))
        for i, (msg, rec) in enumerate(zip(msgs, recs)):
            ck.assert_same(msg, rec, i)
        assert ck.wait_eof(c) == []
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_writes_kafka_python_reads(broker, codec):
    topic = unique_topic(f"x-ck2kp-{codec}")
    ck.create_topic(ck.admin(broker), topic)
    recs = _records()
    ck.produce_all(ck.producer(broker, **{"compression.type": codec}), topic, recs)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="none", request_timeout_ms=15000)
    try:
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(recs) and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                got.extend(batch)
        assert len(got) == len(recs)
        for i, (msg, rec) in enumerate(zip(got, recs)):
            assert msg.offset == i
            assert (msg.key, msg.value, list(msg.headers or []), msg.timestamp) == (
                rec.key, rec.value, rec.headers, rec.timestamp), f"offset {i}"
    finally:
        c.close(autocommit=False)
