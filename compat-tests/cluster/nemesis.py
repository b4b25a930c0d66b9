"""The nemesis: a seeded fault schedule and the threads that carry it out.

The schedule is made up front from the seed (``make_schedule``) and saved with the run, so a
seed always gives the same faults, in the same order, with the same parameters and start times.
Targets named by role ("the leader of partition 3", "the active controller") are resolved when
the fault starts; when that fails, the seeded fallback node is used.

Two lanes run side by side: a process lane (kill -9 + restart with the same data dir,
SIGSTOP/SIGCONT past the session timeout, kill -9 of the active controller, kill -9 of the
transaction coordinator of a transactional worker's ``transactional.id``, kill -9 of the leader of
a partition the share group reads: its share partitions move to another leader, which loads
their state from the share coordinator) and a network lane
(client link cuts one-way and both ways; with several nodes also one-way and two-way partitions
between two nodes on their data links, controller links or both, and isolation of the active
controller). Faults in a lane run one after another; each ends healed (restarted, resumed,
routes healed) before the next starts. Every fault is recorded as a ``nemesis`` invoke when it
starts and ``ok`` (or ``info`` with the error) when it is healed.

Millrace also gets a storage lane: flip a byte inside a batch of a closed segment of one
replica (``flip-bytes``), never in more than RF-1 replicas' copies of any batch, and only while
another replica holds a whole copy of it (a replica that is behind may not hold it at all), so one
good copy remains; its scrubber must find the damage and repair it from a replica (issue 30). The final
replica comparison and the consumers' read-back check that nothing damaged was served and that
every replica is whole again. Apache Kafka does not repair damaged batches, so its runs have no
storage lane.

With tiered storage (Millrace, 3 nodes) the process lane also kills -9 the leader of a tiered
partition (``kill-tiered-leader``), waiting up to a few seconds for a moment when that node has
closed segments not yet uploaded (its ``millrace_remote_upload_lag_segments`` > 0; the record
says whether it caught one), and an object-store lane cuts the brokers' ``s3`` route both ways
for 5-20 s (``object-store-outage``), then leaves it whole for 8-20 s; the other lanes go on
meanwhile, so leaders are killed and partitioned during uploads and outages.

With several nodes a throttle lane sets a KIP-73 replication throttle (``throttle-replication``):
a low leader or follower rate on one broker for every replica of the main topic, for 6-12 s,
then lifts it (in a one-shot worker process); only out-of-sync replicas are held back, so acks=all
writes wait on nothing the throttle slows except the catch-up of a replica back from a fault.

The broken configuration has its own lane: isolate the leader of a partition from its
followers for a moment, kill -9 it while acks=1 writes are still unreplicated, let another
replica take over, then heal and restart.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Dict, List, Optional

import share
import tiered
from ctp import WORKERS
from history import History
from systems import Cluster
from workload import admin_client

SESSION_PAUSE_S = (11.0, 14.0)  # past Kafka's broker.session.timeout.ms (9 s) and the consumers' 10 s
DOWN_S = (1.0, 4.0)
CUT_S = (3.0, 8.0)
PARTITION_S = (3.0, 10.0)
# Faults that kill a node and restart it (the schedule leaves time for the restart).
KILL_KINDS = ("kill", "kill-controller", "kill-txn-coordinator", "isolate-leader-kill", "kill-tiered-leader",
              "kill-share-leader")
# An object-store outage: the s3 route cut, then whole again before the next outage.
OUTAGE_S = (5.0, 20.0)
OUTAGE_QUIET_S = (8.0, 20.0)
# How long a kill-tiered-leader fault looks for pending uploads on its target before killing anyway.
UPLOAD_WAIT_S = 8.0
UPLOAD_POLL_S = 0.1
TXN_SLOTS = WORKERS  # transactional worker slots; the schedule picks one per coordinator kill
TIERED_TOPIC = "chaos-tiered"  # the tiered topic of a Millrace run (harness.py creates it)
TIERED_PARTITIONS = 3
# How long a flip-bytes fault waits for the scrubber and repair before the next storage fault
# (Millrace's harness scrub interval is 3 s: two passes).
FLIP_S = (6.0, 9.0)
# How long a flip-bytes fault waits for a closed segment to appear in its partition.
FLIP_WAIT_SEGMENT_S = 30.0
# A throttle-replication fault: how long the throttle holds, and its bound (bytes/s: far below
# the workload's replication, so an out-of-sync replica really waits).
THROTTLE_S = (6.0, 12.0)
THROTTLE_RATE = (50_000, 300_000)
# A v2 batch's CRC covers its bytes from the attributes field on (offset 21).
CRC_COVERED_FROM = 21


def make_schedule(seed: int, duration: float, lanes: Dict[str, tuple], ids: List[int], partitions: int,
                  restart_s: float) -> List[dict]:
    """Faults for ``duration`` seconds. Each lane cycles through its kinds in a shuffled order per
    round, so every kind comes up once per round."""
    rng = random.Random(seed)
    schedule: List[dict] = []
    for lane, kinds in sorted(lanes.items()):
        t = rng.uniform(4.0, 8.0)
        order: List[str] = []
        while t < duration:
            if not order:
                order = list(kinds)
                rng.shuffle(order)
            kind = order.pop()
            fault = _params(rng, kind, ids, partitions)
            fault.update(lane=lane, at=round(t, 2))
            schedule.append(fault)
            overhead = restart_s if kind in KILL_KINDS else 0.0
            t += fault["duration"] + overhead + rng.uniform(0.5, 2.0)
    schedule.sort(key=lambda f: f["at"])
    return schedule


def _params(rng: random.Random, kind: str, ids: List[int], partitions: int) -> dict:
    node = rng.choice(ids)
    if kind == "kill":
        if rng.random() < 0.5:
            return dict(kind=kind, target="leader", partition=rng.randrange(partitions), node=node,
                        duration=round(rng.uniform(*DOWN_S), 2))
        return dict(kind=kind, target="node", node=node, duration=round(rng.uniform(*DOWN_S), 2))
    if kind == "pause":
        return dict(kind=kind, node=node, duration=round(rng.uniform(*SESSION_PAUSE_S), 2))
    if kind == "kill-controller":
        return dict(kind=kind, node=node, duration=round(rng.uniform(*DOWN_S), 2))
    if kind == "kill-txn-coordinator":
        return dict(kind=kind, slot=rng.randrange(1, TXN_SLOTS + 1), node=node, duration=round(rng.uniform(*DOWN_S), 2))
    if kind == "client-cut-oneway":
        return dict(kind=kind, node=node, direction=rng.choice(["up", "down"]), duration=round(rng.uniform(*CUT_S), 2))
    if kind == "client-cut-both":
        return dict(kind=kind, node=node, duration=round(rng.uniform(*CUT_S), 2))
    if kind in ("partition-oneway", "partition-both"):
        a, b = rng.sample(ids, 2)
        links = rng.choice(["data", "ctrl", "all"])
        return dict(kind=kind, a=a, b=b, links=links, duration=round(rng.uniform(*PARTITION_S), 2))
    if kind == "isolate-controller":
        return dict(kind=kind, node=node, duration=round(rng.uniform(*PARTITION_S), 2))
    if kind == "flip-bytes":
        return dict(kind=kind, partition=rng.randrange(partitions), node=node, segment=round(rng.random(), 4),
                    batch=round(rng.random(), 4), byte=round(rng.random(), 4),
                    duration=round(rng.uniform(*FLIP_S), 2))
    if kind == "kill-tiered-leader":
        return dict(kind=kind, partition=rng.randrange(TIERED_PARTITIONS), node=node,
                    duration=round(rng.uniform(*DOWN_S), 2))
    if kind == "kill-share-leader":
        return dict(kind=kind, partition=rng.randrange(share.PARTITIONS), node=node,
                    duration=round(rng.uniform(*DOWN_S), 2))
    if kind == "object-store-outage":
        cut = round(rng.uniform(*OUTAGE_S), 2)
        # The schedule spaces faults by ``duration``: the cut and the quiet time after it.
        return dict(kind=kind, cut=cut, duration=round(cut + rng.uniform(*OUTAGE_QUIET_S), 2))
    if kind == "throttle-replication":
        return dict(kind=kind, node=node, side=rng.choice(["leader", "follower"]),
                    rate=rng.randrange(*THROTTLE_RATE), duration=round(rng.uniform(*THROTTLE_S), 2))
    if kind == "isolate-leader-kill":
        return dict(kind=kind, partition=rng.randrange(partitions), node=node,
                    isolate=round(rng.uniform(1.5, 3.0), 2), duration=round(rng.uniform(12.0, 15.0), 2))
    raise ValueError(f"unknown fault kind {kind}")


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, topic: str, stop: threading.Event,
                 controller_lookup, txn_coordinator_lookup=None, throttle_setter=None) -> None:
        self.cluster = cluster
        self.chaos = cluster.chaos
        self.history = history
        self.topic = topic
        self.stop = stop
        self.admin = admin_client(cluster.bootstrap)
        # DescribeCluster runs in a short-lived worker process (an admin-client abort must not end
        # the harness); it answers the active controller's id or None.
        self.controller_lookup = controller_lookup
        # slot -> (coordinator node id or None, why the lookup failed): FindCoordinator for the
        # transactional id of that worker slot (ctp.find_txn_coordinator).
        self.txn_coordinator_lookup = txn_coordinator_lookup
        # (node, side, rate or None) -> error text or None: sets or lifts a KIP-73 throttle in a
        # one-shot worker process (worker.set_throttle).
        self.throttle_setter = throttle_setter
        # (node, side) of throttles that may still be set (a lift that failed): lifted at the heal.
        self.throttled: set = set()
        self.errors: List[str] = []
        self.threads: List[threading.Thread] = []
        # (partition, batch base offset) -> nodes whose copy a flip-bytes fault damaged.
        self.flipped: Dict[tuple, set] = {}

    # --- target resolution ----------------------------------------------------------------------
    def controller(self, fallback: int) -> int:
        found = self.controller_lookup()
        return found if found in self.cluster.nodes else fallback

    def txn_coordinator(self, slot: int, fallback: int) -> tuple:
        """(node, how it was chosen): the coordinator found, or the seeded fallback."""
        found, failures = self.txn_coordinator_lookup(slot) if self.txn_coordinator_lookup else (None, ["no lookup"])
        if found in self.cluster.nodes:
            return found, "coordinator"
        return fallback, f"fallback ({'; '.join(failures)[:200]})"

    def leader(self, partition: int, fallback: int, topic: Optional[str] = None) -> int:
        topic = topic or self.topic
        try:
            md = self.admin.list_topics(topic, timeout=5)
            leader = md.topics[topic].partitions[partition].leader
            if leader in self.cluster.nodes:
                return leader
        except Exception:  # noqa: BLE001
            pass
        return fallback

    # --- running ----------------------------------------------------------------------------------
    def start(self, schedule: List[dict]) -> None:
        t0 = time.monotonic()
        lanes = sorted({f["lane"] for f in schedule})
        for lane in lanes:
            faults = [f for f in schedule if f["lane"] == lane]
            th = threading.Thread(target=self._lane, args=(t0, faults), name=f"nemesis-{lane}", daemon=True)
            th.start()
            self.threads.append(th)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for th in self.threads:
            th.join(max(0.0, deadline - time.monotonic()))

    def _lane(self, t0: float, faults: List[dict]) -> None:
        for fault in faults:
            if self.stop.wait(max(0.0, t0 + fault["at"] - time.monotonic())):
                return
            try:
                self.run_fault(fault)
            except Exception as exc:  # noqa: BLE001 - recorded; the lane goes on
                self.errors.append(f"{fault}: {exc!r}")
                self.history.record("nemesis", "info", fault["kind"], error=repr(exc)[:300])

    def run_fault(self, fault: dict) -> None:
        kind = fault["kind"]
        h = self.history
        if kind in ("kill", "kill-controller"):
            if kind == "kill-controller":
                node = self.controller(fault["node"])
            elif fault.get("target") == "leader":
                node = self.leader(fault["partition"], fault["node"])
            else:
                node = fault["node"]
            h.record("nemesis", "invoke", kind, node=node, duration=fault["duration"])
            self.cluster.nodes[node].kill9()
            time.sleep(fault["duration"])
            self._restart(node)
            h.record("nemesis", "ok", kind, node=node)
        elif kind == "kill-txn-coordinator":
            node, chosen = self.txn_coordinator(fault["slot"], fault["node"])
            h.record("nemesis", "invoke", kind, node=node, slot=fault["slot"], chosen=chosen, duration=fault["duration"])
            self.cluster.nodes[node].kill9()
            time.sleep(fault["duration"])
            self._restart(node)
            h.record("nemesis", "ok", kind, node=node)
        elif kind == "pause":
            node = fault["node"]
            h.record("nemesis", "invoke", kind, node=node, duration=fault["duration"])
            self.cluster.nodes[node].pause()
            time.sleep(fault["duration"])
            self.cluster.nodes[node].resume()
            h.record("nemesis", "ok", kind, node=node)
        elif kind in ("client-cut-oneway", "client-cut-both"):
            node = fault["node"]
            direction = fault.get("direction", "both")
            route = f"client{node}"
            h.record("nemesis", "invoke", kind, node=node, direction=direction, duration=fault["duration"])
            self.chaos.cut([route], direction)
            time.sleep(fault["duration"])
            self.chaos.heal([route])
            h.record("nemesis", "ok", kind, node=node)
        elif kind in ("partition-oneway", "partition-both"):
            a, b = fault["a"], fault["b"]
            links = ["data", "ctrl"] if fault["links"] == "all" else [fault["links"]]
            pairs = []
            for link in links:
                pairs += self.cluster.link_routes(link, a, b)
                if kind == "partition-both":
                    pairs += self.cluster.link_routes(link, b, a)
            h.record("nemesis", "invoke", kind, a=a, b=b, links=fault["links"], duration=fault["duration"],
                     routes=[f"{r}:{d}" for r, d in pairs])
            self._cut_pairs(pairs)
            time.sleep(fault["duration"])
            self.chaos.heal(sorted({r for r, _ in pairs}))
            h.record("nemesis", "ok", kind, a=a, b=b)
        elif kind == "isolate-controller":
            node = self.controller(fault["node"])
            pairs = []
            for m in self.cluster.ids:
                if m != node:
                    pairs += self.cluster.link_routes("ctrl", node, m) + self.cluster.link_routes("ctrl", m, node)
            h.record("nemesis", "invoke", kind, node=node, duration=fault["duration"])
            self._cut_pairs(pairs)
            time.sleep(fault["duration"])
            self.chaos.heal(sorted({r for r, _ in pairs}))
            h.record("nemesis", "ok", kind, node=node)
        elif kind == "isolate-leader-kill":
            node = self.leader(fault["partition"], fault["node"])
            pairs = []
            for m in self.cluster.ids:
                if m != node:
                    pairs += self.cluster.link_routes("data", node, m) + self.cluster.link_routes("data", m, node)
            h.record("nemesis", "invoke", kind, node=node, partition=fault["partition"], isolate=fault["isolate"],
                     duration=fault["duration"])
            self._cut_pairs(pairs)
            time.sleep(fault["isolate"])
            self.cluster.nodes[node].kill9()
            time.sleep(fault["duration"])
            self.chaos.heal(sorted({r for r, _ in pairs}))
            self._restart(node)
            h.record("nemesis", "ok", kind, node=node)
        elif kind == "kill-tiered-leader":
            node = self.leader(fault["partition"], fault["node"], TIERED_TOPIC)
            pending = self._wait_upload_lag(node)
            h.record("nemesis", "invoke", kind, node=node, partition=fault["partition"], uploads_pending=pending,
                     duration=fault["duration"])
            self.cluster.nodes[node].kill9()
            time.sleep(fault["duration"])
            self._restart(node)
            h.record("nemesis", "ok", kind, node=node)
        elif kind == "kill-share-leader":
            node = self.leader(fault["partition"], fault["node"], share.TOPIC)
            h.record("nemesis", "invoke", kind, node=node, partition=fault["partition"], duration=fault["duration"])
            self.cluster.nodes[node].kill9()
            time.sleep(fault["duration"])
            self._restart(node)
            h.record("nemesis", "ok", kind, node=node)
        elif kind == "object-store-outage":
            h.record("nemesis", "invoke", kind, cut=fault["cut"], duration=fault["duration"])
            self.chaos.cut(["s3"], "both")
            time.sleep(fault["cut"])
            self.chaos.heal(["s3"])
            h.record("nemesis", "ok", kind)
        elif kind == "throttle-replication":
            node, side = fault["node"], fault["side"]
            h.record("nemesis", "invoke", kind, node=node, side=side, rate=fault["rate"], duration=fault["duration"])
            self.throttled.add((node, side))
            error = self.throttle_setter(node, side, fault["rate"])
            time.sleep(fault["duration"])
            lifted = self.throttle_setter(node, side, None)
            if lifted is None:
                self.throttled.discard((node, side))
            if error or lifted:
                h.record("nemesis", "info", kind, node=node, error=(error or lifted)[:300])
            else:
                h.record("nemesis", "ok", kind, node=node)
        elif kind == "flip-bytes":
            self._flip_bytes(fault)
        else:
            raise ValueError(f"unknown fault kind {kind}")

    def _flip_bytes(self, fault: dict) -> None:
        """Flips one CRC-covered byte of a batch in a closed segment of one replica (waiting for
        a closed segment if there is none yet), then gives the scrubber time to repair it."""
        h = self.history
        rf = len(self.cluster.ids)
        deadline = time.monotonic() + FLIP_WAIT_SEGMENT_S
        while True:
            target = self._flip_target(fault, rf)
            if target is not None or time.monotonic() > deadline or self.stop.is_set():
                break
            time.sleep(1.0)
        if target is None:
            raise RuntimeError(f"no closed segment to damage in partition {fault['partition']}")
        node, segment, pos, base, at = target
        with open(segment, "r+b") as fh:
            fh.seek(at)
            (byte,) = fh.read(1)
            fh.seek(at)
            fh.write(bytes([byte ^ 0x5A]))
        self.flipped.setdefault((fault["partition"], base), set()).add(node)
        h.record("nemesis", "invoke", "flip-bytes", node=node, partition=fault["partition"], segment=segment.name,
                 batch=base, position=at, duration=fault["duration"])
        time.sleep(fault["duration"])
        h.record("nemesis", "ok", "flip-bytes", node=node, partition=fault["partition"])

    def _flip_target(self, fault: dict, rf: int):
        """(node, segment file, batch position, batch base offset, byte position) or None. Prefers
        the seeded node; moves to another when its copy of that batch was damaged before, or when
        no other replica holds a whole copy of it, and gives up once RF-1 copies of the batch were."""
        p = fault["partition"]
        nodes = [fault["node"]] + [n for n in self.cluster.ids if n != fault["node"]]
        for node in nodes:
            pdir = self.cluster.data_dirs()[node] / f"{self.topic}-{p}"
            segments = sorted(pdir.glob("*.log")) if pdir.is_dir() else []
            closed = segments[:-1]
            if not closed:
                continue
            segment = closed[min(len(closed) - 1, int(fault["segment"] * len(closed)))]
            batches = _batch_positions(segment.read_bytes())
            if not batches:
                continue
            pos, base, total = batches[min(len(batches) - 1, int(fault["batch"] * len(batches)))]
            damaged = self.flipped.get((p, base), set())
            if node in damaged or len(damaged) >= rf - 1:
                continue
            # A replica that is behind may not hold the batch at all, so counting damaged copies
            # is not enough: another replica must hold a whole copy of it right now.
            copy = segment.read_bytes()[pos:pos + total]
            if not any(self._holds_copy(other, p, base, copy) for other in self.cluster.ids
                       if other != node and other not in damaged):
                continue
            at = pos + CRC_COVERED_FROM + int(fault["byte"] * (total - CRC_COVERED_FROM))
            return node, segment, pos, base, at
        return None

    def _holds_copy(self, node: int, partition: int, base: int, copy: bytes) -> bool:
        """Whether ``node``'s replica of ``partition`` holds the batch at ``base`` byte for byte."""
        pdir = self.cluster.data_dirs()[node] / f"{self.topic}-{partition}"
        segments = sorted(pdir.glob("*.log")) if pdir.is_dir() else []
        holding = [s for s in segments if s.stem.isdigit() and int(s.stem) <= base]
        if not holding:
            return False
        try:
            data = holding[-1].read_bytes()
        except OSError:  # deleted or rolled under us: not a copy to count on
            return False
        return any(b == base and data[pos:pos + total] == copy for pos, b, total in _batch_positions(data))

    def _wait_upload_lag(self, node: int) -> Optional[float]:
        """Polls ``node``'s upload lag (closed segments not yet in the object store) until it is
        above 0 or ``UPLOAD_WAIT_S`` passes; returns the last value seen (None: unreadable)."""
        addr = self.cluster.nodes[node].http_addr
        seen: Optional[float] = None
        deadline = time.monotonic() + UPLOAD_WAIT_S
        while addr and time.monotonic() < deadline and not self.stop.is_set():
            try:
                seen = tiered.metric(tiered.http_get(addr, "/metrics"), "millrace_remote_upload_lag_segments")
            except OSError:
                seen = None
            if seen:
                break
            time.sleep(UPLOAD_POLL_S)
        return seen

    def _cut_pairs(self, pairs: List[tuple]) -> None:
        for direction in ("up", "down"):
            self.chaos.cut(sorted({r for r, d in pairs if d == direction}), direction)

    def _restart(self, node: int) -> None:
        try:
            self.cluster.restart(node)
        except Exception as exc:  # noqa: BLE001 - one more try, then give up on this node
            self.history.record("nemesis", "info", "restart-failed", node=node, error=repr(exc)[:300])
            self.cluster.nodes[node].kill9()
            self.cluster.restart(node)

    def heal_everything(self) -> None:
        """Heals every route, resumes paused nodes, restarts dead ones."""
        self.chaos.heal_all()
        for node in self.cluster.nodes.values():
            if node.paused or node.alive():
                node.resume()
        for i, node in self.cluster.nodes.items():
            if not node.alive():
                self._restart(i)
        # A throttle whose lift failed (its node was down) is lifted now, the nodes being up.
        for node, side in sorted(self.throttled):
            for _ in range(5):
                if self.throttle_setter(node, side, None) is None:
                    self.throttled.discard((node, side))
                    break
                time.sleep(2)
        self.history.record("nemesis", "ok", "heal-all", throttles_left=sorted(self.throttled))


def _batch_positions(data: bytes) -> List[tuple]:
    """(position, base offset, length) of each whole batch of a segment file's bytes."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        total = 12 + length
        if length < 49 or pos + total > len(data):
            break
        out.append((pos, base, total))
        pos += total
    return out


def fault_counts(history_ops: List[dict]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for op in history_ops:
        if op.get("process") == "nemesis" and op.get("type") == "invoke":
            counts[op["f"]] = counts.get(op["f"], 0) + 1
    return counts


def describe(schedule: List[dict], limit: Optional[int] = None) -> str:
    lines = []
    for f in schedule[:limit]:
        params = {k: v for k, v in f.items() if k not in ("kind", "lane", "at")}
        lines.append(f"  {f['at']:7.2f}s {f['lane']:<8} {f['kind']:<20} {params}")
    return "\n".join(lines)
