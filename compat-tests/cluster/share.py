"""The share-group workload (KIP-932): queue semantics under faults.

- An input producer (idempotent, acks=all) writes ``SHARE_INPUTS`` unique values (``q1-0``,
  ``q1-1``, ...) round-robin to the ``share-in`` topic over most of the run, then stops.
- ``CONSUMERS`` share consumers (librdkafka's ``ShareConsumer``, explicit acknowledgement) in one
  share group read it, several members per partition. After each poll a consumer acknowledges
  every record: mostly ACCEPT, ``RELEASE_P`` RELEASE (redelivered with a higher delivery count),
  ``REJECT_P`` REJECT (never delivered again); "poison" inputs (every ``POISON_EVERY``-th) are
  always released, so they reach the delivery-count limit and are archived; now and then it stalls past the record lock
  (``STALL_P`` per poll) before acknowledging, so its locks expire and the records go to another
  member (its late acknowledgement must fail). It then commits the acknowledgements
  (``commit_sync``) and records the broker's answer per partition.
- The group starts at the log start (group config ``share.auto.offset.reset=earliest``, set by the
  harness before any member joins, with a raw IncrementalAlterConfigs on the GROUP resource), so
  every acknowledged input must reach the group.
- After the heal and the producers' stop, the members run until no record has been delivered
  for ``QUIET_S`` (locks expire and released records come back meanwhile), bounded by
  ``SHARE_DRAIN_S``.

The brokers run with ``group.share.delivery.count.limit`` = ``DELIVERY_LIMIT`` and
``group.share.record.lock.duration.ms`` = ``LOCK_MS`` (``broker_settings``).

History records (``checker.check_share`` reads them):

- ``share-send``: like ``send``, for the input (``partition``, ``value``, ``offset`` on ``ok``).
- ``share-poll``: ``invoke`` before each poll; its ``ok`` has ``deliveries``:
  ``[[partition, offset, value, delivery count], ...]``; ``info`` = the poll raised.
- ``share-ack``: ``invoke`` with ``acks`` (``{"partition": [[offset, type], ...]}``, type
  ``accept`` | ``release`` | ``reject``); its ``ok`` has ``results`` (``{"partition": outcome}``):
  ``ok`` (the broker applied it), ``fail`` (definitely not applied: INVALID_RECORD_STATE, the
  record was no longer acquired by this member) or ``info`` (unknown). ``stalled`` marks a
  deliberate stall before it. Acknowledgements the client refused locally (the record was no
  longer in flight for it) are in ``dropped`` and never sent.
- ``share-config``: the group config the harness set (``ok`` once a broker accepted it and every
  broker's DescribeConfigs answers it).
"""

from __future__ import annotations

import random
import struct
import threading
import time
from typing import Dict, List, Optional

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

from ctp import _string
from history import History
from secure import broker_socket, recv_exact
from workload import CLIENT_TIMEOUTS, Worker, _err_text

TOPIC = "share-in"
PARTITIONS = 3
GROUP = "share-group"
CONSUMERS = 3
SHARE_INPUTS = 3000  # input records of one run (bounded)
INPUT_SPREAD = 0.6  # the input is written over this fraction of --duration
INPUT_RATE_MIN = 5.0
DELIVERY_LIMIT = 4  # group.share.delivery.count.limit under the harness (Kafka allows 2..10)
LOCK_MS = 5000  # group.share.record.lock.duration.ms under the harness
RELEASE_P = 0.05
REJECT_P = 0.03
STALL_P = 0.01  # per poll that returned records
POISON_EVERY = 100  # input number n with n % POISON_EVERY == 0: always released, so archived at the limit
STALL_S = LOCK_MS / 1000 + 2.0
POLL_S = 0.5
ACK_CALL_S = 20.0  # commit_sync's timeout
CLOSE_S = 20.0
QUIET_S = 20.0  # the drain ends once no record was delivered for this long...
SHARE_DRAIN_S = 180.0  # ...or after this long
INVALID_RECORD_STATE = 121
ACK_TYPES = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE, "reject": AcknowledgeType.REJECT}
# The group configs the harness sets before the members join (Kafka's names).
GROUP_CONFIGS = {"share.auto.offset.reset": "earliest"}
CONFIG_VISIBLE_POLL_S = 0.2  # between two rounds of DescribeConfigs waiting for GROUP_CONFIGS everywhere

INCREMENTAL_ALTER_CONFIGS = 44  # API key
DESCRIBE_CONFIGS = 32  # API key (v1: the lowest both systems serve)
RESOURCE_GROUP = 32  # ConfigResource type GROUP
OP_SET = 0


def broker_settings(nodes: int) -> Dict[str, str]:
    """Broker configs a share-group run needs, with Kafka's names (both systems take them)."""
    return {
        "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.record.lock.duration.ms": str(LOCK_MS),
        "share.coordinator.state.topic.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": str(nodes),
        "share.coordinator.state.topic.min.isr": str(min(2, nodes)),
    }


class ShareWorker(Worker):
    """A share consumer: poll, acknowledge each record (accept/release/reject), commit."""

    def __init__(self, name, history, stop, bootstrap, seed: int) -> None:
        super().__init__(name, history, stop)
        self.bootstrap = bootstrap
        self.rng = random.Random(seed)

    def consumer(self) -> ShareConsumer:
        return ShareConsumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": GROUP,
            "client.id": self.proc_name,
            "share.acknowledgement.mode": "explicit",
            **CLIENT_TIMEOUTS,
        })

    def work(self) -> None:
        consumer = self.consumer()
        consumer.subscribe([TOPIC])
        try:
            while not self.stop_event.is_set():
                msgs = self.poll(consumer)
                if msgs:
                    self.acknowledge(consumer, msgs)
        finally:
            close = threading.Thread(target=consumer.close, daemon=True)
            close.start()
            close.join(CLOSE_S)

    def poll(self, consumer: ShareConsumer) -> list:
        h, name = self.history, self.proc_name
        h.record(name, "invoke", "share-poll")
        try:
            msgs = consumer.poll(POLL_S)
        except KafkaException as exc:
            h.record(name, "info", "share-poll", error=repr(exc)[:300])
            self.stop_event.wait(0.5)
            return []
        got, deliveries = [], []
        for m in msgs:
            if m.error() is not None or m.topic() != TOPIC:
                continue
            value = m.value().decode() if m.value() is not None else None
            got.append(m)
            deliveries.append([m.partition(), m.offset(), value, m.delivery_count()])
        h.record(name, "ok", "share-poll", deliveries=deliveries)
        return got

    def choose(self, value: Optional[str]) -> str:
        if poison(value):
            return "release"
        r = self.rng.random()
        if r < RELEASE_P:
            return "release"
        if r < RELEASE_P + REJECT_P:
            return "reject"
        return "accept"

    def acknowledge(self, consumer: ShareConsumer, msgs: list) -> None:
        h, name = self.history, self.proc_name
        stalled = self.rng.random() < STALL_P
        if stalled:
            self.stop_event.wait(STALL_S)  # past the record lock: the acknowledgements must fail
        acks: Dict[str, List[list]] = {}
        dropped: Dict[str, List[list]] = {}
        for m in msgs:
            kind = self.choose(m.value().decode() if m.value() is not None else None)
            try:
                consumer.acknowledge(m, ACK_TYPES[kind])
                acks.setdefault(str(m.partition()), []).append([m.offset(), kind])
            except Exception as exc:  # noqa: BLE001 - not in flight for this client any more
                dropped.setdefault(str(m.partition()), []).append([m.offset(), kind, repr(exc)[:120]])
        h.record(name, "invoke", "share-ack", acks=acks, dropped=dropped, stalled=stalled)
        results = {p: "info" for p in acks}
        errors: Dict[str, str] = {}
        try:
            answer = consumer.commit_sync(ACK_CALL_S) or {}
        except KafkaException as exc:
            h.record(name, "ok", "share-ack", results=results, error=repr(exc)[:300])
            return
        for tp, err in answer.items():
            p = str(tp.partition)
            if tp.topic != TOPIC or p not in results:
                continue
            if err is None:
                results[p] = "ok"
                continue
            kerr = err.args[0] if isinstance(err, KafkaException) and err.args else err
            code = kerr.code() if hasattr(kerr, "code") else None
            results[p] = "fail" if code == INVALID_RECORD_STATE else "info"
            errors[p] = _err_text(kerr) if hasattr(kerr, "code") else repr(kerr)[:200]
        h.record(name, "ok", "share-ack", results=results, errors=errors)


def poison(value: Optional[str]) -> bool:
    """Whether an input value (``<producer>-<n>``) is always released."""
    _, _, n = (value or "").rpartition("-")
    return n.isdigit() and int(n) % POISON_EVERY == 0


# --- the group config, over a raw socket (IncrementalAlterConfigs v0, GROUP resource) ------------

def alter_group_configs_at(addr: str, group: str, configs: Dict[str, str], timeout: float) -> tuple:
    """One IncrementalAlterConfigs v0 request to ``addr`` SETting ``configs`` on the GROUP
    resource ``group``; returns (error code, error message)."""
    correlation = 7
    header = struct.pack(">hhi", INCREMENTAL_ALTER_CONFIGS, 0, correlation) + _string("harness-group-config")
    entries = b"".join(_string(k) + struct.pack(">b", OP_SET) + _string(v) for k, v in configs.items())
    body = (struct.pack(">i", 1) + struct.pack(">b", RESOURCE_GROUP) + _string(group)
            + struct.pack(">i", len(configs)) + entries + struct.pack(">b", 0))
    request = header + body
    with broker_socket(addr, timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        resp = recv_exact(sock, size)
    got_corr, _throttle, count = struct.unpack_from(">iii", resp, 0)
    if got_corr != correlation or count != 1:
        raise ValueError(f"correlation id {got_corr}, {count} resources")
    error = struct.unpack_from(">h", resp, 12)[0]
    msg_len = struct.unpack_from(">h", resp, 14)[0]
    message = resp[16:16 + msg_len].decode(errors="replace") if msg_len > 0 else ""
    return error, message


def describe_group_configs_at(addr: str, group: str, timeout: float) -> Dict[str, Optional[str]]:
    """One DescribeConfigs v1 request to ``addr`` for the GROUP resource ``group``: the configs
    that broker answers with (from its own metadata). Raises ValueError on an error code."""
    correlation = 8
    header = struct.pack(">hhi", DESCRIBE_CONFIGS, 1, correlation) + _string("harness-group-config")
    body = struct.pack(">ib", 1, RESOURCE_GROUP) + _string(group) + struct.pack(">i", -1) + struct.pack(">b", 0)
    request = header + body
    with broker_socket(addr, timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        resp = recv_exact(sock, size)
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        out = struct.unpack_from(fmt, resp, pos)
        pos += struct.calcsize(fmt)
        return out

    def text() -> Optional[str]:
        nonlocal pos
        (n,) = take(">h")
        if n < 0:
            return None
        pos += n
        return resp[pos - n:pos].decode(errors="replace")

    got_corr, _throttle, count = take(">iii")
    if got_corr != correlation or count != 1:
        raise ValueError(f"correlation id {got_corr}, {count} resources")
    (error,) = take(">h")
    message = text()
    if error != 0:
        raise ValueError(f"error code {error} {message}")
    take(">b")
    text()
    (n_configs,) = take(">i")
    configs: Dict[str, Optional[str]] = {}
    for _ in range(max(0, n_configs)):
        name, value = text(), text()
        take(">bbb")  # read_only, config_source, is_sensitive
        (n_synonyms,) = take(">i")
        for _ in range(max(0, n_synonyms)):
            text(), text(), take(">b")
        configs[name or ""] = value
    return configs


def set_group_configs(history: History, bootstrap: str, deadline: float) -> bool:
    """Sets ``GROUP_CONFIGS`` on the share group through any broker, then waits until every
    broker answers them (each broker starts a share partition it leads from its own metadata:
    one that has not seen the config yet would start at ``latest``), retrying until
    ``deadline``."""
    last = ""
    addrs = bootstrap.split(",")
    set_on = None
    while set_on is None and time.monotonic() < deadline:
        for addr in addrs:
            try:
                error, message = alter_group_configs_at(addr, GROUP, GROUP_CONFIGS, 10.0)
            except (OSError, ValueError, struct.error) as exc:
                last = f"{addr}: {exc!r}"[:200]
                continue
            if error == 0:
                set_on = addr
                break
            last = f"{addr}: error code {error} {message}"[:200]
        else:
            time.sleep(2.0)
    waiting = list(addrs) if set_on is not None else []
    while waiting and time.monotonic() < deadline:
        for addr in list(waiting):
            try:
                configs = describe_group_configs_at(addr, GROUP, 10.0)
            except (OSError, ValueError, struct.error) as exc:
                last = f"{addr}: describe: {exc!r}"[:200]
                continue
            if all(configs.get(k) == v for k, v in GROUP_CONFIGS.items()):
                waiting.remove(addr)
            else:
                last = f"{addr}: describe: {({k: configs.get(k) for k in GROUP_CONFIGS})}"[:200]
        if waiting:
            time.sleep(CONFIG_VISIBLE_POLL_S)
    if set_on is not None and not waiting:
        history.record("harness", "ok", "share-config", group=GROUP, configs=GROUP_CONFIGS,
                       delivery_limit=DELIVERY_LIMIT)
        return True
    history.record("harness", "info", "share-config", group=GROUP, configs=GROUP_CONFIGS,
                   delivery_limit=DELIVERY_LIMIT, error=last, set=set_on is not None, not_seen_by=waiting)
    return False


def deliveries_seen(paths: List[str]) -> int:
    """Records delivered so far, from the share workers' history files (the drain's clock)."""
    n = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if '"f":"share-poll"' in line and '"deliveries":[[' in line:
                        n += line.count("],[") + 1
        except OSError:
            continue
    return n


def wait_quiet(paths_fn, stop: Optional[threading.Event] = None) -> tuple:
    """Waits until no record was delivered for ``QUIET_S`` (bounded by ``SHARE_DRAIN_S``);
    returns (went quiet, seconds waited)."""
    t0 = time.monotonic()
    last_n, last_change = -1, t0
    while time.monotonic() - t0 < SHARE_DRAIN_S:
        n = deliveries_seen(paths_fn())
        now = time.monotonic()
        if n != last_n:
            last_n, last_change = n, now
        elif now - last_change >= QUIET_S:
            return True, round(now - t0, 1)
        if stop is not None and stop.is_set():
            break
        time.sleep(1.0)
    return False, round(time.monotonic() - t0, 1)
