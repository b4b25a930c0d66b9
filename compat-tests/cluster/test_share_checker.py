"""Goal: the share-group checker (``checker.check_share``) finds each anomaly in a hand-made
history that has it, and nothing in a clean one, including the legitimate redeliveries (release,
lock expiry, a refused late acknowledgement) and the outcomes it cannot know (unknown
acknowledgements, a record delivered at the limit)."""

from __future__ import annotations

import checker

LIMIT = 3


class S:
    """Builds a share-workload history; every method appends records with increasing indexes."""

    def __init__(self) -> None:
        self.ops = []

    def _op(self, **op):
        op["i"] = len(self.ops)
        op["t"] = op["i"] / 100
        self.ops.append(op)
        return op

    def send(self, p, value, offset=None, outcome="ok"):
        self._op(process="q1", type="invoke", f="share-send", partition=p, value=value)
        done = dict(process="q1", type=outcome, f="share-send", partition=p, value=value)
        if outcome == "ok":
            done["offset"] = offset
        self._op(**done)

    def poll(self, proc, deliveries):
        """deliveries: [(partition, offset, value, count), ...]"""
        self._op(process=proc, type="invoke", f="share-poll")
        self._op(process=proc, type="ok", f="share-poll", deliveries=[list(d) for d in deliveries])

    def ack(self, proc, acks, results, complete=True):
        """acks: {partition: [(offset, kind), ...]}; results: {partition: outcome}"""
        self._op(process=proc, type="invoke", f="share-ack",
                 acks={str(p): [list(a) for a in pairs] for p, pairs in acks.items()}, dropped={}, stalled=False)
        if complete:
            self._op(process=proc, type="ok", f="share-ack", results={str(p): r for p, r in results.items()})

    def result(self):
        return checker.check_share(self.ops, LIMIT)


def clean():
    """Two records: one accepted by s1; one released by s1, then accepted by s2."""
    h = S()
    h.send(0, "q1-0", 0)
    h.send(0, "q1-1", 1)
    h.poll("s1", [(0, 0, "q1-0", 1), (0, 1, "q1-1", 1)])
    h.ack("s1", {0: [(0, "accept"), (1, "release")]}, {0: "ok"})
    h.poll("s2", [(0, 1, "q1-1", 2)])
    h.ack("s2", {0: [(1, "accept")]}, {0: "ok"})
    return h


def nonzero(res):
    return {k: v for k, v in res.counts().items() if v}


def test_clean_history_has_no_anomaly():
    res = clean().result()
    assert nonzero(res) == {}
    assert res.stats["redeliveries"] == 1
    assert res.stats["settled"] == {"applied": 2}


def test_expired_lock_late_ack_refused_then_redelivered_is_clean():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.poll("s2", [(0, 0, "q1-0", 2)])  # s1's lock expired
    h.ack("s1", {0: [(0, "accept")]}, {0: "fail"})
    h.ack("s2", {0: [(0, "accept")]}, {0: "ok"})
    assert nonzero(h.result()) == {}


def test_late_accept_skipped_below_the_start_is_not_accepted_twice():
    # s1's lock expired; s2 got the record and accepted it, moving the share-partition start
    # past it; s1's late ACCEPT is then skipped with success (Kafka's rule), not applied.
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.poll("s2", [(0, 0, "q1-0", 2)])
    h.ack("s2", {0: [(0, "accept")]}, {0: "ok"})
    h.ack("s1", {0: [(0, "accept")]}, {0: "ok"})
    assert nonzero(h.result()) == {}


def test_two_accepts_of_the_latest_delivery_are_accepted_twice():
    # Two members each accepting its own, unsuperseded delivery: both cannot have been applied.
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.ack("s1", {0: [(0, "accept")]}, {0: "ok"})
    h.poll("s2", [(0, 0, "q1-0", 2)])
    h.ack("s2", {0: [(0, "accept")]}, {0: "ok"})
    assert nonzero(h.result()) == {"accepted-twice": 1, "delivered-after-accept": 1}


def test_never_delivered_is_lost():
    h = clean()
    h.send(0, "q1-2", 2)
    res = h.result()
    assert nonzero(res) == {"lost": 1}
    assert res.anomalies["lost"][0]["value"] == "q1-2"


def test_released_and_never_redelivered_is_lost():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.ack("s1", {0: [(0, "release")]}, {0: "ok"})
    assert nonzero(h.result()) == {"lost": 1}


def test_refused_accept_never_redelivered_is_lost():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.ack("s1", {0: [(0, "accept")]}, {0: "fail"})
    assert nonzero(h.result()) == {"lost": 1}


def test_unknown_accept_without_redelivery_is_settled_ambiguously():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.ack("s1", {0: [(0, "accept")]}, {0: "info"})
    res = h.result()
    assert nonzero(res) == {}
    assert res.stats["settled"] == {"ambiguous": 1}


def test_a_process_that_died_during_its_ack_is_unknown():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.ack("s1", {0: [(0, "accept")]}, {}, complete=False)
    assert nonzero(h.result()) == {}


def test_delivered_at_the_limit_is_settled():
    h = S()
    h.send(0, "q1-0", 0)
    for n in range(1, LIMIT + 1):
        h.poll("s1", [(0, 0, "q1-0", n)])
        h.ack("s1", {0: [(0, "release")]}, {0: "ok"})
    res = h.result()
    assert nonzero(res) == {}
    assert res.stats["settled"] == {"at-limit": 1}


def test_over_the_limit():
    h = clean()
    h.poll("s2", [(0, 1, "q1-1", LIMIT + 1)])
    assert "over-delivery-limit" in nonzero(h.result())


def test_delivered_after_accept_and_accepted_twice():
    h = clean()
    h.poll("s3", [(0, 0, "q1-0", 2)])
    h.ack("s3", {0: [(0, "accept")]}, {0: "ok"})
    got = nonzero(h.result())
    assert got == {"delivered-after-accept": 1, "accepted-twice": 1}


def test_delivery_before_the_accept_completed_is_not_after_it():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h._op(process="s1", type="invoke", f="share-ack", acks={"0": [[0, "accept"]]}, dropped={}, stalled=False)
    h.poll("s2", [(0, 0, "q1-0", 2)])  # concurrent with s1's acknowledgement: its lock had expired
    h._op(process="s1", type="ok", f="share-ack", results={"0": "fail"})
    h.ack("s2", {0: [(0, "accept")]}, {0: "ok"})
    assert nonzero(h.result()) == {}


def test_delivered_after_reject():
    h = S()
    h.send(0, "q1-0", 0)
    h.poll("s1", [(0, 0, "q1-0", 1)])
    h.ack("s1", {0: [(0, "reject")]}, {0: "ok"})
    h.poll("s2", [(0, 0, "q1-0", 2)])
    assert nonzero(h.result()) == {"delivered-after-reject": 1}


def test_wrong_value_and_phantom():
    h = clean()
    h.poll("s2", [(0, 0, "q1-9", 2)])
    h.poll("s2", [(0, 5, "nobody", 1)])
    res = h.result()
    assert res.counts()["wrong-value"] == 2
