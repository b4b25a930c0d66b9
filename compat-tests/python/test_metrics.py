"""Goal: an operator's questions are answered over HTTP (issue 17): /metrics in the Prometheus text
format, parsed here by the `prometheus_client` package's own parser, moves with real client
traffic (bytes and records in and out, request counts and latency histograms, consumer lag), and
/ready answers 503 while the group coordinator replays a large __consumer_offsets, 200 after, with
/health 200 throughout.

Millrace-only: the HTTP listener is Millrace's own surface (Kafka exposes JMX), so this suite does
not run against the Apache Kafka reference.

Run: .venv/bin/pytest -q compat-tests/python/test_metrics.py (starts its own brokers from
target/debug/millrace, or MILLRACE_BIN)."""

import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from groups_helpers import Broker, create_topic
from test_dashboard import documented_metrics

PARTITIONS = 2
PER_PARTITION = 100
VALUE = b"v" * 100


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=5):
    """(status, body) or (None, error) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, socket.timeout) as e:
        return None, str(e)


def scrape(port):
    """{(name, frozenset(labels)): value} of every sample, via prometheus_client's parser."""
    status, text = http_get(port, "/metrics")
    assert status == 200, text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)


def total(samples, name, **labels):
    """Sum over every series of `name` whose labels include `labels`."""
    want = {(k, str(v)) for k, v in labels.items()}
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


# Millrace's own /metrics: not a Kafka behaviour, so not run against the reference broker.
pytestmark = pytest.mark.skipif(
    os.environ.get("MILLRACE_BIN", "").endswith("kafka-shim.sh"),
    reason="Millrace's /metrics endpoint; Apache Kafka has none",
)


@pytest.fixture
def http_broker():
    port = free_port()
    b = Broker(settings={"millrace.http.listen": f"127.0.0.1:{port}"}).start()
    b.http_port = port
    yield b
    b.kill()


def test_metrics_follow_produce_consume_and_lag(http_broker):
    b, port = http_broker, http_broker.http_port
    topic, group = f"metrics-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, PARTITIONS)
    before = scrape(port)
    assert value(before, "millrace_ready") == 1.0

    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(PER_PARTITION):
        for part in range(PARTITIONS):
            p.produce(topic, value=VALUE, partition=part)
    assert p.flush(30) == 0

    # The group consumed half of each partition and committed that.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
    seen = {part: 0 for part in range(PARTITIONS)}
    deadline = time.time() + 30
    while sum(seen.values()) < PARTITIONS * PER_PARTITION and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen[m.partition()] += 1
    assert seen == {part: PER_PARTITION for part in range(PARTITIONS)}
    half = PER_PARTITION // 2
    c.commit(offsets=[TopicPartition(topic, part, half) for part in range(PARTITIONS)], asynchronous=False)
    c.close()

    after = scrape(port)
    records_in = value(after, "millrace_topic_records_in_total", topic=topic)
    assert records_in == PARTITIONS * PER_PARTITION
    bytes_in = value(after, "millrace_topic_bytes_in_total", topic=topic)
    # Batches: the values plus per-record and per-batch overhead (at most ~60 bytes a record here).
    assert PARTITIONS * PER_PARTITION * len(VALUE) <= bytes_in <= PARTITIONS * PER_PARTITION * (len(VALUE) + 60)
    bytes_out = value(after, "millrace_topic_bytes_out_total", topic=topic)
    assert bytes_out >= bytes_in, (bytes_out, bytes_in)
    for part in range(PARTITIONS):
        assert value(after, "millrace_log_end_offset", topic=topic, partition=part) == PER_PARTITION
        assert value(after, "millrace_high_watermark", topic=topic, partition=part) == PER_PARTITION
        assert value(after, "millrace_log_start_offset", topic=topic, partition=part) == 0
        assert value(after, "millrace_log_size_bytes", topic=topic, partition=part) > 0

    for api in ("Produce", "Fetch"):
        count = total(after, "millrace_request_duration_seconds_count", api=api) - total(
            before, "millrace_request_duration_seconds_count", api=api)
        assert count > 0, api
        assert total(after, "millrace_requests_total", api=api) > total(before, "millrace_requests_total", api=api)
        # The +Inf bucket holds every observation.
        assert total(after, "millrace_request_duration_seconds_bucket", api=api, le="+Inf") == total(
            after, "millrace_request_duration_seconds_count", api=api)

    # Lag = high watermark - committed = the records the group has not consumed.
    for part in range(PARTITIONS):
        assert value(after, "millrace_consumer_group_lag", group=group, topic=topic, partition=part) == PER_PARTITION - half
    assert value(after, "millrace_consumer_group_lag_sum", group=group) == PARTITIONS * (PER_PARTITION - half)
    assert value(after, "millrace_groups", state="Empty") >= 1
    assert value(after, "millrace_log_flush_duration_seconds_count") > value(before, "millrace_log_flush_duration_seconds_count")
    assert value(after, "millrace_connections_accepted_total") > 0
    assert value(after, "millrace_partitions") >= PARTITIONS
    assert value(after, "millrace_under_replicated_partitions") == 0
    assert value(after, "millrace_active_controller") == 1

    # One refused request: CreateTopics of a topic that exists.
    with pytest.raises(KafkaException):
        create_topic(b.bootstrap, topic, PARTITIONS)
    errors = scrape(port)
    assert value(errors, "millrace_request_errors_total", api="CreateTopics", error="TOPIC_ALREADY_EXISTS") == 1, {
        k: v for k, v in errors.items() if k[0] == "millrace_request_errors_total"}
    check_served_equals_documented(port)


def check_served_equals_documented(port):
    """Every metric family served is in docs/operations.md's table with the same type, and every
    documented one is served (after traffic: a labelled family appears with its first series)."""
    status, text = http_get(port, "/metrics")
    assert status == 200
    served = {}
    for family in text_string_to_metric_families(text):
        # The parser names a counter family without its _total suffix.
        name = family.name + "_total" if family.type == "counter" else family.name
        served[name] = family.type
    documented = documented_metrics()
    assert served == documented, {
        "served, not in docs/operations.md": sorted(set(served) - set(documented)),
        "documented, not served": sorted(set(documented) - set(served)),
        "type differs": sorted(n for n in set(served) & set(documented) if served[n] != documented[n]),
    }


def test_share_group_lag_follows_a_share_consumer():
    """millrace_share_group_lag (KIP-932): 0 once a share consumer has acknowledged what it got,
    the records produced since while it does not poll, 0 again after it reads them."""
    from confluent_kafka import ShareConsumer

    port = free_port()
    b = Broker(settings={"millrace.http.listen": f"127.0.0.1:{port}",
                         "millrace.share.groups.enable": "true"}).start()
    topic, group = f"metrics-share-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    c = None
    try:
        create_topic(b.bootstrap, topic, 1)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "implicit"})
        c.subscribe([topic])

        def lag():
            samples = scrape(port)
            return (value(samples, "millrace_share_group_lag", group=group, topic=topic, partition=0),
                    value(samples, "millrace_share_group_lag_sum", group=group))

        def read_until_lag_is_zero(warm_up):
            deadline = time.time() + 60
            while time.time() < deadline:
                if warm_up:
                    p.produce(topic, value=b"warm-up")
                    p.flush(10)
                got = [m for m in c.poll(0.5) if m.error() is None]
                c.commit_sync()
                if warm_up:
                    warm_up = not got
                elif lag() == (0.0, 0.0):
                    return
            pytest.fail(f"share lag did not reach 0: {lag()}")

        # Warm-up: the share partition exists once a record produced after the member joined
        # arrives (share.auto.offset.reset=latest); then everything read is acknowledged.
        read_until_lag_is_zero(warm_up=True)
        for _ in range(5):
            p.produce(topic, value=VALUE)
        assert p.flush(10) == 0
        deadline = time.time() + 10
        while lag() != (5.0, 5.0) and time.time() < deadline:
            time.sleep(0.1)
        assert lag() == (5.0, 5.0)
        read_until_lag_is_zero(warm_up=False)
    finally:
        if c is not None:
            c.close()
        b.kill()


def test_partition_level_series_can_be_turned_off():
    port = free_port()
    b = Broker(settings={"millrace.http.listen": f"127.0.0.1:{port}",
                         "millrace.metrics.partition.level": "false"}).start()
    try:
        topic = f"metrics-{uuid.uuid4().hex[:8]}"
        create_topic(b.bootstrap, topic, PARTITIONS)
        samples = scrape(port)
        assert not [k for k in samples if ("partition", "0") in k[1]], "a partition-labelled series"
        assert value(samples, "millrace_partitions") >= PARTITIONS
    finally:
        b.kill()


def commit_many(bootstrap, group, topic, partitions, rounds):
    """`rounds` OffsetCommit requests of `partitions` offsets each."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for r in range(rounds):
            c.commit(offsets=[TopicPartition(topic, part, r) for part in range(partitions)], asynchronous=False)
    finally:
        c.close()


def test_ready_waits_for_the_coordinator_to_replay_offsets():
    port = free_port()
    settings = {"millrace.http.listen": f"127.0.0.1:{port}", "offsets.topic.num.partitions": "1"}
    b = Broker(settings=settings).start()
    topic, group = f"ready-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, 500)
    commit_many(b.bootstrap, group, topic, 500, 400)  # 200,000 offset records to replay
    # kill -9 and no group snapshot: the restart replays the whole log.
    b.kill()
    shutil.rmtree(os.path.join(b.data_dir, "data", "group_snapshot.sled"), ignore_errors=True)

    statuses, health = [], []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            statuses.append(http_get(port, "/ready", timeout=2))
            health.append(http_get(port, "/health", timeout=2)[0])
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        b.start(timeout=120)
        deadline = time.time() + 120
        while time.time() < deadline and not (statuses and statuses[-1][0] == 200):
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(timeout=10)
        b.kill()
    answered = [s for s in statuses if s[0] is not None]
    assert answered and answered[-1][0] == 200, statuses[-5:]
    loading = [body for code, body in answered if code == 503 and "loading" in body]
    assert loading, f"never saw 503 during the replay: {sorted(set(c for c, _ in answered))}"
    first_ready = next(i for i, (code, _) in enumerate(answered) if code == 200)
    assert all(code == 503 for code, _ in answered[:first_ready])
    assert all(code == 200 for code, _ in answered[first_ready:]), "ready went back to 503"
    assert all(h == 200 for h in health if h is not None), set(health)
    assert len([h for h in health if h is not None]) >= len(loading)


def test_replication_metrics_follow_a_broker_crash_and_return():
    """3 nodes, a topic of 3 partitions with 3 replicas: healthy → one node killed (its ISR
    membership ends when its session expires, leaderships move) → it returns and catches up."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from millrace import Cluster, wait_until

    cluster = Cluster(3, {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"},
                      http=True).start()
    try:
        topic = f"repl-{uuid.uuid4().hex[:8]}"
        adm = AdminClient({"bootstrap.servers": cluster.bootstrap})
        adm.create_topics([NewTopic(topic, 3, 3)], request_timeout=30)[topic].result(30)

        def scrape_all(ids):
            return {i: scrape(cluster.nodes[i].http_port) for i in ids}

        def sum_of(samples_by_node, name):
            return sum(value(s, name) for s in samples_by_node.values())

        def healthy():
            s = scrape_all(cluster.ids)
            return (sum_of(s, "millrace_leader_partitions") >= 3
                    and sum_of(s, "millrace_under_replicated_partitions") == 0
                    and sum(value(x, "millrace_partitions") for x in s.values()) >= 9)
        wait_until(healthy, 60, what="every partition led with a full ISR")
        before = scrape_all(cluster.ids)
        assert sum_of(before, "millrace_active_controller") == 1
        assert sum_of(before, "millrace_offline_partitions") == 0
        shrinks_before = sum_of(before, "millrace_isr_shrinks_total")
        expands_before = sum_of(before, "millrace_isr_expands_total")
        # Kill a node that is not the active controller (the metrics of a controller change are
        # not what this test is about).
        victim = next(i for i in cluster.ids if value(before[i], "millrace_active_controller") == 0)
        cluster.nodes[victim].kill()
        survivors = [i for i in cluster.ids if i != victim]

        def degraded():
            s = scrape_all(survivors)
            return (sum_of(s, "millrace_under_replicated_partitions") == 3
                    and sum_of(s, "millrace_leader_partitions") >= 3)
        wait_until(degraded, 60, what="three under-replicated partitions led by the survivors")
        after_kill = scrape_all(survivors)
        # The survivors' own partitions shrank their ISR; the victim's moved to a new leader (an
        # election, whose new leader epoch starts with the smaller ISR: not a shrink).
        victim_led = value(before[victim], "millrace_leader_partitions")
        assert victim_led >= 1
        assert sum_of(after_kill, "millrace_isr_shrinks_total") - shrinks_before >= 3 - victim_led
        elections = sum_of(after_kill, "millrace_leader_elections_total") - sum(
            value(before[i], "millrace_leader_elections_total") for i in survivors)
        assert elections >= victim_led
        assert sum_of(after_kill, "millrace_offline_partitions") == 0

        cluster.nodes[victim].start()

        def recovered():
            s = scrape_all(cluster.ids)
            return sum_of(s, "millrace_under_replicated_partitions") == 0 and sum_of(
                s, "millrace_isr_expands_total") - expands_before >= 3
        wait_until(recovered, 90, what="the returned node back in every ISR")
        assert value(scrape(cluster.nodes[victim].http_port), "millrace_ready") == 1
    finally:
        cluster.close()
