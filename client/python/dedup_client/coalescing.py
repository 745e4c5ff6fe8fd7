"""CoalescingClient: the concurrent Begins, Completes and Checkpoints of one
process go as BeginBatch, CompleteBatch and CheckpointBatch calls, so N
threads cost the server a few RPCs instead of N.

A call leaves at once while fewer than max_batches_in_flight batches of its
kind are outstanding; otherwise it joins the next batch, which leaves the
moment one returns. A lone caller pays no added delay and batches grow with
the load: the server's per-RPC cost is what bounds unary throughput, and its
durable writes already share fsyncs. A batch is closed at max_batch_items,
or before its requests reach batch.MAX_BATCH_BYTES (3 MiB, under gRPC's
4 MiB message limit: a checkpoint alone may carry 64 KiB of data).

Each call answers as the Client's would: the server's response, or a
grpc.RpcError with the unary call's code and details (an item the server
refused raises DedupRpcError with "key: ...", without the batch's "items[i]."
prefix; a failed batch raises a DedupRpcError with the batch's code and
details to each caller, its own object, with the batch's error as
__cause__). Batches use the Client's channels, leader, deadline, attempts
and backoff: a follower's redirect (UNAVAILABLE with `dedup-leader`) is
followed at once, at most max_leader_hops times per attempt and within its
deadline; other UNAVAILABLEs are retried with the same owners at the next
address. Items the server refused with UNAVAILABLE (nothing happened: it
stopped leading, or is shutting down) and items whose outcome is unknown
(ABORTED, or the whole batch ABORTED with `dedup-outcome: unknown`; those
that may be resent, see dedup_client.outcome) go again as a batch of their
own; an item whose outcome is still unknown when the attempts run out (or
that may not be resent) raises DedupRpcError(ABORTED, outcome_unknown=True).
Begins refused only because the answer already held the server's
--max_batch_response_bytes of stored results go again at once, without
spending an attempt, in batches of at most as many items as that answer held
results (see _Lane._settle_items).
Every retry waits its backoff delay on a timer thread, never on a gRPC
thread. A batch refused with RESOURCE_EXHAUSTED carrying a RetryInfo (a
tenant over its limits) goes again whole after exactly that delay (capped at
30 s), as an attempt, while attempts remain; then each caller gets the
refusal. One refused with RESOURCE_EXHAUSTED without it (a message size limit
on either side) goes again item by item. All resend each Begin with its owner,
so give every Begin one (an anonymous Begin resent after the server applied
it answers IN_USE).

Begins that wait (wait_ms > 0) cannot be batched and go through the Client;
release, renew, get and forget do too, so a CoalescingClient can stand in for
a Client anywhere, with_idempotency included (its claim.checkpoint then joins
the CheckpointBatch calls). A checkpoint resent after an unknown outcome is
harmless (the same fence, step and data again), so checkpoints are retried
like Completes. A server older than CheckpointBatch answers it UNIMPLEMENTED:
that batch's checkpoints then go as unary Checkpoints through the Client
(from a worker thread, never a gRPC thread), and so do all later ones of this
CoalescingClient (it remembers; a new one asks again).

Thread-safe: share one per process. The *_future methods never block; the
others block the calling thread. Callbacks added to those futures usually run
on the channel's one gRPC thread (otherwise on a retry timer's thread or the
thread of a call whose send failed at once): while one blocks, no answer
arrives on that channel at all. So a callback must not block, nor call this
client's blocking methods, close() or with_idempotency; chain further calls
with the *_future methods instead.

close() refuses new begin/complete/checkpoint calls and waits until every
earlier one was answered; it then closes the Client only if it made it (from
a target).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, Sequence, TypeVar, Union

from dedup_client._lane import _Lane, _Outstanding, _settle
from dedup_client._proto import dedup_pb2
from dedup_client.client import Client
from dedup_client.errors import rpc_code
from dedup_client.messages import begin_request, checkpoint_request, complete_request
from dedup_client.outcome import is_outcome_unknown, outcome_unknown_error

_Answer = TypeVar("_Answer")

# The server refuses batches larger than its --max_batch_items, 1000 by
# default.
_MAX_ITEMS_LIMIT = 1000

# Threads that send checkpoints unary when the server lacks CheckpointBatch:
# only the batches that found out and checkpoint_future calls use them
# (a blocking checkpoint() then sends on its caller's thread).
_FALLBACK_THREADS = 8


class CoalescingClient:
    """Batches one process's concurrent Begins, Completes and Checkpoints;
    see the module docstring."""

    def __init__(
        self,
        client: Union[str, Sequence[str], Client, None] = None,
        *,
        max_batch_items: int = 256,
        max_batches_in_flight: int = 2,
        **client_options: Any,
    ) -> None:
        """client: supplies the channels, leader, deadline, attempts and
        backoff; a Client is shared (left open by close()), a "host:port"
        target or a list of them gets a Client(target, **client_options) of
        its own (e.g. tls=TlsConfig(...), token=..., deadline_s=...; the
        batches carry its token like every call); None: a Client of
        DEDUP_ADDRESS and the other DEDUP_* variables.
        max_batch_items: 1..1000 items per batch.
        max_batches_in_flight: batches of one kind (Begin, Complete or
        Checkpoint) on the wire at once; 1 gives the largest batches, more
        lets a batch leave while the server still works on the previous
        one."""
        if not 1 <= max_batch_items <= _MAX_ITEMS_LIMIT:
            raise ValueError(f"max_batch_items must be in 1..{_MAX_ITEMS_LIMIT}")
        if max_batches_in_flight < 1:
            raise ValueError("max_batches_in_flight must be at least 1")
        self._owns_client = not isinstance(client, Client)
        if not self._owns_client and client_options:
            raise ValueError(
                "client options (" + ", ".join(sorted(client_options)) + ") go to "
                "the Client given, not to CoalescingClient")
        self.client = (client if isinstance(client, Client)
                       else Client(client, **client_options))
        self._outstanding = _Outstanding()
        self._begins: _Lane[dedup_pb2.BeginResponse] = _Lane(
            "BeginBatch", dedup_pb2.BeginBatchRequest,
            self.client, max_batch_items, max_batches_in_flight, self._outstanding,
        )
        self._completes: _Lane[dedup_pb2.CompleteResponse] = _Lane(
            "CompleteBatch", dedup_pb2.CompleteBatchRequest,
            self.client, max_batch_items, max_batches_in_flight, self._outstanding,
        )
        self._checkpoints: _Lane[dedup_pb2.CheckpointResponse] = _Lane(
            "CheckpointBatch", dedup_pb2.CheckpointBatchRequest,
            self.client, max_batch_items, max_batches_in_flight, self._outstanding,
            fallback=self._hand_off_checkpoint,
        )
        self._executor_lock = threading.Lock()
        self._executor: Optional[ThreadPoolExecutor] = None  # guarded by _executor_lock

    def close(self, timeout_s: Optional[float] = None) -> bool:
        """Refuses new begin/complete/checkpoint calls, waits until every
        earlier one is answered (at most timeout_s; None: no limit), and
        closes the Client if this CoalescingClient made it (else the Client,
        and the calls that go through it, stay usable). False if calls were
        still outstanding at the timeout."""
        answered = self._outstanding.close_and_wait(timeout_s)
        with self._executor_lock:
            executor = self._executor
        if executor is not None:
            # Its calls were waited for above (after a timeout, those still
            # queued run; a later hand-off is refused, failing its caller).
            executor.shutdown(wait=False)
        if self._owns_client:
            self.client.close()
        return answered

    def __enter__(self) -> "CoalescingClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin_future(
        self,
        namespace: str,
        key: str,
        args_hash: bytes = b"",
        *,
        owner: str = "",
        lease_ms: int = 0,
        ttl_s: int = 0,
        accept_rerun: bool = False,
    ) -> "Future[dedup_pb2.BeginResponse]":
        """Queues a Begin (no wait); the future holds the BeginResponse or
        raises the grpc.RpcError its unary Begin would have."""
        return self._begins.submit(begin_request(
            namespace, key, args_hash, owner=owner, lease_ms=lease_ms, ttl_s=ttl_s,
            accept_rerun=accept_rerun))

    def begin(
        self,
        namespace: str,
        key: str,
        args_hash: bytes = b"",
        *,
        owner: str = "",
        lease_ms: int = 0,
        ttl_s: int = 0,
        wait_ms: int = 0,
        accept_rerun: bool = False,
    ) -> dedup_pb2.BeginResponse:
        """Client.begin, batched unless it waits (wait_ms > 0)."""
        if wait_ms > 0:
            return self.client.begin(
                namespace, key, args_hash, owner=owner, lease_ms=lease_ms,
                ttl_s=ttl_s, wait_ms=wait_ms, accept_rerun=accept_rerun,
            )
        return self.begin_future(
            namespace, key, args_hash, owner=owner, lease_ms=lease_ms, ttl_s=ttl_s,
            accept_rerun=accept_rerun,
        ).result()

    def complete_future(
        self,
        namespace: str,
        key: str,
        fence: int,
        outcome: int,
        result: bytes = b"",
        *,
        ttl_s: int = 0,
    ) -> "Future[dedup_pb2.CompleteResponse]":
        """Queues a Complete; the future holds the CompleteResponse or raises
        the grpc.RpcError its unary Complete would have."""
        return self._completes.submit(complete_request(
            namespace, key, fence, outcome, result, ttl_s=ttl_s))

    def complete(
        self,
        namespace: str,
        key: str,
        fence: int,
        outcome: int,
        result: bytes = b"",
        *,
        ttl_s: int = 0,
    ) -> dedup_pb2.CompleteResponse:
        """Client.complete, batched."""
        return self.complete_future(
            namespace, key, fence, outcome, result, ttl_s=ttl_s
        ).result()

    def release(self, namespace: str, key: str, fence: int) -> dedup_pb2.ReleaseResponse:
        return self.client.release(namespace, key, fence)

    def renew(
        self, namespace: str, key: str, fence: int, *, lease_ms: int = 0
    ) -> dedup_pb2.RenewResponse:
        return self.client.renew(namespace, key, fence, lease_ms=lease_ms)

    def checkpoint_future(
        self, namespace: str, key: str, fence: int, step: str, data: bytes = b"",
        *, lease_ms: int = 0,
    ) -> "Future[dedup_pb2.CheckpointResponse]":
        """Queues a Checkpoint; the future holds the CheckpointResponse or
        raises the grpc.RpcError its unary Checkpoint would have. (Against a
        server without CheckpointBatch it is sent unary from a worker
        thread.)"""
        request = checkpoint_request(namespace, key, fence, step, data, lease_ms=lease_ms)
        if not self._checkpoints.batch_unimplemented:
            return self._checkpoints.submit(request)
        future = self._outstanding.new_future()
        try:
            self._hand_off_checkpoint(request, future, False)
        except Exception as error:  # noqa: BLE001 - closed meanwhile: the caller's
            _settle(future, error=error)
        return future

    def checkpoint(
        self, namespace: str, key: str, fence: int, step: str, data: bytes = b"",
        *, lease_ms: int = 0,
    ) -> dedup_pb2.CheckpointResponse:
        """Client.checkpoint, batched (unary, on this thread, once the server
        answered CheckpointBatch UNIMPLEMENTED)."""
        request = checkpoint_request(namespace, key, fence, step, data, lease_ms=lease_ms)
        if not self._checkpoints.batch_unimplemented:
            return self._checkpoints.submit(request).result()
        future = self._outstanding.new_future()
        self._checkpoint_alone(request, future, False)
        return future.result()

    def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        return self.client.get(namespace, key)

    def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        return self.client.forget(namespace, key)

    def _hand_off_checkpoint(
        self, request: dedup_pb2.CheckpointRequest, future: Future, unknown: bool
    ) -> None:
        """The checkpoints lane's fallback: sends `request` unary from a worker
        thread. Never blocks (it runs on gRPC threads). Raises RuntimeError
        once close() shut the workers down."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    _FALLBACK_THREADS, thread_name_prefix="dedup-checkpoint")
            executor = self._executor
        executor.submit(self._checkpoint_alone, request, future, unknown)

    def _checkpoint_alone(
        self, request: dedup_pb2.CheckpointRequest, future: Future, unknown: bool
    ) -> None:
        """Sends `request` as a unary Checkpoint through the Client (with its
        retries) and answers `future`; blocks. unknown: an earlier send's
        outcome is unknown, so a failure must not read as "nothing
        happened"."""
        try:
            response = self.client.checkpoint(
                request.namespace, request.key, request.fence, request.step,
                request.data, lease_ms=request.lease_ms)
        except Exception as error:  # noqa: BLE001 - handed to the caller
            if unknown and rpc_code(error) is not None and not is_outcome_unknown(error):
                error = outcome_unknown_error("Checkpoint", error)
            _settle(future, error=error)
        else:
            _settle(future, result=response)
