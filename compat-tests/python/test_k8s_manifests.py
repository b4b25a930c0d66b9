"""Goal: the Kubernetes resources in ``deploy/k8s/`` are valid, and the command lines their pods
run form a working cluster.

1. Every resource validates against the Kubernetes API schemas (``kubernetes-validate``, strict:
   an unknown field fails), for the oldest and the newest Kubernetes version we claim; a resource
   with a misspelt field fails the same check (so the check can fail).
2. The pods' own shell scripts (the StatefulSets' ``args``), run as processes: three controller
   pods and two broker pods, each with its ``POD_NAME`` and ``POD_NAMESPACE`` as the downward API
   gives them. Nothing resolves ``*.svc.cluster.local`` here and every pod listens on the same
   ports, so a ``millrace`` on the PATH rewrites exactly those addresses (each pod's DNS name and
   0.0.0.0 to 127.0.0.1 with ports of its own, ``/data`` to a directory of its own) and runs the
   broker with everything else as the manifest wrote it: the node ids computed from the ordinal,
   the voter set, ``process.roles=broker``, the probes' HTTP listener. Checked: every pod turns
   ready (``/ready``, the readiness probe's path), Metadata lists brokers 1, 2, 3, 100 and 101,
   and DescribeQuorum shows voters 1-3 with 100 and 101 as observers.

Not on the reference run: the manifests run Millrace's command line."""

from __future__ import annotations

import copy
import json
import os
import signal
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from millrace import REPO_ROOT, broker_binary, broker_env, free_ports, wait_until

K8S_DIR = REPO_ROOT / "deploy" / "k8s"
# The Kubernetes versions the manifests claim (docs/operations.md, "Scaling").
K8S_VERSIONS = ("1.30.0", "1.37.0")
NAMESPACE = "ci"
START_TIMEOUT = 90.0

pytestmark = pytest.mark.skipif(
    os.environ.get("MILLRACE_BIN", "").endswith("kafka-shim.sh"),
    reason="the manifests run Millrace's own command line",
)


def resources() -> List[Dict]:
    out = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        with open(path) as f:
            out.extend(r for r in yaml.safe_load_all(f) if r)
    return out


def statefulset(name: str) -> Dict:
    (found,) = [r for r in resources() if r["kind"] == "StatefulSet" and r["metadata"]["name"] == name]
    return found


def test_manifests_validate_against_the_kubernetes_schemas() -> None:
    import kubernetes_validate

    found = resources()
    kinds = sorted({r["kind"] for r in found})
    assert kinds == [
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Service",
        "StatefulSet",
    ], kinds
    for version in K8S_VERSIONS:
        for resource in found:
            kubernetes_validate.validate(resource, version, strict=True)
    # A misspelt field in the pod template is refused: the validation can fail.
    broken = copy.deepcopy(statefulset("millrace-broker"))
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


# The stand-in for the image's millrace: rewrites the addresses only DNS and a pod network give
# meaning to, then runs the real broker with the rest of the command line untouched.
WRAPPER = r'''#!{python}
import json, os, re, sys
m = json.load(open({map!r}))
pod = os.environ["POD_NAME"]
def local(text):
    def one(match):
        host, port = match.group(1), match.group(2)
        target = pod if host == "0.0.0.0" else host.split(".")[0]
        return "127.0.0.1:%d" % m["ports"][target][port]
    return re.sub(r"(0\.0\.0\.0|[a-z0-9-]+\.[a-z0-9-]+\.[a-z0-9-]+\.svc\.cluster\.local):(\d+)", one, text)
args = [local(a) for a in sys.argv[1:]]
args = [os.path.join(m["work"], pod, "data") if a == "/data" else a for a in args]
with open(os.path.join(m["work"], pod, "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
os.execv(m["binary"], [m["binary"]] + args)
'''


def http_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001 - not ready yet
        return False


def test_pod_command_lines_form_a_cluster(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    pods = {f"millrace-controller-{i}": "millrace-controller" for i in range(3)}
    pods.update({f"millrace-broker-{i}": "millrace-broker" for i in range(2)})
    ports = iter(free_ports(3 * len(pods)))
    port_map = {pod: {"9092": next(ports), "9093": next(ports), "9101": next(ports)} for pod in pods}
    (tmp_path / "map.json").write_text(
        json.dumps({"ports": port_map, "work": str(tmp_path), "binary": str(broker_binary())})
    )
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "getent").write_text("#!/bin/sh\nexit 0\n")
    (shim / "millrace").write_text(
        WRAPPER.replace("{python}", sys.executable).replace("{map!r}", repr(str(tmp_path / "map.json")))
    )
    for tool in ("getent", "millrace"):
        (shim / tool).chmod(stat.S_IRWXU)

    procs: Dict[str, subprocess.Popen] = {}
    try:
        for pod, set_name in pods.items():
            (tmp_path / pod).mkdir()
            container = statefulset(set_name)["spec"]["template"]["spec"]["containers"][0]
            assert container["command"] == ["/bin/sh", "-c"], container["command"]
            env = broker_env()
            env.update(
                POD_NAME=pod,
                POD_NAMESPACE=NAMESPACE,
                PATH=f"{shim}{os.pathsep}{env.get('PATH', '')}",
            )
            with open(tmp_path / pod / "stderr.log", "wb") as err:
                procs[pod] = subprocess.Popen(
                    ["/bin/sh", "-c", container["args"][0]],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                )
        for pod in pods:
            try:
                wait_until(
                    lambda pod=pod: http_ready(port_map[pod]["9101"]),
                    timeout=START_TIMEOUT,
                    interval=0.5,
                    what=f"{pod} ready",
                )
            except TimeoutError:
                tail = (tmp_path / pod / "stderr.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{pod} never turned ready; stderr tail:\n{tail}")

        argv = json.loads((tmp_path / "millrace-broker-1" / "argv.json").read_text())
        assert argv[argv.index("--node-id") + 1] == "101", argv
        assert "process.roles=broker" in argv, argv

        bootstrap = ",".join(f"127.0.0.1:{p['9092']}" for p in port_map.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        brokers = wait_until(
            lambda: (
                sorted(admin.list_topics(timeout=5).brokers)
                if len(admin.list_topics(timeout=5).brokers) == 5
                else None
            ),
            timeout=30,
            what="five brokers in Metadata",
        )
        assert brokers == [1, 2, 3, 100, 101]

        kadmin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        try:
            def quorum():
                p = kadmin.describe_metadata_quorum()["topics"][0]["partitions"][0]
                voters = sorted(v["replica_id"] for v in p["current_voters"])
                observers = sorted(o["replica_id"] for o in p["observers"])
                return (voters, observers) if observers == [100, 101] else None

            voters, observers = wait_until(quorum, timeout=30, what="observers 100 and 101")
            assert voters == [1, 2, 3]
        finally:
            kadmin.close()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
