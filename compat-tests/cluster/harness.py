"""Cluster fault test: N nodes, a proxy on every link, a seeded fault schedule, a recorded
workload, then heal, drain and check the history.

    python harness.py [--system millrace|kafka] [--nodes 3] [--seed S] [--duration 240] [--broken]

A Millrace cluster of 3 nodes also runs tiered storage (``tiered.py``, ``seaweed.py``): one
SeaweedFS S3 server behind the ``s3`` proxy route, a tiered topic with its own producer and a
reader that goes back to offset 0 every 30 s (checked like the main topic, in the same history),
the ``kill-tiered-leader`` and ``object-store-outage`` faults, and at the end, once uploads have
caught up, the remote-log checks against every broker's ``/remote-log`` and the bucket.

Alongside the plain workload runs the transactional consume-transform-produce workload
(``ctp.py``): an input producer, two transactional workers in a ``read_committed`` group, and a
final drain of both topics; the process lane also kills the transaction coordinator of a
worker's ``transactional.id``.

Beside them runs the share-group workload (``share.py``): an input producer and three share
consumers in one share group that accept, release and reject, stall past their record locks, and
run until nothing is left to deliver; the process lane also kills the leader of a partition the
share group reads. ``checker.check_share`` judges it: no record accepted twice or delivered after
it was accepted or rejected, none over the delivery-count limit, none lost.

Prints the schedule, progress, ``faults injected: N``, the checker's report (each anomaly
count, with the operations that show each anomaly; then the transactional report), one line
per check, and ends with
``harness: N passed, M failed``. The work dir (history.jsonl, schedule.json, node logs) is
kept when a check fails or with --keep. Rerun a seed with the same --system, --nodes,
--duration and --seed: the schedule is identical (timing of the system under test is not).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import checker
import ctp
import replicas
import secure
import share
import tiered
from chaos import Chaos
from history import History, merge
from nemesis import TIERED_PARTITIONS, TIERED_TOPIC, Nemesis, describe, fault_counts, make_schedule
from procs import spawn, terminate, wait_until
from seaweed import SeaweedFs, weed_binary
from systems import REPO, TIERED_PREFIX, Cluster, KafkaCluster, MillraceCluster, millrace_has_cluster_support
from workload import CLIENT_LOG, CLIENT_TIMEOUTS, admin_client, create_topic

HERE = Path(__file__).resolve().parent
PARTITIONS = 6
CLIENT_RESTARTS_MAX = 20  # per client: a client that keeps dying is left dead
# A transactional worker also exits (to be restarted) on every fenced producer or unknown commit
# outcome, which each transaction-coordinator kill can cause.
CTP_RESTARTS_MAX = 60
CTP_DRAIN_S = 240  # the transactional drain: waiting for the group to catch up, then both topics
TOPIC = "chaos"
GROUP = "chaos-group"
# The tiered topic: 16 KiB segments, at most 64 KiB kept locally, the rest in the object store.
TIERED_LOCAL_RETENTION_BYTES = 65536
TIERED_REWIND_S = 30.0  # its reader goes back to offset 0 this often (reads from the object store)
TIERED_CATCH_UP_S = 120.0  # after the drains: uploads catch up and every broker's image agrees


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def binary(env: str, name: str) -> Path:
    path = Path(os.environ.get(env) or REPO / "target" / "debug" / name)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise SystemExit(f"harness: {path} is not an executable (build it, or set {env})")
    return path


class WorkerProc:
    """A workload client in its own process (worker.py). A crashed client is restarted under a new
    incarnation name (``p1.1``), so its values and its history stay distinct."""

    def __init__(self, work: Path, t0_ns: int, role: str, name: str, common: dict, finishes: bool = False,
                 restarts_max: int = CLIENT_RESTARTS_MAX) -> None:
        self.work, self.t0_ns, self.role, self.base, self.common = work, t0_ns, role, name, common
        self.finishes = finishes  # exit status 0 means it is done (not restarted)
        self.restarts_max = restarts_max
        self.incarnation = 0
        self.proc = None
        self.crashes: List[str] = []
        self.histories: List[str] = []
        self.stopping = False

    @property
    def name(self) -> str:
        return self.base if self.incarnation == 0 else f"{self.base}.{self.incarnation}"

    def start(self) -> None:
        hist = str(self.work / f"history-{self.name}.jsonl")
        self.histories.append(hist)
        cfg = dict(self.common, role=self.role, name=self.name, history=hist, t0_ns=self.t0_ns,
                   client_log=str(self.work / f"client-{self.name}.log"))
        self.stderr = self.work / f"client-{self.name}.stderr"
        self.proc = spawn([sys.executable, str(HERE / "worker.py"), json.dumps(cfg)], cwd=str(HERE),
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.stderr, "wb"))

    def check(self) -> None:
        """Restarts the client if it died on its own."""
        if self.stopping or self.proc is None or self.proc.poll() is None:
            return
        if self.finishes and self.proc.returncode == 0:
            return
        if len(self.crashes) >= self.restarts_max:
            return  # gave up on this client; its crashes are printed with the results
        tail = self.stderr.read_text(errors="replace")[-300:].strip().replace("\n", " | ")
        self.crashes.append(f"{self.name} exited {self.proc.returncode}: {tail}")
        log(f"client {self.name} exited with {self.proc.returncode}; restarting it ({tail[-150:]})")
        self.incarnation += 1
        self.start()

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"stop\n")
                self.proc.stdin.flush()
            except OSError:
                pass

    def wait(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"client {self.name} did not stop within {timeout:.0f}s; killing it")
            terminate(self.proc, grace=5)


def run_once(work: Path, t0_ns: int, role: str, name: str, common: dict, timeout: float) -> Optional[str]:
    """Runs a one-shot worker (drain, committed read-back, controller lookup); returns its stdout."""
    w = WorkerProc(work, t0_ns, role, name, common)
    w.start()
    try:
        out, _ = w.proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        terminate(w.proc, grace=5)
        return None
    return out.decode(errors="replace").strip() if w.proc.returncode == 0 else None


def healthy(admin, cluster: Cluster) -> bool:
    md = admin.list_topics(TOPIC, timeout=5)
    if len(md.brokers) < cluster.n:
        return False
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None or len(t.partitions) != PARTITIONS:
        return False
    return all(p.leader >= 0 and len(p.isrs) >= cluster.min_insync for p in t.partitions.values())


class Checks:
    def __init__(self) -> None:
        self.results: List[tuple] = []

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.results.append((name, ok, detail))
        print(f"check {'PASS' if ok else 'FAIL'}: {name}{f' ({detail})' if detail else ''}", flush=True)

    @property
    def passed(self) -> int:
        return sum(1 for _, ok, _ in self.results if ok)

    @property
    def failed(self) -> int:
        return sum(1 for _, ok, _ in self.results if not ok)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="cluster fault test")
    ap.add_argument("--system", choices=["millrace", "kafka"], default="millrace")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--duration", type=float, default=240.0, help="seconds of faults and workload")
    ap.add_argument("--rate", type=float, default=50.0, help="sends per second per producer")
    ap.add_argument("--broken", action="store_true", help="acks=1, min.insync.replicas=1, unclean election; expects lost writes")
    ap.add_argument("--min-faults", type=int, default=None, help="default: 40 per 240 s of --duration")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--secure", action="store_true",
                    help="every Kafka listener SASL_SSL, brokers' own links included (secure.py)")
    args = ap.parse_args(argv)

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    if args.min_faults is not None:
        min_faults = args.min_faults
    elif args.broken:
        min_faults = 3  # one slow fault kind (~30 s each); a few suffice to show the loss
    else:
        min_faults = max(1, int(40 * args.duration / 240))
    work = args.work or Path(tempfile.mkdtemp(prefix=f"millrace-cluster-{args.system}-"))
    work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    handler = logging.FileHandler(work / "clients.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
    CLIENT_LOG.addHandler(handler)
    CLIENT_LOG.setLevel(logging.INFO)

    nodes = args.nodes
    if args.system == "millrace":
        mbin = binary("MILLRACE_BIN", "millrace")
        if nodes > 1 and not millrace_has_cluster_support(mbin):
            log(f"millrace: {mbin} has no cluster support (no --controller-voters): running 1 node "
                "(kill -9 + restart, SIGSTOP/SIGCONT, client link cuts)")
            nodes = 1
    if args.broken and (args.system != "kafka" or nodes < 3):
        raise SystemExit("harness: --broken needs --system kafka with 3 nodes (it kills an isolated leader)")

    if args.secure:
        log(f"secure: every Kafka listener is SASL_SSL (TLS material in {secure.enable(work)})")
        CLIENT_TIMEOUTS.update(secure.client_settings())
    log(f"system {args.system}, {nodes} node(s), seed {seed}, duration {args.duration:.0f}s, "
        f"{'BROKEN configuration' if args.broken else 'safe configuration'}, work dir {work}")
    chaos = Chaos(binary("CHAOS_PROXY_BIN", "millrace-chaos"), work / "chaos.log").start()
    cluster: Optional[Cluster] = None
    object_store: Optional[SeaweedFs] = None
    checks = Checks()
    history: Optional[History] = None
    workers: List[WorkerProc] = []
    keep = args.keep
    try:
        if args.system == "kafka":
            cluster = KafkaCluster(work, chaos, nodes, args.broken)
        else:
            if nodes > 1:
                object_store = SeaweedFs(weed_binary(REPO), work).start()
                log(f"object store: SeaweedFS S3 on {object_store.s3_upstream} (filer {object_store.filer}), "
                    f"brokers reach it through the s3 route")
            cluster = MillraceCluster(work, chaos, nodes, args.broken, mbin, object_store)
        (work / "routes.json").write_text(json.dumps(chaos.routes, indent=1))
        t_start = time.monotonic()
        cluster.start()
        log(f"{nodes} node(s) ready in {time.monotonic() - t_start:.1f}s; bootstrap {cluster.bootstrap}")
        admin = admin_client(cluster.bootstrap)
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) >= nodes, 120, 1, "all brokers in metadata")
        wait_until(lambda: create_topic(cluster.bootstrap, TOPIC, PARTITIONS, cluster.replication_factor,
                                        cluster.topic_config()) or True, 120, 2, f"topic {TOPIC} created")
        for topic in (ctp.IN_TOPIC, ctp.OUT_TOPIC):
            wait_until(lambda t=topic: create_topic(cluster.bootstrap, t, ctp.PARTITIONS, cluster.replication_factor,
                                                    cluster.topic_config()) or True, 120, 2, f"topic {topic} created")
        wait_until(lambda: create_topic(cluster.bootstrap, share.TOPIC, share.PARTITIONS, cluster.replication_factor,
                                        cluster.topic_config()) or True, 120, 2, f"topic {share.TOPIC} created")
        if cluster.tiered:
            wait_until(lambda: create_topic(cluster.bootstrap, TIERED_TOPIC, TIERED_PARTITIONS, cluster.replication_factor,
                                            cluster.tiered_topic_config(TIERED_LOCAL_RETENTION_BYTES)) or True,
                       120, 2, f"topic {TIERED_TOPIC} created")
        wait_until(lambda: healthy(admin, cluster), 120, 1, "every partition led and in sync")

        lanes: Dict[str, tuple] = {"broken": ("isolate-leader-kill",)} if args.broken else cluster.fault_kinds()
        restart_s = 10.0 if args.system == "kafka" else 1.0
        schedule = make_schedule(seed, args.duration, lanes, cluster.ids, PARTITIONS, restart_s)
        (work / "schedule.json").write_text(json.dumps({"seed": seed, "system": args.system, "nodes": nodes,
                                                        "duration": args.duration, "broken": args.broken,
                                                        "faults": schedule}, indent=1))
        log(f"schedule: {len(schedule)} faults planned (seed {seed})\n{describe(schedule)}")

        t0_ns = time.monotonic_ns()
        common = dict(bootstrap=cluster.bootstrap, topic=TOPIC, partitions=PARTITIONS, group=GROUP,
                      rate=args.rate, broken=args.broken)
        history = History(str(work / "history-harness.jsonl"), t0_ns)
        stop_nemesis = threading.Event()
        producers = [WorkerProc(work, t0_ns, "producer", f"p{k}", common) for k in (1, 2)]
        consumers = [WorkerProc(work, t0_ns, "group", f"c{k}", common) for k in (1, 2)]
        readers = [WorkerProc(work, t0_ns, "reader", "r1", common), WorkerProc(work, t0_ns, "committed", "admin", common)]
        ctp_rate = max(ctp.INPUT_RATE_MIN, ctp.CTP_INPUTS / (args.duration * ctp.INPUT_SPREAD))
        ctp_input = WorkerProc(work, t0_ns, "ctp-input", "i1", dict(common, ctp_inputs=ctp.CTP_INPUTS, ctp_rate=ctp_rate),
                               finishes=True)
        ctp_workers = [WorkerProc(work, t0_ns, "ctp", f"x{k}", dict(common, transactional_id=ctp.txn_id(k)),
                                  restarts_max=CTP_RESTARTS_MAX) for k in range(1, ctp.WORKERS + 1)]
        tcommon = dict(common, topic=TIERED_TOPIC, partitions=TIERED_PARTITIONS, record_topic=True)
        if cluster.tiered:
            producers.append(WorkerProc(work, t0_ns, "producer", "t1", tcommon))
            readers.append(WorkerProc(work, t0_ns, "reader", "rt1", dict(tcommon, rewind_s=TIERED_REWIND_S)))
        share_rate = max(share.INPUT_RATE_MIN, share.SHARE_INPUTS / (args.duration * share.INPUT_SPREAD))
        share_input = WorkerProc(work, t0_ns, "share-input", "q1",
                                 dict(common, share_inputs=share.SHARE_INPUTS, share_rate=share_rate), finishes=True)
        share_workers = [WorkerProc(work, t0_ns, "share", f"s{k}", dict(common, seed=seed * 10 + k))
                         for k in range(1, share.CONSUMERS + 1)]
        # The share group starts at the log start: its config comes before any member joins.
        share_configured = share.set_group_configs(history, cluster.bootstrap, time.monotonic() + 60)
        log(f"share group {share.GROUP}: {share.GROUP_CONFIGS} {'set' if share_configured else 'NOT set'}")
        workers = producers + consumers + readers + [ctp_input] + ctp_workers + [share_input] + share_workers
        for w in consumers + readers + ctp_workers + share_workers + producers + [ctp_input, share_input]:
            w.start()

        def controller_lookup() -> Optional[int]:
            out = run_once(work, t0_ns, "controller", "lookup", common, 20)
            try:
                return int(out.splitlines()[-1]) if out else None
            except ValueError:
                return None

        def txn_coordinator_lookup(slot: int) -> tuple:
            return ctp.find_txn_coordinator(cluster.bootstrap, ctp.txn_id(slot))

        def throttle_setter(node: int, side: str, rate: Optional[int]) -> Optional[str]:
            cfg = dict(common, node=node, side=side, rate=rate)
            out = run_once(work, t0_ns, "throttle", f"throttle-{node}", cfg, 30)
            return None if out == "ok" else f"throttle {side} on {node}: no ok ({out!r})"

        nemesis = Nemesis(cluster, history, TOPIC, stop_nemesis, controller_lookup, txn_coordinator_lookup,
                          throttle_setter)
        nemesis.start(schedule)
        t0 = time.monotonic()
        next_report = t0 + 30
        while True:
            now = time.monotonic()
            if now - t0 >= args.duration:
                break
            time.sleep(min(1.0, args.duration - (now - t0)))
            for w in workers:
                w.check()
            if time.monotonic() >= next_report:
                next_report += 30
                c = progress(work)
                log(f"t={time.monotonic() - t0:.0f}s sends ok {c['send-ok']}, info {c['send-info']}; "
                    f"polls {c['poll-ok']}; commits ok {c['commit-ok']}; transactions ok {c['txn-ok']}, "
                    f"aborted {c['txn-fail']}, unknown {c['txn-info']}; share acks ok {c['share-ack-ok']}; "
                    f"faults {c['faults']}")

        log("stopping the nemesis (current faults finish and heal)")
        stop_nemesis.set()
        nemesis.join(180)
        nemesis.heal_everything()
        t_heal = time.monotonic()
        recovered = True
        try:
            wait_until(lambda: healthy(admin, cluster), 120, 1, "every partition led and in sync after heal")
        except TimeoutError as exc:
            recovered = False
            log(str(exc))
        recovery_s = time.monotonic() - t_heal
        log(f"healed; cluster {'recovered' if recovered else 'did NOT recover'} in {recovery_s:.1f}s; stopping producers")
        for w in producers + [ctp_input, share_input]:
            w.stop()
        for w in producers + [ctp_input, share_input]:
            w.wait(90)
        # Give the group time to read and commit what was written last.
        time.sleep(10)
        for w in consumers + readers:
            w.stop()
        for w in consumers + readers:
            w.wait(45)
        run_once(work, t0_ns, "committed", "admin-final", dict(common, once=True), 90)
        log("draining every partition from the beginning")
        out = run_once(work, t0_ns, "drain", "drain", dict(common, timeout=120), 180)
        drained = json.loads(out.splitlines()[-1]) if out else {"complete": False, "read": 0}
        tiered_drained: dict = {}
        offsets_before: Dict[int, dict] = {}
        if cluster.tiered:
            offsets_before = tiered_offsets(admin, cluster)
            log(f"{TIERED_TOPIC} before its drain (ListOffsets): {offsets_before}")
            log(f"draining {TIERED_TOPIC} from offset 0 (below the local log start: the object store)")
            out = run_once(work, t0_ns, "drain", "drain-tiered", dict(tcommon, timeout=120), 180)
            tiered_drained = json.loads(out.splitlines()[-1]) if out else {"complete": False, "read": 0}
        log("transactions: waiting for the group to commit every input, then draining both topics read_committed")
        out = run_once(work, t0_ns, "ctp-drain", "ctp-drain", dict(common, timeout=CTP_DRAIN_S), CTP_DRAIN_S + 60)
        ctp_drained = json.loads(out.splitlines()[-1]) if out else None
        log(f"transactions: drain {ctp_drained}")
        for w in ctp_workers:
            w.stop()
        for w in ctp_workers:
            w.wait(45)
        log(f"share group: members run until no record is delivered for {share.QUIET_S:.0f}s")
        share_quiet, share_drain_s = share.wait_quiet(
            lambda: [h for w in share_workers for h in w.histories])
        log(f"share group: {'quiet' if share_quiet else 'still delivering'} after {share_drain_s}s; stopping its members")
        for w in share_workers:
            w.stop()
        for w in share_workers:
            w.wait(45)
        history.close()
        tiered_res: Optional[tiered.TieredResult] = None
        tiered_facts: dict = {}
        if cluster.tiered:
            tiered_res, tiered_facts = tiered_final(cluster, admin)
        routes = chaos.status()
        # Replicas below the HW, byte for byte: read from disk once every node stopped cleanly.
        cluster.stop()
        hws = {int(p): int(o) for p, o in drained.get("end_offsets", {}).items()}
        compared = replicas.compare(cluster.data_dirs(), TOPIC, hws, cluster.replication_factor)
        log(f"replicas compared below the HW: {compared.partitions} partitions, {compared.replicas} replicas, "
            f"{compared.batches} batches, {compared.bytes} bytes; {len(compared.problems)} problems")
        for problem in compared.problems[:20]:
            log(f"  {problem}")
        (work / "routes-status.json").write_text(json.dumps(routes, indent=1))
        silent = [r["name"] for r in routes if not (r["bytes_up"] > 0 and r["bytes_down"] > 0)]
        paths = sorted(str(p) for p in work.glob("history-*.jsonl"))
        merged = merge(paths, str(work / "history.jsonl"))
        log(f"history: {merged} records from {len(paths)} processes in {work / 'history.jsonl'}")
        crashes = [c for w in workers for c in w.crashes]

        ops = checker.load(str(work / "history.jsonl"))
        counts = fault_counts(ops)
        total = sum(counts.values())
        print(f"faults injected: {total}")
        print("  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if nemesis.errors:
            print(f"nemesis errors ({len(nemesis.errors)}): " + "; ".join(nemesis.errors[:5]))
        res = checker.check(ops)
        checker.report(res)
        tiered_topic_res = None
        if cluster.tiered:
            tiered_topic_res = checker.check(ops, TIERED_TOPIC)
            checker.report(tiered_topic_res, topic=TIERED_TOPIC)
            if tiered_res is not None:
                tiered.report(tiered_res)
            print(f"tiered facts: {json.dumps(tiered_facts)}")
        ctp_res = checker.check_ctp(ops)
        checker.report_ctp(ctp_res)
        share_res = checker.check_share(ops, share.DELIVERY_LIMIT)
        checker.report_share(share_res)
        with open(work / "result.json", "w", encoding="utf-8") as fh:
            json.dump({"seed": seed, "faults": counts, "counts": res.counts(), "stats": res.stats,
                       "ctp_counts": ctp_res.counts(), "ctp_stats": ctp_res.stats,
                       "share_counts": share_res.counts(), "share_stats": share_res.stats,
                       "share_drain": {"quiet": share_quiet, "seconds": share_drain_s},
                       "recovery_s": recovery_s, "drain": {k: v for k, v in drained.items() if k != "end_offsets"},
                       "tiered": None if not cluster.tiered else {
                           "topic_counts": tiered_topic_res.counts() if tiered_topic_res else None,
                           "topic_stats": tiered_topic_res.stats if tiered_topic_res else None,
                           "counts": tiered_res.counts() if tiered_res else None,
                           "stats": tiered_res.stats if tiered_res else None,
                           "offsets_before_drain": offsets_before, "facts": tiered_facts}},
                      fh, indent=1, default=str)

        kinds = set(_kinds(lanes))
        acked_min = max(100, int(args.duration * args.rate * 0.25))
        checks.add(f"faults injected >= {min_faults}", total >= min_faults, f"{total}")
        checks.add("every fault kind injected", kinds <= set(counts), f"missing {sorted(kinds - set(counts))}" if kinds - set(counts) else "")
        checks.add(f"acknowledged sends >= {acked_min}", res.stats["sends_ok"] >= acked_min, f"{res.stats['sends_ok']}")
        checks.add("group consumers committed", res.stats["commits_ok"] > 0, f"{res.stats['commits_ok']} commits ok")
        checks.add("final read-back of the committed offsets succeeded", res.stats["final_committed_read"])
        if crashes:
            print(f"client crashes (each client was restarted): {len(crashes)}")
            for c in crashes:
                print(f"  {c}")
        checks.add("cluster recovered within 120 s of the heal", recovered, f"{recovery_s:.1f}s")
        if "throttle" in lanes:
            checks.add("every replication throttle lifted by the heal", not nemesis.throttled,
                       f"left: {sorted(nemesis.throttled)}" if nemesis.throttled else "")
        checks.add("final drain read every partition to its end", bool(drained["complete"]))
        checks.add("replicas byte-identical below the HW", bool(hws) and not compared.problems,
                   f"{len(compared.problems)} problems" if compared.problems else f"{compared.batches} batches")
        checks.add(f"all {len(routes)} proxy routes carried traffic both ways", not silent, f"silent: {silent}" if silent else "")
        counts_a = res.counts()
        if args.broken:
            checks.add("broken configuration: the checker reports lost writes", counts_a["lost-write"] > 0,
                       f"{counts_a['lost-write']} lost")
        else:
            for kind in checker.ANOMALIES:
                checks.add(f"no {kind}", counts_a[kind] == 0, checker.count_detail(res, kind))
            add_ctp_checks(checks, ctp_res, ops, ctp_drained)
            add_share_checks(checks, share_res, ops, share_quiet)
            if cluster.tiered:
                add_tiered_checks(checks, tiered_topic_res, tiered_res, tiered_facts, offsets_before,
                                  tiered_drained, acked_min)
    except BaseException as exc:  # noqa: BLE001 - a harness failure is a failed check
        checks.add("harness ran to the end", False, repr(exc)[:500])
        if not isinstance(exc, Exception):
            raise
    finally:
        if history is not None:
            try:
                history.close()
            except Exception:  # noqa: BLE001
                pass
        for w in workers:
            w.stop()
        for w in workers:
            w.wait(10)
        if cluster is not None:
            cluster.stop()
        chaos.stop()
        if object_store is not None:
            object_store.stop()
        if checks.failed:
            # Matched by run-all.sh's failure excerpt, so a CI log names the schedule to rerun.
            print(f"harness: FAILED with seed {seed} (rerun it: --seed {seed} --duration {args.duration:.0f}"
                  f"{' --secure' if args.secure else ''} --system {args.system})", flush=True)
        if checks.failed or keep:
            print(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        print(f"harness: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 0 if checks.failed == 0 else 1


def add_ctp_checks(checks: Checks, res: checker.Result, ops: List[dict], drained: Optional[dict]) -> None:
    """The transactional workload's checks (safe configuration only: the broken one loses
    writes by design, and its transactional counts are printed, not judged)."""
    s = res.stats
    kills = [op for op in ops if op.get("process") == "nemesis" and op.get("type") == "invoke"
             and op.get("f") == "kill-txn-coordinator"]
    found = sum(1 for op in kills if op.get("chosen") == "coordinator")
    checks.add(f"transactional inputs acknowledged >= {ctp.CTP_INPUTS // 2}", s["inputs_ok"] >= ctp.CTP_INPUTS // 2,
               f"{s['inputs_ok']}")
    checks.add("transactions committed, and some aborted on purpose", s["txn_ok"] > 0 and s["txn_deliberate_aborts"] > 0,
               f"{s['txn_ok']} committed, {s['txn_deliberate_aborts']} aborted on purpose")
    checks.add("transaction-coordinator kills hit the coordinator FindCoordinator named", bool(kills) and found > 0,
               f"{found} of {len(kills)}")
    checks.add("the transactional group committed every input before the drain", s["caught_up"])
    checks.add("final read_committed drain read both topics to their ends", s["drain_complete"],
               "" if drained else "the drain worker failed")
    for kind in checker.CTP_ANOMALIES:
        checks.add(f"no transactional {kind}", res.counts()[kind] == 0, checker.count_detail(res, kind))


def add_share_checks(checks: Checks, res: checker.Result, ops: List[dict], quiet: bool) -> None:
    """The share-group workload's checks (safe configuration only)."""
    s = res.stats
    kills = sum(1 for op in ops if op.get("process") == "nemesis" and op.get("type") == "invoke"
                and op.get("f") == "kill-share-leader")
    acks = s["acks"]
    checks.add("share: the group config was set, and every broker answered it, before the members joined",
               s["group_configured"])
    checks.add(f"share: inputs acknowledged >= {share.SHARE_INPUTS // 2}", s["inputs_ok"] >= share.SHARE_INPUTS // 2,
               f"{s['inputs_ok']}")
    checks.add("share: records accepted, released (and redelivered) and rejected",
               acks.get("accept", 0) > 0 and acks.get("release", 0) > 0 and acks.get("reject", 0) > 0
               and s["redeliveries"] > 0,
               f"{acks}, {s['redeliveries']} redeliveries")
    checks.add("share: records delivered at the delivery-count limit", s["settled"].get("at-limit", 0) > 0,
               f"{s['settled']}")
    checks.add("share: kills of a share partition's leader", kills > 0, f"{kills}")
    checks.add("share: the members went quiet (nothing left to deliver)", quiet)
    for kind in checker.SHARE_ANOMALIES:
        checks.add(f"no share {kind}", res.counts()[kind] == 0, checker.count_detail(res, kind))


def tiered_offsets(admin, cluster: Cluster) -> Dict[int, dict]:
    """Per partition of the tiered topic, its leader's ListOffsets answers: ``remote_start``
    (-2, the log start clients see), ``local_start`` (-4), ``last_tiered`` (-5) and ``end`` (-1,
    the high watermark); an error code in place of an offset when the leader refused."""
    out: Dict[int, dict] = {}
    try:
        parts = admin.list_topics(TIERED_TOPIC, timeout=10).topics[TIERED_TOPIC].partitions
    except Exception as exc:  # noqa: BLE001 - no answer: the check that needs it fails, saying so
        log(f"{TIERED_TOPIC}: no metadata for ListOffsets: {exc!r}")
        return out
    for p, meta in sorted(parts.items()):
        row: Dict[str, object] = {"leader": meta.leader}
        addr = cluster.client_addr.get(meta.leader)
        for name, ts in (("remote_start", tiered.EARLIEST), ("local_start", tiered.EARLIEST_LOCAL),
                         ("last_tiered", tiered.LATEST_TIERED), ("end", tiered.LATEST)):
            try:
                error, offset = tiered.list_offsets(addr, TIERED_TOPIC, [p], ts)[p] if addr else (-1, -1)
                row[name] = offset if error == 0 else f"error {error}"
            except (OSError, ValueError, KeyError) as exc:
                row[name] = f"failed: {exc!r}"[:120]
        out[p] = row
    return out


def tiered_final(cluster: Cluster, admin) -> tuple:
    """After the drains, with the producers stopped: waits (bounded) for every broker's upload
    lag to reach 0 and for their images to agree, then checks the remote logs against each other
    and the bucket. Returns (TieredResult, facts for the summary)."""
    facts: Dict[str, object] = {}
    nodes = {i: n.http_addr for i, n in cluster.nodes.items() if n.alive() and n.http_addr}

    def metrics(name: str) -> Dict[int, Optional[float]]:
        got: Dict[int, Optional[float]] = {}
        for i, addr in nodes.items():
            try:
                got[i] = tiered.metric(tiered.http_get(addr, "/metrics"), name)
            except OSError:
                got[i] = None
        return got

    t0 = time.monotonic()
    try:
        wait_until(lambda: all(v == 0 for v in metrics("millrace_remote_upload_lag_segments").values()),
                   TIERED_CATCH_UP_S, 1, "upload lag 0 on every broker")
        facts["uploads_caught_up"] = True
    except TimeoutError as exc:
        facts["uploads_caught_up"] = False
        log(str(exc))
    facts["catch_up_s"] = round(time.monotonic() - t0, 1)
    facts["upload_lag_segments"] = metrics("millrace_remote_upload_lag_segments")

    answers: Dict[int, list] = {}

    def agree() -> bool:
        answers.clear()
        for i, addr in nodes.items():
            answers[i] = sorted(tiered.remote_log(addr), key=lambda e: (e["topic"], e["partition"]))
        return len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1
    try:
        wait_until(agree, max(10.0, TIERED_CATCH_UP_S - (time.monotonic() - t0)), 1,
                   "every broker's /remote-log the same")
    except TimeoutError as exc:
        log(str(exc))  # judged below as brokers-disagree, with what each answered last
    objects = None
    try:
        objects = cluster.object_store.list_objects(TIERED_PREFIX)
    except (OSError, ValueError, RuntimeError) as exc:
        facts["bucket_listing_failed"] = repr(exc)[:300]
    res = tiered.check_remote_logs(answers, objects, TIERED_PREFIX)
    for i, addr in nodes.items():
        try:
            text = tiered.http_get(addr, "/metrics")
        except OSError as exc:
            text = f"unreadable: {exc!r}"
        (cluster.work / f"node{i}" / "metrics-at-end.txt").write_text(text)
    facts["segments_copied"] = metrics("millrace_remote_segments_copied")
    facts["copy_failures"] = metrics("millrace_remote_copy_failures")
    facts["orphans_deleted"] = metrics("millrace_remote_orphans_deleted")
    # Counters since each broker's last start (kills reset them): lower bounds for the run.
    facts["remote_bytes_fetched"] = metrics("millrace_remote_bytes_fetched")
    facts["offsets_after"] = tiered_offsets(admin, cluster)
    return res, facts


def add_tiered_checks(checks: Checks, topic_res: checker.Result, res: Optional[tiered.TieredResult], facts: dict,
                      before: Dict[int, dict], drained: dict, acked_min: int) -> None:
    """Tiered storage's checks: the tiered topic's history, the remote logs, and that it tiered."""
    counts = topic_res.counts()
    checks.add(f"{TIERED_TOPIC}: acknowledged sends >= {acked_min}", topic_res.stats["sends_ok"] >= acked_min,
               f"{topic_res.stats['sends_ok']}")
    checks.add(f"{TIERED_TOPIC}: final drain from offset 0 read every partition to its end",
               bool(drained.get("complete")), f"{drained.get('read', 0)} records")
    for kind in checker.ANOMALIES:
        if kind == "committed-offset-regression":
            continue  # no group reads the tiered topic
        checks.add(f"{TIERED_TOPIC}: no {kind}", counts[kind] == 0, checker.count_detail(topic_res, kind))
    checks.add("tiered: uploads caught up after the heal (upload lag 0 on every broker)",
               bool(facts.get("uploads_caught_up")), f"{facts.get('catch_up_s')}s")
    if res is None:
        checks.add("tiered: remote logs checked", False, "no answer")
        return
    per_partition = res.stats.get("segments_per_partition", {})
    tiered_parts = [f"{TIERED_TOPIC}-{p}" for p in range(TIERED_PARTITIONS)]
    checks.add(f"tiered: every {TIERED_TOPIC} partition has remote segments",
               all(per_partition.get(tp, 0) > 0 for tp in tiered_parts),
               ", ".join(f"{tp} {per_partition.get(tp, 0)}" for tp in tiered_parts))
    local_starts = {p: row.get("local_start") for p, row in before.items()}
    checks.add("tiered: before the drain every leader's local log started above 0 and the log at 0 "
               "(so reads from 0 came from the object store)",
               bool(before) and all(isinstance(v, int) and v > 0 for v in local_starts.values())
               and all(row.get("remote_start") == 0 for row in before.values()),
               "; ".join(f"p{p}: -2 {row.get('remote_start')}, -4 {row.get('local_start')}, "
                         f"-5 {row.get('last_tiered')}, -1 {row.get('end')}" for p, row in sorted(before.items())))
    checks.add("tiered: the bucket was listed", bool(res.stats.get("objects_listed")),
               facts.get("bucket_listing_failed", f"{res.stats.get('objects', 0)} objects"))
    for kind, n in res.counts().items():
        checks.add(f"tiered: no {kind}", n == 0, checker.count_detail(res, kind))


def progress(work: Path) -> Dict[str, int]:
    """Counts from the per-process history files written so far (for progress lines)."""
    c = {"send-ok": 0, "send-info": 0, "poll-ok": 0, "commit-ok": 0, "faults": 0, "txn-ok": 0, "txn-fail": 0,
         "txn-info": 0, "share-ack-ok": 0}
    for path in work.glob("history-*.jsonl"):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if '"f":"send"' in line:
                    if '"type":"ok"' in line:
                        c["send-ok"] += 1
                    elif '"type":"info"' in line:
                        c["send-info"] += 1
                elif '"type":"ok","f":"poll"' in line:
                    c["poll-ok"] += 1
                elif '"type":"ok","f":"commit"' in line:
                    c["commit-ok"] += 1
                elif '"f":"txn"' in line:
                    for kind in ("ok", "fail", "info"):
                        if f'"type":"{kind}","f":"txn"' in line:
                            c[f"txn-{kind}"] += 1
                elif '"type":"ok","f":"share-ack"' in line:
                    c["share-ack-ok"] += 1
                elif '"process":"nemesis","type":"invoke"' in line:
                    c["faults"] += 1
    return c


def _kinds(lanes: Dict[str, tuple]) -> List[str]:
    return [k for kinds in lanes.values() for k in kinds]


if __name__ == "__main__":
    sys.exit(main())
