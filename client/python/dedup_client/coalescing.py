"""CoalescingClient: the concurrent Begins and Completes of one process go as
BeginBatch and CompleteBatch calls, so N threads cost the server a few RPCs
instead of N.

A call leaves at once while fewer than max_batches_in_flight batches of its
kind are outstanding; otherwise it joins the next batch, which leaves the
moment one returns. A lone caller pays no added delay and batches grow with
the load: the server's per-RPC cost is what bounds unary throughput, and its
durable writes already share fsyncs.

Each call answers as the Client's would: the server's response, or a
grpc.RpcError with the unary call's code and details (an item the server
refused raises DedupRpcError with "key: ...", without the batch's "items[i]."
prefix; a failed batch raises a DedupRpcError with the batch's code and
details to each caller, its own object, with the batch's error as
__cause__). One difference: an item the server refuses with UNAVAILABLE (it
is shutting down) is not retried, where a unary call would be. Batches
use the Client's deadline, attempts and backoff, and are retried on
UNAVAILABLE with the same owners; a batch refused with RESOURCE_EXHAUSTED (a
message size limit on either side) goes again item by item. Both resend each
Begin with its owner, so give every Begin one (an anonymous Begin resent after
the server applied it answers IN_USE).

Begins that wait (wait_ms > 0) cannot be batched and go through the Client;
release, renew, get and forget do too, so a CoalescingClient can stand in for
a Client anywhere, with_idempotency included.

Thread-safe: share one per process. The *_future methods never block; the
others block the calling thread. Callbacks added to those futures usually run
on the channel's one gRPC thread (otherwise on a retry timer's thread or the
thread of a call whose send failed at once): while one blocks, no answer
arrives on that channel at all. So a callback must not block, nor call this
client's blocking methods, close() or with_idempotency; chain further calls
with the *_future methods instead.

close() refuses new begin/complete calls and waits until every earlier one
was answered; it then closes the Client only if it made it (from a target).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Generic, Optional, TypeVar, Union

import grpc

from dedup_client._proto import dedup_pb2
from dedup_client.batch import MAX_BATCH_BYTES, as_unary_error, item_results
from dedup_client.client import Client, is_retryable_rpc_error, rpc_code
from dedup_client.errors import DedupRpcError

_Answer = TypeVar("_Answer")

# The server refuses batches larger than its --max_batch_items, 1000 by
# default.
_MAX_ITEMS_LIMIT = 1000


class CoalescingClient:
    """Batches one process's concurrent Begins and Completes; see the module
    docstring."""

    def __init__(
        self,
        client: Union[str, Client],
        *,
        max_batch_items: int = 256,
        max_batches_in_flight: int = 2,
    ) -> None:
        """client: supplies the channel, deadline, attempts and backoff; a
        Client is shared (left open by close()), a "host:port" target gets a
        Client(target) of its own. max_batch_items: 1..1000 items per batch.
        max_batches_in_flight: batches of one kind (Begin or Complete) on the
        wire at once; 1 gives the largest batches, more lets a batch leave
        while the server still works on the previous one."""
        if not 1 <= max_batch_items <= _MAX_ITEMS_LIMIT:
            raise ValueError(f"max_batch_items must be in 1..{_MAX_ITEMS_LIMIT}")
        if max_batches_in_flight < 1:
            raise ValueError("max_batches_in_flight must be at least 1")
        self._owns_client = isinstance(client, str)
        self.client = Client(client) if isinstance(client, str) else client
        self._outstanding = _Outstanding()
        stub = self.client._stub  # noqa: SLF001 - same package, same channel
        self._begins: _Lane[dedup_pb2.BeginResponse] = _Lane(
            "BeginBatch", stub.BeginBatch, dedup_pb2.BeginBatchRequest,
            self.client, max_batch_items, max_batches_in_flight, self._outstanding,
        )
        self._completes: _Lane[dedup_pb2.CompleteResponse] = _Lane(
            "CompleteBatch", stub.CompleteBatch, dedup_pb2.CompleteBatchRequest,
            self.client, max_batch_items, max_batches_in_flight, self._outstanding,
        )

    def close(self, timeout_s: Optional[float] = None) -> bool:
        """Refuses new begin/complete calls, waits until every earlier one is
        answered (at most timeout_s; None: no limit), and closes the Client if
        this CoalescingClient made it (else the Client, and the calls that go
        through it, stay usable). False if calls were still outstanding at
        the timeout."""
        answered = self._outstanding.close_and_wait(timeout_s)
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
    ) -> "Future[dedup_pb2.BeginResponse]":
        """Queues a Begin (no wait); the future holds the BeginResponse or
        raises the grpc.RpcError its unary Begin would have."""
        return self._begins.submit(dedup_pb2.BeginRequest(
            namespace=namespace, key=key, args_hash=args_hash, owner=owner,
            lease_ms=lease_ms, ttl_s=ttl_s,
        ))

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
    ) -> dedup_pb2.BeginResponse:
        """Client.begin, batched unless it waits (wait_ms > 0)."""
        if wait_ms > 0:
            return self.client.begin(
                namespace, key, args_hash, owner=owner, lease_ms=lease_ms,
                ttl_s=ttl_s, wait_ms=wait_ms,
            )
        return self.begin_future(
            namespace, key, args_hash, owner=owner, lease_ms=lease_ms, ttl_s=ttl_s
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
        return self._completes.submit(dedup_pb2.CompleteRequest(
            namespace=namespace, key=key, fence=fence, outcome=outcome,
            result=result, ttl_s=ttl_s,
        ))

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

    def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        return self.client.get(namespace, key)

    def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        return self.client.forget(namespace, key)


class _Outstanding:
    """Counts the calls not yet answered, so close() can wait for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._closed = False

    def track(self, future: Future) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("CoalescingClient is closed")
            self._count += 1
        future.add_done_callback(self._done)

    def _done(self, _: Future) -> None:
        with self._cond:
            self._count -= 1
            if self._count == 0:
                self._cond.notify_all()

    def close_and_wait(self, timeout_s: Optional[float]) -> bool:
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._count == 0, timeout_s)


class _Batch:
    __slots__ = ("requests", "futures", "size")

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.futures: list[Future] = []
        self.size = 0


class _Lane(Generic[_Answer]):
    """The queue and in-flight batches of one kind of call."""

    def __init__(
        self,
        method: str,
        rpc: Any,
        make_request: Callable[..., Any],
        client: Client,
        max_items: int,
        max_in_flight: int,
        outstanding: _Outstanding,
    ) -> None:
        self._method = method
        self._rpc = rpc
        self._make_request = make_request
        self._client = client
        self._max_items = max_items
        self._max_in_flight = max_in_flight
        self._outstanding = outstanding
        self._lock = threading.Lock()
        self._queue: deque[_Batch] = deque()  # guarded by _lock
        self._in_flight = 0  # guarded by _lock
        # Batches this thread is sending now: a send that fails at once frees
        # its slot and starts the next batch, which could fail the same way
        # (a closed channel), so sends are looped here rather than nested.
        self._sending = threading.local()

    def submit(self, request: Any) -> "Future[_Answer]":
        future: Future = Future()
        # Once queued a call goes out with its batch: it cannot be cancelled.
        future.set_running_or_notify_cancel()
        self._outstanding.track(future)
        size = request.ByteSize()
        with self._lock:
            last = self._queue[-1] if self._queue else None
            if (last is None or len(last.requests) >= self._max_items
                    or (last.size > 0 and last.size + size > MAX_BATCH_BYTES)):
                last = _Batch()
                self._queue.append(last)
            last.requests.append(request)
            last.futures.append(future)
            last.size += size
            ready = self._take_ready_locked()
        self._send_all([(batch, 0) for batch in ready])
        return future

    def _send_all(self, batches: list[tuple[_Batch, int]]) -> None:
        work = getattr(self._sending, "work", None)
        if work is not None:  # an outer _send_all on this thread sends them
            work.extend(batches)
            return
        work = self._sending.work = list(batches)
        try:
            while work:
                batch, attempt = work.pop(0)
                self._send(batch, attempt)
        finally:
            self._sending.work = None

    def _take_ready_locked(self) -> list[_Batch]:
        ready = []
        while self._in_flight < self._max_in_flight and self._queue:
            ready.append(self._queue.popleft())
            self._in_flight += 1
        return ready

    def _send(self, batch: _Batch, attempt: int) -> None:
        try:
            call = self._rpc.future(
                self._make_request(items=batch.requests),
                timeout=self._client.deadline_s,
            )
            call.add_done_callback(lambda done: self._on_done(batch, attempt, done))
        except Exception as error:  # noqa: BLE001 - handed to the callers
            try:
                self._fail(batch, error)
            finally:
                self._release_slot()

    def _on_done(self, batch: _Batch, attempt: int, call: Any) -> None:
        # Runs on a gRPC thread: it must not block, and must answer every
        # caller whatever happens.
        keeps_slot = False
        try:
            error = call.exception()
            if error is None:
                self._deliver(batch, call.result())
            elif (is_retryable_rpc_error(error)
                  and attempt + 1 < self._client.max_attempts):
                timer = threading.Timer(
                    self._client.retry_delay_s(attempt),
                    self._send_all, ([(batch, attempt + 1)],),
                )
                timer.daemon = True
                timer.start()
                keeps_slot = True  # the retry goes out in this batch's slot
            elif (rpc_code(error) == grpc.StatusCode.RESOURCE_EXHAUSTED
                  and len(batch.requests) > 1):
                self._send_alone(batch)
            else:
                self._fail(batch, error)
        except BaseException as error:  # noqa: BLE001 - never strand a caller
            self._fail(batch, error)
        finally:
            if not keeps_slot:
                self._release_slot()

    def _deliver(self, batch: _Batch, response: Any) -> None:
        try:
            results = item_results(self._method, len(batch.requests), response.items)
        except DedupRpcError as error:
            self._fail(batch, error)
            return
        for index, (future, result) in enumerate(zip(batch.futures, results)):
            if isinstance(result, DedupRpcError):
                _settle(future, error=as_unary_error(result, index))
            else:
                _settle(future, result=result)

    def _send_alone(self, batch: _Batch) -> None:
        """Each item as a batch of its own, as its unary call would have gone
        (say, several DUPLICATEs with large results overflowed the answer)."""
        singles = []
        for request, future in zip(batch.requests, batch.futures):
            single = _Batch()
            single.requests.append(request)
            single.futures.append(future)
            singles.append(single)
        with self._lock:
            self._in_flight += len(singles)
        self._send_all([(single, 0) for single in singles])

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        for future in batch.futures:
            _settle(future, error=_own_copy(error))

    def _release_slot(self) -> None:
        with self._lock:
            self._in_flight -= 1
            ready = self._take_ready_locked()
        self._send_all([(batch, 0) for batch in ready])


def _own_copy(error: BaseException) -> BaseException:
    """Each caller of a failed batch gets its own exception: one object
    raised in many threads would collect all their tracebacks (and notes).
    A gRPC error becomes a DedupRpcError with its code and details."""
    code = rpc_code(error)
    if code is None:
        return error
    details = getattr(error, "details", None)
    text = details() if callable(details) else None
    copy = DedupRpcError(code, text if text is not None else str(error))
    copy.__cause__ = error
    return copy


def _settle(
    future: Future, *, result: Any = None, error: Union[BaseException, None] = None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
