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


def test_load_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"i": 0, "process": "p1", "type": "invoke", "f": "send", "partition": 0, "value": "x"}) + "\n{\"i\": 1, \"pro")
    assert len(checker.load(str(path))) == 1
