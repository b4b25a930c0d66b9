"""The object store of a tiered-storage run: one SeaweedFS server (``weed server -s3``) with its
data in the run's work dir, on free loopback ports, with one S3 identity so the brokers'
credentials are checked (the same setup as ``millrace_tiered::testing::SeaweedFs``).

The brokers reach its S3 port only through the ``s3`` proxy route (``systems.py``), so the
nemesis can cut it; the harness itself talks to the filer port directly: to create the bucket,
to probe that a write works, and to list the bucket at the end (the filer's JSON directory
listing: ``GET /buckets/<bucket>/<dir>/`` with ``Accept: application/json``), so the checks see
what the store holds whatever the proxy does.

The binary: env ``SEAWEEDFS_BIN`` or ``MILLRACE_WEED`` (as the Rust tests; the broker knows it is
not a config key), else what ``scripts/seaweedfs.sh`` prints (it builds and caches SeaweedFS once
per machine, ~9 minutes). Only the process started here is ever signalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, Optional

from procs import free_port, spawn, terminate, wait_until

ACCESS_KEY = "millrace-harness"
SECRET_KEY = "millrace-harness-secret"
BUCKET = "millrace-harness"
REGION = "us-east-1"
READY_TIMEOUT_S = 90.0  # a first start on a busy machine: master election, volume registration
HTTP_TIMEOUT_S = 5.0
LIST_PAGE = 1000  # entries per filer listing request
LIST_ENTRIES_MAX = 200_000  # bound on one bucket listing (a run writes a few thousand objects)
VOLUME_SIZE_LIMIT_MB = 64
VOLUMES_MAX = 16  # at most 1 GiB of volumes; a 6-minute run writes tens of MiB
MODE_DIR = 1 << 31  # Go's os.ModeDir in the filer's "Mode"


def weed_binary(repo: Path) -> Path:
    env = os.environ.get("SEAWEEDFS_BIN") or os.environ.get("MILLRACE_WEED")
    if env:
        return Path(env)
    out = subprocess.run(["bash", str(repo / "scripts" / "seaweedfs.sh")], capture_output=True, timeout=1800,
                         check=True)
    return Path(out.stdout.decode().strip().splitlines()[-1])


class SeaweedFs:
    def __init__(self, binary: Path, work: Path) -> None:
        self.binary = binary
        self.dir = work / "s3"
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        self.ports = {k: free_port() for k in ("master", "master_grpc", "volume", "volume_grpc", "filer",
                                               "filer_grpc", "s3", "s3_grpc")}
        self.proc: Optional[subprocess.Popen] = None

    @property
    def s3_upstream(self) -> str:
        return f"127.0.0.1:{self.ports['s3']}"

    @property
    def filer(self) -> str:
        return f"http://127.0.0.1:{self.ports['filer']}"

    def broker_env(self, endpoint: str) -> Dict[str, str]:
        """The AWS variables a broker needs to reach this server at ``endpoint`` (the proxy route)."""
        return {
            "AWS_ENDPOINT_URL": f"http://{endpoint}",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self) -> "SeaweedFs":
        identities = {"identities": [{"name": "millrace", "credentials": [{"accessKey": ACCESS_KEY,
                                                                         "secretKey": SECRET_KEY}],
                                      "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        (self.dir / "s3.json").write_text(json.dumps(identities))
        p, d = self.ports, self.dir
        args = [
            str(self.binary), "server", f"-dir={d / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
            f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}", "-master.telemetry=false",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}", f"-volume.max={VOLUMES_MAX}",
            "-volume.preStopSeconds=0", "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={d / 'filer.sock'}", "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={d / 's3.sock'}",
            f"-s3.config={d / 's3.json'}",
        ]
        log = open(d / "weed.log", "ab")
        self.proc = spawn(args, cwd=str(d), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def up(what):
            def cond():
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"SeaweedFS exited; see {d / 'weed.log'}")
                return what()
            return cond

        deadline = time.monotonic() + READY_TIMEOUT_S
        wait_until(up(lambda: self._status("POST", f"/buckets/{BUCKET}/") in range(200, 300)),
                   max(1.0, deadline - time.monotonic()), 0.2, "SeaweedFS creates the bucket")
        # A write through the filer lands in a volume: the volume server registered and has room.
        probe = f"/buckets/{BUCKET}/.harness-probe"
        wait_until(up(lambda: self._status("PUT", probe, b"probe") in range(200, 300)),
                   max(1.0, deadline - time.monotonic()), 0.2, "a SeaweedFS write works")
        self._status("DELETE", probe)
        wait_until(up(lambda: self._status("GET", "/", port="s3") is not None),
                   max(1.0, deadline - time.monotonic()), 0.2, "the S3 port answers")
        return self

    def _status(self, method: str, path: str, body: Optional[bytes] = None, port: str = "filer") -> Optional[int]:
        url = f"http://127.0.0.1:{self.ports[port]}{urllib.parse.quote(path)}"
        req = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def list_objects(self, prefix: str) -> Dict[str, int]:
        """Every object under ``prefix`` (a folder of the bucket): key relative to the bucket ->
        size in bytes. Walks the filer's directories, a page at a time."""
        root = f"/buckets/{BUCKET}"
        out: Dict[str, int] = {}
        folders = [f"{root}/{prefix.strip('/')}".rstrip("/")]
        seen = 0
        while folders:
            folder = folders.pop()
            last = ""
            while True:
                query = urllib.parse.urlencode({"limit": LIST_PAGE, "lastFileName": last})
                req = urllib.request.Request(f"{self.filer}{urllib.parse.quote(folder)}/?{query}",
                                             headers={"Accept": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                        page = json.loads(resp.read())
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:
                        break  # no such folder: nothing there
                    raise
                entries = page.get("Entries") or []
                for e in entries:
                    seen += 1
                    if seen > LIST_ENTRIES_MAX:
                        raise RuntimeError(f"more than {LIST_ENTRIES_MAX} entries under {prefix}")
                    if int(e.get("Mode", 0)) & MODE_DIR:
                        folders.append(e["FullPath"])
                    else:
                        out[e["FullPath"][len(root) + 1:]] = int(e.get("FileSize", 0))
                if not page.get("ShouldDisplayLoadMore") or not entries:
                    break
                last = page.get("LastFileName") or entries[-1]["FullPath"].rsplit("/", 1)[-1]
        return out

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, grace=5)
            self.proc = None
        for role in ("master", "volume", "filer", "s3"):
            try:
                Path(f"/tmp/seaweedfs-{role}-grpc-{self.ports[role + '_grpc']}.sock").unlink()
            except OSError:
                pass
