"""One workload client in its own process, so that a client library abort ends only that client.

    python worker.py CONFIG_JSON

CONFIG_JSON: ``role`` (producer | group | reader | committed | drain | controller | ctp-input |
ctp | ctp-drain | share-input | share), ``name``, ``bootstrap``, ``topic``, ``partitions``, ``group``, ``rate``,
``broken``, ``history`` (file), ``t0_ns`` (the run's CLOCK_MONOTONIC origin), ``client_log``
(librdkafka's log file), optional ``record_topic`` (every record names ``topic``: a topic
checked apart from the main one) and ``rewind_s`` (a reader goes back to the beginning that often); ``ctp-input`` also ``ctp_inputs`` and ``ctp_rate``, ``ctp`` also
``transactional_id`` (``ctp.py`` describes the transactional workload); ``share-input`` also
``share_inputs`` and ``share_rate``, ``share`` also ``seed`` (``share.py``: the share-group workload).

The worker stops when a line arrives on stdin or stdin closes (the harness died). ``drain`` and
``ctp-drain`` print their result as one JSON line; ``controller`` prints the active controller's
id. A ``ctp`` worker whose producer is fenced or whose transaction outcome is unknown exits with
``ctp.EXIT_RESTART`` (the harness restarts it; the new producer fences the old one).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Optional

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import ctp
import share
from history import History
from workload import (
    CLIENT_LOG,
    CommittedReader,
    GroupConsumerWorker,
    ProducerWorker,
    ReaderWorker,
    TopicHistory,
    admin_client,
    drain,
    reader_for_group,
)


def set_throttle(bootstrap: str, topic: str, node: int, side: str, rate: Optional[int]) -> None:
    """KIP-73 throttle of ``side`` (leader or follower) on broker ``node`` for every replica of
    ``topic`` (``*``): SET with a rate, DELETE without (IncrementalAlterConfigs; the broker's
    resource goes to that broker). Raises on any refusal."""
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    admin = admin_client(bootstrap)
    resources = [
        ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[
            ConfigEntry(f"{side}.replication.throttled.rate", str(rate or ""), incremental_operation=op)]),
        ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(f"{side}.replication.throttled.replicas", "*" if rate is not None else "",
                        incremental_operation=op)]),
    ]
    for resource in resources:
        for f in admin.incremental_alter_configs([resource], request_timeout=8).values():
            f.result(timeout=10)


def main() -> int:
    cfg = json.loads(sys.argv[1])
    role = cfg["role"]
    if role == "controller":
        desc = admin_client(cfg["bootstrap"]).describe_cluster(request_timeout=5).result(8)
        print(desc.controller.id if desc.controller is not None else -1, flush=True)
        return 0
    if role == "throttle":
        set_throttle(cfg["bootstrap"], cfg["topic"], cfg["node"], cfg["side"], cfg.get("rate"))
        print("ok", flush=True)
        return 0

    if cfg.get("client_log"):
        handler = logging.FileHandler(cfg["client_log"])
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        CLIENT_LOG.addHandler(handler)
        CLIENT_LOG.setLevel(logging.DEBUG if os.environ.get("CHAOS_CLIENT_DEBUG") else logging.INFO)
    history = History(cfg["history"], cfg["t0_ns"])
    if cfg.get("record_topic"):
        history = TopicHistory(history, cfg["topic"])
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    name, bootstrap, topic = cfg["name"], cfg["bootstrap"], cfg["topic"]
    try:
        if role == "drain":
            result = drain(history, bootstrap, topic, cfg["partitions"], cfg.get("timeout", 120))
            print(json.dumps(result), flush=True)
            return 0
        if role == "ctp-drain":
            result = ctp.drain(history, bootstrap, cfg.get("timeout", 120))
            print(json.dumps(result), flush=True)
            return 0
        if role == "ctp-input":
            ctp.InputProducer(name, history, stop, bootstrap, cfg["ctp_inputs"], cfg["ctp_rate"]).work()
            return 0
        if role == "ctp":
            try:
                ctp.CtpWorker(name, history, stop, bootstrap, cfg["transactional_id"]).work()
            except ctp.Restart as exc:
                history.record(name, "info", "ctp-restart", error=str(exc)[:300])
                print(f"restart: {exc}", file=sys.stderr, flush=True)
                return ctp.EXIT_RESTART
            return 0
        if role == "share-input":
            ctp.InputProducer(name, history, stop, bootstrap, cfg["share_inputs"], cfg["share_rate"], topic=share.TOPIC,
                              partitions=share.PARTITIONS, op="share-send").work()
            return 0
        if role == "share":
            share.ShareWorker(name, history, stop, bootstrap, cfg["seed"]).work()
            return 0
        if role == "producer":
            worker = ProducerWorker(name, history, stop, bootstrap, topic, cfg["partitions"], cfg["rate"], cfg["broken"])
        elif role == "group":
            worker = GroupConsumerWorker(name, history, stop, bootstrap, topic, cfg["group"])
        elif role == "reader":
            worker = ReaderWorker(name, history, stop, bootstrap, topic, cfg["partitions"], cfg.get("rewind_s"))
        elif role == "committed":
            worker = CommittedReader(name, history, stop, bootstrap, topic, cfg["group"], cfg["partitions"])
            if cfg.get("once"):
                consumer = reader_for_group(bootstrap, cfg["group"], name)
                for _ in range(6):
                    if worker.read_once(consumer, final=True):
                        break
                    stop.wait(2)
                consumer.close()
                return 0
        else:
            raise SystemExit(f"unknown role {role}")
        worker.work()
        return 0
    finally:
        history.close()


if __name__ == "__main__":
    sys.exit(main())
