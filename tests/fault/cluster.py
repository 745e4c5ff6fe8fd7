"""The 3 dedupd processes of a fault run, each in its own network namespace
(see netns.py), started, signalled and restarted by PID.

Node N serves clients on 10.77.S.N:50051 and Raft on 10.77.S.N:7001 (each
namespace has its own ports, so the numbers never collide), keeps its data in
<run dir>/nN and appends its stderr to <run dir>/nN.log across restarts.

Each node runs under `setpriv --pdeathsig KILL`, which execs `ip netns exec`,
which execs dedupd: the Popen PID is dedupd's, and the node dies with this
runner even when the runner is killed with SIGKILL. Nodes must therefore be
started from the main thread (the death signal follows the thread that
forked).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Optional

import grpc

from dedup.v1 import cluster_pb2, cluster_pb2_grpc

CLIENT_PORT = 50051
RAFT_PORT = 7001
LISTENING = b"dedupd listening on "


class NodeFailure(Exception):
    """A node did not start, or exited when it should not have."""


class Node:
    def __init__(self, node_id: int, topology, run_dir: str, dedupd: str,
                 peers: str, extra_flags: list[str]) -> None:
        self.id = node_id
        self.topology = topology
        self.ns = topology.ns(node_id)
        self.ip = topology.ip(node_id)
        self.client_address = f"{self.ip}:{CLIENT_PORT}"
        self.data_dir = os.path.join(run_dir, f"n{node_id}")
        self.log_path = os.path.join(run_dir, f"n{node_id}.log")
        # The working directory: where a crash leaves its core file (with
        # the usual core_pattern "core").
        self.cwd = os.path.join(run_dir, f"n{node_id}-cwd")
        self.dedupd = dedupd
        self.peers = peers
        self.extra_flags = extra_flags
        self.proc: Optional[subprocess.Popen] = None
        self.stopped = False  # SIGSTOPped
        self.last_exit: Optional[int] = None  # of the last kill or terminate
        self.starts = 0
        self._channel = grpc.insecure_channel(
            self.client_address,
            options=[("grpc.initial_reconnect_backoff_ms", 100),
                     ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 500)])
        self._cluster = cluster_pb2_grpc.ClusterStub(self._channel)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts dedupd and waits for its "listening" line."""
        if self.running:
            raise NodeFailure(f"node {self.id} is already running")
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== fault test: start #{self.starts + 1} of node {self.id} "
                      f"at {time.time():.3f} ===\n".encode())
            offset = log.tell()
            os.makedirs(self.cwd, exist_ok=True)
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL",
                 "prlimit", "--core=unlimited",
                 "ip", "netns", "exec", self.ns, self.dedupd,
                 f"--node_id={self.id}", f"--peers={self.peers}",
                 f"--address={self.client_address}",
                 f"--data_dir={self.data_dir}",
                 "--event_log=off", "--metrics_address=",
                 # Each node is alone in a network namespace on a 10.77/16
                 # address: not loopback, so plaintext needs --insecure.
                 "--insecure",
                 # Snapshots as often as before the default went to 65536, so
                 # faults keep meeting snapshots taken and installed.
                 "--snapshot_threshold=4096",
                 *self.extra_flags],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.cwd)
        self.starts += 1
        self.stopped = False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if LISTENING in f.read():
                    return
            if self.proc.poll() is not None:
                raise NodeFailure(
                    f"node {self.id} exited with {self.proc.returncode} at start")
            time.sleep(0.05)
        raise NodeFailure(f"node {self.id} did not listen within {timeout_s} s")

    def signal(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.last_exit = self.proc.wait(timeout=30)
        self.proc = None
        self.stopped = False

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (a clean stop: a leader hands leadership over first),
        waits for the exit and returns the exit code (NodeFailure unless 0);
        SIGKILL after timeout_s."""
        if self.proc is None:
            return 0
        if self.stopped:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.last_exit = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise NodeFailure(f"node {self.id} ignored SIGTERM for {timeout_s} s")
        self.proc = None
        if self.last_exit != 0:
            raise NodeFailure(f"node {self.id} exited with {self.last_exit} "
                              f"after SIGTERM (a clean stop exits 0)")
        return self.last_exit

    def exited_unexpectedly(self) -> Optional[int]:
        """The exit code if the process is gone although nobody stopped it
        (kill and terminate forget the process they stopped)."""
        if self.proc is None:
            return None
        return self.proc.poll()

    def status(self, timeout_s: float = 0.5) -> Optional[cluster_pb2.ClusterStatusResponse]:
        if not self.running or self.stopped:
            return None
        try:
            return self._cluster.Status(cluster_pb2.ClusterStatusRequest(),
                                        timeout=timeout_s)
        except grpc.RpcError:
            return None

    def digest(self, timeout_s: float = 2.0) -> Optional[cluster_pb2.DigestResponse]:
        try:
            return self._cluster.Digest(cluster_pb2.DigestRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return None

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-lines:])

    def backtraces(self) -> str:
        """gdb's backtrace of every core this node left, if gdb is here
        (the full `thread apply all bt` goes to <core>.bt)."""
        out = []
        try:
            cores = sorted(f for f in os.listdir(self.cwd) if f.startswith("core"))
        except OSError:
            return ""
        gdb = shutil.which("gdb")
        for core in (c for c in cores if not c.endswith(".bt")):
            path = os.path.join(self.cwd, core)
            if gdb is None:
                out.append(f"core file {path} (no gdb to read it)")
                continue
            full = subprocess.run(
                [gdb, "-batch", "-ex", "bt", "-ex", "thread apply all bt",
                 self.dedupd, path], capture_output=True, text=True, timeout=300)
            with open(path + ".bt", "w") as f:
                f.write(full.stdout + full.stderr)
            crash = full.stdout.split("\nThread ")[0]
            lines: list[str] = []
            for line in crash.splitlines():
                if (line.startswith("#") or "signal" in line) and line not in lines:
                    lines.append(line)
            out.append(f"core {path} (all threads: {path}.bt):\n" + "\n".join(lines[:40]))
        return "\n".join(out)

    def close(self) -> None:
        self._channel.close()


class Cluster:
    def __init__(self, topology, run_dir: str, dedupd: str,
                 extra_flags: Optional[list[str]] = None) -> None:
        ids = range(1, topology.nodes + 1)
        peers = ",".join(
            f"{n}={topology.ip(n)}:{RAFT_PORT}={topology.ip(n)}:{CLIENT_PORT}"
            for n in ids)
        self.nodes = {n: Node(n, topology, run_dir, dedupd, peers, extra_flags or [])
                      for n in ids}
        self.topology = topology

    @property
    def addresses(self) -> list[str]:
        return [self.nodes[n].client_address for n in sorted(self.nodes)]

    def start_all(self) -> None:
        for node in self.nodes.values():
            node.start()

    def stop_all(self) -> None:
        """SIGKILL every node (cleanup); never raises."""
        for node in self.nodes.values():
            try:
                if node.running:
                    node.kill()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
            node.close()

    def leader(self) -> Optional[int]:
        """The node that reports itself leader in the highest term among the
        reachable nodes (a stopped or isolated old leader is not asked, or
        has a lower term), or None."""
        best = None
        for node in self.nodes.values():
            st = node.status()
            if st is not None and st.role == "leader":
                if best is None or st.term > best[1]:
                    best = (node.id, st.term)
        return best[0] if best else None

    def settled(self, max_lag: int) -> Optional[str]:
        """None when every node runs, one leader is known to all in one
        term and no member lags more than max_lag entries; otherwise what is
        missing."""
        statuses = {}
        for node in self.nodes.values():
            if not node.running:
                return f"node {node.id} is down"
            if node.stopped:
                return f"node {node.id} is stopped"
            st = node.status()
            if st is None:
                return f"node {node.id} does not answer Status"
            statuses[node.id] = st
        leaders = [n for n, st in statuses.items() if st.role == "leader"]
        if len(leaders) != 1:
            return f"leaders: {leaders}"
        lead = statuses[leaders[0]]
        for n, st in statuses.items():
            if st.leader_id != leaders[0] or st.term != lead.term:
                return f"node {n} sees leader {st.leader_id} term {st.term}"
        for m in lead.members:
            if m.id != lead.node_id and m.lag > max_lag:
                return f"node {m.id} lags {m.lag} entries"
        return None

    def wait_settled(self, timeout_s: float, max_lag: int = 64) -> Optional[str]:
        """Polls settled(); returns None when settled, else the last reason."""
        deadline = time.monotonic() + timeout_s
        reason = "not asked"
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                code = node.exited_unexpectedly()
                if code is not None:
                    raise NodeFailure(f"node {node.id} exited with {code}")
            reason = self.settled(max_lag)
            if reason is None:
                return None
            time.sleep(0.05)
        return reason

    def converged_digests(self, timeout_s: float = 30.0):
        """Waits until every node reports a digest at the same applied index;
        returns {id: DigestResponse} (the last seen, converged or not) and
        whether they converged."""
        deadline = time.monotonic() + timeout_s
        last = {}
        while time.monotonic() < deadline:
            last = {n: node.digest() for n, node in self.nodes.items()}
            if all(d is not None for d in last.values()) and \
                    len({d.applied_index for d in last.values()}) == 1:
                return last, True
            time.sleep(0.1)
        return last, False
