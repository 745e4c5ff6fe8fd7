"""In-process gRPC dedup nodes whose answers a test scripts, to pin how the
clients follow a leader and retry unknown outcomes. (Against a real
replicated group: tests/python/integration/test_cluster.py.)

A node answers as a follower (UNAVAILABLE, naming `leader` in the trailing
metadata `dedup-leader` if it is set) or, with `leader` None, as the leader:
each call takes the next action scripted for its method, or the default
answer when none is left. An action is a response to return, or a function
(request, context) -> response that may abort (redirect, unavailable,
unknown below).
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, Callable, Iterable, Optional

import grpc

from dedup_client import dedup_pb2, dedup_pb2_grpc

Action = Any  # a response message or Callable[[request, context], response]


def redirect(leader: str) -> Callable[[Any, grpc.ServicerContext], Any]:
    """A follower's answer: UNAVAILABLE naming the leader."""

    def act(request: Any, context: grpc.ServicerContext) -> Any:
        context.set_trailing_metadata((("dedup-leader", leader),))
        context.abort(grpc.StatusCode.UNAVAILABLE, f"not the leader; the leader is {leader}")

    return act


def unavailable(request: Any, context: grpc.ServicerContext) -> Any:
    """UNAVAILABLE naming no leader (an election)."""
    context.abort(grpc.StatusCode.UNAVAILABLE, "no leader")


def unknown(request: Any, context: grpc.ServicerContext) -> Any:
    """ABORTED with `dedup-outcome: unknown` (leadership lost after the
    proposal)."""
    context.set_trailing_metadata((("dedup-outcome", "unknown"),))
    context.abort(grpc.StatusCode.ABORTED, "leadership lost; outcome unknown")


def unimplemented(request: Any, context: grpc.ServicerContext) -> Any:
    """What a dedupd older than the method answers (nothing happened)."""
    context.abort(grpc.StatusCode.UNIMPLEMENTED, "")


def unparseable(request: Any, context: grpc.ServicerContext) -> Any:
    """What a dedupd from before CheckpointBatch answers that method (its
    interceptor took the UNIMPLEMENTED for an unparseable request)."""
    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                  "request: cannot be parsed as the request of "
                  "/dedup.v1.Dedup/CheckpointBatch (malformed protobuf, or a "
                  "string field that is not valid UTF-8)")


def aborted_items(*indexes: int) -> Callable[[Any, grpc.ServicerContext], Any]:
    """A batch answer: items at `indexes` ABORTED (outcome unknown), the
    others as default."""
    return failed_items(grpc.StatusCode.ABORTED, "outcome unknown", *indexes)


def unavailable_items(*indexes: int) -> Callable[[Any, grpc.ServicerContext], Any]:
    """A batch answer: items at `indexes` UNAVAILABLE (leadership lost before
    they were proposed), the others as default."""
    return failed_items(grpc.StatusCode.UNAVAILABLE, "not the leader", *indexes)


def failed_items(
    code: grpc.StatusCode, message: str, *indexes: int
) -> Callable[[Any, grpc.ServicerContext], Any]:
    def act(request: Any, context: grpc.ServicerContext) -> Any:
        response = _DEFAULTS[type(request).__name__](request)
        for index in indexes:
            item = response.items[index]
            item.ClearField("response")
            item.error.code = code.value[0]
            item.error.message = message
        return response

    return act


def _begin_batch(request: dedup_pb2.BeginBatchRequest) -> dedup_pb2.BeginBatchResponse:
    """STARTED, fence = the number in the key ("k7" -> 7, else 1)."""
    response = dedup_pb2.BeginBatchResponse()
    for item in request.items:
        digits = "".join(c for c in item.key if c.isdigit())
        answer = response.items.add().response
        answer.status = dedup_pb2.BeginResponse.STARTED
        answer.fence = int(digits) if digits else 1
    return response


def _complete_batch(
    request: dedup_pb2.CompleteBatchRequest,
) -> dedup_pb2.CompleteBatchResponse:
    response = dedup_pb2.CompleteBatchResponse()
    for item in request.items:
        answer = response.items.add().response
        answer.status = dedup_pb2.CompleteResponse.OK
        answer.fence = item.fence
    return response


def _checkpoint_batch(
    request: dedup_pb2.CheckpointBatchRequest,
) -> dedup_pb2.CheckpointBatchResponse:
    response = dedup_pb2.CheckpointBatchResponse()
    for item in request.items:
        answer = response.items.add().response
        answer.status = dedup_pb2.CheckpointResponse.OK
        answer.fence = item.fence
    return response


_DEFAULTS: dict[str, Callable[[Any], Any]] = {
    "BeginRequest": lambda r: dedup_pb2.BeginResponse(
        status=dedup_pb2.BeginResponse.STARTED, fence=7),
    "CompleteRequest": lambda r: dedup_pb2.CompleteResponse(
        status=dedup_pb2.CompleteResponse.OK, fence=r.fence),
    "ReleaseRequest": lambda r: dedup_pb2.ReleaseResponse(
        status=dedup_pb2.ReleaseResponse.OK, fence=r.fence),
    "RenewRequest": lambda r: dedup_pb2.RenewResponse(
        status=dedup_pb2.RenewResponse.OK, fence=r.fence),
    "GetRequest": lambda r: dedup_pb2.GetResponse(found=False),
    "ForgetRequest": lambda r: dedup_pb2.ForgetResponse(existed=True),
    "CheckpointRequest": lambda r: dedup_pb2.CheckpointResponse(
        status=dedup_pb2.CheckpointResponse.OK, fence=r.fence),
    "BeginBatchRequest": _begin_batch,
    "CompleteBatchRequest": _complete_batch,
    "CheckpointBatchRequest": _checkpoint_batch,
}


class ScriptedNode(dedup_pb2_grpc.DedupServicer):
    """One node on 127.0.0.1:<free port> (`target`); records every call as
    (method, request) in `calls`, and its metadata in `metadata`. Methods
    named in `without` answer UNIMPLEMENTED, as a dedupd older than them
    would (recorded too), unless an action is scripted for the call."""

    def __init__(self, leader: Optional[str] = None, *, without: Iterable[str] = ()) -> None:
        self.leader = leader
        self.without = frozenset(without)
        self.script: dict[str, list[Action]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.metadata: list[dict[str, str]] = []  # one per call, as `calls`
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dedup_pb2_grpc.add_DedupServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.target = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.stop(grace=None)

    def then(self, method: str, *actions: Action) -> "ScriptedNode":
        """Appends actions for `method` ("Begin", "CompleteBatch", ...)."""
        with self._lock:
            self.script.setdefault(method, []).extend(actions)
        return self

    def requests(self, method: str) -> list[Any]:
        with self._lock:
            return [request for name, request in self.calls if name == method]

    def methods(self) -> list[str]:
        with self._lock:
            return [name for name, _ in self.calls]

    def _answer(self, method: str, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            self.calls.append((method, request))
            self.metadata.append(dict(context.invocation_metadata()))
            script = self.script.get(method)
            action = script.pop(0) if script else None
            leader = self.leader
        if action is None and method in self.without:
            action = unimplemented
        if action is None:
            if leader is not None:
                action = redirect(leader) if leader else unavailable
            else:
                return _DEFAULTS[type(request).__name__](request)
        return action(request, context) if callable(action) else action

    def Begin(self, request, context):  # noqa: N802 - gRPC's names
        return self._answer("Begin", request, context)

    def Complete(self, request, context):  # noqa: N802
        return self._answer("Complete", request, context)

    def Release(self, request, context):  # noqa: N802
        return self._answer("Release", request, context)

    def Renew(self, request, context):  # noqa: N802
        return self._answer("Renew", request, context)

    def Get(self, request, context):  # noqa: N802
        return self._answer("Get", request, context)

    def Forget(self, request, context):  # noqa: N802
        return self._answer("Forget", request, context)

    def BeginBatch(self, request, context):  # noqa: N802
        return self._answer("BeginBatch", request, context)

    def CompleteBatch(self, request, context):  # noqa: N802
        return self._answer("CompleteBatch", request, context)

    def Checkpoint(self, request, context):  # noqa: N802
        return self._answer("Checkpoint", request, context)

    def CheckpointBatch(self, request, context):  # noqa: N802
        return self._answer("CheckpointBatch", request, context)
