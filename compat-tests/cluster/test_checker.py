"""Goal: the checker finds each anomaly in a hand-made history that has it, and nothing in a clean one."""

from __future__ import annotations

import io
import json

import checker


class H:
    """Builds a history; every method appends records with increasing indexes."""

    def __init__(self) -> None:
        self.ops = []

    def _op(self, **op):
        op["i"] = len(self.ops)
        op["t"] = op["i"] / 100
        self.ops.append(op)
        return op

    def send(self, proc, p, value, offset=None, outcome="ok"):
        self._op(process=proc, type="invoke", f="send", partition=p, value=value)
        done = dict(process=proc, type=outcome, f="send", partition=p, value=value)
        if outcome == "ok":
            done["offset"] = offset
        self._op(**done)

    def poll(self, proc, reads):
        """reads: {partition: [(offset, value), ...]}"""
        self._op(process=proc, type="invoke", f="poll")
        self._op(process=proc, type="ok", f="poll", reads={str(p): [list(r) for r in rs] for p, rs in reads.items()})

    def assign(self, proc, partitions):
        self._op(process=proc, type="ok", f="assign", partitions=partitions)

    def commit(self, proc, group, offsets, outcome="ok"):
        self._op(process=proc, type="invoke", f="commit", group=group, offsets=offsets)
        self._op(process=proc, type=outcome, f="commit", group=group, offsets=offsets)

    def committed(self, proc, group, offsets):
        self._op(process=proc, type="invoke", f="committed", group=group)
        self._op(process=proc, type="ok", f="committed", group=group, offsets=offsets)

    def result(self):
        return checker.check(self.ops)


def base():
    """Two producers, one partition each plus a shared one, all written and read back."""
    h = H()
    h.send("p1", 0, "p1-0", 0)
    h.send("p2", 0, "p2-0", 1)
    h.send("p1", 1, "p1-1", 0)
    h.send("p2", 1, "p2-1", 1)
    h.send("p1", 0, "p1-2", 2)
    return h


def only(res, kind, n=1):
    counts = res.counts()
    assert counts[kind] == n, counts
    others = {k: v for k, v in counts.items() if k != kind and v}
    return others


def test_clean_history_has_no_anomaly():
    h = base()
    h.assign("c1", [0, 1])
    h.poll("c1", {0: [(0, "p1-0"), (1, "p2-0")], 1: [(0, "p1-1")]})
    h.commit("c1", "g", {"0": 2, "1": 1})
    h.committed("admin", "g", {"0": 2, "1": 1})
    h.poll("c1", {0: [(2, "p1-2")], 1: [(1, "p2-1")]})
    h.commit("c1", "g", {"0": 3, "1": 2})
    h.committed("admin", "g", {"0": 3, "1": 2})
    # A rebalance, and the other member re-reads from the committed offsets.
    h.assign("c2", [0, 1])
    h.poll("c2", {0: [(2, "p1-2")]})
    h.poll("drain", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    # A send with an unknown outcome that nobody read is not an anomaly.
    h.send("p2", 1, "p2-9", outcome="info")
    res = h.result()
    assert res.valid(), res.counts()
    assert res.stats["sends_ok"] == 5
    assert res.stats["sends_info"] == 1
    assert res.stats["commits_ok"] == 2
    assert res.stats["committed_reads_ok"] == 2


def test_lost_write():
    h = base()
    # p1-0 at offset 0 is acknowledged; the readers see offset 1 and 2 but never offset 0.
    h.assign("r1", [0, 1])
    h.poll("r1", {0: [(1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    res = h.result()
    assert only(res, "lost-write") == {}
    lost = res.anomalies["lost-write"][0]
    assert lost["value"] == "p1-0" and lost["offset"] == 0 and lost["max_read_offset"] == 2
    assert [o["type"] for o in lost["ops"]] == ["invoke", "ok"]


def test_unseen_is_above_every_read():
    h = base()
    h.poll("r1", {0: [(0, "p1-0"), (1, "p2-0")], 1: [(0, "p1-1"), (1, "p2-1")]})
    res = h.result()
    assert only(res, "unseen") == {}
    assert res.anomalies["unseen"][0]["value"] == "p1-2"


def test_inconsistent_offset():
    h = base()
    h.poll("r1", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    # Another reader sees a different value at partition 1, offset 1 (after a divergent leader).
    h.send("p2", 1, "p2-7", outcome="info")
    h.poll("r2", {1: [(0, "p1-1"), (1, "p2-7")]})
    res = h.result()
    assert only(res, "inconsistent-offset") == {}
    bad = res.anomalies["inconsistent-offset"][0]
    assert (bad["partition"], bad["offset"], bad["values"]) == (1, 1, ["p2-1", "p2-7"])


def test_duplicate():
    h = base()
    h.send("p1", 0, "p1-3", outcome="info")
    h.poll("r1", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2"), (3, "p1-3"), (4, "p1-3")], 1: [(0, "p1-1"), (1, "p2-1")]})
    res = h.result()
    assert only(res, "duplicate") == {}
    assert res.anomalies["duplicate"][0]["places"] == [[0, 3], [0, 4]]


def test_aborted_read():
    h = base()
    h.send("p1", 1, "p1-5", outcome="fail")
    h.poll("r1", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1"), (2, "p1-5")]})
    res = h.result()
    assert only(res, "aborted-read") == {}
    assert res.anomalies["aborted-read"][0]["why"] == "send failed"


def test_poll_skip_within_an_assignment():
    h = base()
    h.poll("r1", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    h.assign("c1", [0])
    h.poll("c1", {0: [(0, "p1-0")]})
    h.poll("c1", {0: [(2, "p1-2")]})
    res = h.result()
    assert only(res, "poll-skip") == {}
    skip = res.anomalies["poll-skip"][0]
    assert (skip["process"], skip["previous_offset"], skip["offset"], skip["skipped"]) == ("c1", 0, 2, [1])


def test_gap_nobody_observed_is_not_a_skip_and_a_rebalance_resets():
    h = H()
    h.send("p1", 0, "a", 0)
    h.send("p1", 0, "b", 5)  # offsets 1-4 never observed by anyone (e.g. info sends)
    h.send("p1", 0, "c", 6)
    h.poll("c1", {0: [(0, "a")]})
    h.poll("c1", {0: [(5, "b")]})
    h.assign("c1", [0])  # after a rebalance the position may move back to the committed offset
    h.poll("c1", {0: [(0, "a"), (5, "b"), (6, "c")]})
    h.poll("drain", {0: [(0, "a"), (5, "b"), (6, "c")]})
    res = h.result()
    assert res.valid(), res.counts()
    # Without the assignment change, going back is an anomaly.
    h.poll("c1", {0: [(5, "b")]})
    assert only(h.result(), "nonmonotonic-poll") == {}


def test_nonmonotonic_poll():
    h = base()
    h.poll("c1", {0: [(0, "p1-0"), (1, "p2-0")], 1: [(0, "p1-1"), (1, "p2-1")]})
    h.poll("c1", {0: [(1, "p2-0"), (2, "p1-2")]})
    res = h.result()
    assert only(res, "nonmonotonic-poll") == {}
    bad = res.anomalies["nonmonotonic-poll"][0]
    assert (bad["previous_offset"], bad["offset"]) == (1, 1)


def test_committed_offset_regression():
    h = base()
    h.poll("drain", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    h.commit("c1", "g", {"0": 3, "1": 2})
    # After the heal the group's committed offset of partition 0 is back at 1: a commit was lost.
    h._op(process="admin", type="invoke", f="committed", group="g")
    h._op(process="admin", type="ok", f="committed", group="g", offsets={"0": 1, "1": 2}, final=True)
    res = h.result()
    assert only(res, "committed-offset-regression") == {}
    bad = res.anomalies["committed-offset-regression"][0]
    assert (bad["partition"], bad["acknowledged_offset"], bad["final_offset"]) == (0, 3, 1)


def test_midrun_regressions_are_counted_not_anomalies():
    h = base()
    h.poll("drain", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    h.commit("c1", "g", {"0": 3})
    h.committed("admin", "g", {"0": 1})  # a new coordinator still behind the acknowledged commit
    h._op(process="admin", type="invoke", f="committed", group="g")
    h._op(process="admin", type="ok", f="committed", group="g", offsets={"0": 3}, final=True)
    res = h.result()
    assert res.valid(), res.counts()
    assert res.stats["committed_midrun_regressions"] == 1
    assert res.stats["final_committed_read"]


def test_concurrent_or_failed_commits_are_not_regressions():
    h = base()
    h.poll("drain", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    # The read-back is invoked before the commit completes: either order is legal.
    h._op(process="admin", type="invoke", f="committed", group="g")
    h.commit("c1", "g", {"0": 3})
    h._op(process="admin", type="ok", f="committed", group="g", offsets={"0": 1})
    # A failed commit of a higher offset does not count.
    h.commit("c2", "g", {"0": 9}, outcome="fail")
    h._op(process="admin", type="invoke", f="committed", group="g")
    h._op(process="admin", type="ok", f="committed", group="g", offsets={"0": 3}, final=True)
    res = h.result()
    assert res.valid(), res.counts()
    assert res.stats["committed_midrun_regressions"] == 0


def test_report_prints_counts_and_the_operations():
    h = base()
    h.poll("r1", {0: [(1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    out = io.StringIO()
    checker.report(h.result(), out)
    text = out.getvalue()
    assert "lost-write: 1" in text
    assert "duplicate: 0" in text
    assert '"value": "p1-0"' in text


def test_count_detail_names_the_first_anomaly_without_its_operations():
    h = base()
    h.poll("r1", {0: [(1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    res = h.result()
    detail = checker.count_detail(res, "lost-write")
    assert detail.startswith("1; first {")
    first = json.loads(detail.split("first ", 1)[1])
    assert first["value"] == "p1-0" and first["offset"] == 0 and "ops" not in first
    assert checker.count_detail(res, "duplicate") == "0"


def test_load_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"i": 0, "process": "p1", "type": "invoke", "f": "send", "partition": 0, "value": "x"}) + "\n{\"i\": 1, \"pro")
    assert len(checker.load(str(path))) == 1


# --- transactions (consume-transform-produce) ---------------------------------------------------


class T(H):
    """Adds the transactional workload's records (ctp.py) to a hand-made history."""

    def txn(self, proc, txn, inputs, outcome="ok", deliberate=False):
        """inputs: {partition: [(offset, value), ...]}; outputs are '<value>|<txn>'."""
        outputs = [f"{v}|{txn}" for rs in inputs.values() for _, v in rs]
        nexts = {str(p): rs[-1][0] + 1 for p, rs in inputs.items()}
        self._op(process=proc, type="invoke", f="txn", txn=txn, outputs=outputs, offsets=nexts,
                 inputs={str(p): [list(r) for r in rs] for p, rs in inputs.items()}, deliberate=deliberate)
        self._op(process=proc, type=outcome, f="txn", txn=txn, deliberate=deliberate and outcome == "fail")

    def input(self, p, value, offset):
        self._op(process="i1", type="invoke", f="ctp-send", partition=p, value=value)
        self._op(process="i1", type="ok", f="ctp-send", partition=p, value=value, offset=offset)

    def read(self, topic, reads):
        self._op(process="ctp-drain", type="invoke", f="ctp-read", topic=topic)
        self._op(process="ctp-drain", type="ok", f="ctp-read", topic=topic,
                 reads={str(p): [list(r) for r in rs] for p, rs in reads.items()})

    def drained(self):
        for topic in ("in", "out"):
            self._op(process="ctp-drain", type="ok", f="ctp-drain-end", topic=topic, complete=True, caught_up=True)

    def result(self):
        return checker.check_ctp(self.ops)


def ctp_base():
    """Four inputs on two partitions; x1 commits a, b; aborts c on purpose; x2 commits c, d.
    The output holds the committed outputs and the aborted transaction's records are not read."""
    h = T()
    for p, value, offset in ((0, "a", 0), (1, "b", 0), (0, "c", 1), (1, "d", 1)):
        h.input(p, value, offset)
    h.txn("x1", "x1#1", {0: [(0, "a")], 1: [(0, "b")]})
    h.txn("x1", "x1#2", {0: [(1, "c")]}, outcome="fail", deliberate=True)
    h.txn("x2", "x2#1", {0: [(1, "c")], 1: [(1, "d")]})
    h.read("in", {0: [(0, "a"), (1, "c")], 1: [(0, "b"), (1, "d")]})
    return h


def ctp_out_clean(h):
    h.read("out", {0: [(0, "a|x1#1"), (3, "c|x2#1")], 1: [(0, "b|x1#1"), (2, "d|x2#1")]})


def test_ctp_clean_history_passes():
    h = ctp_base()
    ctp_out_clean(h)
    h.drained()
    res = h.result()
    assert res.valid(), res.counts()
    s = res.stats
    assert (s["txn_ok"], s["txn_fail"], s["txn_deliberate_aborts"], s["txn_info"]) == (2, 1, 1, 0)
    assert s["inputs"] == 4 and s["outputs_read"] == 4 and s["drain_complete"] and s["caught_up"]


def test_ctp_aborted_read():
    h = ctp_base()
    # The aborted transaction's record is visible to the read_committed drain.
    h.read("out", {0: [(0, "a|x1#1"), (1, "c|x1#2"), (3, "c|x2#1")], 1: [(0, "b|x1#1"), (2, "d|x2#1")]})
    res = h.result()
    assert only(res, "aborted-read") == {"duplicate": 1}  # c also came out twice
    bad = res.anomalies["aborted-read"][0]
    assert (bad["value"], bad["txn"], bad["why"]) == ("c|x1#2", "x1#2", "aborted on purpose")


def test_ctp_record_of_no_transaction_is_an_aborted_read():
    h = ctp_base()
    ctp_out_clean(h)
    h.read("out", {1: [(5, "z|x9#4")]})
    res = h.result()
    assert only(res, "aborted-read") == {}
    assert res.anomalies["aborted-read"][0]["why"] == "no such transaction"


def test_ctp_lost_write():
    h = ctp_base()
    # x1#1 was acknowledged, but none of its outputs is in the output: both lost, and a and b
    # never came out at all.
    h.read("out", {0: [(3, "c|x2#1")], 1: [(2, "d|x2#1")]})
    res = h.result()
    assert only(res, "lost-write", 2) == {"missing-output": 2}
    assert sorted(a["value"] for a in res.anomalies["lost-write"]) == ["a|x1#1", "b|x1#1"]


def test_ctp_duplicate_from_two_committed_transactions():
    h = ctp_base()
    # A zombie x1 also committed d after the group had moved partition 1 to x2.
    h.txn("x1", "x1#3", {1: [(1, "d")]})
    h.read("out", {0: [(0, "a|x1#1"), (3, "c|x2#1")], 1: [(0, "b|x1#1"), (2, "d|x2#1"), (4, "d|x1#3")]})
    res = h.result()
    assert only(res, "duplicate") == {}
    dup = res.anomalies["duplicate"][0]
    assert dup["input"] == "d" and [pl[2] for pl in dup["places"]] == ["x2#1", "x1#3"]


def test_ctp_unknown_outcome_is_indeterminate_either_way():
    h = ctp_base()
    # x2#2's commit timed out: its outputs may or may not be there. Here it committed (d only
    # came out through it) ...
    h.txn("x2", "x2#2", {1: [(2, "e")]}, outcome="info")
    h.input(1, "e", 2)
    h.read("in", {1: [(2, "e")]})
    ctp_out_clean(h)
    h.read("out", {1: [(4, "e|x2#2")]})
    assert h.result().valid(), h.result().counts()
    # ... and had it aborted, e came out through a later transaction: also fine.
    g = ctp_base()
    g.txn("x2", "x2#2", {1: [(2, "e")]}, outcome="info")
    g.input(1, "e", 2)
    g.read("in", {1: [(2, "e")]})
    g.txn("x2.1", "x2.1#1", {1: [(2, "e")]})
    ctp_out_clean(g)
    g.read("out", {1: [(5, "e|x2.1#1")]})
    res = g.result()
    assert res.valid(), res.counts()
    assert res.stats["txn_info"] == 1


def test_ctp_partial_transaction():
    h = ctp_base()
    h.txn("x2", "x2#2", {0: [(2, "e")], 1: [(2, "f")]}, outcome="info")
    h.input(0, "e", 2)
    h.input(1, "f", 2)
    ctp_out_clean(h)
    h.read("out", {0: [(5, "e|x2#2")]})  # f's output of the same transaction is missing
    res = h.result()
    assert only(res, "partial-transaction") == {"missing-output": 1}
    bad = res.anomalies["partial-transaction"][0]
    assert (bad["txn"], bad["present"], bad["outputs"], bad["missing"]) == ("x2#2", 1, 2, ["f|x2#2"])


def test_ctp_missing_output_for_an_input_never_processed():
    h = ctp_base()
    h.input(0, "e", 2)  # acknowledged, and nobody transformed it
    ctp_out_clean(h)
    res = h.result()
    assert only(res, "missing-output") == {}
    miss = res.anomalies["missing-output"][0]
    assert (miss["input"], miss["acknowledged"], miss["read"]) == ("e", True, False)


def test_ctp_report_prints_counts():
    h = ctp_base()
    h.read("out", {0: [(0, "a|x1#1"), (1, "c|x1#2"), (3, "c|x2#1")], 1: [(0, "b|x1#1"), (2, "d|x2#1")]})
    out = io.StringIO()
    checker.report_ctp(h.result(), out)
    text = out.getvalue()
    assert "ctp aborted-read: 1" in text and "ctp lost-write: 0" in text
    assert "1 aborted of which 1 on purpose" in text


def test_plain_checker_ignores_transactional_records():
    h = ctp_base()
    ctp_out_clean(h)
    res = checker.check(h.ops)
    assert res.valid(), res.counts()


# --- another topic in the same history (the tiered topic) ---------------------------------------

def test_a_topic_named_in_its_records_is_checked_apart_from_the_main_topic():
    h = base()
    h.poll("r1", {0: [(0, "p1-0"), (1, "p2-0"), (2, "p1-2")], 1: [(0, "p1-1"), (1, "p2-1")]})
    # The tiered topic: t1-0 at offset 0 acknowledged, a reader saw offset 1 but never offset 0.
    h._op(process="t1", type="invoke", f="send", partition=0, value="t1-0", topic="tiered")
    h._op(process="t1", type="ok", f="send", partition=0, value="t1-0", offset=0, topic="tiered")
    h._op(process="t1", type="invoke", f="send", partition=0, value="t1-1", topic="tiered")
    h._op(process="t1", type="ok", f="send", partition=0, value="t1-1", offset=1, topic="tiered")
    h._op(process="rt1", type="invoke", f="poll", topic="tiered")
    h._op(process="rt1", type="ok", f="poll", reads={"0": [[1, "t1-1"]]}, topic="tiered")
    assert h.result().valid(), "the main topic's check ignores the tiered topic's records"
    res = checker.check(h.ops, "tiered")
    assert only(res, "lost-write") == {}
    assert res.anomalies["lost-write"][0]["value"] == "t1-0"
    assert res.stats["sends_ok"] == 2


# --- tiered storage: the remote logs of every broker and the bucket ------------------------------

import copy  # noqa: E402

import tiered  # noqa: E402

PREFIX = "tiered"
TOPIC_ID = "0b3c8f4e-0000-4000-8000-00000000abcd"


def seg(n, base, end, size=1000):
    return {"segment_id": f"00000000-0000-4000-8000-{n:012d}", "base_offset": base, "end_offset": end,
            "leader_epoch": 1, "max_timestamp": 5, "size_bytes": size, "epochs": [[1, base]]}


def remote_log(*segments, partition=0, start=0):
    return {"topic": "chaos-tiered", "partition": partition, "log_start_offset": start, "segments": list(segments)}


def bucket(answer):
    """The objects a correct upload leaves for every segment of ``answer``."""
    out = {}
    for log in answer:
        for s in log["segments"]:
            stem = f"{PREFIX}/{log['topic']}-{TOPIC_ID}/{log['partition']}/{s['base_offset']:020}-{s['segment_id']}"
            out[f"{stem}.log"] = s["size_bytes"]
            out[f"{stem}.index"] = 24
    return out


def good_answer():
    return [remote_log(seg(1, 0, 99), seg(2, 100, 180), seg(3, 181, 300)),
            remote_log(seg(4, 0, 50), partition=1)]


def tiered_check(answers, objects):
    return tiered.check_remote_logs(answers, objects, PREFIX)


def only_tiered(res, kind, n=1):
    counts = res.counts()
    assert counts[kind] == n, counts
    assert not {k: v for k, v in counts.items() if k != kind and v}, counts


def test_tiered_clean_remote_logs_have_no_anomaly():
    answer = good_answer()
    objects = bucket(answer)
    objects[f"{PREFIX}/chaos-tiered-{TOPIC_ID}/0/00000000000000000301-00000000-0000-4000-8000-000000000099.log"] = 7
    res = tiered_check({1: answer, 2: copy.deepcopy(answer), 3: copy.deepcopy(answer)}, objects)
    assert res.valid(), res.counts()
    assert res.stats["segments"] == 4
    assert res.stats["segments_per_partition"] == {"chaos-tiered-0": 3, "chaos-tiered-1": 1}
    assert res.stats["orphan_log_objects"] == 1  # an upload whose commit failed: not an anomaly


def test_tiered_overlap_is_an_offset_owned_twice():
    # A fake /remote-log answer whose second segment starts inside the first.
    answer = [remote_log(seg(1, 0, 99), seg(2, 90, 180))]
    res = tiered_check({1: answer, 2: copy.deepcopy(answer)}, bucket(answer))
    only_tiered(res, "remote-segment-overlap", n=2)  # seen in both brokers' answers
    bad = res.anomalies["remote-segment-overlap"][0]
    assert (bad["topic"], bad["partition"], bad["offsets"]) == ("chaos-tiered", 0, [90, 99])


def test_tiered_gap_between_segments():
    answer = [remote_log(seg(1, 0, 99), seg(2, 101, 180))]
    res = tiered_check({1: answer}, bucket(answer))
    only_tiered(res, "remote-log-gap")
    assert res.anomalies["remote-log-gap"][0]["missing"] == [100, 100]


def test_tiered_unsorted_segments():
    answer = [remote_log(seg(2, 100, 180), seg(1, 0, 99))]
    res = tiered_check({1: answer}, bucket(answer))
    only_tiered(res, "remote-log-unsorted")


def test_tiered_malformed_segment():
    answer = [remote_log(seg(1, 10, 9))]
    res = tiered_check({1: answer}, bucket(answer))
    only_tiered(res, "remote-segment-malformed")


def test_tiered_brokers_disagree():
    answer = good_answer()
    behind = copy.deepcopy(answer)
    behind[0]["segments"].pop()
    res = tiered_check({1: answer, 2: answer, 3: behind}, bucket(answer))
    only_tiered(res, "brokers-disagree")
    assert res.anomalies["brokers-disagree"][0]["partition"] == 0
    # A broker whose image lacks the partition altogether disagrees too.
    res = tiered_check({1: answer, 2: answer[:1]}, bucket(answer))
    only_tiered(res, "brokers-disagree")
    assert res.anomalies["brokers-disagree"][0]["partition"] == 1


def test_tiered_missing_object_and_wrong_size():
    answer = good_answer()
    objects = bucket(answer)
    gone = f"{PREFIX}/chaos-tiered-{TOPIC_ID}/0/00000000000000000100-{answer[0]['segments'][1]['segment_id']}.log"
    del objects[gone]
    res = tiered_check({1: answer}, objects)
    only_tiered(res, "missing-object")
    objects = bucket(answer)
    objects[gone] = 999
    res = tiered_check({1: answer}, objects)
    only_tiered(res, "object-size-mismatch")
    # The object under another partition's folder does not count as this segment's.
    objects = bucket(answer)
    objects[gone.replace("/0/", "/1/")] = objects.pop(gone)
    only_tiered(tiered_check({1: answer}, objects), "missing-object")


def test_tiered_metric_reads_prometheus_text():
    text = ("# TYPE millrace_remote_segments_copied counter\nmillrace_remote_segments_copied_total 12\n"
            "millrace_remote_upload_lag_segments 0\n")
    assert tiered.metric(text, "millrace_remote_segments_copied") == 12
    assert tiered.metric(text, "millrace_remote_upload_lag_segments") == 0
    assert tiered.metric(text, "millrace_absent") is None
