"""Broker process contract: clean SIGTERM shutdown, data survives a restart.

Uses confluent-kafka as the client; these tests start their own brokers.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from compat_data import Rec, now_ms, roundtrip_records
from millrace import Broker, unique_topic, wait_until
from test_confluent_kafka import (OP_TIMEOUT, admin, assert_same, consume, consumer, create_topic,
                                  produce_all, producer, wait_eof)


def test_sigterm_exits_zero():
    b = Broker().start()
    try:
        # serve one request first so that shutdown has something to close
        assert b.port in [x.port for x in admin(b).list_topics(timeout=OP_TIMEOUT).brokers.values()]
    finally:
        rc = b.stop(timeout=15)
    assert rc == 0, f"exit code {rc} after SIGTERM; stderr tail:\n{b.stderr_tail()}"


def test_data_survives_restart(tmp_path):
    data_dir = tmp_path / "data"
    topic = unique_topic("ck-restart")
    recs = roundtrip_records()
    more = [Rec(f"k{i}".encode(), f"v{i}".encode(), [], now_ms()) for i in range(100)]

    first = Broker(data_dir=data_dir).start()
    try:
        create_topic(admin(first), topic, partitions=2)
        produce_all(producer(first), topic, recs + more, partition=0)
    finally:
        assert first.stop(timeout=15) == 0, first.stderr_tail()

    second = Broker(data_dir=data_dir).start()
    try:
        adm = admin(second)
        md = wait_until(lambda: adm.list_topics(timeout=OP_TIMEOUT).topics.get(topic),
                        timeout=OP_TIMEOUT, what=f"{topic} after restart")
        assert sorted(md.partitions) == [0, 1]
        c = consumer(second)
        try:
            msgs = consume(c, [TopicPartition(topic, 0, 0)], len(recs) + len(more))
            for i, (msg, rec) in enumerate(zip(msgs, recs + more)):
                assert_same(msg, rec, i)
            assert wait_eof(c) == []
            # the log continues at the old end offset
            [report] = produce_all(producer(second), topic, [Rec(b"after", b"restart", [], now_ms())], partition=0)
            assert report.offset() == len(recs) + len(more)
        finally:
            c.close()
    finally:
        second.stop(timeout=15)
