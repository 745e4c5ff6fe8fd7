"""The dedupd processes of a fault run (3 by default), each in its own
network namespace (see netns.py), started, signalled and restarted by PID
(history.process).

With --groups > 1 (a sharded cluster: the nodes get --groups and
--replication_factor through their extra flags) the cluster reads the
layout once from Cluster.ShardMap at the start, then follows the moves
itself (start_move, moved: a node's ShardMap is not authoritative for
groups it does not host), and every question (status, leader, settling)
is asked per group, of that group's members, with group_id; digests are
asked of every node, to see where each group lives. Group g >= 1 keeps
its data in nN/groups/<g>/.

Node N serves clients on 10.77.S.N:50051 and Raft on 10.77.S.N:7001 (each
namespace has its own ports, so the numbers never collide), keeps its data in
<run dir>/nN (--data_dir: RocksDB in state/, libraft's log and snapshots in
raft/), appends its stderr to <run dir>/nN.log across restarts and writes its
ready file to <run dir>/nN.ready.json. With power loss on (power.py), <run
dir>/nN is a powerfs mount of <run dir>/nN.backing, mounted before the node
starts.

Each node runs as `ip netns exec NS dedupd ...`, which execs dedupd, under
history.process's setpriv and prlimit: the Popen PID is dedupd's, and the
node dies with this runner even when the runner is killed with SIGKILL.
Nodes must therefore be started from the main thread (the death signal
follows the thread that forked).

`ip netns exec` also gives the node a mount namespace of its own: a copy of
the root one when the node starts (the root mount is private here, so
nothing propagates either way afterwards). A powerfs mount made before the
start is therefore what the node sees; after a power cut the node keeps the
dead mount (ENOTCONN) until it is killed, and the next start sees the new
mount.
"""

from __future__ import annotations

import os
import time
from typing import Optional

import grpc

from dedup.v1 import cluster_pb2, cluster_pb2_grpc
from history.process import DedupdProcess, NodeFailure  # noqa: F401 - re-exported

CLIENT_PORT = 50051
RAFT_PORT = 7001


class Node(DedupdProcess):
    def __init__(self, node_id: int, topology, run_dir: str, dedupd: str,
                 peers: str, extra_flags: list[str], power=None) -> None:
        # The working directory: where a crash leaves its core file (with
        # the usual core_pattern "core").
        super().__init__(f"node {node_id}", dedupd,
                         data_dir=os.path.join(run_dir, f"n{node_id}"),
                         log_path=os.path.join(run_dir, f"n{node_id}.log"),
                         ready_path=os.path.join(run_dir, f"n{node_id}.ready.json"),
                         cwd=os.path.join(run_dir, f"n{node_id}-cwd"),
                         extra_flags=extra_flags)
        self.id = node_id
        self.topology = topology
        self.ns = topology.ns(node_id)
        self.ip = topology.ip(node_id)
        self.client_address = f"{self.ip}:{CLIENT_PORT}"
        self.peers = peers
        # A PowerFs mounted at data_dir (power.py), or None.
        self.power = power
        self._channel = grpc.insecure_channel(
            self.client_address,
            options=[("grpc.initial_reconnect_backoff_ms", 100),
                     ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 500)])
        self._cluster = cluster_pb2_grpc.ClusterStub(self._channel)

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns, self.dedupd,
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
                *self.extra_flags]

    def start(self, timeout_s: float = 30.0) -> dict:
        if self.power is not None and not self.power.running:
            self.power.start()  # power back on: mount what survived
        ready = super().start(timeout_s)
        if ready["address"] != self.client_address:
            raise NodeFailure(f"node {self.id} serves on {ready['address']}, "
                              f"not {self.client_address}")
        return ready

    def status(self, timeout_s: float = 0.5,
               group: int = 0) -> Optional[cluster_pb2.ClusterStatusResponse]:
        if not self.running or self.stopped:
            return None
        try:
            return self._cluster.Status(cluster_pb2.ClusterStatusRequest(group_id=group),
                                        timeout=timeout_s)
        except grpc.RpcError:
            return None

    def digest(self, timeout_s: float = 2.0,
               group: int = 0) -> Optional[cluster_pb2.DigestResponse]:
        return self.digest_or_code(timeout_s, group)[0]

    def digest_or_code(self, timeout_s: float = 2.0, group: int = 0):
        """(DigestResponse, None), or (None, the error's code name): NOT_FOUND
        when this node hosts no replica of `group`."""
        try:
            return self._cluster.Digest(cluster_pb2.DigestRequest(group_id=group),
                                        timeout=timeout_s), None
        except grpc.RpcError as e:
            return None, e.code().name

    def shard_map(self, timeout_s: float = 2.0) -> Optional[cluster_pb2.ShardMapResponse]:
        if not self.running or self.stopped:
            return None
        try:
            return self._cluster.ShardMap(cluster_pb2.ShardMapRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return None

    def transfer(self, group: int, to: int, timeout_s: float = 5.0) -> Optional[int]:
        """Asks this node (the group's leader) to hand the group's
        leadership to node `to`; the leader afterwards, or None on error."""
        try:
            return self._cluster.TransferLeadership(
                cluster_pb2.TransferLeadershipRequest(node_id=to, group_id=group),
                timeout=timeout_s).leader_id
        except grpc.RpcError:
            return None

    def close(self) -> None:
        self._channel.close()


class Cluster:
    def __init__(self, topology, run_dir: str, dedupd: str,
                 extra_flags: Optional[list[str]] = None,
                 make_power=None) -> None:
        """make_power(node_id, data_dir): the PowerFs to mount at the node's
        data dir, or None (no power loss)."""
        ids = range(1, topology.nodes + 1)
        peers = ",".join(
            f"{n}={topology.ip(n)}:{RAFT_PORT}={topology.ip(n)}:{CLIENT_PORT}"
            for n in ids)
        self.nodes = {}
        for n in ids:
            data_dir = os.path.join(run_dir, f"n{n}")
            power = make_power(n, data_dir) if make_power is not None else None
            self.nodes[n] = Node(n, topology, run_dir, dedupd, peers,
                                 extra_flags or [], power)
        self.topology = topology
        # Group id -> its replicas' node ids; one group of every node until
        # load_layout() reads a sharded cluster's map, then the map's, with
        # every completed move applied (moved()). Each list is replaced,
        # never changed in place (a mover thread replaces them).
        self.groups: dict[int, list[int]] = {0: sorted(self.nodes)}
        # Group id -> (from, to) of the move under way, if any.
        self.moving: dict[int, tuple[int, int]] = {}
        self.sharded = False
        self.slots = None  # history.slots.SlotTable once sharded

    def load_layout(self, timeout_s: float = 30.0) -> None:
        """Reads the shard map from the first node that answers: the groups,
        their replicas and slot ranges (NodeFailure if none does)."""
        from history.slots import SlotTable
        deadline = time.monotonic() + timeout_s
        while True:
            for node in self.nodes.values():
                m = node.shard_map()
                if m is not None and m.groups:
                    self.groups = {g.group_id: sorted(r.node_id for r in g.replicas)
                                   for g in m.groups}
                    self.slots = SlotTable([(g.first_slot, g.end_slot, g.group_id)
                                            for g in m.groups])
                    self.sharded = len(self.groups) > 1
                    return
            if time.monotonic() > deadline:
                raise NodeFailure(f"no node answered Cluster.ShardMap in {timeout_s} s")
            time.sleep(0.1)

    def members(self, group: int) -> list[int]:
        """The nodes that may hold a replica of `group` now: its replicas,
        and during a move the node it moves to."""
        move = self.moving.get(group)
        return sorted(set(self.groups[group]) | ({move[1]} if move else set()))

    def start_move(self, group: int, src: int, dst: int) -> None:
        self.moving[group] = (src, dst)

    def moved(self, group: int, replicas: list[int]) -> None:
        """A move of `group` completed: its replicas are now `replicas`."""
        self.groups[group] = sorted(replicas)
        self.moving.pop(group, None)

    def group_dir_exists(self, node_id: int, group: int) -> bool:
        """Whether node_id's data dir holds any of `group`'s data (group 0
        in nN/raft and nN/state, group g in nN/groups/g): a node hosts at
        start the groups whose Raft directory exists, and a dropped replica
        leaves none."""
        data = self.nodes[node_id].data_dir
        if group != 0:
            return os.path.isdir(os.path.join(data, "groups", str(group)))
        return any(os.path.isdir(os.path.join(data, d)) for d in ("raft", "state"))

    def group_of(self, key: str) -> int:
        """The group holding `key` of the workload's namespace (0 unsharded)."""
        from history.workload import NAMESPACE
        return 0 if self.slots is None else self.slots.group_of(NAMESPACE, key)

    def hosted(self, node_id: int) -> list[int]:
        """The groups node_id holds a replica of."""
        return [g for g, ids in sorted(self.groups.items()) if node_id in ids]

    @property
    def addresses(self) -> list[str]:
        return [self.nodes[n].client_address for n in sorted(self.nodes)]

    def start_all(self) -> None:
        for node in self.nodes.values():
            node.start()

    def stop_all(self) -> None:
        """SIGKILL every node, then unmount its powerfs cleanly (cleanup);
        never raises."""
        for node in self.nodes.values():
            try:
                if node.running:
                    node.kill()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
            node.close()
        for node in self.nodes.values():
            if node.power is None:
                continue
            try:
                node.power.stop()
            except Exception:  # noqa: BLE001 - cleanup goes on
                try:
                    node.power.kill()
                except Exception:  # noqa: BLE001
                    pass

    @property
    def mounted(self) -> list[str]:
        """The nodes' data dirs still mounted (none after stop_all)."""
        return [n.data_dir for n in self.nodes.values()
                if n.power is not None and os.path.ismount(n.data_dir)]

    def leader(self, group: int = 0) -> Optional[int]:
        """The replica of `group` that reports itself leader in the highest
        term among the reachable ones (a stopped or isolated old leader is
        not asked, or has a lower term), or None."""
        best = None
        for n in self.members(group):
            st = self.nodes[n].status(group=group)
            if st is not None and st.role == "leader":
                if best is None or st.term > best[1]:
                    best = (n, st.term)
        return best[0] if best else None

    def leaders(self) -> dict[int, Optional[int]]:
        """Group id -> leader(group)."""
        return {g: self.leader(g) for g in sorted(self.groups)}

    def settled(self, max_lag: int) -> Optional[str]:
        """None when every node runs and, in every group, one leader is
        known to all replicas in one term and no member lags more than
        max_lag entries; otherwise what is missing."""
        for node in self.nodes.values():
            if not node.running:
                return f"node {node.id} is down"
            if node.stopped:
                return f"node {node.id} is stopped"
        for group in sorted(self.groups):
            reason = self._group_settled(group, max_lag)
            if reason is not None:
                return reason if not self.sharded else f"group {group}: {reason}"
        return None

    def _group_settled(self, group: int, max_lag: int) -> Optional[str]:
        """Settled: one leader among the group's members, its voters the
        group's replicas (during a move: some of the old and new ones), and
        every member of its configuration that it replicates to (voters and
        standbys) answering, naming it in its term and caught up. Not asked
        to agree: a node the configuration left (a moved replica not yet
        dropped), and a spare (a move's newcomer before its promotion, left
        so by an interrupted move until the move is run again: libraft
        sends a spare nothing)."""
        moving = group in self.moving
        statuses = {}
        for n in self.members(group):
            st = self.nodes[n].status(group=group)
            if st is None:
                if moving:  # the move's nodes: hosting it not yet, or no more
                    continue
                return f"node {n} does not answer Status"
            statuses[n] = st
        leaders = [n for n, st in statuses.items() if st.role == "leader"]
        if len(leaders) != 1:
            return f"leaders: {leaders}"
        lead = statuses[leaders[0]]
        voters = sorted(m.id for m in lead.members if m.role == "voter")
        if not moving and voters != self.groups[group]:
            return f"voters {voters}, not the replicas {self.groups[group]}"
        for m in lead.members:
            if m.role == "spare":
                continue
            st = statuses.get(m.id)
            if st is None:
                return f"node {m.id} ({m.role}) does not answer Status"
            if st.leader_id != leaders[0] or st.term != lead.term:
                return f"node {m.id} sees leader {st.leader_id} term {st.term}"
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

    def converged_digests(self, timeout_s: float = 30.0, group: int = 0):
        """Waits until every replica of `group` reports a digest at the same
        applied index; returns {id: DigestResponse} (the last seen,
        converged or not) and whether they converged. Sharded: every node
        is asked, and the replicas are the nodes that answer (a node
        answering NOT_FOUND hosts none; any other error is waited out), so
        that where the group lives is seen, not assumed; the third value is
        the nodes that answered NOT_FOUND."""
        deadline = time.monotonic() + timeout_s
        asked = sorted(self.nodes) if self.sharded else self.groups[group]
        last, absent = {}, []
        while time.monotonic() < deadline:
            answers = {n: self.nodes[n].digest_or_code(group=group) for n in asked}
            absent = [n for n, (_, code) in answers.items() if code == "NOT_FOUND"]
            last = {n: d for n, (d, _) in answers.items() if n not in absent}
            if last and all(d is not None for d in last.values()) and \
                    len({d.applied_index for d in last.values()}) == 1:
                return last, True, absent
            time.sleep(0.1)
        return last, False, absent
