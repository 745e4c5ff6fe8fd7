"""In-process gRPC "nodes" of a sharded cluster, to pin how the clients
route by slot: each serves dedup.v1.Dedup (recording which keys reached it)
and, unless told not to, dedup.v1.Cluster/ShardMap (a map the test sets).
(The real multi-group dedupd is tested in tests/cluster.)

Every Dedup call is answered as the key's leader would: Begin STARTED with
fence = the number in the key ("k7" -> 7), batches item by item the same
way, so a test can tell each answer's item. `trailers` are sent on every
answer (e.g. "dedup-shard-epoch"); `redirect_to`, when set, makes the node
answer UNAVAILABLE naming that leader instead.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, Optional, Sequence

import grpc

from dedup_client import dedup_pb2, dedup_pb2_grpc
from dedup_client._proto import cluster_pb2, cluster_pb2_grpc
from dedup_client.slot import SLOT_COUNT, slot_of

NAMESPACE = "ns"


def fence_of(key: str) -> int:
    digits = "".join(c for c in key if c.isdigit())
    return int(digits) if digits else 1


class ShardNode(dedup_pb2_grpc.DedupServicer, cluster_pb2_grpc.ClusterServicer):
    """One node on 127.0.0.1:<free port> (`target`). serve_map False: no
    Cluster service (UNIMPLEMENTED, as a single dedupd answers);
    map_error: ShardMap answers that code instead of the map."""

    def __init__(self, *, serve_map: bool = True,
                 map_error: Optional[grpc.StatusCode] = None) -> None:
        self.map: Optional[cluster_pb2.ShardMapResponse] = None
        self.map_error = map_error
        self.map_calls = 0
        self.trailers: tuple[tuple[str, str], ...] = ()
        self.redirect_to: Optional[str] = None
        self.calls: list[tuple[str, str]] = []  # (method, key), items one by one
        self.rpcs: list[str] = []  # the method of each RPC
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dedup_pb2_grpc.add_DedupServicer_to_server(self, self._server)
        if serve_map:
            cluster_pb2_grpc.add_ClusterServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.target = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.stop(grace=None)

    def keys(self, method: Optional[str] = None) -> list[str]:
        with self._lock:
            return [k for m, k in self.calls if method is None or m == method]

    def rpc_count(self, method: str) -> int:
        with self._lock:
            return self.rpcs.count(method)

    def ShardMap(self, request, context):  # noqa: N802 - gRPC's names
        with self._lock:
            self.map_calls += 1
            shard_map, error = self.map, self.map_error
        if error is not None or shard_map is None:
            context.abort(error or grpc.StatusCode.UNAVAILABLE, "no map")
        return shard_map

    def _record(self, method: str, keys: Sequence[str], context: grpc.ServicerContext) -> None:
        with self._lock:
            self.calls.extend((method, k) for k in keys)
            self.rpcs.append(method)
            trailers, redirect_to = self.trailers, self.redirect_to
        if redirect_to is not None:
            context.set_trailing_metadata(trailers + (("dedup-leader", redirect_to),))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"not the leader: {redirect_to}")
        if trailers:
            context.set_trailing_metadata(trailers)

    def Begin(self, request, context):  # noqa: N802
        self._record("Begin", [request.key], context)
        return dedup_pb2.BeginResponse(status=dedup_pb2.BeginResponse.STARTED,
                                       fence=fence_of(request.key))

    def Complete(self, request, context):  # noqa: N802
        self._record("Complete", [request.key], context)
        return dedup_pb2.CompleteResponse(status=dedup_pb2.CompleteResponse.OK,
                                          fence=request.fence)

    def Get(self, request, context):  # noqa: N802
        self._record("Get", [request.key], context)
        return dedup_pb2.GetResponse(found=False)

    def BeginBatch(self, request, context):  # noqa: N802
        self._record("BeginBatch", [i.key for i in request.items], context)
        response = dedup_pb2.BeginBatchResponse()
        for item in request.items:
            answer = response.items.add().response
            answer.status = dedup_pb2.BeginResponse.STARTED
            answer.fence = fence_of(item.key)
        return response

    def CompleteBatch(self, request, context):  # noqa: N802
        self._record("CompleteBatch", [i.key for i in request.items], context)
        response = dedup_pb2.CompleteBatchResponse()
        for item in request.items:
            answer = response.items.add().response
            answer.status = dedup_pb2.CompleteResponse.OK
            answer.fence = item.fence
        return response


def shard_map(epoch: int, leaders: Sequence[str],
              replicas: Optional[Sequence[Sequence[str]]] = None
              ) -> cluster_pb2.ShardMapResponse:
    """len(leaders) groups splitting the slots evenly (as FoundingLayout
    does); group g led by leaders[g], its replicas replicas[g] (default:
    its leader alone)."""
    count = len(leaders)
    response = cluster_pb2.ShardMapResponse(epoch=epoch, slot_count=SLOT_COUNT)
    for g, leader in enumerate(leaders):
        group = response.groups.add(
            group_id=g, first_slot=g * SLOT_COUNT // count,
            end_slot=(g + 1) * SLOT_COUNT // count, leader_node_id=g + 1,
            leader_address=leader)
        for n, address in enumerate(replicas[g] if replicas else [leader]):
            group.replicas.add(node_id=n + 1, client_address=address)
    return response


def group_of(key: str, groups: int) -> int:
    """The group (of `groups` even ranges) of NAMESPACE/key."""
    slot = slot_of(NAMESPACE, key)
    return next(g for g in range(groups)
                if g * SLOT_COUNT // groups <= slot < (g + 1) * SLOT_COUNT // groups)


def keys_per_group(groups: int, per_group: int) -> list[str]:
    """Keys "k1", "k2", ... until every group has per_group of them, in the
    order found (so groups interleave)."""
    counts = [0] * groups
    keys = []
    i = 1
    while min(counts) < per_group:
        key = f"k{i}"
        g = group_of(key, groups)
        if counts[g] < per_group:
            counts[g] += 1
            keys.append(key)
        i += 1
    return keys


def key_in(group: int, groups: int, nth: int = 0) -> str:
    """The nth key "k<i>" of `group` (of `groups`)."""
    return [k for k in keys_per_group(groups, nth + 1) if group_of(k, groups) == group][nth]
