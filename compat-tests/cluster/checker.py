"""Checks a cluster-test history for the anomalies of Jepsen's Kafka workload (non-transactional part).

The model is jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``: partitions are
append-only logs, each offset holds one value, values are unique, and every operation of a
client is recorded as JSON lines ``invoke`` then ``ok`` / ``fail`` / ``info`` (``info`` =
unknown outcome, e.g. a timeout). See ``history.py`` for the record format and
``docs/reliability.md`` for the definitions in prose.

Anomalies (each reported with the operations that show it):

- ``lost-write``: a send acknowledged (``ok``) at offset o of partition p, never read by
  anyone, although some read of p reached an offset >= o.
- ``unseen``: a send acknowledged but never read, above every offset read of its partition.
  After the final drain (which reads every partition to its end) this must be empty too.
- ``inconsistent-offset``: one (partition, offset) holding two values across sends and reads.
- ``duplicate``: one value at two (partition, offset) places.
- ``aborted-read``: a value read whose send definitely failed, or that nobody sent.
- ``poll-skip`` / ``nonmonotonic-poll``: one consumer, between two assignment changes, read
  partition p at version-order positions i then j with j > i + 1 (it skipped values that
  exist) or j <= i (it went back or stood still). The version order of p is every offset known
  to hold a value (from acknowledged sends and reads), sorted; gaps in raw offsets that nobody
  ever observed are not skips.
- ``committed-offset-regression``: an acknowledged commit lost: the final read-back of the
  group's committed offsets (after the heal) is lower than the highest acknowledged commit of
  that partition. Regressions seen *during* faults (a read-back or commit lower than one that
  completed before it started) are counted in the statistics, not as anomalies: Kafka itself
  shows them after a coordinator fails over (see the comment in ``check``).

Transactions (``check_ctp``; the consume-transform-produce workload of ``ctp.py``, whose
module comment describes its records). A transaction is ``ok`` (commit acknowledged), ``fail``
(definitely not committed) or ``info`` (unknown: either may have happened, so nothing is
concluded from it alone). The output records are those the final ``read_committed`` drain read.

- ``aborted-read``: an output record of a transaction that definitely did not commit, or of no
  recorded transaction at all.
- ``lost-write``: an output of an acknowledged transaction missing from the output.
- ``duplicate``: one input record's output present more than once (two transactions, or one
  transaction's record stored twice).
- ``partial-transaction``: some, not all, outputs of one transaction are present.
- ``missing-output``: an input record (acknowledged, or read from the input topic) with no
  output after the final drain: every input must come out exactly once.

Another topic written and read the same way (the tiered topic of a Millrace run) is checked by
``check(ops, topic)``: its records name their ``topic``; the main topic's carry none.

Share groups (``check_share``; the KIP-932 workload of ``share.py``, whose module comment
describes its records). An acknowledgement is ``ok`` (applied), ``fail`` (definitely not:
INVALID_RECORD_STATE) or ``info`` (unknown). A record is *settled* once an ACCEPT or REJECT of it
was applied, or once it was delivered at the delivery-count limit (then it is accepted or
archived; the client cannot tell which).

- ``accepted-twice``: two applied ACCEPTs of one record. An ACCEPT sent after another delivery
  of the record superseded the one it acknowledges is not counted: it fails, or — the record
  already settled below the share-partition start — is skipped with success (Kafka's rule).
- ``delivered-after-accept`` / ``delivered-after-reject``: a poll invoked after an applied
  ACCEPT (REJECT) of a record completed returned that record again.
- ``over-delivery-limit``: a delivery count above the limit (or below 1).
- ``wrong-value``: a delivered (partition, offset) whose value is not the one acknowledged there,
  or a value nobody sent.
- ``lost``: an acknowledged input never settled: never delivered, or its last delivery was
  released, expired or refused and it never came back. An ACCEPT or REJECT of unknown outcome
  (``info``) with no delivery after it counts as settled (``ambiguous`` in the statistics).

Usage: ``python checker.py HISTORY.jsonl [--json OUT]``; exit status 1 when any anomaly.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import Counter, defaultdict
from typing import Any, Dict, Iterable, List, Optional, Tuple

ANOMALIES = (
    "lost-write",
    "inconsistent-offset",
    "duplicate",
    "aborted-read",
    "poll-skip",
    "nonmonotonic-poll",
    "committed-offset-regression",
    "unseen",
)

CTP_ANOMALIES = (
    "aborted-read",
    "lost-write",
    "duplicate",
    "partial-transaction",
    "missing-output",
)

SHARE_ANOMALIES = (
    "accepted-twice",
    "delivered-after-accept",
    "delivered-after-reject",
    "over-delivery-limit",
    "wrong-value",
    "lost",
)

# How many example operations an anomaly carries, and how many anomalies of a kind are printed.
OPS_PER_ANOMALY_MAX = 6
PRINTED_PER_KIND_MAX = 10
FIRST_DETAIL_CHARS_MAX = 200  # of a failed check's first anomaly (count_detail)

# Events that end a consumer's run of polls: after them, its position may legitimately move.
ASSIGNMENT_EVENTS = ("assign", "revoke")

Op = Dict[str, Any]


def load(path: str) -> List[Op]:
    """Reads a JSON-lines history; a torn last line (the writer was killed) is skipped."""
    ops: List[Op] = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            ops.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines) - 1:
                continue
            raise
    return ops


def _reads(op: Op) -> Iterable[Tuple[int, int, str]]:
    """(partition, offset, value) of every record an ok poll returned, in order."""
    for p, pairs in (op.get("reads") or {}).items():
        for offset, value in pairs:
            yield int(p), int(offset), value


class Result:
    def __init__(self, kinds: Tuple[str, ...] = ANOMALIES) -> None:
        self.anomalies: Dict[str, List[Dict[str, Any]]] = {k: [] for k in kinds}
        self.stats: Dict[str, Any] = {}

    def add(self, kind: str, ops: List[Op], **detail: Any) -> None:
        entry = dict(detail)
        entry["ops"] = ops[:OPS_PER_ANOMALY_MAX]
        self.anomalies[kind].append(entry)

    def counts(self) -> Dict[str, int]:
        return {k: len(v) for k, v in self.anomalies.items()}

    def valid(self) -> bool:
        return not any(self.anomalies.values())


def count_detail(res: Any, kind: str) -> str:
    """How many ``kind`` anomalies ``res`` (a ``Result`` or any result with ``anomalies``) found,
    and the first one's detail (its ops left out) when there are any: a failed check's line is
    all a CI excerpt shows of the run."""
    found = res.anomalies[kind]
    if not found:
        return "0"
    first = {k: v for k, v in found[0].items() if k != "ops"}
    return f"{len(found)}; first {json.dumps(first, sort_keys=True)[:FIRST_DETAIL_CHARS_MAX]}"


# Operations that belong to one topic's history. Records of the main topic carry no ``topic``
# field; those of another topic checked the same way (the tiered topic) name it.
TOPIC_OPERATIONS = ("send", "poll", "assign", "revoke", "commit", "committed", "drain-end")


def of_topic(ops: Iterable[Op], topic: Optional[str]) -> List[Op]:
    """``ops`` less the per-topic operations of other topics (``TOPIC_OPERATIONS``)."""
    return [op for op in ops if op.get("f") not in TOPIC_OPERATIONS or op.get("topic") == topic]


def check(ops: List[Op], topic: Optional[str] = None) -> Result:
    """The anomalies of one topic's history: the main topic's (records without ``topic``) by
    default, else those whose records name ``topic``."""
    ops = sorted(of_topic(ops, topic), key=lambda o: o.get("i", 0))
    res = Result()

    # --- sends, by value (a producer has many sends in flight, so pair by value) --------------
    send_invoke: Dict[str, Op] = {}
    send_done: Dict[str, Op] = {}
    for op in ops:
        if op.get("f") != "send":
            continue
        if op["type"] == "invoke":
            send_invoke[op["value"]] = op
        else:
            send_done[op["value"]] = op

    # --- what each (partition, offset) and each value was seen as ------------------------------
    at_offset: Dict[Tuple[int, int], Dict[str, List[Op]]] = defaultdict(lambda: defaultdict(list))
    value_places: Dict[str, Dict[Tuple[int, int], List[Op]]] = defaultdict(lambda: defaultdict(list))
    read_values: Dict[str, Op] = {}
    max_read: Dict[int, int] = {}
    n_reads = 0
    for value, op in send_done.items():
        if op["type"] == "ok" and op.get("offset") is not None:
            place = (int(op["partition"]), int(op["offset"]))
            at_offset[place][value].append(op)
            value_places[value][place].append(op)
    for op in ops:
        if op.get("f") != "poll" or op["type"] != "ok":
            continue
        for p, offset, value in _reads(op):
            n_reads += 1
            witnesses = at_offset[(p, offset)][value]
            if len(witnesses) < OPS_PER_ANOMALY_MAX:
                witnesses.append(op)
            places = value_places[value][(p, offset)]
            if len(places) < OPS_PER_ANOMALY_MAX:
                places.append(op)
            read_values.setdefault(value, op)
            if offset > max_read.get(p, -1):
                max_read[p] = offset

    for (p, offset), values in sorted(at_offset.items()):
        if len(values) > 1:
            witnesses = [o for v in sorted(values) for o in values[v][:2]]
            res.add("inconsistent-offset", witnesses, partition=p, offset=offset, values=sorted(values))
    for value, places in sorted(value_places.items()):
        if len(places) > 1:
            witnesses = [o for pl in sorted(places) for o in places[pl][:2]]
            res.add("duplicate", witnesses, value=value, places=[list(pl) for pl in sorted(places)])

    for value, first_read in sorted(read_values.items()):
        done = send_done.get(value)
        if value not in send_invoke:
            res.add("aborted-read", [first_read], value=value, why="never sent")
        elif done is not None and done["type"] == "fail":
            res.add("aborted-read", [send_invoke[value], done, first_read], value=value, why="send failed")

    for value, done in sorted(send_done.items(), key=lambda kv: kv[1].get("i", 0)):
        if done["type"] != "ok" or value in read_values or done.get("offset") is None:
            continue
        p, offset = int(done["partition"]), int(done["offset"])
        witnesses = [send_invoke.get(value, done), done]
        if offset <= max_read.get(p, -1):
            res.add("lost-write", witnesses, partition=p, offset=offset, value=value, max_read_offset=max_read[p])
        else:
            res.add("unseen", witnesses, partition=p, offset=offset, value=value, max_read_offset=max_read.get(p))

    # --- per consumer: monotonic, gap-free polls between assignment changes ---------------------
    version: Dict[int, List[int]] = defaultdict(list)
    for p, offset in at_offset:
        version[p].append(offset)
    for p in version:
        version[p].sort()
    position = {p: {o: n for n, o in enumerate(offsets)} for p, offsets in version.items()}
    last: Dict[str, Dict[int, Tuple[int, Op]]] = defaultdict(dict)
    for op in ops:
        proc = op.get("process")
        if op.get("f") in ASSIGNMENT_EVENTS:
            last[proc] = {}
            continue
        if op.get("f") != "poll" or op["type"] != "ok":
            continue
        for p, offset, value in _reads(op):
            idx = position[p][offset]
            prev = last[proc].get(p)
            if prev is not None:
                prev_idx, prev_op = prev
                if idx <= prev_idx:
                    res.add(
                        "nonmonotonic-poll",
                        [prev_op, op] if prev_op is not op else [op],
                        process=proc,
                        partition=p,
                        previous_offset=version[p][prev_idx],
                        offset=offset,
                    )
                elif idx > prev_idx + 1:
                    missed = version[p][prev_idx + 1 : idx]
                    res.add(
                        "poll-skip",
                        [prev_op, op] if prev_op is not op else [op],
                        process=proc,
                        partition=p,
                        previous_offset=version[p][prev_idx],
                        offset=offset,
                        skipped=missed[:20],
                        skipped_count=len(missed),
                    )
            last[proc][p] = (idx, op)

    # --- committed offsets: an acknowledged commit is never lost ----------------------------------
    # The anomaly is judged on the final read-back (``final: true``, taken after the heal with the
    # cluster healthy and the consumers stopped): it must be at least the highest acknowledged
    # commit of each partition. Read-backs during faults may legitimately show an older value for
    # a while (a new coordinator serves reads at its high watermark, which can lag an offset the
    # old leader acknowledged; Apache Kafka does this), and a consumer that then resumes from
    # that older value commits lower offsets durably (at-least-once). Those mid-run regressions
    # are counted in the statistics, with their operations, but are not anomalies.
    observations: Dict[Tuple[str, int], List[Tuple[int, int, int, Op]]] = defaultdict(list)
    best_commit: Dict[Tuple[str, int], Tuple[int, Op]] = {}
    finals: List[Op] = []
    pending: Dict[Tuple[str, str], Op] = {}
    n_commits = n_readbacks = 0
    for op in ops:
        f = op.get("f")
        if f not in ("commit", "committed"):
            continue
        key = (op.get("process"), f)
        if op["type"] == "invoke":
            pending[key] = op
            continue
        invoke = pending.pop(key, None)
        if op["type"] != "ok" or invoke is None:
            continue
        if f == "commit":
            n_commits += 1
        else:
            n_readbacks += 1
            if op.get("final"):
                finals.append(op)
        for p, offset in (op.get("offsets") or {}).items():
            if offset is None or int(offset) < 0:
                continue
            gp = (op["group"], int(p))
            observations[gp].append((invoke["i"], op["i"], int(offset), op))
            if f == "commit" and int(offset) > best_commit.get(gp, (-1, op))[0]:
                best_commit[gp] = (int(offset), op)
    if finals:
        final = finals[-1]
        for (group, p), (high, high_op) in sorted(best_commit.items()):
            if group != final["group"]:
                continue
            seen = (final.get("offsets") or {}).get(str(p))
            if seen is None or int(seen) < high:
                res.add(
                    "committed-offset-regression",
                    [high_op, final],
                    group=group,
                    partition=p,
                    acknowledged_offset=high,
                    final_offset=seen,
                )
    midrun: List[Dict[str, Any]] = []
    for (group, p), obs in sorted(observations.items()):
        by_completion = sorted(obs, key=lambda o: o[1])
        completions = [o[1] for o in by_completion]
        # best[k] = the highest offset among the first k+1 completed observations.
        best: List[Tuple[int, Op]] = []
        for o in by_completion:
            if not best or o[2] > best[-1][0]:
                best.append((o[2], o[3]))
            else:
                best.append(best[-1])
        for invoke_i, _, offset, op in obs:
            k = bisect.bisect_left(completions, invoke_i)  # observations completed before invoke
            if k and offset < best[k - 1][0]:
                midrun.append({"group": group, "partition": p, "earlier_offset": best[k - 1][0], "offset": offset,
                               "ops": [best[k - 1][1], op]})

    # --- statistics ------------------------------------------------------------------------------
    outcome = Counter(op["type"] for op in send_done.values())
    faults = Counter(op["f"] for op in ops if op.get("process") == "nemesis" and op["type"] == "invoke")
    res.stats = {
        "sends": len(send_invoke),
        "sends_ok": outcome.get("ok", 0),
        "sends_fail": outcome.get("fail", 0),
        "sends_info": outcome.get("info", 0) + (len(send_invoke) - len(send_done)),
        "reads": n_reads,
        "values_read": len(read_values),
        "commits_ok": n_commits,
        "committed_reads_ok": n_readbacks,
        "final_committed_read": bool(finals),
        "committed_midrun_regressions": len(midrun),
        "committed_midrun_examples": midrun[:3],
        "faults": dict(sorted(faults.items())),
        "operations": sum(1 for op in ops if op.get("type") == "invoke" and op.get("process") != "nemesis"),
        "topic_operations": sum(1 for op in ops if op.get("type") == "invoke" and op.get("f") in TOPIC_OPERATIONS),
    }
    return res


def _output_parts(value: str) -> Tuple[str, str]:
    """(input value, transaction id) of a CTP output value ``<input>|<txn>`` (see ctp.py)."""
    head, sep, txn = value.rpartition("|")
    return (head, txn) if sep else (value, "")


def check_ctp(ops: List[Op]) -> Result:
    """The transactional consume-transform-produce checks (module comment)."""
    ops = sorted(ops, key=lambda o: o.get("i", 0))
    res = Result(CTP_ANOMALIES)
    txn_invoke: Dict[str, Op] = {}
    txn_done: Dict[str, Op] = {}
    pending: Dict[str, Op] = {}
    for op in ops:
        if op.get("f") != "txn":
            continue
        if op["type"] == "invoke":
            pending[op["process"]] = op
            txn_invoke[op["txn"]] = op
        else:
            invoke = pending.pop(op["process"], None)
            if invoke is not None:
                txn_done[invoke["txn"]] = op
    inputs_sent: Dict[str, Op] = {}
    for op in ops:
        if op.get("f") == "ctp-send" and op["type"] == "ok":
            inputs_sent[op["value"]] = op
    inputs_read: Dict[str, Op] = {}
    outputs: Dict[str, List[Tuple[int, int, str, Op]]] = defaultdict(list)  # input -> places read
    by_txn: Dict[str, set] = defaultdict(set)  # txn -> output values read
    n_out = 0
    for op in ops:
        if op.get("f") != "ctp-read" or op["type"] != "ok":
            continue
        for p, offset, value in _reads(op):
            if value is None:
                continue
            if op.get("topic") == "in":
                inputs_read.setdefault(value, op)
                continue
            n_out += 1
            source, txn = _output_parts(value)
            outputs[source].append((p, offset, txn, op))
            by_txn[txn].add(value)

    # aborted-read: an output of a transaction that definitely did not commit, or of none recorded.
    for txn, seen in sorted(by_txn.items()):
        invoke, done = txn_invoke.get(txn), txn_done.get(txn)
        example = next(o for places in outputs.values() for (_, _, t, o) in places if t == txn)
        if invoke is None:
            for value in sorted(seen):
                res.add("aborted-read", [example], value=value, txn=txn, why="no such transaction")
        elif done is not None and done["type"] == "fail":
            why = "aborted on purpose" if done.get("deliberate") else "aborted"
            for value in sorted(seen):
                res.add("aborted-read", [invoke, done, example], value=value, txn=txn, why=why)

    # lost-write and partial-transaction: per transaction, all of its outputs or none.
    for txn, invoke in sorted(txn_invoke.items(), key=lambda kv: kv[1].get("i", 0)):
        done = txn_done.get(txn)
        if done is not None and done["type"] == "fail":
            continue  # any of its outputs read is an aborted-read (above)
        wanted = set(invoke.get("outputs") or [])
        seen = by_txn.get(txn, set()) & wanted
        if done is not None and done["type"] == "ok":
            for value in sorted(wanted - seen):
                res.add("lost-write", [invoke, done], value=value, txn=txn)
        if seen and seen != wanted:
            res.add("partial-transaction", [invoke] + ([done] if done else []), txn=txn,
                    present=len(seen), outputs=len(wanted), missing=sorted(wanted - seen)[:10])

    # duplicate: one input's output more than once in the output.
    for source, places in sorted(outputs.items()):
        if len(places) > 1:
            res.add("duplicate", [o for (_, _, _, o) in places], input=source,
                    places=[[p, offset, txn] for (p, offset, txn, _) in sorted(places)])

    # missing-output: every input comes out (exactly once: more is a duplicate).
    all_inputs = dict(inputs_read)
    for value, op in inputs_sent.items():
        all_inputs.setdefault(value, op)
    for value, op in sorted(all_inputs.items(), key=lambda kv: kv[1].get("i", 0)):
        if value not in outputs:
            res.add("missing-output", [op], input=value, acknowledged=value in inputs_sent, read=value in inputs_read)

    outcome = Counter(op["type"] for op in txn_done.values())
    drains = {op.get("topic"): op for op in ops if op.get("f") == "ctp-drain-end"}
    res.stats = {
        "transactions": len(txn_invoke),
        "txn_ok": outcome.get("ok", 0),
        "txn_fail": outcome.get("fail", 0),
        "txn_deliberate_aborts": sum(1 for op in txn_done.values() if op["type"] == "fail" and op.get("deliberate")),
        "txn_info": outcome.get("info", 0) + (len(txn_invoke) - len(txn_done)),
        "inputs_ok": len(inputs_sent),
        "inputs": len(all_inputs),
        "outputs_read": n_out,
        "restarts": sum(1 for op in ops if op.get("f") == "ctp-restart"),
        "drain_complete": bool(drains) and all(op.get("complete") for op in drains.values()) and len(drains) == 2,
        "caught_up": any(op.get("caught_up") for op in drains.values()),
    }
    return res


def report_ctp(res: Result, out=None) -> None:
    out = out or sys.stdout
    s = res.stats
    print(
        f"transactions (consume-transform-produce): {s['transactions']} ({s['txn_ok']} committed, "
        f"{s['txn_fail']} aborted of which {s['txn_deliberate_aborts']} on purpose, {s['txn_info']} unknown); "
        f"{s['inputs']} inputs ({s['inputs_ok']} acknowledged), {s['outputs_read']} outputs read committed; "
        f"worker restarts {s['restarts']}",
        file=out,
    )
    _print_anomalies(res, "ctp ", out)


def check_share(ops: List[Op], delivery_limit: int) -> Result:
    """The share-group checks (module comment)."""
    ops = sorted(ops, key=lambda o: o.get("i", 0))
    res = Result(SHARE_ANOMALIES)
    sent_at: Dict[Tuple[int, int], Tuple[str, Op]] = {}  # acknowledged inputs
    sent_values: Dict[str, Op] = {}  # every value a producer tried to send
    for op in ops:
        if op.get("f") != "share-send":
            continue
        if op["type"] == "invoke":
            sent_values.setdefault(op["value"], op)
        elif op["type"] == "ok":
            sent_at[(int(op["partition"]), int(op["offset"]))] = (op["value"], op)
    # Per record: its deliveries (poll invoke index, count, ops) and acknowledgements.
    deliveries: Dict[Tuple[int, int], List[Tuple[int, int, Op]]] = defaultdict(list)
    acks: Dict[Tuple[int, int], List[Tuple[str, str, int, Op, Op]]] = defaultdict(list)
    poll_invoke: Dict[str, Op] = {}
    ack_invoke: Dict[str, Op] = {}
    n_deliveries = redeliveries = 0
    kinds: Counter = Counter()
    outcomes: Counter = Counter()
    stalls = 0
    for op in ops:
        f, typ, proc = op.get("f"), op.get("type"), op.get("process")
        if f == "share-poll":
            if typ == "invoke":
                poll_invoke[proc] = op
                continue
            invoke = poll_invoke.pop(proc, None)
            if typ != "ok":
                continue
            at = invoke["i"] if invoke is not None else op["i"]
            for p, offset, value, count in op.get("deliveries") or []:
                key = (int(p), int(offset))
                n_deliveries += 1
                if count is not None and count > 1:
                    redeliveries += 1
                deliveries[key].append((at, count, op))
                if count is None or count < 1 or count > delivery_limit:
                    res.add("over-delivery-limit", [op], partition=key[0], offset=key[1], delivery_count=count,
                            limit=delivery_limit)
                want = sent_at.get(key)
                if want is not None and want[0] != value:
                    res.add("wrong-value", [want[1], op], partition=key[0], offset=key[1], sent=want[0], read=value)
                elif want is None and value not in sent_values:
                    res.add("wrong-value", [op], partition=key[0], offset=key[1], read=value, why="never sent")
        elif f == "share-ack":
            if typ == "invoke":
                ack_invoke[proc] = op
                stalls += 1 if op.get("stalled") else 0
                continue
            invoke = ack_invoke.pop(proc, None)
            if invoke is None:
                continue
            results = op.get("results") or {}
            for p, pairs in (invoke.get("acks") or {}).items():
                outcome = results.get(p, "info")
                for offset, kind in pairs:
                    kinds[kind] += 1
                    outcomes[outcome] += 1
                    acks[(int(p), int(offset))].append((kind, outcome, op["i"], invoke, op))
    # Processes whose last acknowledgement never completed: unknown outcome.
    for proc, invoke in ack_invoke.items():
        for p, pairs in (invoke.get("acks") or {}).items():
            for offset, kind in pairs:
                kinds[kind] += 1
                outcomes["info"] += 1
                acks[(int(p), int(offset))].append((kind, "info", invoke["i"], invoke, invoke))

    settled_kinds: Counter = Counter()
    for key in sorted(set(deliveries) | set(acks) | set(sent_at)):
        dels = sorted(deliveries.get(key, []), key=lambda d: d[0])
        applied = [a for a in acks.get(key, []) if a[1] == "ok"]
        # An acknowledgement of a delivery that another delivery of the record superseded before
        # it was sent (its lock expired; the record went to a member again) either fails or, once
        # the record is settled below the share-partition start, is skipped with success — Kafka's
        # rule, and Millrace's. Its "ok" proves nothing was applied, so it counts for no
        # accepted-twice.
        accepts = [a for a in applied if a[0] == "accept" and not _superseded(a, dels)]
        if len(accepts) > 1:
            res.add("accepted-twice", [a[4] for a in accepts], partition=key[0], offset=key[1])
        for kind, anomaly in (("accept", "delivered-after-accept"), ("reject", "delivered-after-reject")):
            first = min((a for a in applied if a[0] == kind), key=lambda a: a[2], default=None)
            if first is None:
                continue
            late = [d for d in dels if d[0] > first[2]]
            if late:
                res.add(anomaly, [first[3], first[4]] + [d[2] for d in late], partition=key[0], offset=key[1],
                        delivery_counts=[d[1] for d in late])
        # Settled?
        last_delivery = dels[-1][0] if dels else -1
        if any(a[0] in ("accept", "reject") for a in applied):
            settled_kinds["applied"] += 1
            continue
        if any(d[1] is not None and d[1] >= delivery_limit for d in dels):
            settled_kinds["at-limit"] += 1
            continue
        if any(a[0] in ("accept", "reject") and a[1] == "info" and a[2] > last_delivery for a in acks.get(key, [])):
            settled_kinds["ambiguous"] += 1
            continue
        if key in sent_at:
            value, sent = sent_at[key]
            last = [d[2] for d in dels[-2:]] + [a[4] for a in acks.get(key, [])][-3:]
            res.add("lost", [sent] + last, partition=key[0], offset=key[1], value=value, deliveries=len(dels),
                    acks=[[a[0], a[1]] for a in acks.get(key, [])])
    configs = [op for op in ops if op.get("f") == "share-config"]
    res.stats = {
        "inputs_ok": len(sent_at),
        "inputs": len(sent_values),
        "records_delivered": len(deliveries),
        "deliveries": n_deliveries,
        "redeliveries": redeliveries,
        "acks": dict(kinds),
        "ack_outcomes": dict(outcomes),
        "stalls": stalls,
        "settled": dict(settled_kinds),
        "max_delivery_count": max((d[1] or 0 for ds in deliveries.values() for d in ds), default=0),
        "group_configured": any(op.get("type") == "ok" for op in configs),
        "delivery_limit": delivery_limit,
    }
    return res


def report_share(res: Result, out=None) -> None:
    out = out or sys.stdout
    s = res.stats
    print(
        f"share group: {s['inputs']} inputs ({s['inputs_ok']} acknowledged), {s['records_delivered']} records "
        f"delivered in {s['deliveries']} deliveries ({s['redeliveries']} redeliveries, highest delivery count "
        f"{s['max_delivery_count']} of {s['delivery_limit']}); acknowledgements {s['acks']}, outcomes "
        f"{s['ack_outcomes']}, stalls {s['stalls']}; settled {s['settled']}",
        file=out,
    )
    _print_anomalies(res, "share ", out)


def _short(op: Op) -> str:
    text = json.dumps(op, sort_keys=True)
    return text if len(text) <= 400 else text[:397] + "..."


def report(res: Result, out=None, topic: Optional[str] = None) -> None:
    out = out or sys.stdout
    s = res.stats
    print(
        f"{f'topic {topic}: ' if topic else ''}checked {s['topic_operations'] if topic else s['operations']} operations: {s['sends']} sends ({s['sends_ok']} ok, "
        f"{s['sends_fail']} fail, {s['sends_info']} info), {s['reads']} records read "
        f"({s['values_read']} distinct values), {s['commits_ok']} commits ok, "
        f"{s['committed_reads_ok']} committed-offset reads; committed offsets seen going back during "
        f"faults (not an anomaly): {s['committed_midrun_regressions']}",
        file=out,
    )
    _print_anomalies(res, f"{topic} " if topic else "", out)


def _print_anomalies(res: Result, prefix: str, out) -> None:
    for kind, found in res.anomalies.items():
        print(f"{prefix}{kind}: {len(found)}", file=out)
        for entry in found[:PRINTED_PER_KIND_MAX]:
            detail = {k: v for k, v in entry.items() if k != "ops"}
            print(f"  {prefix}{kind} {json.dumps(detail, sort_keys=True)}", file=out)
            for op in entry["ops"]:
                print(f"    {_short(op)}", file=out)
        if len(found) > PRINTED_PER_KIND_MAX:
            print(f"  ... and {len(found) - PRINTED_PER_KIND_MAX} more", file=out)


def _superseded(ack: tuple, dels: List[tuple]) -> bool:
    """Whether the delivery ``ack`` (kind, outcome, i, invoke, op) acknowledges — its process's
    latest delivery of the record before the acknowledgement was sent — was followed, still
    before that, by another delivery of the record (to any member)."""
    invoke = ack[3]
    sent_at, proc = invoke["i"], invoke.get("process")
    own = [d[0] for d in dels if d[0] < sent_at and d[2].get("process") == proc]
    if not own:
        return False
    return any(max(own) < d[0] < sent_at for d in dels)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("history")
    ap.add_argument("--json", help="write counts, stats and anomalies to this file")
    ap.add_argument("--delivery-limit", type=int, default=4,
                    help="the share group's delivery-count limit, when the history does not record it")
    args = ap.parse_args(argv)
    ops = load(args.history)
    res = check(ops)
    report(res)
    others = sorted({op["topic"] for op in ops if op.get("f") == "send" and op.get("topic")})
    for topic in others:
        extra = check(ops, topic)
        report(extra, topic=topic)
        if not extra.valid():
            res.anomalies = {k: v + extra.anomalies[k] for k, v in res.anomalies.items()}
    ctp = None
    if any(op.get("f") in ("txn", "ctp-send", "ctp-read") for op in ops):
        ctp = check_ctp(ops)
        report_ctp(ctp)
    share = None
    configs = [op for op in ops if op.get("f") == "share-config"]
    if configs or any(op.get("f") == "share-send" for op in ops):
        share = check_share(ops, int((configs[0].get("delivery_limit") if configs else None) or args.delivery_limit))
        report_share(share)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            doc = {"counts": res.counts(), "stats": res.stats, "anomalies": res.anomalies}
            if ctp is not None:
                doc["ctp"] = {"counts": ctp.counts(), "stats": ctp.stats, "anomalies": ctp.anomalies}
            if share is not None:
                doc["share"] = {"counts": share.counts(), "stats": share.stats, "anomalies": share.anomalies}
            json.dump(doc, fh)
    return 0 if res.valid() and (ctp is None or ctp.valid()) and (share is None or share.valid()) else 1


if __name__ == "__main__":
    sys.exit(main())

