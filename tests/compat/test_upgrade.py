"""Upgrade test: data dirs an earlier release wrote (tests/compat/fixtures,
made by make_fixture.sh) open with this dedupd and every record in them
checks, for a single node and for a 3-node group; a dir of a newer format is
refused untouched.

Environment (tests/compat/CMakeLists.txt): DEDUPD, PYTHONPATH with the
generated dedup.v1 stubs, DEDUP_FORMAT_HEADER (storage/format_version.h, for
this binary's format), DEDUP_COMPAT_FIXTURES (the fixtures dir).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
from pathlib import Path
from typing import Optional

import grpc
from google.protobuf import json_format

from dedup.v1 import dedup_pb2 as pb
from dedup.v1 import dedup_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from history import ready as ready_file  # noqa: E402
from write_records import find_leader as leader  # noqa: E402

# Exit code of a data dir format this binary cannot read (common/exit_codes.h).
EXIT_DATA_FORMAT = 8


def header_constant(name: str) -> int:
    text = Path(os.environ["DEDUP_FORMAT_HEADER"]).read_text()
    return int(re.search(rf"\b{name}\s*=\s*(\d+)", text).group(1))


DATA_FORMAT = header_constant("kDataFormatVersion")


def fixtures() -> list[Path]:
    found = sorted(Path(os.environ["DEDUP_COMPAT_FIXTURES"]).glob("*.tar.gz"))
    if not found:
        raise RuntimeError("no fixture in $DEDUP_COMPAT_FIXTURES")
    return found


def dir_digest(root: Path) -> str:
    """Names, sizes, modes, modification times and contents of everything
    under root."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest.update(f"{path.relative_to(root)} {st.st_mode} {st.st_size} "
                      f"{st.st_mtime_ns}\n".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


class Server:
    """One dedupd on a given data dir, stopped with SIGTERM."""

    def __init__(self, root: Path, name: str, args: list[str],
                 binary: Optional[str] = None) -> None:
        self.log_path = root / f"{name}.log"
        ready = root / f"{name}.ready.json"
        ready.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [binary or os.environ["DEDUPD"], f"--ready_file={ready}",
                 "--metrics_address=", *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.ready_path = ready

    def wait_ready(self, timeout_s: float = 30) -> dict:
        try:
            return ready_file.wait_ready(self.ready_path, self.process, timeout_s)
        except ready_file.NotReady as e:
            raise RuntimeError(f"{e}: {self.log()}") from e

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()




class RecordChecks:
    """Every record of a manifest, checked against a running dedupd."""

    def __init__(self, test: unittest.TestCase, stub: pb_grpc.DedupStub,
                 records: list[dict]) -> None:
        self.t, self.stub, self.records = test, stub, records

    def begin(self, r: dict, **kw) -> pb.BeginResponse:
        kw.setdefault("args_hash", r["args_hash"].encode())
        kw.setdefault("owner", "upgrade-test")
        return self.stub.Begin(pb.BeginRequest(
            namespace=r["namespace"], key=r["key"], **kw), timeout=10)

    def check_all(self) -> None:
        # Every Get first, before a Begin changes a record.
        for r in self.records:
            with self.t.subTest(record=r["key"], check="get"):
                got = self.stub.Get(pb.GetRequest(namespace=r["namespace"],
                                                  key=r["key"]), timeout=10)
                self.t.assertEqual(json_format.MessageToDict(got), r["get"])
        for r in self.records:
            with self.t.subTest(record=r["key"], kind=r["kind"]):
                getattr(self, "check_" + r["kind"])(r)

    def check_completed(self, r: dict) -> None:
        stored = r["get"]["record"]
        reply = self.begin(r)
        self.t.assertEqual(reply.status, pb.BeginResponse.DUPLICATE, reply)
        self.t.assertEqual(reply.fence, r["fence"])
        self.t.assertEqual(pb.Outcome.Name(reply.outcome), stored["outcome"])
        self.t.assertEqual(json_format.MessageToDict(pb.Record(result=reply.result)),
                           {"result": stored["result"]})
        conflict = self.begin(r, args_hash=b"other args")
        self.t.assertEqual(conflict.status, pb.BeginResponse.CONFLICT, conflict)

    def check_error_retry(self, r: dict) -> None:
        # Its namespace's policy retries errors (tests/compat/policy.json).
        reply = self.begin(r)
        self.t.assertEqual(reply.status, pb.BeginResponse.STARTED, reply)
        self.t.assertGreater(reply.fence, r["fence"])

    def check_in_flight(self, r: dict) -> None:
        lease_end = int(r["get"]["record"]["leaseExpiresAt"])
        if time.time() * 1000 < lease_end - 10_000:
            # The lease (the longest there is) still runs: the owner's own
            # Begin re-enters, anyone else's waits.
            other = self.begin(r)
            self.t.assertEqual(other.status, pb.BeginResponse.IN_USE, other)
            self.t.assertEqual(other.lease_expires_at, lease_end)
            again = self.begin(r, owner=r["owner"])
            self.t.assertEqual(again.status, pb.BeginResponse.STARTED, again)
            self.t.assertEqual(again.fence, r["fence"])
            self.t.assertFalse(again.takeover)
        elif time.time() * 1000 > lease_end + 10_000:
            self.check_lease_expired(r)

    def check_lease_expired(self, r: dict) -> None:
        reply = self.begin(r)
        self.t.assertEqual(reply.status, pb.BeginResponse.STARTED, reply)
        self.t.assertTrue(reply.takeover)
        self.t.assertGreater(reply.fence, r["fence"])
        self.t.assertEqual(reply.attempts, 2)
        if "checkpoint" in r:
            self.t.assertEqual(reply.checkpoint.step, r["checkpoint"]["step"])
            self.t.assertEqual(
                json_format.MessageToDict(reply.checkpoint)["data"],
                r["checkpoint"]["data"])
            self.t.assertEqual(reply.checkpoint.fence, r["fence"])

    def check_gone(self, r: dict) -> None:
        reply = self.begin(r)
        self.t.assertEqual(reply.status, pb.BeginResponse.STARTED, reply)
        self.t.assertFalse(reply.takeover)
        self.t.assertEqual(reply.attempts, 1)
        self.t.assertGreater(reply.fence, r["fence"])

    check_released = check_forgotten = check_expired = check_gone

    def check_tombstone(self, r: dict) -> None:
        reply = self.begin(r)
        self.t.assertEqual(json_format.MessageToDict(reply), r["begin"])
        rerun = self.begin(r, accept_rerun=True)
        self.t.assertEqual(rerun.status, pb.BeginResponse.STARTED, rerun)
        self.t.assertTrue(rerun.rerun)
        self.t.assertGreater(rerun.fence, r["fence"])

    def check_new_write(self) -> None:
        """A new record commits, with a fence above every one issued
        before the upgrade."""
        r = {"namespace": "mail:out", "key": "after-upgrade", "args_hash": "new"}
        started = self.begin(r)
        self.t.assertEqual(started.status, pb.BeginResponse.STARTED, started)
        self.t.assertGreater(started.fence, max(x["fence"] for x in self.records))
        done = self.stub.Complete(pb.CompleteRequest(
            namespace="mail:out", key="after-upgrade", fence=started.fence,
            outcome=pb.SUCCESS, result=b"ok"), timeout=10)
        self.t.assertEqual(done.status, pb.CompleteResponse.OK, done)
        self.t.assertEqual(self.begin(r).status, pb.BeginResponse.DUPLICATE)


class UpgradeTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="dedup-upgrade-")
        self.root = Path(self._tmp.name)
        self.servers: list[Server] = []

    def tearDown(self) -> None:
        for server in self.servers:
            server.stop()
        self._tmp.cleanup()

    def unpack(self, fixture: Path) -> Path:
        target = self.root / fixture.name.removesuffix(".tar.gz")
        with tarfile.open(fixture) as tar:
            tar.extractall(target)
        return target

    def start(self, name: str, args: list[str],
              binary: Optional[str] = None) -> Server:
        server = Server(self.root, name, args, binary)
        self.servers.append(server)
        return server

    def assert_format_recorded(self, data_dir: Path) -> None:
        self.assertEqual((data_dir / "DEDUP-FORMAT").read_text(), f"{DATA_FORMAT}\n")

    def test_single_node(self) -> None:
        for fixture in fixtures():
            with self.subTest(fixture=fixture.name):
                data = self.unpack(fixture)
                self.assertFalse((data / "single" / "DEDUP-FORMAT").exists())
                server = self.start(f"single-{fixture.name}", [
                    "--address=127.0.0.1:0", f"--data_dir={data / 'single'}",
                    f"--policy_file={data / 'policy.json'}"])
                ready = server.wait_ready()
                self.assertEqual(ready["data_format"], DATA_FORMAT)
                self.assert_format_recorded(data / "single")
                records = json.loads((data / "single.manifest.json").read_text())
                checks = RecordChecks(
                    self, pb_grpc.DedupStub(grpc.insecure_channel(ready["address"])),
                    records["records"])
                checks.check_all()
                checks.check_new_write()
                self.assertEqual(server.stop(), 0, server.log())

    def test_group(self) -> None:
        """Three new-binary nodes on the three dirs of an old group. Node 3
        starts last, as in a rolling upgrade, and catches up on entries the
        upgraded two wrote."""
        for fixture in fixtures():
            with self.subTest(fixture=fixture.name):
                data = self.unpack(fixture)
                info = dict(line.split(" ", 1) for line in
                            (data / "FIXTURE").read_text().splitlines())
                peers = info["peers"]
                addresses = {int(p.split("=")[0]): p.split("=")[2]
                             for p in peers.split(",")}
                nodes = {}
                for n in (1, 2):
                    nodes[n] = self.start_node(data, n, peers, addresses[n])
                for n in (1, 2):
                    nodes[n].wait_ready()
                stub = leader([addresses[1], addresses[2]])
                records = json.loads((data / "group.manifest.json").read_text())
                checks = RecordChecks(self, stub, records["records"])
                checks.check_all()
                checks.check_new_write()
                nodes[3] = self.start_node(data, 3, peers, addresses[3])
                nodes[3].wait_ready()
                for n in (1, 2, 3):
                    self.assert_format_recorded(data / "group" / f"n{n}")
                self.wait_caught_up(addresses)
                for n in (2, 3):
                    self.assertEqual(nodes[n].stop(), 0, nodes[n].log())

    def start_node(self, data: Path, n: int, peers: str, address: str,
                   binary: Optional[str] = None) -> Server:
        return self.start(f"n{n}-{data.name}", [
            f"--node_id={n}", f"--peers={peers}", f"--address={address}",
            f"--data_dir={data / 'group' / f'n{n}'}",
            f"--policy_file={data / 'policy.json'}", "--event_log=off"], binary)

    @unittest.skipUnless(os.environ.get("DEDUPD_PREVIOUS"),
                         "set DEDUPD_PREVIOUS to the fixture release's dedupd "
                         "(make_fixture.sh builds it)")
    def test_mixed_group(self) -> None:
        """A rolling upgrade half done: node 1 runs this dedupd, nodes 2 and 3
        the release that wrote the fixture. Every record checks through the
        leader, whichever binary it runs; with node 2 stopped, writes commit
        only when the new node 1 and the old node 3 both store them."""
        fixture = fixtures()[-1]
        data = self.unpack(fixture)
        peers = self.peers_of(data)
        addresses = {int(p.split("=")[0]): p.split("=")[2] for p in peers.split(",")}
        old = os.environ["DEDUPD_PREVIOUS"]
        nodes = {n: self.start_node(data, n, peers, addresses[n],
                                    None if n == 1 else old) for n in (1, 2, 3)}
        for node in nodes.values():
            node.wait_ready()
        records = json.loads((data / "group.manifest.json").read_text())
        checks = RecordChecks(self, leader(list(addresses.values())),
                              records["records"])
        checks.check_all()
        checks.check_new_write()
        self.assertEqual(nodes[2].stop(), 0, nodes[2].log())
        stub = leader([addresses[1], addresses[3]])
        for i in range(20):
            reply = stub.Begin(pb.BeginRequest(namespace="mail:out", key=f"mixed-{i}",
                                               owner="t"), timeout=10)
            self.assertEqual(reply.status, pb.BeginResponse.STARTED, reply)
        self.assert_format_recorded(data / "group" / "n1")
        for n in (1, 3):
            self.assertEqual(nodes[n].stop(), 0, nodes[n].log())

    def wait_caught_up(self, addresses: dict[int, str]) -> None:
        """Node 3 took part after its upgrade: with node 1 stopped, nodes 2
        and 3 elect a leader that has the write made before node 3 started
        and commits a new one."""
        stopped = next(s for s in self.servers if s.ready_path.name.startswith("n1-"))
        self.assertEqual(stopped.stop(), 0, stopped.log())
        stub = leader([addresses[2], addresses[3]])
        again = stub.Begin(pb.BeginRequest(namespace="mail:out", key="after-upgrade",
                                           args_hash=b"new"), timeout=10)
        self.assertEqual(again.status, pb.BeginResponse.DUPLICATE, again)
        started = stub.Begin(pb.BeginRequest(namespace="mail:out", key="pair-2-3",
                                             owner="t"), timeout=10)
        self.assertEqual(started.status, pb.BeginResponse.STARTED, started)

    def test_newer_format_refused_untouched(self) -> None:
        fixture = fixtures()[-1]
        data = self.unpack(fixture)
        peers = self.peers_of(data)
        cases = [("single", ["--address=127.0.0.1:0"]),
                 ("group/n1", ["--node_id=1", f"--peers={peers}",
                               f"--address={peers.split(',')[0].split('=')[2]}"])]
        for subdir, args in cases:
            with self.subTest(dir=subdir):
                target = data / subdir
                (target / "DEDUP-FORMAT").write_text(f"{DATA_FORMAT + 1}\n")
                before = dir_digest(target)
                server = self.start(f"newer-{subdir.replace('/', '-')}",
                                    [f"--data_dir={target}", *args])
                code = server.process.wait(timeout=30)
                self.assertEqual(code, EXIT_DATA_FORMAT, server.log())
                log = server.log()
                self.assertIn(f"has format {DATA_FORMAT + 1}", log)
                self.assertIn(f"reads formats 1 to {DATA_FORMAT}", log)
                self.assertEqual(dir_digest(target), before)

    @staticmethod
    def peers_of(data: Path) -> str:
        for line in (data / "FIXTURE").read_text().splitlines():
            if line.startswith("peers "):
                return line.split(" ", 1)[1]
        raise ValueError("FIXTURE has no peers line")


if __name__ == "__main__":
    unittest.main()
