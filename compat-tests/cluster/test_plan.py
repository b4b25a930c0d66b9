"""Goal: a seed fixes the fault schedule, every fault kind comes up, and the Millrace adapter builds
the cluster contract's command lines (per-node voters and peer addresses through proxy routes)."""

from __future__ import annotations

from pathlib import Path

import nemesis
import systems


def test_same_seed_same_schedule_and_every_kind_comes_up():
    lanes = {"process": systems.PROCESS_KINDS, "network": systems.CLIENT_NETWORK_KINDS + systems.PEER_NETWORK_KINDS}
    a = nemesis.make_schedule(42, 240, lanes, [1, 2, 3], 6, 10.0)
    b = nemesis.make_schedule(42, 240, lanes, [1, 2, 3], 6, 10.0)
    c = nemesis.make_schedule(43, 240, lanes, [1, 2, 3], 6, 10.0)
    assert a == b
    assert a != c
    kinds = {f["kind"] for f in a}
    assert kinds == set(lanes["process"]) | set(lanes["network"])
    assert all(f["at"] < 240 for f in a)
    for f in a:
        if f["kind"] == "pause":
            assert f["duration"] > 10, "a pause must outlast the 10 s consumer session and Kafka's 9 s broker session"
        if f["kind"].startswith("partition"):
            assert f["a"] != f["b"]
        if f["kind"] == "kill-txn-coordinator":
            assert 1 <= f["slot"] <= nemesis.TXN_SLOTS and f["node"] in (1, 2, 3)


def test_one_way_partition_cuts_both_ends_of_the_pair():
    assert systems.Cluster.link_routes("data", 1, 2) == [("data1>2", "up"), ("data2>1", "down")]


class FakeChaos:
    """Stands in for the proxy: hands out one address per route name."""

    def __init__(self) -> None:
        self.routes = {}

    def add(self, name: str, upstream: str) -> str:
        addr = f"127.0.0.1:{20000 + len(self.routes)}"
        self.routes[name] = (addr, upstream)
        return addr


def test_millrace_three_node_command_lines_follow_the_cluster_contract(tmp_path: Path):
    chaos = FakeChaos()
    cluster = systems.MillraceCluster(tmp_path, chaos, 3, False, Path("/bin/millrace"))
    assert sorted(chaos.routes) == sorted(
        ["client1", "client2", "client3"]
        + [f"{k}{i}>{j}" for k in ("ctrl", "data") for i in (1, 2, 3) for j in (1, 2, 3) if i != j]
    )
    node = cluster.nodes[2]
    args = node.args
    flag = {args[k]: args[k + 1] for k in range(1, len(args) - 1) if args[k].startswith("--") and args[k] != "--set"}
    assert flag["--node-id"] == "2"
    assert flag["--advertised-listener"] == chaos.routes["client2"][0]
    assert chaos.routes["client2"][1] == flag["--listen"]
    voters = dict(v.split("@") for v in flag["--controller-voters"].split(","))
    assert voters["1"] == chaos.routes["ctrl2>1"][0]
    assert voters["3"] == chaos.routes["ctrl2>3"][0]
    assert voters["2"] == flag["--controller-listen"]  # its own entry is not used for connecting
    assert chaos.routes["ctrl2>1"][1] == dict(
        v.split("@") for v in cluster.nodes[1].args[cluster.nodes[1].args.index("--controller-voters") + 1].split(",")
    )["1"]
    peers = dict(p.split("=") for p in node.extra_env["MILLRACE_TEST_PEER_ADDRESSES"].split(","))
    assert peers == {"1": chaos.routes["data2>1"][0], "3": chaos.routes["data2>3"][0]}
    assert chaos.routes["data2>1"][1] == f"127.0.0.1:{cluster.client_ports[1]}"
    assert "min.insync.replicas=2" in args


def test_millrace_single_node_has_no_cluster_flags(tmp_path: Path):
    chaos = FakeChaos()
    cluster = systems.MillraceCluster(tmp_path, chaos, 1, False, Path("/bin/millrace"))
    assert list(chaos.routes) == ["client1"]
    args = cluster.nodes[1].args
    assert "--controller-voters" not in args and "--controller-listen" not in args
    assert "MILLRACE_TEST_PEER_ADDRESSES" not in cluster.nodes[1].extra_env
    assert cluster.fault_kinds()["network"] == systems.CLIENT_NETWORK_KINDS


def test_find_coordinator_request_and_answer():
    """The raw FindCoordinator v1 (key type 1) the nemesis sends, against a canned answer."""
    import socket
    import struct
    import threading

    import ctp
    import secure

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = {}

    def serve():
        conn, _ = srv.accept()
        with conn:
            size = struct.unpack(">i", secure.recv_exact(conn, 4))[0]
            got["req"] = secure.recv_exact(conn, size)
            body = struct.pack(">iih", 1, 0, 0) + struct.pack(">h", -1) + struct.pack(">i", 3)
            body += ctp._string("127.0.0.1") + struct.pack(">i", 9092)
            conn.sendall(struct.pack(">i", len(body)) + body)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    port = srv.getsockname()[1]
    node, failures = ctp.find_txn_coordinator(f"127.0.0.1:1,127.0.0.1:{port}", "ctp-x1", timeout=2)
    th.join(5)
    srv.close()
    assert node == 3 and len(failures) == 1  # the first address refused the connection
    api_key, version, corr = struct.unpack_from(">hhi", got["req"], 0)
    assert (api_key, version, corr) == (10, 1, 1)
    assert got["req"].endswith(ctp._string("ctp-x1") + b"\x01")


def _batch(base: int, payload: bytes) -> bytes:
    """A v2-shaped batch: base offset, length, a 49-byte header rest and a payload (CRC unchecked
    here: the nemesis only needs the framing)."""
    rest = bytes(49) + payload
    return base.to_bytes(8, "big") + len(rest).to_bytes(4, "big") + rest


def test_flip_bytes_damages_at_most_rf_minus_one_copies_of_a_batch(tmp_path: Path):
    chaos = FakeChaos()
    cluster = systems.MillraceCluster(tmp_path, chaos, 3, False, Path("/bin/millrace"))
    assert cluster.fault_kinds()["storage"] == systems.STORAGE_KINDS
    assert cluster.topic_config()["segment.bytes"] == "16384"
    segment = _batch(0, b"a" * 30) + _batch(1, b"b" * 30)
    for node, d in cluster.data_dirs().items():
        pdir = d / "t-0"
        pdir.mkdir(parents=True)
        (pdir / f"{0:020}.log").write_bytes(segment)
        (pdir / f"{2:020}.log").write_bytes(b"")  # the active segment: never damaged
    nem = nemesis.Nemesis.__new__(nemesis.Nemesis)
    nem.cluster, nem.topic, nem.flipped = cluster, "t", {}
    fault = dict(partition=0, node=2, segment=0.0, batch=0.9, byte=0.5)
    chosen = []
    for _ in range(3):
        target = nem._flip_target(fault, rf=3)
        if target is None:
            break
        node, seg, pos, base, at = target
        assert seg.name == f"{0:020}.log" and base == 1
        assert pos + nemesis.CRC_COVERED_FROM <= at < pos + len(_batch(1, b"b" * 30))
        nem.flipped.setdefault((0, base), set()).add(node)
        chosen.append(node)
    # The seeded node first, then one more; the third copy of the batch stays whole.
    assert chosen == [2, 1]


def test_flip_bytes_leaves_a_whole_copy_when_a_replica_is_behind(tmp_path: Path):
    """Seed 1868716910: node 2 was behind at offset 524 (it never held the batch), node 1's copy
    was damaged and not yet repaired (node 3 was down), and then node 3's copy was damaged too:
    no copy was left. A batch only one other replica holds whole is damaged at most once."""
    chaos = FakeChaos()
    cluster = systems.MillraceCluster(tmp_path, chaos, 3, False, Path("/bin/millrace"))
    whole = _batch(0, b"a" * 30) + _batch(1, b"b" * 30)
    for node, d in cluster.data_dirs().items():
        pdir = d / "t-0"
        pdir.mkdir(parents=True)
        # Node 2 is behind: its log ends after batch 0.
        (pdir / f"{0:020}.log").write_bytes(whole if node != 2 else _batch(0, b"a" * 30))
        (pdir / f"{2:020}.log").write_bytes(b"")
    nem = nemesis.Nemesis.__new__(nemesis.Nemesis)
    nem.cluster, nem.topic, nem.flipped = cluster, "t", {}
    fault = dict(partition=0, node=1, segment=0.0, batch=0.9, byte=0.5)
    node, seg, pos, base, at = nem._flip_target(fault, rf=3)
    assert (node, base) == (1, 1)
    data = bytearray(seg.read_bytes())
    data[at] ^= 0x5A
    seg.write_bytes(bytes(data))
    nem.flipped.setdefault((0, base), set()).add(node)
    # Node 3 holds the only whole copy of batch 1 now; the fault moves on to node 2's last batch.
    fault = dict(partition=0, node=3, segment=0.0, batch=0.9, byte=0.5)
    node, seg, pos, base, at = nem._flip_target(fault, rf=3)
    assert (node, base) == (2, 0)


def test_kafka_runs_have_no_storage_lane():
    assert "flip-bytes" not in systems.PROCESS_KINDS + systems.CLIENT_NETWORK_KINDS + systems.PEER_NETWORK_KINDS


class FakeObjectStore:
    s3_upstream = "127.0.0.1:8333"

    def broker_env(self, endpoint: str) -> dict:
        return {"AWS_ENDPOINT_URL": f"http://{endpoint}", "AWS_ALLOW_HTTP": "true"}


def test_millrace_tiered_brokers_reach_the_object_store_through_the_s3_route(tmp_path: Path):
    chaos = FakeChaos()
    cluster = systems.MillraceCluster(tmp_path, chaos, 3, False, Path("/bin/millrace"), FakeObjectStore())
    assert cluster.tiered
    assert chaos.routes["s3"][1] == FakeObjectStore.s3_upstream
    for node in cluster.nodes.values():
        assert node.extra_env["AWS_ENDPOINT_URL"] == f"http://{chaos.routes['s3'][0]}"
        assert "remote.log.storage.system.enable=true" in node.args
        assert f"millrace.remote.storage.url=s3://{systems.BUCKET}/{systems.TIERED_PREFIX}" in node.args
        assert node.args[node.args.index("--http-listen") + 1] == node.http_addr
    kinds = cluster.fault_kinds()
    assert kinds["object-store"] == systems.OBJECT_STORE_KINDS
    assert "kill-tiered-leader" in kinds["process"]
    cfg = cluster.tiered_topic_config(65536)
    assert (cfg["remote.storage.enable"], cfg["local.retention.bytes"], cfg["segment.bytes"]) == ("true", "65536", "16384")
    schedule = nemesis.make_schedule(5, 240, kinds, cluster.ids, 6, 1.0)
    outages = [f for f in schedule if f["kind"] == "object-store-outage"]
    assert outages and all(5 <= f["cut"] <= 20 and f["duration"] >= f["cut"] + 8 for f in outages)
    assert {f["partition"] for f in schedule if f["kind"] == "kill-tiered-leader"} <= set(range(nemesis.TIERED_PARTITIONS))


def test_kafka_and_plain_millrace_have_no_tiered_parts(tmp_path: Path):
    chaos = FakeChaos()
    cluster = systems.MillraceCluster(tmp_path, chaos, 3, False, Path("/bin/millrace"))
    assert not cluster.tiered and "s3" not in chaos.routes
    assert "object-store" not in cluster.fault_kinds()
    assert not systems.Cluster.tiered
