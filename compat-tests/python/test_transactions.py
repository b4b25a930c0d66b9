"""Transactions (KIP-98, with KIP-360/KIP-588 epoch bumps and KIP-447 offset commits): transactional
producers of confluent-kafka 2.16.1 (librdkafka 2.16.0) and what read_committed / read_uncommitted
consumers, ListOffsets and Kafka's own tools see of them.

A broker for the module, started with
    transaction.state.log.replication.factor=1   (one broker: the defaults of 3 and 2 would leave
    transaction.state.log.min.isr=1               __transaction_state without a coordinator)
    transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
                                                 (the coordinator looks for timed-out transactions
                                                  every second instead of every 10 s)
transaction.state.log.num.partitions and transaction.max.timeout.ms keep their defaults (50,
900000). Every test has its own topics and transactional ids.

Checks:
- commit one, abort one: a read_committed consumer gets exactly the committed records, in order;
  read_uncommitted gets the aborted ones too; each transaction marker (a control batch) takes one
  offset and is never delivered as a message (high watermark = N + M + 2).
- a committed and an aborted transaction spanning three partitions of two topics: markers on each.
- the last stable offset: while a transaction is open, ListOffsets(latest, read_committed) and a
  read_committed consumer's watermarks give the offset of its first record, read_uncommitted the
  high watermark; a read_committed consumer stops there until the commit, then gets the records.
- fencing: a producer SIGKILLed in the middle of a transaction (txn_child.py) is fenced by a new
  producer with its transactional.id, whose init_transactions aborts the open transaction; and a
  live producer fenced that way fails fatally with _FENCED, and its late record is not appended.
- timeout: the coordinator aborts a transaction older than transaction.timeout.ms on its own; the
  LSO moves past it; the producer's commit_transaction then fails fatally with _FENCED.
- kafka-python 3.0.12 with isolation_level='read_committed' skips an aborted transaction written by
  librdkafka and stops at an open one (end_offsets = the LSO) until it commits.
- send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit): the group's offset is committed
  by the transaction's commit only, not by an abort.
- Kafka's TransactionsCommand (kafka-transactions.sh) list / describe / describe-producers: an open
  transaction is Ongoing with its partitions, CompleteCommit after the commit; an unknown id fails;
  `list --transactional-id-pattern` (ListTransactions v2, KIP-1152) keeps the ids the pattern
  matches as a whole, and an invalid pattern fails with INVALID_REGULAR_EXPRESSION.
- raw FindCoordinator (key_type 1), InitProducerId and EndTxn edge cases, with Kafka's error codes.

What Apache Kafka 4.1.1 does (asserted):
- librdkafka speaks FindCoordinator v2, InitProducerId v4, AddPartitionsToTxn v0, Produce v10,
  EndTxn v1 (AddOffsetsToTxn/TxnOffsetCommit for send_offsets_to_transaction).
- Offsets: commit of records 0..N-1 puts the COMMIT marker at N; the aborted records follow at
  N+1..N+M, the ABORT marker at N+M+1. A read_committed consumer's EOF is at the high
  watermark once nothing is open, past the aborted records and both markers.
- commit_transaction returns before the markers are written (EndTxn answers once PrepareCommit is in
  the transaction log): right after it, ListOffsets(read_committed) may still give the old LSO, so
  every check after a commit or abort polls (bounded) until LSO = high watermark.
- A read_committed consumer's get_watermark_offsets (cached=False) gives (0, LSO).
- Fencing by a new producer: its InitProducerId gets CONCURRENT_TRANSACTIONS (51) while the
  coordinator aborts the old transaction (librdkafka retries, logs "Failed to acquire transactional
  PID ... concurrent operation ...: retrying"), then succeeds; by then the ABORT marker is
  written. The killed producer's disconnect aborts nothing by itself.
- The fenced producer (observed): its next Produce is refused with INVALID_PRODUCER_EPOCH (47,
  "Producer attempted an operation with an old epoch"; librdkafka: fatal _FENCED "transactional
  producer fenced by newer producer instance") and that record is not appended; with no record
  pending its commit's EndTxn v1 is refused with INVALID_PRODUCER_EPOCH (47) (fatal _FENCED
  "Failed to end transaction: Local: This instance has been fenced by a newer instance").
  EndTxn v2+ would get PRODUCER_FENCED (90) instead (see the raw test). Not asserted (client-side):
  what librdkafka answers to later calls (begin_transaction: _FENCED after a failed EndTxn, but
  _CONFLICT "commit_transaction API call is already in progress" after a failed Produce).
- Timeout: the coordinator aborts a transaction once transaction.timeout.ms have passed since its
  start, at the next cleanup pass (about 3-4 s for 3000 ms with the 1000 ms interval), bumping the
  epoch; the producer's later commit_transaction gets EndTxn INVALID_PRODUCER_EPOCH (47) -> fatal
  _FENCED ("Failed to end transaction: Local: This instance has been fenced by a newer instance").
- kafka-python read_committed: end_offsets = the LSO, position ends at the LSO (past markers).
- TxnOffsetCommit: the offset is invisible (-1001 with require_stable=false) until the COMMIT marker
  reaches __consumer_offsets; an abort discards it. (A require_stable OffsetFetch, librdkafka's
  consumer.committed() under read_committed, gets UNSTABLE_OFFSET_COMMIT while it is pending and
  retries until its timeout: not used.)
- TransactionsCommand: `list` prints TransactionalId, Coordinator, ProducerId, TransactionState;
  `describe` prints CoordinatorId, TransactionalId, ProducerId, ProducerEpoch, TransactionState,
  TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationMs, TopicPartitions
  (topic-partition,... while Ongoing, empty after the commit; the epoch stays 0 with librdkafka's
  EndTxn v1); `describe-producers` shows CurrentTransactionStartOffset = the first offset of the
  open transaction, "None" after it; describe of an unknown id exits 1: "... failed because the ID
  could not be found" (DescribeTransactions TRANSACTIONAL_ID_NOT_FOUND).
- Raw: FindCoordinator v1 key_type 1 -> 0 and this broker (once __transaction_state exists);
  InitProducerId v1 with transaction_timeout_ms 900001, 0 or -1 -> INVALID_TRANSACTION_TIMEOUT (50)
  with producer id and epoch -1; an empty transactional id -> INVALID_REQUEST (42); a second
  InitProducerId for one id -> the same producer id, epoch + 1; no id -> a new producer id, epoch 0.
  EndTxn v1 for an unknown id -> INVALID_PRODUCER_ID_MAPPING (49), as for a wrong producer id; an
  old epoch -> INVALID_PRODUCER_EPOCH (47) on v0/v1, PRODUCER_FENCED (90) on v2; the right epoch
  with no transaction open -> INVALID_TXN_STATE (48), commit and abort alike.

Runs against Apache Kafka too (the reference broker, 4.4.0) (MILLRACE_BIN=compat-tests/reference/kafka-shim.sh).
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

import test_confluent_kafka as ck
from millrace import Broker, unique_topic, wait_until
from secure_clients import Wire, java_tool, stop_checked, wire_str

OP_TIMEOUT = 15.0      # seconds, for every single client operation that should succeed
TXN_TIMEOUT = 30.0     # seconds for init_transactions / commit / abort (a fencing init retries)
STABLE_TIMEOUT = 30.0  # seconds for the markers of a finished transaction to show (LSO = HWM)
ABORT_TIMEOUT = 30.0   # seconds for the coordinator to abort a timed-out transaction
QUIET = 1.0            # seconds a read_committed consumer at the LSO must get nothing more

SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
CHILD = Path(__file__).resolve().parent / "txn_child.py"
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"  # kafka-transactions.sh

RC, RU = "read_committed", "read_uncommitted"

# Kafka error codes (raw checks)
NONE = 0
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
PRODUCER_FENCED = 90
NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


# ------------------------------------------------------------------ the broker
@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    """This module's broker, with the transaction settings above (overrides the plugin's)."""
    b = Broker(settings=SETTINGS).start()
    try:
        yield b
    finally:
        stop_checked(b)


# ------------------------------------------------------------------ clients
def txn_producer(broker: Broker, tid: str, **extra: object) -> Producer:
    """A transactional producer (librdkafka turns idempotence on with transactional.id)."""
    conf: Dict[str, object] = {"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                               "acks": "all", "linger.ms": 5}
    conf.update(extra)
    return Producer(conf)


def send(p: Producer, topic: str, values: List[bytes], partition: int = 0) -> List[int]:
    """Produce VALUES to PARTITION of TOPIC in P's open transaction and flush; returns their offsets.
    (Only for deliveries that must succeed: confluent-kafka 2.16.1 raises a fatal error from flush()
    and then a delivery callback finds that exception pending, a SystemError.)"""
    offsets: Dict[int, int] = {}
    errors: List[str] = []

    def on_delivery(i: int):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                offsets[i] = msg.offset()
        return cb

    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=partition, on_delivery=on_delivery(i))
        p.poll(0)
    remaining = p.flush(OP_TIMEOUT)
    assert remaining == 0, f"{remaining} records still undelivered after {OP_TIMEOUT} s"
    assert not errors, f"delivery failed: {errors[:5]}"
    return [offsets[i] for i in range(len(values))]


def consumer(broker: Broker, isolation: str, group: str = "compat-txn-unused") -> Consumer:
    """A consumer with ISOLATION stated (librdkafka's default is read_committed); never commits."""
    return Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",  # an out-of-range fetch must surface
    })


def read_until(c: Consumer, end: int, timeout: float = 30.0) -> List[Tuple[int, bytes]]:
    """(offset, value) of the messages C gets until a partition EOF at offset END or later (the
    consumer's end: the LSO for read_committed, the high watermark for read_uncommitted)."""
    out: List[Tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"no partition EOF at offset {end} within {timeout} s; got {out}"
        msg = c.poll(0.5)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                if msg.offset() >= end:
                    return out
                continue
            raise AssertionError(f"consumer error: {err}")
        out.append((msg.offset(), msg.value()))


def read_partition(broker: Broker, topic: str, isolation: str, end: int,
                   partition: int = 0) -> List[Tuple[int, bytes]]:
    """(offset, value) of everything an ISOLATION consumer reads of PARTITION from offset 0 up to
    its EOF at END."""
    c = consumer(broker, isolation)
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        return read_until(c, end)
    finally:
        c.close()


def assert_quiet(c: Consumer, seconds: float = QUIET) -> None:
    """C gets no message within SECONDS (EOF events allowed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            raise AssertionError(f"read offset {msg.offset()} ({msg.value()!r}) beyond the last stable offset")


def latest(adm: AdminClient, topic: str, isolation: IsolationLevel, partition: int = 0) -> int:
    """ListOffsets(latest) with ISOLATION: the LSO (READ_COMMITTED) or high watermark."""
    tp = TopicPartition(topic, partition)
    futures = adm.list_offsets({tp: OffsetSpec.latest()}, isolation_level=isolation,
                               request_timeout=OP_TIMEOUT)
    return futures[tp].result(timeout=OP_TIMEOUT).offset


def ends(adm: AdminClient, topic: str, partition: int = 0) -> Tuple[int, int]:
    """(LSO, high watermark) of PARTITION."""
    return (latest(adm, topic, IsolationLevel.READ_COMMITTED, partition),
            latest(adm, topic, IsolationLevel.READ_UNCOMMITTED, partition))


def await_stable(adm: AdminClient, topic: str, end: int, partition: int = 0,
                 timeout: float = STABLE_TIMEOUT) -> None:
    """Waits until LSO = high watermark = END (every marker written, nothing open)."""
    wait_until(lambda: ends(adm, topic, partition) == (end, end), timeout=timeout, interval=0.05,
               what=f"{topic}[{partition}]: LSO = high watermark = {end}")


def values(prefix: str, n: int) -> List[bytes]:
    return [f"{prefix} {i}".encode() for i in range(n)]


def fatal(info: pytest.ExceptionInfo) -> KafkaError:
    err = info.value.args[0]
    assert isinstance(err, KafkaError), f"raised {info.value!r}"
    return err


# ------------------------------------------------------------------ commit and abort
def test_commit_one_abort_one(broker):
    """A read_committed consumer gets exactly the committed records, in order, nothing of the aborted
    transaction; read_uncommitted gets both; each marker takes one offset and is never delivered."""
    adm, topic = ck.admin(broker), unique_topic("txn-basic")
    ck.create_topic(adm, topic)
    n, m = 5, 3
    committed, aborted = values("committed", n), values("aborted", m)
    p = txn_producer(broker, unique_topic("txn-basic-id"))
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    committed_at = send(p, topic, committed)
    p.commit_transaction(TXN_TIMEOUT)
    p.begin_transaction()
    aborted_at = send(p, topic, aborted)
    p.abort_transaction(TXN_TIMEOUT)

    assert committed_at == list(range(n))
    assert aborted_at == list(range(n + 1, n + 1 + m)), "the COMMIT marker takes offset N"
    await_stable(adm, topic, n + m + 2)  # the ABORT marker at N+M+1

    assert read_partition(broker, topic, RC, n + m + 2) == list(zip(committed_at, committed))
    assert read_partition(broker, topic, RU, n + m + 2) == list(zip(committed_at + aborted_at,
                                                                    committed + aborted))


def test_transaction_spans_partitions_and_topics(broker):
    """One transaction over two partitions of a topic and a second topic: its commit makes its
    records visible on all three, its abort hides them on all three (a marker on each)."""
    adm, a, b = ck.admin(broker), unique_topic("txn-span-a"), unique_topic("txn-span-b")
    ck.create_topic(adm, a, partitions=2)
    ck.create_topic(adm, b)
    parts = [(a, 0), (a, 1), (b, 0)]
    p = txn_producer(broker, unique_topic("txn-span-id"))
    p.init_transactions(TXN_TIMEOUT)
    at: Dict[Tuple[str, int, str], List[int]] = {}
    for outcome in ("commit", "abort"):
        p.begin_transaction()
        for t, part in parts:
            at[(t, part, outcome)] = send(p, t, values(f"{outcome} {t}[{part}]", 2), partition=part)
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(TXN_TIMEOUT)
    for t, part in parts:
        assert (at[(t, part, "commit")], at[(t, part, "abort")]) == ([0, 1], [3, 4]), f"{t}[{part}]"
        await_stable(adm, t, 6, part)
        want_c = list(zip([0, 1], values(f"commit {t}[{part}]", 2)))
        want_a = list(zip([3, 4], values(f"abort {t}[{part}]", 2)))
        assert read_partition(broker, t, RC, 6, part) == want_c, f"{t}[{part}] read_committed"
        assert read_partition(broker, t, RU, 6, part) == want_c + want_a, f"{t}[{part}] read_uncommitted"


# ------------------------------------------------------------------ last stable offset
def test_last_stable_offset_holds_read_committed_until_commit(broker):
    """While a transaction is open, ListOffsets(read_committed) and a read_committed consumer's
    watermarks give its first offset (the LSO), read_uncommitted the high watermark; a read_committed
    consumer stops at the LSO and gets the records only once they are committed."""
    adm, topic = ck.admin(broker), unique_topic("txn-lso")
    ck.create_topic(adm, topic)
    first, second = values("first", 3), values("open", 4)
    p = txn_producer(broker, unique_topic("txn-lso-id"))
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    assert send(p, topic, first) == [0, 1, 2]
    p.commit_transaction(TXN_TIMEOUT)
    await_stable(adm, topic, 4)

    p.begin_transaction()
    open_at = send(p, topic, second)
    assert open_at == [4, 5, 6, 7]
    assert ends(adm, topic) == (4, 8), "(LSO, high watermark) with a transaction open from offset 4"
    tp = TopicPartition(topic, 0)
    c_rc, c_ru = consumer(broker, RC), consumer(broker, RU)
    try:
        assert c_rc.get_watermark_offsets(tp, timeout=OP_TIMEOUT, cached=False) == (0, 4)
        assert c_ru.get_watermark_offsets(tp, timeout=OP_TIMEOUT, cached=False) == (0, 8)
        c_rc.assign([TopicPartition(topic, 0, 0)])
        c_ru.assign([TopicPartition(topic, 0, 0)])
        assert read_until(c_rc, 4) == list(zip([0, 1, 2], first))
        assert_quiet(c_rc)
        assert read_until(c_ru, 8) == list(zip([0, 1, 2] + open_at, first + second))

        p.commit_transaction(TXN_TIMEOUT)
        await_stable(adm, topic, 9)
        assert read_until(c_rc, 9) == list(zip(open_at, second)), "the committed records after the LSO moved"
    finally:
        c_rc.close()
        c_ru.close()


# ------------------------------------------------------------------ fencing
def test_killed_producer_is_fenced_and_its_transaction_aborted(broker, tmp_path):
    """A producer SIGKILLed in the middle of a transaction leaves it open (LSO held); a new producer
    with the same transactional.id fences it: its init_transactions aborts the open transaction
    (ABORT marker), then its own transaction commits. read_committed gets only the new producer's
    records, read_uncommitted both."""
    adm, topic, tid = ck.admin(broker), unique_topic("txn-zombie"), unique_topic("txn-zombie-id")
    ck.create_topic(adm, topic)
    zombie = values("zombie", 4)
    out = tmp_path / "child.out"
    err = tmp_path / "child.err"
    with open(err, "wb") as err_fh:
        child = subprocess.Popen([sys.executable, str(CHILD), broker.bootstrap, topic, tid, str(len(zombie)), str(out)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_fh)
    try:
        def child_ready() -> Optional[str]:
            if child.poll() is not None and not out.exists():
                raise AssertionError(f"txn_child.py exited {child.returncode}: {err.read_text()[-2000:]}")
            return out.read_text().strip() if out.exists() else None
        line = wait_until(child_ready, timeout=TXN_TIMEOUT, interval=0.1, what="txn_child.py to report")
        assert line == "READY 0,1,2,3", f"txn_child.py: {line}; stderr {err.read_text()[-2000:]}"
        assert ends(adm, topic) == (0, 4), "the child's transaction is open"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    # Its connection is gone, its transaction is not: nothing aborts it before the fencing (its
    # transaction.timeout.ms is 60 s).
    assert ends(adm, topic) == (0, 4), "(LSO, high watermark) after the SIGKILL"

    p = txn_producer(broker, tid, **{"transaction.timeout.ms": 60000})
    p.init_transactions(TXN_TIMEOUT)  # CONCURRENT_TRANSACTIONS until the abort is done: retried
    await_stable(adm, topic, 5, timeout=OP_TIMEOUT)  # the ABORT marker at 4
    mine = values("successor", 3)
    p.begin_transaction()
    mine_at = send(p, topic, mine)
    assert mine_at == [5, 6, 7]
    p.commit_transaction(TXN_TIMEOUT)
    await_stable(adm, topic, 9)

    assert read_partition(broker, topic, RC, 9) == list(zip(mine_at, mine))
    assert read_partition(broker, topic, RU, 9) == list(zip([0, 1, 2, 3] + mine_at, zombie + mine))


def test_live_producer_is_fenced_by_a_second_instance(broker):
    """Two producers with one transactional.id in one process: the second's init_transactions aborts
    the first's open transaction and fences it; the first's next record is refused (not appended)
    and its commit_transaction raises a fatal _FENCED."""
    adm, topic, tid = ck.admin(broker), unique_topic("txn-fence"), unique_topic("txn-fence-id")
    ck.create_topic(adm, topic)
    old_vals, new_vals = values("old", 3), values("new", 2)
    old = txn_producer(broker, tid)
    old.init_transactions(TXN_TIMEOUT)
    old.begin_transaction()
    assert send(old, topic, old_vals) == [0, 1, 2]

    new = txn_producer(broker, tid)
    new.init_transactions(TXN_TIMEOUT)
    await_stable(adm, topic, 4, timeout=OP_TIMEOUT)  # the old transaction aborted: marker at 3

    # No delivery callback here (see send()): the record is refused with INVALID_PRODUCER_EPOCH (47),
    # which librdkafka raises as a fatal _FENCED from the commit's flush.
    old.produce(topic, value=b"late", partition=0)
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(TXN_TIMEOUT)
    err = fatal(info)
    del info
    # Observed on Kafka 4.1.1: KafkaError{FATAL,code=_FENCED,"ProduceRequest for <topic> [0] with 1
    # message(s) failed: Broker: Producer attempted an operation with an old epoch ... transactional
    # producer fenced by newer producer instance"}.
    assert err.code() == KafkaError._FENCED and err.fatal(), f"commit_transaction of the fenced producer: {err}"

    new.begin_transaction()
    new_at = send(new, topic, new_vals)
    assert new_at == [4, 5], "the fenced producer's late record was appended"
    new.commit_transaction(TXN_TIMEOUT)
    await_stable(adm, topic, 7)
    assert read_partition(broker, topic, RC, 7) == list(zip(new_at, new_vals))
    assert read_partition(broker, topic, RU, 7) == list(zip([0, 1, 2] + new_at, old_vals + new_vals))


# ------------------------------------------------------------------ timeout
def test_coordinator_aborts_a_timed_out_transaction(broker):
    """A transaction left open past transaction.timeout.ms (3000) is aborted by the coordinator on
    its own, within ABORT_TIMEOUT: the ABORT marker moves the LSO to the high watermark, no
    read_committed consumer gets its records, and the producer's commit_transaction then fails with
    a fatal _FENCED (the abort bumped its epoch)."""
    adm, topic = ck.admin(broker), unique_topic("txn-timeout")
    ck.create_topic(adm, topic)
    p = txn_producer(broker, unique_topic("txn-timeout-id"), **{"transaction.timeout.ms": 3000})
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    t0 = time.monotonic()
    doomed = values("timed out", 3)
    assert send(p, topic, doomed) == [0, 1, 2]
    now = ends(adm, topic)
    if time.monotonic() - t0 < 2.0:  # well within the timeout: the transaction must still be open
        assert now == (0, 3), "(LSO, high watermark) of the open transaction"

    await_stable(adm, topic, 4, timeout=ABORT_TIMEOUT)  # the coordinator's ABORT marker at 3
    print(f"aborted by the coordinator {time.monotonic() - t0:.1f} s after the transaction began")
    assert read_partition(broker, topic, RC, 4) == []
    assert read_partition(broker, topic, RU, 4) == list(zip([0, 1, 2], doomed))

    with pytest.raises(KafkaException) as info:
        p.commit_transaction(TXN_TIMEOUT)
    err = fatal(info)
    del info
    # Observed on Kafka 4.1.1: EndTxn v1 -> INVALID_PRODUCER_EPOCH (47), librdkafka:
    # KafkaError{FATAL,code=_FENCED,"Failed to end transaction: Local: This instance has been fenced
    # by a newer instance"}.
    assert err.code() == KafkaError._FENCED and err.fatal(), f"commit_transaction after the timeout abort: {err}"
    assert ends(adm, topic) == (4, 4), "the failed commit wrote nothing"


# ------------------------------------------------------------------ kafka-python
def kp_read(c: KafkaConsumer, tp: KpTopicPartition, end: int, timeout: float = 30.0) -> List[Tuple[int, bytes]]:
    """(offset, value) of the records kafka-python's C returns until its position reaches END."""
    out: List[Tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while c.position(tp) < end:
        assert time.monotonic() < deadline, f"position {c.position(tp)}, not {end}, after {timeout} s; got {out}"
        for recs in c.poll(timeout_ms=500).values():
            out.extend((r.offset, r.value) for r in recs)
    return out


def test_kafka_python_read_committed(broker):
    """kafka-python 3.0.12 with isolation_level='read_committed' reads what librdkafka's transactions
    committed, skips an aborted transaction between them, and stops at an open one (its end_offsets
    is the LSO) until that commits; read_uncommitted reads every record."""
    adm, topic = ck.admin(broker), unique_topic("txn-kp")
    ck.create_topic(adm, topic)
    p = txn_producer(broker, unique_topic("txn-kp-id"))
    p.init_transactions(TXN_TIMEOUT)
    script = [("a", 3, "commit"), ("x", 2, "abort"), ("b", 2, "commit"), ("o", 1, "open")]
    at: Dict[str, List[int]] = {}
    for name, n, outcome in script:
        p.begin_transaction()
        at[name] = send(p, topic, values(name, n))
        if outcome == "commit":
            p.commit_transaction(TXN_TIMEOUT)
        elif outcome == "abort":
            p.abort_transaction(TXN_TIMEOUT)
    assert at == {"a": [0, 1, 2], "x": [4, 5], "b": [7, 8], "o": [10]}
    wait_until(lambda: ends(adm, topic) == (10, 11), timeout=STABLE_TIMEOUT, interval=0.05,
               what="(LSO, high watermark) = (10, 11)")

    def got(name: str) -> List[Tuple[int, bytes]]:
        return list(zip(at[name], values(name, len(at[name]))))

    tp = KpTopicPartition(topic, 0)
    made: List[KafkaConsumer] = []
    try:
        for isolation in (RC, RU):
            c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                              auto_offset_reset="none", isolation_level=isolation,
                              request_timeout_ms=int(OP_TIMEOUT * 1000))
            made.append(c)
            c.assign([tp])
            c.seek(tp, 0)
        rc, ru = made
        assert rc.end_offsets([tp]) == {tp: 10}, "kafka-python read_committed end_offsets (the LSO)"
        assert ru.end_offsets([tp]) == {tp: 11}
        assert kp_read(rc, tp, 10) == got("a") + got("b")
        assert kp_read(ru, tp, 11) == got("a") + got("x") + got("b") + got("o")

        p.commit_transaction(TXN_TIMEOUT)
        await_stable(adm, topic, 12)
        assert kp_read(rc, tp, 12) == got("o"), "the open transaction's record once committed"
    finally:
        for c in made:
            c.close(autocommit=False)


# ------------------------------------------------------------------ offsets in a transaction
def test_send_offsets_to_transaction_commits_with_the_transaction(broker):
    """send_offsets_to_transaction (AddOffsetsToTxn, TxnOffsetCommit): the group's offset stays
    uncommitted while the transaction is open, is discarded by an abort, and is committed by a commit."""
    adm = ck.admin(broker)
    src, dst, group = unique_topic("txn-eos-in"), unique_topic("txn-eos-out"), unique_topic("txn-eos-g")
    ck.create_topic(adm, src)
    ck.create_topic(adm, dst)
    c = consumer(broker, RC, group=group)
    p = txn_producer(broker, unique_topic("txn-eos-id"))
    try:
        meta = c.consumer_group_metadata()
        p.init_transactions(TXN_TIMEOUT)

        def group_offset() -> int:
            # require_stable=False: OffsetFetch answers at once while a transactional offset is
            # pending (a stable fetch gets UNSTABLE_OFFSET_COMMIT until the marker)
            req = ConsumerGroupTopicPartitions(group, [TopicPartition(src, 0)])
            res = adm.list_consumer_group_offsets([req], require_stable=False, request_timeout=OP_TIMEOUT)
            return res[group].result(timeout=OP_TIMEOUT).topic_partitions[0].offset

        p.begin_transaction()
        send(p, dst, [b"aborted output"])
        p.send_offsets_to_transaction([TopicPartition(src, 0, 5)], meta, TXN_TIMEOUT)
        assert group_offset() == -1001, "a pending transactional offset is not committed"
        p.abort_transaction(TXN_TIMEOUT)
        await_stable(adm, dst, 2)
        assert group_offset() == -1001, "the aborted transaction's offset"

        p.begin_transaction()
        send(p, dst, [b"committed output"])
        p.send_offsets_to_transaction([TopicPartition(src, 0, 7)], meta, TXN_TIMEOUT)
        assert group_offset() == -1001, "a pending transactional offset is not committed"
        p.commit_transaction(TXN_TIMEOUT)
        wait_until(lambda: group_offset() == 7, timeout=STABLE_TIMEOUT, interval=0.05,
                   what="the committed transaction's offset 7 for the group")
        await_stable(adm, dst, 4)
        assert read_partition(broker, dst, RC, 4) == [(2, b"committed output")]
    finally:
        c.close()


# ------------------------------------------------------------------ Kafka's TransactionsCommand
def table(text: str) -> List[Dict[str, str]]:
    """TransactionsCommand's tab-separated output: one dict per row, keyed by the header."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no output"
    head = [h.strip() for h in lines[0].rstrip("\t").split("\t")]
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.rstrip("\t").split("\t")]
        cells += [""] * (len(head) - len(cells))  # an empty last column
        assert len(cells) == len(head), f"row {line!r} under {head}"
        rows.append(dict(zip(head, cells)))
    return rows


def transactions_tool(cp: str, broker: Broker, *args: str) -> List[Dict[str, str]]:
    r = java_tool(cp, TRANSACTIONS_COMMAND, ["--bootstrap-server", broker.bootstrap, *args])
    assert r.returncode == 0, f"kafka-transactions {' '.join(args)} exited {r.returncode}: {r.stderr[-3000:]}"
    return table(r.stdout)


@pytest.mark.timeout(1000)  # java_cp may resolve the Kafka tools jars with mvn
def test_transactions_command_lists_and_describes(broker, java_cp):
    """kafka-transactions list / describe / describe-producers show the open transaction as Ongoing
    with its two partitions and its first offset; after the commit describe shows CompleteCommit
    and no partitions; describe of an unknown transactional id fails (exit 1)."""
    adm, topic, tid = ck.admin(broker), unique_topic("txn-tool"), unique_topic("txn-tool-id")
    ck.create_topic(adm, topic, partitions=2)
    bid = str(ck.only_broker(adm.list_topics(timeout=OP_TIMEOUT)).id)
    p = txn_producer(broker, tid)
    p.init_transactions(TXN_TIMEOUT)
    p.begin_transaction()
    assert send(p, topic, [b"p0"], partition=0) == [0]
    assert send(p, topic, [b"p1"], partition=1) == [0]

    [d] = transactions_tool(java_cp, broker, "describe", "--transactional-id", tid)
    assert (d["CoordinatorId"], d["TransactionalId"], d["ProducerEpoch"], d["TransactionState"],
            d["TransactionTimeoutMs"]) == (bid, tid, "0", "Ongoing", "60000"), d
    assert sorted(d["TopicPartitions"].split(",")) == [f"{topic}-0", f"{topic}-1"], d
    pid = d["ProducerId"]
    assert int(pid) >= 0 and int(d["CurrentTransactionStartTimeMs"]) > 0, d

    listed = [r for r in transactions_tool(java_cp, broker, "list") if r["TransactionalId"] == tid]
    assert listed == [{"TransactionalId": tid, "Coordinator": bid, "ProducerId": pid,
                       "TransactionState": "Ongoing"}], listed
    # ListTransactions v2 (KIP-1152): the pattern matches a whole transactional id, Java-style.
    suffix = tid.rsplit("-", 1)[1]
    for pattern, expected in ((f"txn-tool-id-{suffix}", [tid]), (f"(?i)TXN-TOOL-ID-{suffix}", [tid]),
                              (f".*-{suffix}", [tid]), (suffix, []), ("txn-tool-id", [])):
        listed = transactions_tool(java_cp, broker, "list", "--transactional-id-pattern", pattern)
        assert [r["TransactionalId"] for r in listed] == expected, (pattern, listed)
    r = java_tool(java_cp, TRANSACTIONS_COMMAND, ["--bootstrap-server", broker.bootstrap, "list",
                                                  "--transactional-id-pattern", "txn-tool-id-["])
    assert r.returncode == 1 and "INVALID_REGULAR_EXPRESSION" in r.stderr, \
        f"list with an invalid pattern: exit {r.returncode}, stderr {r.stderr[-2000:]!r}"

    producers = transactions_tool(java_cp, broker, "describe-producers", "--topic", topic, "--partition", "0")
    mine = [r for r in producers if r["ProducerId"] == pid]
    assert len(mine) == 1 and (mine[0]["ProducerEpoch"], mine[0]["CurrentTransactionStartOffset"]) == ("0", "0"), \
        producers

    p.commit_transaction(TXN_TIMEOUT)
    await_stable(adm, topic, 2, partition=0)
    await_stable(adm, topic, 2, partition=1)

    def described_complete() -> Optional[Dict[str, str]]:
        [d] = transactions_tool(java_cp, broker, "describe", "--transactional-id", tid)
        return d if d["TransactionState"] == "CompleteCommit" else None
    d = wait_until(described_complete, timeout=STABLE_TIMEOUT, interval=0.5, what="describe: CompleteCommit")
    assert (d["ProducerId"], d["TopicPartitions"]) == (pid, ""), d

    producers = transactions_tool(java_cp, broker, "describe-producers", "--topic", topic, "--partition", "0")
    mine = [r for r in producers if r["ProducerId"] == pid]
    assert len(mine) == 1 and mine[0]["CurrentTransactionStartOffset"] == "None", producers

    r = java_tool(java_cp, TRANSACTIONS_COMMAND, ["--bootstrap-server", broker.bootstrap, "describe",
                                                  "--transactional-id", tid + "-unknown"])
    assert r.returncode == 1 and "could not be found" in r.stderr, \
        f"describe of an unknown id: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr[-2000:]!r}"


# ------------------------------------------------------------------ raw protocol
def s16(s: Optional[str]) -> bytes:
    return struct.pack(">h", -1) if s is None else wire_str(s)


def find_coordinator(w: Wire, key: str, key_type: int) -> Tuple[int, int, str, int]:
    """FindCoordinator v1: (error code, node id, host, port)."""
    body = w.call(10, 1, s16(key) + struct.pack(">b", key_type))
    assert body is not None, "FindCoordinator got the connection closed"
    _, err, mlen = struct.unpack_from(">ihh", body)
    off = 8 + max(mlen, 0)
    node, hlen = struct.unpack_from(">ih", body, off)
    host = body[off + 6:off + 6 + hlen].decode()
    (port,) = struct.unpack_from(">i", body, off + 6 + hlen)
    return err, node, host, port


def init_producer_id(w: Wire, tid: Optional[str], timeout_ms: int) -> Tuple[int, int, int]:
    """InitProducerId v1: (error code, producer id, epoch); retried while the coordinator loads."""
    def call() -> Optional[Tuple[int, int, int]]:
        body = w.call(22, 1, s16(tid) + struct.pack(">i", timeout_ms))
        assert body is not None, "InitProducerId got the connection closed"
        got = struct.unpack_from(">ihqh", body)[1:]
        return None if got[0] in NOT_READY else got
    return wait_until(call, timeout=OP_TIMEOUT, interval=0.2, what=f"InitProducerId {tid!r} answered")


def end_txn(w: Wire, tid: str, pid: int, epoch: int, commit: bool, version: int = 1) -> int:
    """EndTxn VERSION (0-2: not flexible): its error code; retried while the coordinator loads."""
    def call() -> Optional[Tuple[int]]:
        body = w.call(26, version, s16(tid) + struct.pack(">qh?", pid, epoch, commit))
        assert body is not None, "EndTxn got the connection closed"
        (_, err) = struct.unpack_from(">ih", body)
        return None if err in NOT_READY else (err,)
    return wait_until(call, timeout=OP_TIMEOUT, interval=0.2, what=f"EndTxn {tid!r} answered")[0]


def test_raw_find_coordinator_init_producer_id_end_txn(broker):
    """Raw requests: FindCoordinator for a transactional id names this broker; InitProducerId
    refuses a timeout above transaction.max.timeout.ms (and 0, -1) and an empty id, and bumps the
    epoch of a known id; EndTxn answers an unknown id, a wrong producer id, an old epoch and no open
    transaction with Kafka's codes."""
    adm, tid = ck.admin(broker), unique_topic("txn-raw-id")
    bid = ck.only_broker(adm.list_topics(timeout=OP_TIMEOUT)).id
    w = Wire(broker.port)
    try:
        # The first FindCoordinator for a transactional id creates __transaction_state: retried.
        found = wait_until(lambda: (r := find_coordinator(w, tid, 1))[0] not in NOT_READY and r,
                           timeout=TXN_TIMEOUT, interval=0.2, what="FindCoordinator (transaction) answered")
        assert found == (NONE, bid, "127.0.0.1", broker.port), f"FindCoordinator key_type 1: {found}"

        for timeout_ms in (900001, 0, -1):
            assert init_producer_id(w, tid, timeout_ms) == (INVALID_TRANSACTION_TIMEOUT, -1, -1), timeout_ms
        assert init_producer_id(w, "", 60000) == (INVALID_REQUEST, -1, -1), "an empty transactional id"
        err, pid, epoch = init_producer_id(w, tid, 900000)
        assert (err, epoch) == (NONE, 0) and pid >= 0, (err, pid, epoch)
        assert init_producer_id(w, tid, 60000) == (NONE, pid, 1), "a second InitProducerId: same id, epoch + 1"
        err, other, epoch = init_producer_id(w, None, 60000)
        assert (err, epoch) == (NONE, 0) and other >= 0 and other != pid, (err, other, epoch)

        for commit in (True, False):
            assert end_txn(w, tid + "-unknown", 12345, 0, commit) == INVALID_PRODUCER_ID_MAPPING, commit
            assert end_txn(w, tid, pid, 1, commit) == INVALID_TXN_STATE, f"commit={commit} with nothing open"
        assert end_txn(w, tid, pid + 1000, 1, True) == INVALID_PRODUCER_ID_MAPPING, "a wrong producer id"
        assert end_txn(w, tid, pid, 0, True, version=0) == INVALID_PRODUCER_EPOCH, "an old epoch, v0"
        assert end_txn(w, tid, pid, 0, True, version=1) == INVALID_PRODUCER_EPOCH, "an old epoch, v1"
        assert end_txn(w, tid, pid, 0, True, version=2) == PRODUCER_FENCED, "an old epoch, v2"
    finally:
        w.close()
