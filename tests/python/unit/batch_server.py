"""An in-process gRPC server whose BeginBatch/CompleteBatch follow a test's
script, so the coalescing client's batching, retries and error mapping can
be pinned. (Against the real dedupd: tests/python/integration.)"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Callable, Optional

import grpc

from dedup_client import dedup_pb2, dedup_pb2_grpc

BeginBatchHandler = Callable[
    [dedup_pb2.BeginBatchRequest, grpc.ServicerContext], dedup_pb2.BeginBatchResponse
]


def started_for_each(
    request: dedup_pb2.BeginBatchRequest, context: grpc.ServicerContext
) -> dedup_pb2.BeginBatchResponse:
    """STARTED with a fence derived from the key ("k7" -> 7); a key without
    a number is refused as the server refuses a bad field."""
    response = dedup_pb2.BeginBatchResponse()
    for index, item in enumerate(request.items):
        digits = "".join(c for c in item.key if c.isdigit())
        answer = response.items.add()
        if digits:
            answer.response.status = dedup_pb2.BeginResponse.STARTED
            answer.response.fence = int(digits)
        else:
            answer.error.code = grpc.StatusCode.INVALID_ARGUMENT.value[0]
            answer.error.message = f"items[{index}].key: no number"
    return response


class ScriptedBatchServer(dedup_pb2_grpc.DedupServicer):
    """Records every batch; answers BeginBatch with `begin_batch` (default
    started_for_each) and CompleteBatch with OK for each item. After hold(),
    every BeginBatch waits until release() (`holding` is set once one does)."""

    def __init__(self, begin_batch: BeginBatchHandler = started_for_each) -> None:
        self.begin_batch = begin_batch
        self.begin_batches: list[list[dedup_pb2.BeginRequest]] = []
        self.complete_batches: list[list[dedup_pb2.CompleteRequest]] = []
        self._lock = threading.Lock()
        self._held: Optional[threading.Event] = None
        self.holding = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dedup_pb2_grpc.add_DedupServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.target = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.release()
        self._server.stop(grace=None)

    def hold(self) -> None:
        with self._lock:
            self._held = threading.Event()

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held.set()

    def batch_sizes(self) -> list[int]:
        with self._lock:
            return [len(batch) for batch in self.begin_batches]

    def BeginBatch(self, request, context):  # noqa: N802 - gRPC's name
        with self._lock:
            self.begin_batches.append(list(request.items))
            held = self._held
        if held is not None:
            self.holding.set()
            held.wait(timeout=30)
        return self.begin_batch(request, context)

    def CompleteBatch(self, request, context):  # noqa: N802 - gRPC's name
        with self._lock:
            self.complete_batches.append(list(request.items))
        response = dedup_pb2.CompleteBatchResponse()
        for _ in request.items:
            response.items.add().response.status = dedup_pb2.CompleteResponse.OK
        return response
