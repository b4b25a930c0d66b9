"""Helpers for the group tests: start a millrace broker on a free port, produce test data.

Kept separate from the shared compat-tests helpers on purpose (see test_groups.py)."""

import os
import re
import signal
import subprocess
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("MILLRACE_BIN", os.path.join(REPO, "target", "debug", "millrace"))


class Broker:
    """One millrace process; `restart()` keeps the data directory."""

    def __init__(self, data_dir=None, settings=None):
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="millrace-groups-")
        self.settings = dict(settings or {})
        self.proc = None
        self.bootstrap = None
        self.log_path = os.path.join(self.data_dir, "broker.log")

    def start(self, timeout=30, listen="127.0.0.1:0"):
        args = [BINARY, "--data-dir", os.path.join(self.data_dir, "data"), "--listen", listen]
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        log = open(self.log_path, "ab")
        # Its own process group: kill() reaches every process of it (the reference shim's JVM).
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"broker exited with {self.proc.returncode}; see {self.log_path}")
                continue
            m = re.search(r"listening on (\S+)", line)
            if m:
                self.bootstrap = m.group(1)
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        raise RuntimeError("broker did not print its ready line")

    def _drain(self):
        for _ in self.proc.stdout:
            pass

    def stop(self, timeout=30):
        """SIGTERM: a clean stop."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        return self.proc.returncode if self.proc else None

    def kill(self):
        """SIGKILL: kill -9."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    def restart(self, same_port=False, timeout=30):
        """Stops and starts again on the same data; with `same_port`, on the same address, so
        that clients that stay open reconnect."""
        listen = self.bootstrap if same_port else "127.0.0.1:0"
        self.stop()
        return self.start(timeout=timeout, listen=listen)

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""


def create_topic(bootstrap, topic, partitions=4):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in futures.values():
        f.result(timeout=30)


def produce(bootstrap, topic, per_partition, partitions=4, tag="m"):
    """Writes `per_partition` messages to each partition; returns the count."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "linger.ms": 5})
    failures = []

    def report(err, _msg):
        if err is not None:
            failures.append(err)

    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, key=f"{part}", value=f"{tag}-{part}-{i}", partition=part, on_delivery=report)
    assert p.flush(30) == 0, "produce did not finish"
    assert not failures, failures
    return per_partition * partitions


# While a broker (re)starts, its partitions and offsets topic take a moment to be led and loaded:
# NOT_LEADER_OR_FOLLOWER (6), COORDINATOR_LOAD_IN_PROGRESS (14), COORDINATOR_NOT_AVAILABLE (15)
# and NOT_COORDINATOR (16) are answered meanwhile (Apache Kafka 4.4 does, and librdkafka hands
# them to an explicit commit or a watermark query): those are retried for up to 30 s.
STARTING_UP = {6, 14, 15, 16}


def retry_starting_up(call):
    """`call()`, again while it fails with a STARTING_UP code, for up to 30 s."""
    from confluent_kafka import KafkaException

    deadline = time.time() + 30
    while True:
        try:
            return call()
        except KafkaException as e:
            if e.args[0].code() not in STARTING_UP or time.time() > deadline:
                raise
            time.sleep(0.2)


def commit(consumer, offsets):
    """A synchronous commit of `offsets`, retried while the coordinator starts up."""
    return retry_starting_up(lambda: consumer.commit(offsets=offsets, asynchronous=False))


def high_watermarks(bootstrap, topic, partitions=4):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hwm-probe", "enable.auto.commit": False})
    try:
        return {
            p: retry_starting_up(lambda p=p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10))[1]
            for p in range(partitions)
        }
    finally:
        c.close()
