"""The workload: producers of unique numbered values, a consumer group that commits after
processing, standalone readers, a committed-offsets reader and the final drain. Each records
its operations in the history (``history.py`` describes the records).

Clients are confluent-kafka (librdkafka). Every client call is bounded by a timeout; a thread
stops when the shared ``stop`` event is set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Dict, List, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from history import History
import secure

# Commit errors that mean the coordinator refused the commit (it did not happen).
COMMIT_REFUSED = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._NO_OFFSET,
}

# librdkafka's own log lines go here; the harness points it at a file in the work dir.
CLIENT_LOG = logging.getLogger("librdkafka")
CLIENT_LOG.propagate = False

# Client timeouts (ms): short enough that a cut link is noticed within the fault's duration.
# metadata.recovery.strategy=none: librdkafka 2.16 re-bootstraps when no known broker answers
# (KIP-899), and doing so forgets every partition's leader epoch; the next metadata answer, even a
# stale one from a just-resumed old leader, is then taken as new, and the position is validated
# against that old leader, which answers the end of its own epoch: the consumer reads again what
# it already read (against Apache Kafka 4.1.1 it resets to the log start). FINDINGS.md, "Consumer
# rewinds after a re-bootstrap". The bootstrap list here is the brokers themselves, so
# re-bootstrapping never finds a broker the client did not know.
CLIENT_TIMEOUTS = {
    "socket.timeout.ms": 10000,
    "socket.connection.setup.timeout.ms": 5000,
    "reconnect.backoff.max.ms": 1000,
    "metadata.max.age.ms": 5000,
    "topic.metadata.refresh.interval.ms": 2000,
    "metadata.recovery.strategy": "none",
    "logger": CLIENT_LOG,
}
# CHAOS_CLIENT_DEBUG=eos,broker,msg (librdkafka's debug contexts) turns on every client's debug log,
# written to its client-*.log: how to see why a client stalls (the broker's side is in node*/).
if os.environ.get("CHAOS_CLIENT_DEBUG"):
    CLIENT_TIMEOUTS["debug"] = os.environ["CHAOS_CLIENT_DEBUG"]
# --secure (CHAOS_TLS_DIR, secure.py): every client speaks SASL_SSL; the harness process, which
# imported this before it made the TLS material, adds them again once it has.
CLIENT_TIMEOUTS.update(secure.client_settings())


def _err_text(err) -> str:
    try:
        return f"{err.name()}: {err.str()}"
    except Exception:  # noqa: BLE001
        return str(err)


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **CLIENT_TIMEOUTS})


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, config: Dict[str, str], timeout: float = 60) -> None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics([NewTopic(topic, partitions, rf, config=config)], operation_timeout=30, request_timeout=30)
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if getattr(err, "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class Worker(threading.Thread):
    def __init__(self, name: str, history: History, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.proc_name = name
        self.history = history
        self.stop_event = stop
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - reported by the harness
            self.error = exc
            self.history.record(self.proc_name, "info", "crash", error=repr(exc))

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorker(Worker):
    """Sends ``NAME-N`` for N = 0, 1, ... at ``rate`` per second, round-robin over partitions."""

    def __init__(self, name, history, stop, bootstrap, topic, partitions, rate, broken) -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.broken = broken
        self.sent = 0
        self.incarnation = 0
        self.fatal = threading.Event()
        self.unresolved = 0

    def conf(self) -> dict:
        conf = {
            "bootstrap.servers": self.bootstrap,
            "client.id": f"{self.proc_name}.{self.incarnation}",
            "linger.ms": 5,
            # Java's delivery.timeout.ms default: a timeout makes librdkafka bump the producer epoch,
            # and messages it then retries under the new epoch can be stored twice.
            "message.timeout.ms": 120000,
            "request.timeout.ms": 10000,
            "error_cb": self.on_error,
            **CLIENT_TIMEOUTS,
        }
        if self.broken:
            conf.update({"enable.idempotence": False, "acks": 1})
        else:
            # One request in flight: with more, an error on the first request makes librdkafka
            # 2.16 bump the epoch on the OUT_OF_ORDER_SEQUENCE answers to the others and resend
            # them, storing duplicates (librdkafka issue 4953; compat-tests/cluster/FINDINGS.md).
            conf.update({"enable.idempotence": True, "acks": "all", "max.in.flight.requests.per.connection": 1})
        return conf

    def on_error(self, err) -> None:
        if err.fatal():
            self.history.record(self.proc_name, "info", "producer-fatal", error=_err_text(err))
            self.fatal.set()

    def on_delivery(self, value: str, partition: int, err, msg) -> None:
        if err is None:
            self.history.record(self.proc_name, "ok", "send", partition=partition, value=value, offset=msg.offset())
        else:
            # Also _PURGE_QUEUE: librdkafka re-queues a message for retry after a timeout or a
            # lost connection, and a purge of the queue then reports it as never sent although
            # the earlier attempt may have been appended (librdkafka's "possibly persisted",
            # which confluent-kafka does not expose): seen as "aborted reads" of purged values.
            # librdkafka cannot tell whether the broker appended it: unknown outcome.
            self.history.record(self.proc_name, "info", "send", partition=partition, value=value, error=_err_text(err))

    def work(self) -> None:
        producer = Producer(self.conf())
        interval = 1.0 / self.rate
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            if self.fatal.is_set():
                # A fatal idempotence error ends this producer instance; a new one carries on.
                producer.purge(in_queue=True, in_flight=False)
                producer.flush(10)
                self.incarnation += 1
                self.fatal.clear()
                producer = Producer(self.conf())
            n = self.sent
            partition = n % self.partitions
            value = f"{self.proc_name}-{n}"
            self.sent += 1
            self.history.record(self.proc_name, "invoke", "send", partition=partition, value=value)
            try:
                producer.produce(
                    self.topic, value=value.encode(), partition=partition,
                    on_delivery=lambda err, msg, v=value, p=partition: self.on_delivery(v, p, err, msg),
                )
            except (BufferError, KafkaException) as exc:
                self.history.record(self.proc_name, "fail", "send", partition=partition, value=value, error=repr(exc))
            next_t += interval
            while True:
                wait = next_t - time.monotonic()
                producer.poll(max(0.0, min(wait, 0.05)))
                if wait <= 0 or self.stop_event.is_set():
                    break
            if time.monotonic() - next_t > 5:
                next_t = time.monotonic()  # fell behind (stalled cluster): do not burst afterwards
        self.unresolved = producer.flush(45)
        if self.unresolved:
            # Still queued after 45 s: purge; their callbacks record them (unknown outcome).
            producer.purge(in_queue=True, in_flight=True)
            producer.flush(10)


class GroupConsumerWorker(Worker):
    """A member of the group: subscribes, polls, commits what it processed after each batch."""

    def __init__(self, name, history, stop, bootstrap, topic, group) -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.read = 0

    def on_assign(self, consumer, partitions) -> None:
        self.history.record(self.proc_name, "ok", "assign", partitions=sorted(tp.partition for tp in partitions), group=self.group)

    def on_revoke(self, consumer, partitions) -> None:
        self.history.record(self.proc_name, "ok", "revoke", partitions=sorted(tp.partition for tp in partitions), group=self.group)

    def on_lost(self, consumer, partitions) -> None:
        self.history.record(self.proc_name, "ok", "revoke", partitions=sorted(tp.partition for tp in partitions), group=self.group, lost=True)

    def work(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.proc_name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 60000,
            **CLIENT_TIMEOUTS,
        })
        consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        try:
            while not self.stop_event.is_set():
                batch: Dict[int, int] = {}
                deadline = time.monotonic() + 0.2
                while time.monotonic() < deadline and not self.stop_event.is_set():
                    msg = consumer.poll(0.1)
                    if msg is None:
                        continue
                    if msg.error():
                        self.history.record(self.proc_name, "info", "poll-error", error=_err_text(msg.error()))
                        continue
                    value = msg.value().decode() if msg.value() is not None else None
                    p, o = msg.partition(), msg.offset()
                    # One record per message: a rebalance inside poll() is recorded before it.
                    self.history.record(self.proc_name, "invoke", "poll")
                    self.history.record(self.proc_name, "ok", "poll", reads={str(p): [[o, value]]})
                    self.read += 1
                    batch[p] = o + 1
                if batch:
                    self.commit(consumer, batch)
        finally:
            close = threading.Thread(target=consumer.close, daemon=True)
            close.start()
            close.join(30)

    def commit(self, consumer: Consumer, batch: Dict[int, int]) -> None:
        offsets = {str(p): o for p, o in sorted(batch.items())}
        self.history.record(self.proc_name, "invoke", "commit", group=self.group, offsets=offsets)
        try:
            result = consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in batch.items()], asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            code = err.code() if hasattr(err, "code") else None
            kind = "fail" if code in COMMIT_REFUSED else "info"
            self.history.record(self.proc_name, kind, "commit", group=self.group, offsets=offsets, error=_err_text(err))
            return
        errors = [tp for tp in (result or []) if tp.error is not None]
        if not errors:
            self.history.record(self.proc_name, "ok", "commit", group=self.group, offsets=offsets)
        else:
            kind = "fail" if all(tp.error.code() in COMMIT_REFUSED for tp in errors) else "info"
            self.history.record(self.proc_name, kind, "commit", group=self.group, offsets=offsets,
                                error=_err_text(errors[0].error))


def assign_from_beginning(consumer: Consumer, topic: str, partitions: int) -> None:
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])  # -2 = OFFSET_BEGINNING


class ReaderWorker(Worker):
    """A standalone reader (assign, no group): reads every partition from the beginning; with
    ``rewind_s``, goes back to the beginning that often (on a tiered topic those reads come
    from the object store once the leaders' local logs start above 0)."""

    def __init__(self, name, history, stop, bootstrap, topic, partitions, rewind_s: Optional[float] = None) -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rewind_s = rewind_s
        self.read = 0

    def work(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"reader-{self.proc_name}",  # required by librdkafka; never joined
            "client.id": self.proc_name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **CLIENT_TIMEOUTS,
        })
        self.history.record(self.proc_name, "ok", "assign", partitions=list(range(self.partitions)), seek="beginning")
        assign_from_beginning(consumer, self.topic, self.partitions)
        next_rewind = time.monotonic() + self.rewind_s if self.rewind_s else None
        try:
            while not self.stop_event.is_set():
                self.poll_batch(consumer)
                if next_rewind is not None and time.monotonic() >= next_rewind:
                    # An assignment change in the history: the reader's position may go back.
                    self.history.record(self.proc_name, "ok", "assign", partitions=list(range(self.partitions)),
                                        seek="beginning", rewind=True)
                    assign_from_beginning(consumer, self.topic, self.partitions)
                    next_rewind = time.monotonic() + self.rewind_s
        finally:
            close = threading.Thread(target=consumer.close, daemon=True)
            close.start()
            close.join(30)

    def poll_batch(self, consumer: Consumer) -> int:
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        reads: Dict[str, List[list]] = {}
        for msg in msgs:
            if msg.error():
                self.history.record(self.proc_name, "info", "poll-error", error=_err_text(msg.error()))
                continue
            value = msg.value().decode() if msg.value() is not None else None
            reads.setdefault(str(msg.partition()), []).append([msg.offset(), value])
        if reads:
            self.history.record(self.proc_name, "invoke", "poll")
            self.history.record(self.proc_name, "ok", "poll", reads=reads)
        n = sum(len(v) for v in reads.values())
        self.read += n
        return n


class TopicHistory:
    """A ``History`` whose records all name ``topic``: the history of a topic other than the
    main one, checked apart from it (``checker.check(ops, topic)``)."""

    def __init__(self, history: History, topic: str) -> None:
        self.history, self.topic = history, topic

    def record(self, process: str, type_: str, f: str, t: Optional[float] = None, **fields):
        return self.history.record(process, type_, f, t, topic=self.topic, **fields)

    def close(self) -> None:
        self.history.close()


class CommittedReader(Worker):
    """Reads the group's committed offsets back every ``interval`` seconds."""

    def __init__(self, name, history, stop, bootstrap, topic, group, partitions, interval=2.0) -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.topic, self.group, self.interval = bootstrap, topic, group, interval
        self.partitions = partitions

    def read_once(self, consumer: Consumer, final: bool = False) -> bool:
        """OffsetFetch through a consumer that never joins the group. (The admin client's
        list_consumer_group_offsets aborted librdkafka 2.16.1 under faults; see
        docs/decisions/0017-one-process-per-test-client.md.)"""
        self.history.record(self.proc_name, "invoke", "committed", group=self.group)
        try:
            result = consumer.committed([TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=10)
        except Exception as exc:  # noqa: BLE001 - any failure: unknown outcome of a read
            self.history.record(self.proc_name, "info", "committed", group=self.group, error=repr(exc)[:300])
            return False
        offsets = {str(tp.partition): tp.offset for tp in result if tp.error is None and tp.offset >= 0}
        extra = {"final": True} if final else {}
        self.history.record(self.proc_name, "ok", "committed", group=self.group, offsets=offsets, **extra)
        return True

    def work(self) -> None:
        consumer = reader_for_group(self.bootstrap, self.group, self.proc_name)
        try:
            while not self.stop_event.wait(self.interval):
                self.read_once(consumer)
        finally:
            close = threading.Thread(target=consumer.close, daemon=True)
            close.start()
            close.join(30)


def reader_for_group(bootstrap: str, group: str, name: str) -> Consumer:
    """A consumer configured with the group's id that never subscribes, so it never joins."""
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        **CLIENT_TIMEOUTS,
    })


def drain(history: History, bootstrap: str, topic: str, partitions: int, timeout: float) -> Dict[str, object]:
    """Reads every partition from the beginning to its high watermark; records it all."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "drain",
        "client.id": "drain",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **CLIENT_TIMEOUTS,
    })
    reader = ReaderWorker("drain", history, threading.Event(), bootstrap, topic, partitions)
    ends: Dict[int, int] = {}
    lows: Dict[int, int] = {}
    for p in range(partitions):
        for _ in range(10):
            try:
                lows[p], ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                break
            except KafkaException:
                time.sleep(1)
    history.record("drain", "ok", "assign", partitions=list(range(partitions)), seek="beginning")
    assign_from_beginning(consumer, topic, partitions)
    deadline = time.monotonic() + timeout
    positions: Dict[int, int] = {}

    def done() -> bool:
        return len(ends) == partitions and all(
            ends[p] <= lows[p] or positions.get(p, -1) >= ends[p] for p in range(partitions)
        )

    while time.monotonic() < deadline:
        reader.poll_batch(consumer)
        for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
            positions[tp.partition] = tp.offset
        if done():
            break
    complete = done()
    history.record("drain", "ok", "drain-end", end_offsets={str(p): o for p, o in ends.items()},
                   positions={str(p): o for p, o in positions.items()}, complete=complete, read=reader.read)
    close = threading.Thread(target=consumer.close, daemon=True)
    close.start()
    close.join(30)
    return {"complete": complete, "end_offsets": ends, "read": reader.read}
