"""Cluster fault test: N nodes, a proxy on every link, a seeded fault schedule, a recorded
workload, then heal, drain and check the history.

    python harness.py [--system millrace|kafka] [--nodes 3] [--seed S] [--duration 240] [--broken]

Alongside the plain workload runs the transactional consume-transform-produce workload
(``ctp.py``): an input producer, two transactional workers in a ``read_committed`` group, and a
final drain of both topics; the process lane also kills the transaction coordinator of a
worker's ``transactional.id``.

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
from chaos import Chaos
from history import History, merge
from nemesis import Nemesis, describe, fault_counts, make_schedule
from procs import spawn, terminate, wait_until
from systems import REPO, Cluster, KafkaCluster, MillraceCluster, millrace_has_cluster_support
from workload import CLIENT_LOG, admin_client, create_topic

HERE = Path(__file__).resolve().parent
PARTITIONS = 6
CLIENT_RESTARTS_MAX = 20  # per client: a client that keeps dying is left dead
# A transactional worker also exits (to be restarted) on every fenced producer or unknown commit
# outcome, which each transaction-coordinator kill can cause.
CTP_RESTARTS_MAX = 60
CTP_DRAIN_S = 240  # the transactional drain: waiting for the group to catch up, then both topics
TOPIC = "chaos"
GROUP = "chaos-group"


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

    log(f"system {args.system}, {nodes} node(s), seed {seed}, duration {args.duration:.0f}s, "
        f"{'BROKEN configuration' if args.broken else 'safe configuration'}, work dir {work}")
    chaos = Chaos(binary("CHAOS_PROXY_BIN", "millrace-chaos"), work / "chaos.log").start()
    cluster: Optional[Cluster] = None
    checks = Checks()
    history: Optional[History] = None
    workers: List[WorkerProc] = []
    keep = args.keep
    try:
        if args.system == "kafka":
            cluster = KafkaCluster(work, chaos, nodes, args.broken)
        else:
            cluster = MillraceCluster(work, chaos, nodes, args.broken, mbin)
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
        workers = producers + consumers + readers + [ctp_input] + ctp_workers
        for w in consumers + readers + ctp_workers + producers + [ctp_input]:
            w.start()

        def controller_lookup() -> Optional[int]:
            out = run_once(work, t0_ns, "controller", "lookup", common, 20)
            try:
                return int(out.splitlines()[-1]) if out else None
            except ValueError:
                return None

        def txn_coordinator_lookup(slot: int) -> tuple:
            return ctp.find_txn_coordinator(cluster.bootstrap, ctp.txn_id(slot))

        nemesis = Nemesis(cluster, history, TOPIC, stop_nemesis, controller_lookup, txn_coordinator_lookup)
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
                    f"aborted {c['txn-fail']}, unknown {c['txn-info']}; faults {c['faults']}")

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
        for w in producers + [ctp_input]:
            w.stop()
        for w in producers + [ctp_input]:
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
        log("transactions: waiting for the group to commit every input, then draining both topics read_committed")
        out = run_once(work, t0_ns, "ctp-drain", "ctp-drain", dict(common, timeout=CTP_DRAIN_S), CTP_DRAIN_S + 60)
        ctp_drained = json.loads(out.splitlines()[-1]) if out else None
        log(f"transactions: drain {ctp_drained}")
        for w in ctp_workers:
            w.stop()
        for w in ctp_workers:
            w.wait(45)
        history.close()
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
        ctp_res = checker.check_ctp(ops)
        checker.report_ctp(ctp_res)
        with open(work / "result.json", "w", encoding="utf-8") as fh:
            json.dump({"seed": seed, "faults": counts, "counts": res.counts(), "stats": res.stats,
                       "ctp_counts": ctp_res.counts(), "ctp_stats": ctp_res.stats,
                       "recovery_s": recovery_s, "drain": {k: v for k, v in drained.items() if k != "end_offsets"}},
                      fh, indent=1)

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
                checks.add(f"no {kind}", counts_a[kind] == 0, f"{counts_a[kind]}")
            add_ctp_checks(checks, ctp_res, ops, ctp_drained)
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
        n = res.counts()[kind]
        checks.add(f"no transactional {kind}", n == 0, f"{n}")


def progress(work: Path) -> Dict[str, int]:
    """Counts from the per-process history files written so far (for progress lines)."""
    c = {"send-ok": 0, "send-info": 0, "poll-ok": 0, "commit-ok": 0, "faults": 0, "txn-ok": 0, "txn-fail": 0,
         "txn-info": 0}
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
                elif '"process":"nemesis","type":"invoke"' in line:
                    c["faults"] += 1
    return c


def _kinds(lanes: Dict[str, tuple]) -> List[str]:
    return [k for kinds in lanes.values() for k in kinds]


if __name__ == "__main__":
    sys.exit(main())
