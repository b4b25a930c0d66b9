"""The transactional workload: consume-transform-produce (CTP) with exactly-once transactions.

- An input producer (idempotent, not transactional) writes ``CTP_INPUTS`` unique values
  (``i1-0``, ``i1-1``, ...) to the input topic, spread over most of the run, then stops.
- CTP workers (``x1``, ``x2``) share a consumer group (``read_committed``, no auto-commit). Each
  has a transactional producer whose ``transactional.id`` is fixed per worker slot, so a
  restarted worker fences its predecessor. A transaction: consume a batch, produce one output
  per input (``<input value>|<transaction id>``, same key, same partition number) to the output
  topic, add the consumed offsets with ``send_offsets_to_transaction``, commit. Every
  ``CTP_ABORT_EVERY``-th transaction is aborted on purpose, so aborted-read detection has
  aborted records to find.
- The final drain waits until the group's committed offsets reach the input's end, then reads
  the input topic and the output topic (``read_committed``) from the beginning to their ends.

History records (``checker.check_ctp`` reads them; ``history.py`` has the common fields):

- ``ctp-send``: like ``send`` (``partition``, ``value``, ``offset`` on ``ok``), for the input.
- ``txn``: ``invoke`` with ``txn`` (its id, ``<process>#<n>``), ``inputs``
  (``{"partition": [[offset, value], ...]}``), ``outputs`` (the values produced) and
  ``offsets`` (``{"partition": next offset}`` sent to the transaction); the completion is ``ok``
  (the commit was acknowledged), ``fail`` (definitely not committed: ``abort_transaction``
  returned, ``deliberate`` says whether on purpose) or ``info`` (unknown outcome: a commit or
  abort that timed out or was cut off by a fatal error). One transaction in flight per process.
- ``txn-init``: ``init_transactions`` of a worker's producer (``info`` = it failed; retried).
- ``ctp-restart`` (``info``): the worker exits to be restarted (``error`` says why).
- ``ctp-read``: what the final drain read, ``topic`` (``in`` | ``out``) and ``reads`` like a poll.
- ``ctp-caught-up``: the group's committed offsets against the input's end offsets before the
  drain (``ok`` = caught up; ``info`` = gave up waiting).
- ``ctp-drain-end``: per topic, the ``end_offsets`` it had to reach and whether it did
  (``complete``); also whether the group had committed every input first (``caught_up``).

The transaction coordinator of a worker's ``transactional.id`` is found with a raw
FindCoordinator request (key type 1); confluent-kafka 2.16's admin client has no transaction
API. The nemesis uses it to kill that node.

Every client call is bounded by a timeout; loops are bounded by a deadline or the stop event.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Dict, List, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from history import History
from secure import broker_socket, recv_exact
from workload import CLIENT_TIMEOUTS, Worker, _err_text, reader_for_group

IN_TOPIC = "ctp-in"
OUT_TOPIC = "ctp-out"
GROUP = "ctp-group"
PARTITIONS = 3
WORKERS = 2  # CTP worker slots; slot k has transactional.id TXN_ID_PREFIX + k
TXN_ID_PREFIX = "ctp-x"
CTP_INPUTS = 3000  # input records of one run (bounded)
INPUT_SPREAD = 0.6  # the input is written over this fraction of --duration
INPUT_RATE_MIN = 5.0  # records per second, at least
CTP_BATCH = 50  # inputs per transaction, at most
CTP_ABORT_EVERY = 7  # every 7th transaction of a worker is aborted on purpose
TXN_TIMEOUT_MS = 30000  # transaction.timeout.ms: a dead worker's open transaction ends within it
TXN_CALL_S = 30.0  # timeout of each transactional call (init, send offsets, commit, abort)
TXN_CALL_TRIES = 4  # retriable errors: a call is retried this many times, then the transaction aborts
INIT_TRIES = 10
POLL_S = 0.5
CATCH_UP_STALL_S = 60.0  # the final wait gives up when the group's committed offsets stop moving this long

# Exit status of a worker that hit a fatal error or an unknown transaction outcome: the harness
# restarts it under a new incarnation (the same transactional.id fences the old producer).
EXIT_RESTART = 3

FIND_COORDINATOR = 10  # API key
COORDINATOR_TXN = 1  # key type: transactional id


def txn_id(slot: int) -> str:
    return f"{TXN_ID_PREFIX}{slot}"


def output_value(input_value: str, txn: str) -> str:
    return f"{input_value}|{txn}"


class Restart(Exception):
    """Ends the worker process with EXIT_RESTART."""


class InputProducer(Worker):
    """Writes ``total`` unique values at ``rate`` per second, round-robin over partitions, then stops.
    ``op`` names its records (``ctp-send``; the share workload's input is ``share-send``)."""

    def __init__(self, name, history, stop, bootstrap, total: int, rate: float, topic: str = IN_TOPIC,
                 partitions: int = PARTITIONS, op: str = "ctp-send") -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.total, self.rate = bootstrap, total, rate
        self.topic, self.partitions, self.op = topic, partitions, op

    def on_delivery(self, value: str, partition: int, err, msg) -> None:
        if err is None:
            self.history.record(self.proc_name, "ok", self.op, partition=partition, value=value, offset=msg.offset())
        elif err.code() == KafkaError._PURGE_QUEUE:
            self.history.record(self.proc_name, "fail", self.op, partition=partition, value=value, error=_err_text(err))
        else:
            self.history.record(self.proc_name, "info", self.op, partition=partition, value=value, error=_err_text(err))

    def work(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap,
            "client.id": self.proc_name,
            "linger.ms": 5,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 1,  # librdkafka issue 4953, see workload.py
            "message.timeout.ms": 120000,
            "request.timeout.ms": 10000,
            **CLIENT_TIMEOUTS,
        })
        interval = 1.0 / self.rate
        next_t = time.monotonic()
        for n in range(self.total):
            if self.stop_event.is_set():
                break
            partition = n % self.partitions
            value = f"{self.proc_name}-{n}"
            self.history.record(self.proc_name, "invoke", self.op, partition=partition, value=value)
            try:
                producer.produce(self.topic, key=value.encode(), value=value.encode(), partition=partition,
                                 on_delivery=lambda err, msg, v=value, p=partition: self.on_delivery(v, p, err, msg))
            except (BufferError, KafkaException) as exc:
                self.history.record(self.proc_name, "fail", self.op, partition=partition, value=value, error=repr(exc))
            next_t += interval
            while True:
                wait = next_t - time.monotonic()
                producer.poll(max(0.0, min(wait, 0.05)))
                if wait <= 0 or self.stop_event.is_set():
                    break
            if time.monotonic() - next_t > 5:
                next_t = time.monotonic()
        if producer.flush(60):
            producer.purge(in_queue=True, in_flight=True)
            producer.flush(10)


def _kafka_error(exc: BaseException):
    return exc.args[0] if isinstance(exc, KafkaException) and exc.args else None


class CtpWorker(Worker):
    """consume -> transform -> produce + send_offsets -> commit, one transaction per batch."""

    def __init__(self, name, history, stop, bootstrap, transactional_id: str) -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.transactional_id = bootstrap, transactional_id
        self.seq = 0
        self.committed = 0
        self.aborted = 0

    # --- clients ----------------------------------------------------------------------------------
    def producer(self) -> Producer:
        producer = Producer({
            "bootstrap.servers": self.bootstrap,
            "client.id": f"{self.proc_name}-txn",
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 1,
            "linger.ms": 5,
            "request.timeout.ms": 10000,
            **CLIENT_TIMEOUTS,
        })
        for attempt in range(INIT_TRIES):
            if self.stop_event.is_set():
                raise Restart("stopped during init_transactions")
            self.history.record(self.proc_name, "invoke", "txn-init", transactional_id=self.transactional_id)
            try:
                producer.init_transactions(TXN_CALL_S)
                self.history.record(self.proc_name, "ok", "txn-init", transactional_id=self.transactional_id)
                return producer
            except KafkaException as exc:
                err = _kafka_error(exc)
                self.history.record(self.proc_name, "info", "txn-init", transactional_id=self.transactional_id,
                                    error=_err_text(err))
                if err is None or not err.retriable():
                    raise
                self.stop_event.wait(min(5.0, 1.0 + attempt))
        raise Restart(f"init_transactions failed {INIT_TRIES} times")

    def consumer(self) -> Consumer:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": GROUP,
            "client.id": self.proc_name,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 60000,
            **CLIENT_TIMEOUTS,
        })
        rec = self.history.record
        consumer.subscribe(
            [IN_TOPIC],
            on_assign=lambda c, ps: rec(self.proc_name, "ok", "assign", partitions=sorted(tp.partition for tp in ps), group=GROUP),
            on_revoke=lambda c, ps: rec(self.proc_name, "ok", "revoke", partitions=sorted(tp.partition for tp in ps), group=GROUP),
            on_lost=lambda c, ps: rec(self.proc_name, "ok", "revoke", partitions=sorted(tp.partition for tp in ps), group=GROUP, lost=True),
        )
        return consumer

    # --- the loop ---------------------------------------------------------------------------------
    def work(self) -> None:
        producer = self.producer()
        consumer = self.consumer()
        try:
            while not self.stop_event.is_set():
                msgs = consumer.consume(num_messages=CTP_BATCH, timeout=POLL_S)
                batch = []
                for msg in msgs:
                    if msg.error():
                        self.history.record(self.proc_name, "info", "poll-error", error=_err_text(msg.error()))
                    else:
                        batch.append(msg)
                if batch:
                    self.transaction(producer, consumer, batch)
        finally:
            close = threading.Thread(target=consumer.close, daemon=True)
            close.start()
            close.join(30)

    def transaction(self, producer: Producer, consumer: Consumer, batch: list) -> None:
        # The group generation the batch was consumed under: a rebalance since then makes the
        # offset commit fail (zombie fencing), and the transaction aborts.
        group_meta = consumer.consumer_group_metadata()
        self.seq += 1
        txn = f"{self.proc_name}#{self.seq}"
        deliberate = self.seq % CTP_ABORT_EVERY == 0
        inputs: Dict[str, List[list]] = {}
        starts: Dict[int, int] = {}
        nexts: Dict[int, int] = {}
        outputs: List[str] = []
        for msg in batch:
            p, o = msg.partition(), msg.offset()
            value = msg.value().decode() if msg.value() is not None else ""
            inputs.setdefault(str(p), []).append([o, value])
            starts.setdefault(p, o)
            nexts[p] = o + 1
            outputs.append(output_value(value, txn))
        offsets = {str(p): o for p, o in sorted(nexts.items())}
        self.history.record(self.proc_name, "invoke", "txn", txn=txn, inputs=inputs, outputs=outputs, offsets=offsets,
                            deliberate=deliberate)
        outcome, error, restart = self.run_transaction(producer, batch, outputs, nexts, group_meta, deliberate)
        extra = {"error": error} if error else {}
        self.history.record(self.proc_name, outcome, "txn", txn=txn, deliberate=deliberate and outcome == "fail", **extra)
        if outcome == "ok":
            self.committed += 1
        elif outcome == "fail":
            self.aborted += 1
        if restart:
            raise Restart(f"transaction {txn}: {outcome} ({error})")
        if outcome == "fail":
            # Definitely aborted: consume the batch again. A partition revoked meanwhile is not
            # ours any more; its new owner resumes from the committed offset.
            for p, o in starts.items():
                try:
                    consumer.seek(TopicPartition(IN_TOPIC, p, o))
                except KafkaException as exc:
                    mine = {tp.partition for tp in consumer.assignment() if tp.topic == IN_TOPIC}
                    if p in mine:
                        # Still ours but not rewound: going on would commit past the batch.
                        raise Restart(f"seek back to {p}@{o} after {txn} failed: {exc!r}") from exc

    def run_transaction(self, producer: Producer, batch: list, outputs: List[str], nexts: Dict[int, int],
                        group_meta, deliberate: bool) -> Tuple[str, str, bool]:
        """Returns (outcome, error, restart): ``ok`` committed, ``fail`` definitely not committed,
        ``info`` unknown; restart when the producer is unusable (fatal error, unknown outcome)."""
        try:
            producer.begin_transaction()
            for msg, value in zip(batch, outputs):
                producer.produce(OUT_TOPIC, key=msg.key(), value=value.encode(), partition=msg.partition())
                producer.poll(0)
            offsets = [TopicPartition(IN_TOPIC, p, o) for p, o in sorted(nexts.items())]
            self._call(lambda: producer.send_offsets_to_transaction(offsets, group_meta, TXN_CALL_S))
        except (KafkaException, BufferError) as exc:
            err = _kafka_error(exc)
            if err is not None and err.fatal():
                # No commit was ever requested: the transaction cannot have committed; whoever
                # fenced this producer aborts it.
                return "fail", f"fatal before commit: {_err_text(err)}", True
            return self.abort(producer, f"before commit: {_err_text(err) if err is not None else repr(exc)}")
        if deliberate:
            return self.abort(producer, "")
        try:
            self._call(lambda: producer.commit_transaction(TXN_CALL_S))
            return "ok", "", False
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err is not None and err.txn_requires_abort():
                return self.abort(producer, f"commit: {_err_text(err)}")
            return "info", f"commit: {_err_text(err) if err is not None else repr(exc)}", True

    def abort(self, producer: Producer, why: str) -> Tuple[str, str, bool]:
        try:
            self._call(lambda: producer.abort_transaction(TXN_CALL_S))
        except KafkaException as exc:
            return "info", f"abort failed: {_err_text(_kafka_error(exc))}; {why}", True
        return "fail", why, False

    def _call(self, fn) -> None:
        """Runs a transactional call, retrying it on retriable errors up to TXN_CALL_TRIES times."""
        for attempt in range(TXN_CALL_TRIES):
            try:
                fn()
                return
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is None or not err.retriable() or err.txn_requires_abort() or err.fatal() \
                        or attempt == TXN_CALL_TRIES - 1:
                    raise
                time.sleep(0.5)  # a short fixed back-off between retries of the same call


def _watermarks(consumer: Consumer, topic: str, deadline: float) -> Dict[int, Tuple[int, int]]:
    marks: Dict[int, Tuple[int, int]] = {}
    while len(marks) < PARTITIONS and time.monotonic() < deadline:
        for p in range(PARTITIONS):
            if p in marks:
                continue
            try:
                marks[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            except KafkaException:
                pass
        if len(marks) < PARTITIONS:
            time.sleep(1)
    return marks


def wait_caught_up(history: History, bootstrap: str, deadline: float) -> bool:
    """Waits until the CTP group has committed the input topic's end offsets (until ``deadline``,
    or until they have not moved for CATCH_UP_STALL_S)."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp-probe", "client.id": "ctp-probe",
                      "enable.auto.commit": False, **CLIENT_TIMEOUTS})
    group = reader_for_group(bootstrap, GROUP, "ctp-committed")
    try:
        ends = _watermarks(probe, IN_TOPIC, deadline)
        committed: Dict[int, int] = {}
        moved = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - moved < CATCH_UP_STALL_S:
            try:
                result = group.committed([TopicPartition(IN_TOPIC, p) for p in range(PARTITIONS)], timeout=10)
                now = {tp.partition: tp.offset for tp in result if tp.error is None}
                if now != committed:
                    committed, moved = now, time.monotonic()
            except KafkaException:
                pass
            if len(ends) == PARTITIONS and all(committed.get(p, -1) >= ends[p][1] for p in range(PARTITIONS)):
                history.record("ctp-drain", "ok", "ctp-caught-up", end_offsets={str(p): e[1] for p, e in ends.items()},
                               committed={str(p): o for p, o in committed.items()})
                return True
            time.sleep(1)
        history.record("ctp-drain", "info", "ctp-caught-up", end_offsets={str(p): e[1] for p, e in ends.items()},
                       committed={str(p): o for p, o in committed.items()})
        return False
    finally:
        for c in (probe, group):
            close = threading.Thread(target=c.close, daemon=True)
            close.start()
            close.join(15)


def drain_topic(history: History, bootstrap: str, topic: str, tag: str, deadline: float) -> Tuple[bool, Dict[int, int], int]:
    """Reads every partition of ``topic`` (read_committed) from the beginning until each reached its
    end (partition EOF at or past the end offset taken first); records ``ctp-read`` ops."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"ctp-drain-{tag}",  # required by librdkafka; never joined
        "client.id": f"ctp-drain-{tag}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        **CLIENT_TIMEOUTS,
    })
    marks = _watermarks(consumer, topic, deadline)
    ends = {p: hw for p, (_, hw) in marks.items()}
    reached = {p for p, (lo, hw) in marks.items() if hw <= lo}
    consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])  # -2 = OFFSET_BEGINNING
    read = 0
    try:
        while time.monotonic() < deadline and (len(ends) < PARTITIONS or len(reached) < PARTITIONS):
            msgs = consumer.consume(num_messages=500, timeout=0.5)
            reads: Dict[str, List[list]] = {}
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= ends.get(msg.partition(), 1 << 62):
                            reached.add(msg.partition())
                    else:
                        history.record("ctp-drain", "info", "poll-error", topic=tag, error=_err_text(err))
                    continue
                value = msg.value().decode() if msg.value() is not None else None
                reads.setdefault(str(msg.partition()), []).append([msg.offset(), value])
            if reads:
                read += sum(len(v) for v in reads.values())
                history.record("ctp-drain", "invoke", "ctp-read", topic=tag)
                history.record("ctp-drain", "ok", "ctp-read", topic=tag, reads=reads)
        complete = len(ends) == PARTITIONS and len(reached) == PARTITIONS
        return complete, ends, read
    finally:
        close = threading.Thread(target=consumer.close, daemon=True)
        close.start()
        close.join(15)


def drain(history: History, bootstrap: str, timeout: float) -> Dict[str, object]:
    """Waits for the group to catch up (half the time at most), then reads both topics."""
    t0 = time.monotonic()
    caught_up = wait_caught_up(history, bootstrap, t0 + timeout / 2)
    result: Dict[str, object] = {"caught_up": caught_up}
    for tag, topic in (("in", IN_TOPIC), ("out", OUT_TOPIC)):
        complete, ends, read = drain_topic(history, bootstrap, topic, tag, time.monotonic() + timeout / 4)
        result[tag] = {"complete": complete, "read": read}
        history.record("ctp-drain", "ok", "ctp-drain-end", topic=tag, complete=complete, read=read,
                       end_offsets={str(p): o for p, o in ends.items()}, caught_up=caught_up)
    return result


# --- FindCoordinator (key type 1) over a raw socket ----------------------------------------------

def _string(s: Optional[str]) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def find_coordinator_at(addr: str, key: str, timeout: float, key_type: int = COORDINATOR_TXN) -> Tuple[int, int]:
    """One FindCoordinator v1 request to ``addr``; returns (error code, coordinator node id)."""
    correlation = 1
    header = struct.pack(">hhi", FIND_COORDINATOR, 1, correlation) + _string("harness-find-coordinator")
    body = _string(key) + struct.pack(">b", key_type)
    request = header + body
    with broker_socket(addr, timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        resp = recv_exact(sock, size)
    got_corr, _throttle, error = struct.unpack_from(">iih", resp, 0)
    if got_corr != correlation:
        raise ValueError(f"correlation id {got_corr}, expected {correlation}")
    pos = 10
    msg_len = struct.unpack_from(">h", resp, pos)[0]
    pos += 2 + max(0, msg_len)
    node_id = struct.unpack_from(">i", resp, pos)[0]
    return error, node_id


def find_txn_coordinator(bootstrap: str, transactional_id: str, timeout: float = 3.0) -> Tuple[Optional[int], List[str]]:
    """Asks each bootstrap address in turn; returns (node id or None, the answers that failed)."""
    failures: List[str] = []
    for addr in bootstrap.split(","):
        try:
            error, node = find_coordinator_at(addr, transactional_id, timeout)
        except (OSError, ValueError, struct.error) as exc:
            failures.append(f"{addr}: {exc!r}"[:200])
            continue
        if error == 0 and node >= 0:
            return node, failures
        failures.append(f"{addr}: error code {error}")
    return None, failures
