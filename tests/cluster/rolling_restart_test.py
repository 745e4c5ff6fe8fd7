"""Rolling restart of a 3-node group (scripts/cluster restart) while the
helpers run: the C++ RunOnce threads (half through a CoalescingClient, in
tests/cluster/rolling_load), Python @idempotent functions (on a Client and on
a CoalescingClient) and, when the TypeScript client is built
(scripts/install-node-deps), TypeScript withIdempotency callers
(rolling_load.mjs), on fresh keys and on keys every caller repeats, each
caller with the three addresses in its own order.

Asserts that no helper call failed, that every outcome a helper returned is
stored (a Begin with the same key and arguments answers DUPLICATE with that
result, through the leader) and that the three nodes end with the same
digest. The group runs on free ports of 127.0.0.1-3 with its data in a temp
dir; $DEDUPD, $DEDUPCTL and $ROLLING_LOAD name the binaries.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path
from typing import Any

import grpc

from dedup_client import Client, CoalescingClient, args_hash, dedup_pb2, idempotent
from tests.history.stubs import generate_stubs

REPO = Path(__file__).resolve().parents[2]
NODES = (1, 2, 3)
PY_NAMESPACE = "roll-py"
CPP_NAMESPACE = "roll-cpp"
TS_NAMESPACE = "roll-ts"
TS_CLIENT = REPO / "client/typescript/dist/src/index.js"
REPEATED_KEYS = 32


def port_free_on_every_node() -> int:
    """A port that 127.0.0.1, .2 and .3 can all bind right now."""
    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                for n in NODES[1:]:
                    with socket.socket() as other:
                        other.bind((f"127.0.0.{n}", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no port free on 127.0.0.1-3")


class PythonLoad:
    """Threads calling @idempotent functions until stop(); what each call
    returned (key, args hash, result) and every exception are kept."""

    def __init__(self, addresses: list[str], threads: int) -> None:
        self.outcomes: list[tuple[str, bytes, Any]] = []
        self.failures: list[str] = []
        self.calls = 0
        self.finished_at: list[float] = []  # time.monotonic() of each outcome
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._clients: list[Any] = []
        self._threads = []
        for t in range(threads):
            order = addresses[t % 3:] + addresses[:t % 3]
            client: Any = Client(order)
            if t % 2 == 1:
                client = CoalescingClient(client)
            self._clients.append(client)
            self._threads.append(threading.Thread(target=self._run, args=(t, client)))
        for thread in self._threads:
            thread.start()

    def _run(self, t: int, client: Any) -> None:
        @idempotent(client, PY_NAMESPACE, key_from=lambda a: a["key"])
        def run(key: str) -> dict[str, Any]:
            return {"key": key, "by": t}

        i = 0
        while not self._stop.is_set():
            key = f"rep-{i % REPEATED_KEYS}" if i % 4 == 3 else f"t{t}-{i}"
            i += 1
            try:
                result = run(key)
            except Exception as e:  # noqa: BLE001 (every failure counts)
                with self._mu:
                    self.calls += 1
                    self.failures.append(f"{key}: {type(e).__name__}: {e}")
                continue
            with self._mu:
                self.calls += 1
                self.outcomes.append((key, args_hash({"key": key}), result))
                self.finished_at.append(time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        for client in self._clients:
            client.close()


class RollingRestartTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="dedup-rolling-")
        self.addCleanup(tmp.cleanup)
        self.root = Path(tmp.name)
        port = port_free_on_every_node()
        raft_port = port_free_on_every_node()
        self.addresses = [f"127.0.0.{n}:{port}" for n in NODES]
        self.env = dict(
            os.environ, CLUSTER_DATA=str(self.root / "cluster"),
            CLUSTER_CLIENT_PORT=str(port), CLUSTER_RAFT_PORT=str(raft_port),
            CLUSTER_METRICS_PORT="", CLUSTER_TIMEOUT_S="30")
        sys.path.insert(0, generate_stubs(str(self.root / "gen")))
        from dedup.v1 import cluster_pb2, cluster_pb2_grpc  # (generated)

        self.cluster_pb2, self.cluster_pb2_grpc = cluster_pb2, cluster_pb2_grpc
        self.addCleanup(self.cluster, "stop")  # (before the dir goes)
        # One Raft group (scripts/cluster's default is 3): this test is
        # about the rolling restart of today's single group.
        started = self.cluster("start", "--groups=1", "--event_log=off")
        self.assertEqual(started.returncode, 0, started.stdout + started.stderr)

    def cluster(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(REPO / "scripts/cluster"), *args], env=self.env,
                              capture_output=True, text=True, timeout=150)

    def logs(self) -> str:
        return "\n".join(
            f"--- node {n} ---\n"
            + (self.root / f"cluster/n{n}.log").read_text(errors="replace")[-2000:]
            for n in NODES)

    def test_restart_every_node_under_the_helpers_load(self) -> None:
        stop_file = self.root / "stop"
        cpp_out = self.root / "cpp-outcomes.tsv"
        cpp = subprocess.Popen(
            [os.environ["ROLLING_LOAD"], f"--addresses={','.join(self.addresses)}",
             f"--out={cpp_out}", f"--stop_file={stop_file}", "--threads=6"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ts_out = self.root / "ts-outcomes.tsv"
        ts = None
        if TS_CLIENT.exists():
            ts = subprocess.Popen(
                ["node", str(REPO / "tests/cluster/rolling_load.mjs"), str(TS_CLIENT),
                 ",".join(self.addresses), str(ts_out), str(stop_file), "4"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        else:
            print(f"no {TS_CLIENT} (scripts/install-node-deps builds it): "
                  "no TypeScript load", file=sys.stderr)
        py = PythonLoad(self.addresses, threads=6)
        try:
            time.sleep(1.5)
            calls_before = py.calls
            restart_began = time.monotonic()
            restart = self.cluster("restart")
            restart_ended = time.monotonic()
            calls_during = py.calls - calls_before
            # What the script waited for: every node follows the one leader.
            leaders_known = {a: self.status(a).leader_id for a in self.addresses}
            time.sleep(1.0)
        finally:
            stop_file.touch()
            py.stop()
            cpp_stdout, cpp_stderr = cpp.communicate(timeout=120)
            ts_stdout, ts_stderr = ts.communicate(timeout=120) if ts else ("", "")
        print(restart.stdout, file=sys.stderr)
        self.assertEqual(restart.returncode, 0, restart.stderr + self.logs())
        for n in NODES:
            self.assertIn(f"node {n}: serving again", restart.stdout)
        self.assertRegex(restart.stdout, r"node \d leads: transferring leadership")
        self.assertGreater(calls_during, 0, "the load stopped during the restart")
        self.assertEqual(len(set(leaders_known.values())), 1, leaders_known)
        self.assertNotEqual(set(leaders_known.values()), {0}, leaders_known)

        # No helper call failed.
        self.assertEqual(py.failures, [], "Python helper calls failed")
        self.assertEqual(cpp.returncode, 0,
                         f"C++ helper calls failed: {cpp_stdout}{cpp_stderr[-3000:]}")
        cpp_outcomes = [line.split("\t", 2) for line in cpp_out.read_text().splitlines()]
        self.assertGreater(len(cpp_outcomes), 0)
        ts_outcomes = []
        if ts is not None:
            self.assertEqual(ts.returncode, 0,
                             f"TypeScript helper calls failed: {ts_stdout}{ts_stderr[-3000:]}")
            ts_outcomes = [line.split("\t", 2) for line in ts_out.read_text().splitlines()]
            self.assertGreater(len(ts_outcomes), 0)
        self.assertGreater(len(py.outcomes), 0)
        during = sorted(t for t in py.finished_at if restart_began <= t <= restart_ended)
        longest_gap = max(b - a for a, b in zip([restart_began] + during, during + [restart_ended]))
        print(f"python: {py.calls} calls; C++: {cpp_stdout.strip()}; "
              f"TypeScript: {ts_stdout.strip() or '-'}; restart took "
              f"{restart_ended - restart_began:.1f} s, longest gap between Python outcomes "
              f"{longest_gap:.2f} s", file=sys.stderr)
        # Leadership was handed over, not lost: an election would leave the
        # callers without an answer for an election timeout (about 1 s).
        self.assertLess(longest_gap, 0.6, "the group went without a leader")

        # No lost write: every outcome returned is stored, through the leader.
        with Client(self.addresses) as checker:
            for key, hash_hex, result in cpp_outcomes:
                self.assert_stored(checker, CPP_NAMESPACE, key, bytes.fromhex(hash_hex),
                                   json.loads(result))
            for key, hash_hex, result in ts_outcomes:
                self.assert_stored(checker, TS_NAMESPACE, key, bytes.fromhex(hash_hex),
                                   json.loads(result))
            for key, hashed, result in py.outcomes:
                self.assert_stored(checker, PY_NAMESPACE, key, hashed, result)

        self.assert_digests_equal()

    def pid(self, n: int) -> int:
        return int((self.root / f"cluster/n{n}.pid").read_text())

    def test_restart_one_node_and_refuse_without_a_majority_to_spare(self) -> None:
        before = {n: self.pid(n) for n in NODES}
        one = self.cluster("restart", "--node", "2")
        self.assertEqual(one.returncode, 0, one.stderr + self.logs())
        self.assertIn("node 2: serving again", one.stdout)
        after = {n: self.pid(n) for n in NODES}
        self.assertNotEqual(after[2], before[2])
        self.assertEqual((after[1], after[3]), (before[1], before[3]), one.stdout)

        # With node 3 down, restarting another would leave no majority.
        os.kill(after[3], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{after[3]}/status").exists() and time.monotonic() < deadline:
            if "zombie" in Path(f"/proc/{after[3]}/status").read_text():
                break
            time.sleep(0.05)
        refused = self.cluster("restart")
        self.assertNotEqual(refused.returncode, 0, refused.stdout)
        self.assertIn("node 3 is not running", refused.stderr)
        self.assertEqual((self.pid(1), self.pid(2)), (after[1], after[2]), refused.stdout)

    def assert_stored(self, client: Client, ns: str, key: str, hashed: bytes,
                      result: Any) -> None:
        again = client.begin(ns, key, hashed, owner=str(uuid.uuid4()))
        self.assertEqual(again.status, dedup_pb2.BeginResponse.DUPLICATE, f"{ns}/{key}")
        self.assertEqual(json.loads(again.result), result, f"{ns}/{key}")

    def status(self, address: str) -> Any:
        with grpc.insecure_channel(address) as channel:
            stub = self.cluster_pb2_grpc.ClusterStub(channel)
            return stub.Status(self.cluster_pb2.ClusterStatusRequest(), timeout=10)

    def assert_digests_equal(self) -> None:
        cluster_pb2, cluster_pb2_grpc = self.cluster_pb2, self.cluster_pb2_grpc
        digests: dict[str, Any] = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            digests = {}
            for address in self.addresses:
                with grpc.insecure_channel(address) as channel:
                    stub = cluster_pb2_grpc.ClusterStub(channel)
                    d = stub.Digest(cluster_pb2.DigestRequest(), timeout=10)
                    digests[address] = (d.applied_index, d.digest, d.live_records)
            if len(set(digests.values())) == 1:
                return
            time.sleep(0.2)
        self.fail(f"digests differ: {digests}")


if __name__ == "__main__":
    unittest.main()
