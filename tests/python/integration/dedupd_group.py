"""Starts a real 3-node replicated dedupd group for a test and stops it by PID.

Node N listens on 127.0.0.N (all of 127/8 is loopback on Linux) on free
ports, for clients and for Raft, with its own data directory under one temp
dir; every process's output goes to a file, and each writes its own ready
file (nN.ready.json), which tells when it serves. The binary comes from
$DEDUPD.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

from dedupd_process import _die_with_parent, wait_ready


def free_port(ip: str) -> int:
    """A port free on `ip` right now (another process could take it before
    the node binds it; the odds are small on a test machine)."""
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, node_id: int, root: Path) -> None:
        self.id = node_id
        self.ip = f"127.0.0.{node_id}"
        self.address = f"{self.ip}:{free_port(self.ip)}"
        self.raft_address = f"{self.ip}:{free_port(self.ip)}"
        self.data_dir = root / f"n{node_id}"
        self.log_path = root / f"n{node_id}.log"
        self.ready_path = root / f"n{node_id}.ready.json"
        self.process: Optional[subprocess.Popen[bytes]] = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except FileNotFoundError:
            return ""


class DedupdGroup:
    """Three dedupd processes forming one Raft group. stop() ends every one
    still running (SIGTERM, then SIGKILL after a timeout) and removes the
    data; the constructor does so itself if a node fails to start."""

    def __init__(self, size: int = 3, start_timeout_s: float = 30.0,
                 extra_flags: tuple[str, ...] = ()) -> None:
        binary = os.environ.get("DEDUPD")
        if not binary:
            raise RuntimeError("set DEDUPD to the dedupd binary")
        self._tmp = tempfile.TemporaryDirectory(prefix="dedup-py-cluster-")
        root = Path(self._tmp.name)
        self.nodes = [Node(i, root) for i in range(1, size + 1)]
        peers = ",".join(f"{n.id}={n.raft_address}={n.address}" for n in self.nodes)
        try:
            for node in self.nodes:
                with open(node.log_path, "wb") as log:
                    node.process = subprocess.Popen(
                        _die_with_parent([
                            binary, f"--node_id={node.id}", f"--peers={peers}",
                            f"--address={node.address}", f"--data_dir={node.data_dir}",
                            "--event_log=off", "--metrics_address=",
                            f"--ready_file={node.ready_path}", *extra_flags,
                        ]),
                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    )
            deadline = time.monotonic() + start_timeout_s
            for node in self.nodes:
                self._wait_listening(node, deadline)
        except BaseException:
            self.stop()
            raise

    @property
    def addresses(self) -> list[str]:
        return [node.address for node in self.nodes]

    def node_at(self, address: str) -> Node:
        for node in self.nodes:
            if node.address == address:
                return node
        raise KeyError(address)

    def _wait_listening(self, node: Node, deadline: float) -> None:
        assert node.process is not None
        ready = wait_ready(node.ready_path, node.process,
                           max(0.0, deadline - time.monotonic()), node.log,
                           name=f"node {node.id}")
        if ready["address"] != node.address:
            raise RuntimeError(f"node {node.id} serves on {ready['address']}, "
                               f"not {node.address}: {node.log()}")

    def kill(self, node: Node) -> None:
        """SIGKILL: the node dies at once, with no leadership transfer."""
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=30)
            node.process = None

    def stop(self) -> dict[int, int]:
        """SIGTERM every running node, wait (SIGKILL after 30 s); returns
        their exit codes by node id. Removes the data."""
        codes: dict[int, int] = {}
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                codes[node.id] = node.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.process.kill()
                codes[node.id] = node.process.wait()
            node.process = None
        self._tmp.cleanup()
        return codes

    def logs(self) -> str:
        return "\n".join(f"--- node {n.id} ---\n{n.log()}" for n in self.nodes)
