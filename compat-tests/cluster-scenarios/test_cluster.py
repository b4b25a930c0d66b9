"""Goal: the cluster Done-when scenarios of issues 12 and 13, on a real 3-node cluster started with
the issue's command line, seen through real clients (kcat, confluent-kafka, the Java AdminClient and
Kafka's CLI tools) and through each broker's own Metadata answers.

Every test starts its own cluster (lib/millrace.py ``Cluster``), and every wait is a bounded poll.
Timings that the issues bound are measured and printed (``-s`` or the run.sh log shows them).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Dict, List

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import kwire
from millrace import unique_topic, wait_until
from scen import (OP_TIMEOUT, admin, create_topic, fully_replicated, java_cluster_info, kafka_configs,
                  kafka_topics, kcat, leaders, log, parse_cluster_info, parse_describe, views, wait_all)

# Kafka's broker.session.timeout.ms default, which the clusters here keep.
SESSION_TIMEOUT_S = 9.0


def addresses(cluster) -> Dict[int, str]:
    return {i: n.bootstrap for i, n in cluster.nodes.items()}


# --- 1. every client sees the three brokers; leaders are spread --------------------------------

def test_three_brokers_in_every_client_and_leaders_on_two_or_more(make_cluster):
    c = make_cluster()
    want = addresses(c)
    took = wait_all(c, c.ids, lambda md: md.brokers == want, 10, "all three brokers in each broker's Metadata")
    log(f"each broker lists all three brokers ({took:.2f}s after start)")

    r = kcat("-b", c.nodes[1].bootstrap, "-L", "-J")
    assert r.rc == 0, r.text()
    md = json.loads(r.out)
    assert {b["id"]: b["name"] for b in md["brokers"]} == want, md["brokers"]

    cm = admin(c.nodes[2].bootstrap).list_topics(timeout=OP_TIMEOUT)
    assert {b.id: f"{b.host}:{b.port}" for b in cm.brokers.values()} == want
    assert cm.controller_id in want, f"confluent-kafka controller id {cm.controller_id}"

    r = java_cluster_info(c.nodes[3].bootstrap)
    assert r.rc == 0, r.text()
    brokers, controller, _ = parse_cluster_info(r.out)
    assert brokers == want, r.out
    assert controller in want, r.out

    topic = unique_topic("spread")
    create_topic(c.nodes[1].bootstrap, topic, 6, 3)
    wait_all(c, c.ids, fully_replicated(topic, 6, 3), 15, "6 partitions x RF 3 with full ISRs", [topic])
    seen = views(c, c.ids, [topic])
    lead = leaders(seen[1], topic)
    for i in c.ids:
        assert leaders(seen[i], topic) == lead, f"broker {i} names other leaders: {leaders(seen[i], topic)} vs {lead}"
    for p in seen[1].topics[topic].partitions.values():
        assert len(set(p.replicas)) == 3 and set(p.replicas) == set(want), f"partition {p.id} replicas {p.replicas}"
        assert p.leader in p.replicas
    log(f"leaders of {topic}: {lead}")
    assert len(set(lead.values())) >= 2, f"every partition led by one broker: {lead}"

    # The three clients report the same leaders/replicas/ISR as the brokers.
    truth = {p.id: (p.leader, p.replicas, sorted(p.isr)) for p in seen[1].topics[topic].partitions.values()}
    r = kcat("-b", c.nodes[2].bootstrap, "-L", "-J", "-t", topic)
    assert r.rc == 0, r.text()
    [kt] = [t for t in json.loads(r.out)["topics"] if t["topic"] == topic]
    got = {p["partition"]: (p["leader"], [x["id"] for x in p["replicas"]], sorted(x["id"] for x in p["isrs"]))
           for p in kt["partitions"]}
    assert got == truth, f"kcat {got} vs brokers {truth}"
    ct = admin(c.nodes[3].bootstrap).list_topics(topic, timeout=OP_TIMEOUT).topics[topic]
    got = {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in ct.partitions.values()}
    assert got == truth, f"confluent-kafka {got} vs brokers {truth}"
    r = java_cluster_info(c.nodes[1].bootstrap, topic)
    assert r.rc == 0, r.text()
    _, _, jparts = parse_cluster_info(r.out)
    got = {p: (d.leader, d.replicas, sorted(d.isr)) for (t, p), d in jparts.items() if t == topic}
    assert got == truth, f"Java AdminClient {got} vs brokers {truth}"

    # Producing reaches the leaders: one acks=all record per partition, each acknowledged.
    acked = produce_numbered(c.bootstrap, topic, 60, partitions=6)
    assert sorted(acked) == list(range(60))


# --- 2. admin through any broker ---------------------------------------------------------------

def test_admin_from_a_non_controller_broker_visible_everywhere_within_1s(make_cluster):
    c = make_cluster()
    ctrl = wait_until(c.active_controller, 10, what="an active controller")
    target = 3 if ctrl != 3 else 2  # broker 3, unless it is the controller (then nothing is forwarded)
    b = c.nodes[target].bootstrap
    log(f"active controller {ctrl}; admin requests go to broker {target}")
    topic = unique_topic("admin")
    bound = 1.0

    def has_partitions(n: int):
        def cond(md: kwire.Metadata) -> bool:
            t = md.topics.get(topic)
            return t is not None and t.error == 0 and len(t.partitions) == n and all(
                p.leader >= 0 for p in t.partitions.values())
        return cond

    r = kafka_topics(b, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3")
    assert r.rc == 0 and f"Created topic {topic}." in r.out, r.text()
    took = wait_all(c, c.ids, has_partitions(3), bound, "created topic on every broker")
    log(f"kafka-topics --create: visible on all brokers {took * 1000:.0f} ms after the tool returned")

    r = kafka_topics(b, "--alter", "--topic", topic, "--partitions", "6")
    assert r.rc == 0, r.text()
    took = wait_all(c, c.ids, has_partitions(6), bound, "6 partitions on every broker")
    log(f"kafka-topics --alter --partitions 6: visible on all brokers after {took * 1000:.0f} ms")

    def configs_everywhere(cond, what):
        t0 = time.monotonic()
        pending = set(c.ids)
        last = {}
        while pending:
            for i in sorted(pending):
                try:
                    cfg = kwire.topic_configs(c.nodes[i].bootstrap, topic)
                    last[i] = {k: cfg.get(k) for k in ("retention.ms", "cleanup.policy")}
                    if cond(cfg):
                        pending.discard(i)
                except (OSError, kwire.WireError) as exc:
                    last[i] = exc
            if pending and time.monotonic() - t0 > bound:
                raise AssertionError(f"{what}: not on brokers {sorted(pending)} within {bound}s: {last}")
            if pending:
                time.sleep(0.02)
        return time.monotonic() - t0

    r = kafka_configs(b, "--alter", "--entity-type", "topics", "--entity-name", topic,
                      "--add-config", "retention.ms=123456789,cleanup.policy=compact")
    assert r.rc == 0, r.text()
    took = configs_everywhere(lambda cfg: cfg.get("retention.ms") == "123456789"
                              and cfg.get("cleanup.policy") == "compact", "altered configs")
    log(f"kafka-configs --add-config: visible on all brokers after {took * 1000:.0f} ms")

    r = kafka_configs(b, "--alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config", "retention.ms")
    assert r.rc == 0, r.text()
    took = configs_everywhere(lambda cfg: cfg.get("retention.ms") == "604800000"
                              and cfg.get("cleanup.policy") == "compact", "retention.ms back to its default")
    log(f"kafka-configs --delete-config: visible on all brokers after {took * 1000:.0f} ms")

    r = kafka_topics(b, "--describe", "--topic", topic)
    assert r.rc == 0, r.text()
    assert "cleanup.policy=compact" in r.out and "retention.ms" not in r.out, r.out
    described = parse_describe(r.out, topic)
    assert sorted(described) == list(range(6)), r.out
    assert all(len(d.replicas) == 3 and d.leader in d.replicas for d in described.values()), r.out

    r = kafka_topics(b, "--delete", "--topic", topic)
    assert r.rc == 0, r.text()
    took = wait_all(c, c.ids, lambda md: topic not in md.topics, bound, "topic gone from every broker")
    log(f"kafka-topics --delete: gone from all brokers after {took * 1000:.0f} ms")


# --- 3. kill -9 of the active controller --------------------------------------------------------

def test_active_controller_kill9_new_controller_within_10s_and_rejoin(make_cluster):
    c = make_cluster()
    before = unique_topic("before")
    create_topic(c.bootstrap, before, 3, 3)
    wait_all(c, c.ids, fully_replicated(before, 3, 3), 15, "topic before the kill", [before])
    old = wait_until(c.active_controller, 10, what="an active controller")
    old_term = c.max_controller_term()
    survivors = [i for i in c.ids if i != old]

    t0 = time.monotonic()
    c.nodes[old].kill()

    def new_controller():
        for i in survivors:
            if any(t > old_term for t in c.nodes[i].controller_terms()):
                return i
        return None

    new = wait_until(new_controller, 30, interval=0.05, what="a new active controller")
    elapsed = time.monotonic() - t0
    log(f"kill -9 of active controller {old} (term {old_term}): node {new} is the active controller "
        f"after {elapsed:.2f}s")
    assert elapsed <= 10.0, f"new controller after {elapsed:.2f}s, want <= 10s"
    wait_all(c, survivors, lambda md: md.controller in survivors, 15, "Metadata names a live controller")

    # A topic created afterwards works (the new controller decides; produce + consume).
    after = unique_topic("after")
    t1 = time.monotonic()
    create_topic(c.bootstrap_of(survivors), after, 3, 3)
    log(f"CreateTopics answered {time.monotonic() - t1:.2f}s after asking")
    acked = produce_numbered(c.bootstrap_of(survivors), after, 300, partitions=3, timeout=60)
    assert sorted(acked) == list(range(300))
    assert sorted(consume_values(c.bootstrap_of(survivors), after, 3, 300)) == list(range(300))
    log(f"produced and consumed 300 records through {after} {time.monotonic() - t0:.1f}s after the kill")

    # The killed node restarts and rejoins: unfenced (listed in Metadata), with the metadata it missed.
    t2 = time.monotonic()
    c.nodes[old].restart()
    ready = time.monotonic() - t2
    took = wait_all(c, c.ids, lambda md: old in md.brokers and after in md.topics and before in md.topics, 30,
                    "restarted node listed (unfenced) with both topics", [before, after])
    log(f"node {old} restarted: ready after {ready:.2f}s, listed by every broker after {ready + took:.2f}s")
    took = wait_all(c, c.ids, lambda md: fully_replicated(after, 3, 3)(md) and fully_replicated(before, 3, 3)(md),
                    60, "full ISRs again", [before, after])
    log(f"every ISR has all three replicas again {took:.2f}s later")


# --- 4. a broker killed past the session timeout is fenced ----------------------------------------

def test_killed_broker_fenced_leaders_move_unfenced_after_restart(make_cluster):
    c = make_cluster()
    topic = unique_topic("fence")
    r = kafka_topics(c.nodes[1].bootstrap, "--create", "--topic", topic, "--partitions", "6",
                     "--replication-factor", "3")
    assert r.rc == 0, r.text()
    wait_all(c, c.ids, fully_replicated(topic, 6, 3), 15, "full ISRs", [topic])

    r = kafka_topics(c.bootstrap, "--describe", "--topic", topic)
    assert r.rc == 0, r.text()
    before = parse_describe(r.out, topic)
    truth = views(c, [1], [topic])[1].topics[topic].partitions
    assert sorted(before) == list(range(6)), r.out
    for p, d in before.items():
        assert (d.leader, d.replicas, sorted(d.isr)) == (truth[p].leader, truth[p].replicas, sorted(truth[p].isr)), \
            f"describe partition {p}: {d} vs Metadata {truth[p]}"
        assert len(set(d.replicas)) == 3 and sorted(d.isr) == sorted(d.replicas) and d.leader in d.replicas, r.out

    ctrl = wait_until(c.active_controller, 10, what="an active controller")
    led_by = defaultdict(list)
    for p, d in before.items():
        led_by[d.leader].append(p)
    victim = next(i for i in c.ids if i != ctrl and led_by[i])  # a broker that leads, not the controller
    survivors = [i for i in c.ids if i != victim]
    log(f"killing broker {victim} (leads partitions {led_by[victim]}); active controller {ctrl}")

    t0 = time.monotonic()
    c.nodes[victim].kill()
    took = wait_all(c, survivors, lambda md: victim not in md.brokers, SESSION_TIMEOUT_S + 10, "victim fenced")
    fenced = time.monotonic() - t0
    log(f"broker {victim} fenced (gone from Metadata) {fenced:.2f}s after kill -9 "
        f"(broker.session.timeout.ms {SESSION_TIMEOUT_S * 1000:.0f})")

    def moved(md: kwire.Metadata) -> bool:
        return all(p.leader in survivors and victim not in p.isr for p in md.topics[topic].partitions.values())

    wait_all(c, survivors, moved, 10, "leaderships moved and ISRs shrunk", [topic])
    log(f"leaderships of {led_by[victim]} moved {time.monotonic() - t0:.2f}s after the kill")

    r = kafka_topics(c.bootstrap_of(survivors), "--describe", "--topic", topic)
    assert r.rc == 0, r.text()
    after = parse_describe(r.out, topic)
    assert sorted(after) == list(range(6)), r.out
    for p, d in after.items():
        assert d.replicas == before[p].replicas, f"partition {p}: replicas changed\n{r.out}"
        assert d.leader in survivors, f"partition {p}: leader {d.leader}\n{r.out}"
        assert victim not in d.isr and sorted(d.isr) == sorted(survivors), f"partition {p}: ISR {d.isr}\n{r.out}"
        if before[p].leader != victim:
            assert d.leader == before[p].leader, f"partition {p}: leader moved from a live broker\n{r.out}"

    t1 = time.monotonic()
    c.nodes[victim].restart()
    took = wait_all(c, c.ids, lambda md: victim in md.brokers, 30, "restarted broker unfenced")
    log(f"broker {victim} unfenced (listed by every broker) {time.monotonic() - t1:.2f}s after the restart")
    took = wait_all(c, c.ids, fully_replicated(topic, 6, 3), 60, "full ISRs again", [topic])
    r = kafka_topics(c.bootstrap, "--describe", "--topic", topic)
    assert r.rc == 0, r.text()
    again = parse_describe(r.out, topic)
    for p, d in again.items():
        assert d.replicas == before[p].replicas and sorted(d.isr) == sorted(d.replicas), f"partition {p}\n{r.out}"
    log(f"ISRs full again {time.monotonic() - t1:.2f}s after the restart")


# --- 5. two of three brokers down: acks=all is not acknowledged ------------------------------------

# What Kafka may answer an acks=all produce that cannot reach min.insync.replicas: the broker's
# NOT_ENOUGH_REPLICAS(_AFTER_APPEND) or REQUEST_TIMED_OUT, or the client's own timeout.
NOT_ACKNOWLEDGED = {
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.REQUEST_TIMED_OUT,
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT,
}


def test_two_of_three_down_acks_all_not_acknowledged_then_resumes(make_cluster):
    c = make_cluster()
    topic = unique_topic("minisr")
    create_topic(c.bootstrap, topic, 1, 3, {"min.insync.replicas": "2"})
    wait_all(c, c.ids, fully_replicated(topic, 1, 3), 15, "full ISR", [topic])
    leader = views(c, [1], [topic])[1].topics[topic].partitions[0].leader
    others = [i for i in c.ids if i != leader]

    client_log: List[str] = []
    p = Producer({
        "bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": False,
        "request.timeout.ms": 5000, "message.timeout.ms": 20000, "retry.backoff.ms": 200,
        "debug": "msg,protocol", "logger": ListLogger(client_log),
    })
    assert deliver(p, topic, b"before", 30) is None

    log(f"leader {leader}; kill -9 of brokers {others}")
    for i in others:
        c.nodes[i].kill()
    t0 = time.monotonic()
    err = deliver(p, topic, b"while-down", 40)
    log(f"acks=all produce with two of three down: {err!r} after {time.monotonic() - t0:.1f}s; broker answers "
        f"seen by librdkafka: {broker_errors(client_log)}")
    assert err is not None, "acknowledged with two of three brokers down"
    assert err.code() in NOT_ACKNOWLEDGED, f"not one of Kafka's answers: {err!r}"

    t1 = time.monotonic()
    for i in others:
        c.nodes[i].launch()
    for i in others:
        c.nodes[i].wait_ready(60)
    back = time.monotonic()
    log(f"brokers {others} restarted and ready after {back - t1:.1f}s")

    attempts = 0
    while True:
        attempts += 1
        value = f"after-{attempts}".encode()
        err = deliver(p, topic, value, 10, message_timeout_ms=5000)
        if err is None:
            break
        assert time.monotonic() - back <= 30, f"producing did not resume within 30s; last {err!r}"
    resumed = time.monotonic() - back
    log(f"acks=all producing resumed {resumed:.1f}s after both brokers returned ({attempts} attempts)")
    assert resumed <= 30
    p.flush(10)

    values = consume_raw(c.bootstrap, topic, 0, want_end=True)
    assert values.count(b"before") == 1 and values.count(value) == 1, values
    log(f"log after recovery: {values} (the unacknowledged record may be there or not: Kafka promises nothing)")


# --- 6. a consumer group through a kill -9 of its coordinator ----------------------------------------

@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_consumes_through_coordinator_kill9_commits_never_regress(make_cluster, protocol):
    """A classic group, and a KIP-848 consumer group (issue 19), through a kill -9 of the group's
    coordinator. The consumer group's state is in __consumer_offsets, replicated: the new
    coordinator knows the member and its epoch, so the member is never fenced (no partitions
    lost)."""
    c = make_cluster(settings={"min.insync.replicas": "2"})
    topic = unique_topic("grp")
    partitions = 3
    create_topic(c.bootstrap, topic, partitions, 3)
    # A group whose coordinator is not the active controller: this scenario is the coordinator's
    # failover alone (test 3 kills the controller). The first FindCoordinator creates
    # __consumer_offsets.
    ctrl = wait_until(c.active_controller, 10, what="an active controller")
    group = pick_group(c, lambda coordinator: coordinator != ctrl)
    wait_all(c, c.ids, fully_replicated(topic, partitions, 3), 15, "full ISRs", [topic])

    stop_producing = threading.Event()
    stop_all = threading.Event()
    produced = defaultdict(int)
    produce_errors: List[str] = []

    def producer_loop():
        pr = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                       "max.in.flight.requests.per.connection": 1, "linger.ms": 5, "message.timeout.ms": 120000})

        def on_delivery(err, msg):
            if err is None:
                produced[msg.partition()] += 1
            else:
                produce_errors.append(str(err))
        n = 0
        while not stop_producing.is_set():
            for _ in range(20):
                pr.produce(topic, str(n).encode(), partition=n % partitions, on_delivery=on_delivery)
                n += 1
            pr.poll(0.05)
        assert pr.flush(120) == 0

    consumed = defaultdict(set)
    commit_errors: List[str] = []
    state = {"consumed_after_kill": 0, "killed": False}

    lost: List[List[int]] = []

    def consumer_loop():
        conf = {"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest"}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
        cons = Consumer(conf)
        cons.subscribe([topic], on_assign=lambda _c, parts: state.__setitem__("assigned", len(parts)),
                       on_lost=lambda _c, parts: lost.append(sorted(p.partition for p in parts)))
        last_commit = 0.0
        try:
            while not stop_all.is_set():
                msg = cons.poll(0.2)
                if msg is not None and msg.error() is None:
                    consumed[msg.partition()].add(msg.offset())
                    if state["killed"]:
                        state["consumed_after_kill"] += 1
                if time.monotonic() - last_commit > 0.3:
                    last_commit = time.monotonic()
                    try:
                        cons.commit(asynchronous=False)
                    except Exception as exc:  # noqa: BLE001 - counted; retried on the next round
                        if "_NO_OFFSET" not in str(exc):
                            commit_errors.append(str(exc))
        finally:
            cons.close()

    samples = defaultdict(list)  # partition -> [(t, committed offset)]
    regressions: List[str] = []

    def sampler_loop():
        reader = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            while not stop_all.is_set():
                try:
                    got = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=5)
                except Exception:  # noqa: BLE001 - coordinator moving: try again
                    time.sleep(0.2)
                    continue
                now = time.monotonic()
                for tp in got:
                    if tp.error is None and tp.offset >= 0:
                        hist = samples[tp.partition]
                        if hist and tp.offset < hist[-1][1]:
                            regressions.append(f"partition {tp.partition}: {hist[-1][1]} -> {tp.offset}")
                        hist.append((now, tp.offset))
                time.sleep(0.2)
        finally:
            reader.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (producer_loop, consumer_loop, sampler_loop)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: state.get("assigned") == partitions, 30, what="the member owns every partition")
        coordinator = wait_until(lambda: group_coordinator(c, group), 10, what="the group's coordinator")
        wait_until(lambda: sum(len(v) for v in consumed.values()) > 500, 30, what="500 records consumed")
        wait_until(lambda: all(samples[p] and samples[p][-1][1] > 0 for p in range(partitions)), 30,
                   what="a committed offset on every partition")
        before_kill = {p: samples[p][-1][1] for p in range(partitions)}
        log(f"coordinator of {group} is broker {coordinator} (active controller: {c.active_controller()}); "
            f"committed before the kill {before_kill}; kill -9")
        t0 = time.monotonic()
        c.nodes[coordinator].kill()
        state["killed"] = True
        survivors = [i for i in c.ids if i != coordinator]

        def advanced():
            return all(samples[p] and samples[p][-1][1] > before_kill[p] for p in range(partitions))
        wait_until(advanced, 45, interval=0.2, what="commits advancing on every partition after the kill")
        log(f"commits advanced on every partition {time.monotonic() - t0:.1f}s after the kill")
        time.sleep(3)
        stop_producing.set()
        threads[0].join(150)
        assert not threads[0].is_alive(), "producer did not finish"
        assert not produce_errors, produce_errors[:5]

        hw = {}
        probe = Consumer({"bootstrap.servers": c.bootstrap_of(survivors), "group.id": group + "-probe"})
        for p in range(partitions):
            hw[p] = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        probe.close()
        assert sum(hw.values()) == sum(produced.values()), f"high watermarks {hw} vs acknowledged {dict(produced)}"

        def caught_up():
            return all(samples[p] and samples[p][-1][1] == hw[p] for p in range(partitions))
        wait_until(caught_up, 60, interval=0.2, what=f"committed offsets = high watermarks {hw}")
    finally:
        stop_producing.set()
        stop_all.set()
        for t in threads:
            t.join(30)
    final = {p: samples[p][-1][1] for p in range(partitions)}
    log(f"coordinator of {group} after the kill: broker {group_coordinator(c, group, survivors)}")
    log(f"final committed {final} = high watermarks {hw}; {sum(len(v) for v in samples.values())} samples, "
        f"{state['consumed_after_kill']} records consumed after the kill, "
        f"{len(commit_errors)} failed commits (retried): {sorted(set(e[:80] for e in commit_errors))[:4]}")
    assert not regressions, f"committed offsets moved backwards: {regressions}"
    assert state["consumed_after_kill"] > 0
    if protocol == "consumer":
        assert not lost, f"the member was fenced after the coordinator moved and lost {lost}"
    for p in range(partitions):
        assert consumed[p] >= set(range(hw[p])), f"partition {p}: records below the high watermark not consumed"


# --- helpers -------------------------------------------------------------------------------------

class ListLogger:
    """A logging.Logger stand-in for librdkafka's log callback: keeps the lines."""

    def __init__(self, lines: List[str]) -> None:
        self.lines = lines

    def log(self, level, fmt, *args):  # noqa: ARG002
        self.lines.append(fmt % args if args else fmt)


def broker_errors(lines: List[str]) -> List[str]:
    """Distinct Kafka error names in librdkafka's Produce response log lines."""
    import re

    found = set()
    for line in lines:
        if "Produce" in line or "produce" in line:
            for m in re.finditer(r"Broker: ([A-Za-z ]+)|(NOT_ENOUGH_REPLICAS\w*|REQUEST_TIMED_OUT|_MSG_TIMED_OUT)", line):
                found.add((m.group(1) or m.group(2)).strip())
    return sorted(found)


def deliver(p: Producer, topic: str, value: bytes, timeout: float, message_timeout_ms: int = 0):
    """Produces one record to partition 0 and waits for its delivery report; returns its error."""
    result = {}
    p.produce(topic, value, partition=0, on_delivery=lambda err, msg: result.setdefault("err", err))
    deadline = time.monotonic() + timeout
    while "err" not in result and time.monotonic() < deadline:
        p.poll(0.1)
    if "err" not in result:
        raise AssertionError(f"no delivery report for {value!r} within {timeout}s")
    return result["err"]


def produce_numbered(bootstrap: str, topic: str, n: int, partitions: int, timeout: float = 30) -> List[int]:
    """n records (values 0..n-1, record i to partition i % partitions), acks=all; the acknowledged values."""
    acked: List[int] = []
    errors: List[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout * 1000)})

    def on_delivery(err, msg):
        if err is None:
            acked.append(int(msg.value()))
        else:
            errors.append(str(err))
    for i in range(n):
        p.produce(topic, str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
    left = p.flush(timeout + 10)
    assert left == 0 and not errors, f"{left} undelivered, errors {errors[:5]}"
    return acked


def consume_values(bootstrap: str, topic: str, partitions: int, n: int) -> List[int]:
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: List[int] = []
    deadline = time.monotonic() + OP_TIMEOUT
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(int(msg.value()))
    finally:
        cons.close()
    return got


def consume_raw(bootstrap: str, topic: str, partition: int, want_end: bool = True) -> List[bytes]:
    """Every value of one partition from offset 0 to its high watermark."""
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "enable.auto.commit": False,
                     "enable.partition.eof": True})
    tp = TopicPartition(topic, partition, 0)
    hw = cons.get_watermark_offsets(tp, timeout=OP_TIMEOUT)[1]
    cons.assign([tp])
    got: List[bytes] = []
    deadline = time.monotonic() + OP_TIMEOUT
    try:
        while time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                got.append(msg.value())
            elif msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= hw:
                break
    finally:
        cons.close()
    return got


def pick_group(c, want, tries: int = 40) -> str:
    """A fresh group id whose coordinator satisfies ``want(node id)``."""
    for _ in range(tries):
        group = unique_topic("g")
        coordinator = wait_until(lambda: group_coordinator(c, group), 30, interval=0.2,
                                 what="FindCoordinator answered (__consumer_offsets created)")
        if want(coordinator):
            return group
    raise AssertionError(f"no group id in {tries} tries with the wanted coordinator")


def group_coordinator(c, group: str, ids=None):
    """The group's coordinator id (FindCoordinator asked of a live broker), or None meanwhile.
    Not confluent-kafka's admin client: it can abort the process under faults
    (compat-tests/cluster/FINDINGS.md)."""
    for i in ids or c.alive_ids():
        try:
            error, node = kwire.find_coordinator(c.nodes[i].bootstrap, group)
        except (OSError, kwire.WireError):
            continue
        return node if error == 0 else None
    return None
