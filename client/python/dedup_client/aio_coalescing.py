"""AsyncCoalescingClient: the asyncio counterpart of CoalescingClient. The
concurrent Begins, Completes and Checkpoints of one event loop's tasks go as
BeginBatch, CompleteBatch and CheckpointBatch calls.

As in CoalescingClient, a call leaves at once while fewer than
max_batches_in_flight batches of its kind are outstanding; otherwise it joins
the next batch, which leaves the moment one returns (so a lone caller pays
no delay, and batches grow with the load; a batch closes at max_batch_items
or before its requests reach batch.MAX_BATCH_BYTES, 3 MiB). Each batch is
sent by AsyncClient.begin_batch / complete_batch / checkpoint_batch, i.e.
with the retry rules every
client shares (dedup_client.policy.BatchRun): redirects to the leader,
UNAVAILABLE and unknown-outcome items resent, result-budget refusals resent
at once in smaller groups, a tenant's RetryInfo waited out. Each caller is
answered as soon as its item's answer is final.

Each call returns or raises what the AsyncClient call would: the response,
or a grpc.RpcError with the unary call's code and details (an item the
server refused raises DedupRpcError with "key: ...", without the batch's
"items[i]." prefix; a failed batch raises a DedupRpcError with the batch's
code and details to each caller, its own object, with the batch's error as
__cause__). A batch refused with RESOURCE_EXHAUSTED without a RetryInfo (a
message size limit) is sent again item by item.

Begins that wait (wait_ms > 0) cannot be batched and go through the
AsyncClient; release, renew, get and forget do too, so an
AsyncCoalescingClient can stand in for an AsyncClient anywhere,
with_idempotency_async and @idempotent included (claim.checkpoint then joins
the CheckpointBatch calls). Give every Begin an owner (with_idempotency_async
does): batches are resent with the same owners; a checkpoint resent is
harmless.

A server older than CheckpointBatch answers it UNIMPLEMENTED: the batch's
checkpoints then go as unary Checkpoints through the AsyncClient, and so do
all later ones of this client (it remembers; a new one asks again). That is
seen when a batch's first RPC is refused so (an older server); a group
changing leader mid-batch to an older node leaves the items resent there
with their last answer (UNAVAILABLE, or outcome unknown), as any batch RPC
failing after its first does.

Use it from one event loop. A caller cancelled while its batch is out only
stops waiting: the batch still goes (and the item may take effect).
`await close()` refuses new begin/complete/checkpoint calls and waits until every
earlier one was answered; it then closes the AsyncClient only if it made it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

import grpc

from dedup_client._proto import dedup_pb2
from dedup_client.aio_client import AsyncClient
from dedup_client.batch import MAX_BATCH_BYTES, as_unary_error
from dedup_client._lane import _own_copy
from dedup_client.errors import DedupRpcError, is_missing_method, rpc_code
from dedup_client.messages import begin_request, checkpoint_request, complete_request
from dedup_client.retry_info import server_retry_delay_s

_MAX_ITEMS_LIMIT = 1000


class AsyncCoalescingClient:
    """Batches one event loop's concurrent Begins, Completes and Checkpoints;
    see the module docstring."""

    def __init__(
        self,
        client: Union[str, Sequence[str], AsyncClient, None] = None,
        *,
        max_batch_items: int = 256,
        max_batches_in_flight: int = 2,
        **client_options: Any,
    ) -> None:
        """As CoalescingClient(...): an AsyncClient is shared (left open by
        close()); a target or a list of them gets an
        AsyncClient(target, **client_options) of its own; None: one of
        DEDUP_ADDRESS (dedup_client.environment)."""
        if not 1 <= max_batch_items <= _MAX_ITEMS_LIMIT:
            raise ValueError(f"max_batch_items must be in 1..{_MAX_ITEMS_LIMIT}")
        if max_batches_in_flight < 1:
            raise ValueError("max_batches_in_flight must be at least 1")
        self._owns_client = not isinstance(client, AsyncClient)
        if not self._owns_client and client_options:
            raise ValueError(
                "client options (" + ", ".join(sorted(client_options)) + ") go to "
                "the AsyncClient given, not to AsyncCoalescingClient")
        self.client = (client if isinstance(client, AsyncClient)
                       else AsyncClient(client, **client_options))
        self._outstanding: set[asyncio.Future] = set()
        self._closed = False
        self._begins = _AsyncLane("BeginBatch", dedup_pb2.BeginBatchRequest, self.client,
                                  max_batch_items, max_batches_in_flight)
        self._completes = _AsyncLane("CompleteBatch", dedup_pb2.CompleteBatchRequest,
                                     self.client, max_batch_items, max_batches_in_flight)
        self._checkpoints = _AsyncLane(
            "CheckpointBatch", dedup_pb2.CheckpointBatchRequest, self.client,
            max_batch_items, max_batches_in_flight, fallback=self._checkpoint_alone)

    async def close(self, timeout_s: Optional[float] = None) -> bool:
        """Refuses new begin/complete/checkpoint calls, waits until every earlier one is
        answered (at most timeout_s; None: no limit), and closes the
        AsyncClient if this client made it. False if calls were still
        outstanding at the timeout."""
        self._closed = True
        answered = True
        if self._outstanding:
            _, pending = await asyncio.wait(set(self._outstanding), timeout=timeout_s)
            answered = not pending
        if self._owns_client:
            await self.client.close()
        return answered

    async def __aenter__(self) -> "AsyncCoalescingClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def begin(
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
        """AsyncClient.begin, batched unless it waits (wait_ms > 0)."""
        if wait_ms > 0:
            return await self.client.begin(
                namespace, key, args_hash, owner=owner, lease_ms=lease_ms,
                ttl_s=ttl_s, wait_ms=wait_ms, accept_rerun=accept_rerun,
            )
        return await self._submit(self._begins, begin_request(
            namespace, key, args_hash, owner=owner, lease_ms=lease_ms, ttl_s=ttl_s,
            accept_rerun=accept_rerun))

    async def complete(
        self,
        namespace: str,
        key: str,
        fence: int,
        outcome: int,
        result: bytes = b"",
        *,
        ttl_s: int = 0,
    ) -> dedup_pb2.CompleteResponse:
        """AsyncClient.complete, batched."""
        return await self._submit(self._completes, complete_request(
            namespace, key, fence, outcome, result, ttl_s=ttl_s))

    async def release(self, namespace: str, key: str, fence: int) -> dedup_pb2.ReleaseResponse:
        return await self.client.release(namespace, key, fence)

    async def renew(
        self, namespace: str, key: str, fence: int, *, lease_ms: int = 0
    ) -> dedup_pb2.RenewResponse:
        return await self.client.renew(namespace, key, fence, lease_ms=lease_ms)

    async def checkpoint(
        self, namespace: str, key: str, fence: int, step: str, data: bytes = b"",
        *, lease_ms: int = 0,
    ) -> dedup_pb2.CheckpointResponse:
        """AsyncClient.checkpoint, batched (unary once the server answered
        CheckpointBatch UNIMPLEMENTED)."""
        return await self._submit(self._checkpoints, checkpoint_request(
            namespace, key, fence, step, data, lease_ms=lease_ms))

    async def get(self, namespace: str, key: str) -> dedup_pb2.GetResponse:
        return await self.client.get(namespace, key)

    async def forget(self, namespace: str, key: str) -> dedup_pb2.ForgetResponse:
        return await self.client.forget(namespace, key)

    async def _checkpoint_alone(
        self, request: dedup_pb2.CheckpointRequest
    ) -> dedup_pb2.CheckpointResponse:
        """The checkpoints lane's fallback: one unary Checkpoint."""
        return await self.client.checkpoint(
            request.namespace, request.key, request.fence, request.step, request.data,
            lease_ms=request.lease_ms)

    async def _submit(self, lane: "_AsyncLane", request: Any) -> Any:
        if self._closed:
            raise RuntimeError("AsyncCoalescingClient is closed")
        future = lane.submit(request)
        self._outstanding.add(future)
        future.add_done_callback(self._outstanding.discard)
        # shield: a cancelled caller stops waiting; the batch's other
        # callers, and close(), still see this item answered.
        return await asyncio.shield(future)


class _Batch:
    __slots__ = ("requests", "futures", "size")

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.futures: list[asyncio.Future] = []
        self.size = 0


class _AsyncLane:
    """The queue and in-flight batches of one kind of call."""

    def __init__(
        self, method: str, make_request: Callable[..., Any], client: AsyncClient,
        max_items: int, max_in_flight: int,
        fallback: Optional[Callable[[Any], Awaitable[Any]]] = None,
    ) -> None:
        """fallback(request), if given, sends one item by other means once the
        server answered `method` UNIMPLEMENTED (an older dedupd); without it
        that answer fails the batch's callers like any other error."""
        self._method = method
        self._make_request = make_request
        self._client = client
        self._max_items = max_items
        self._max_in_flight = max_in_flight
        self._queue: deque[_Batch] = deque()
        self._in_flight = 0
        self._tasks: set[asyncio.Task] = set()
        self._fallback = fallback
        # Set (never cleared) when the server answered `method` UNIMPLEMENTED:
        # queued batches and later calls then go to the fallback.
        self.batch_unimplemented = False

    def submit(self, request: Any) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        # Its caller may have stopped waiting (cancelled): retrieve the
        # outcome here so asyncio does not log it as never retrieved.
        future.add_done_callback(_retrieve)
        if self.batch_unimplemented:
            self._keep(asyncio.get_running_loop().create_task(
                self._alone([request], [future])))
            return future
        size = request.ByteSize()
        last = self._queue[-1] if self._queue else None
        if (last is None or len(last.requests) >= self._max_items
                or (last.size > 0 and last.size + size > MAX_BATCH_BYTES)):
            last = _Batch()
            self._queue.append(last)
        last.requests.append(request)
        last.futures.append(future)
        last.size += size
        self._start_ready()
        return future

    def _start_ready(self) -> None:
        while self._in_flight < self._max_in_flight and self._queue:
            batch = self._queue.popleft()
            self._in_flight += 1
            self._keep(asyncio.get_running_loop().create_task(self._run(batch)))

    def _keep(self, task: asyncio.Task) -> None:
        self._tasks.add(task)  # a strong reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def _alone(self, requests: list[Any], futures: list[asyncio.Future]) -> None:
        """Each item through the fallback, concurrently (as unary callers)."""
        assert self._fallback is not None
        await asyncio.gather(*(
            _each_alone(self._fallback, request, future)
            for request, future in zip(requests, futures) if not future.done()))

    async def _run(self, batch: _Batch) -> None:
        try:
            await self._send(batch.requests, batch.futures)
        except Exception as error:  # noqa: BLE001 - never strand a caller
            for future in batch.futures:
                _settle(future, error=_own_copy(error))
        except BaseException:  # cancelled (the loop is closing): so are they
            for future in batch.futures:
                future.cancel()
            raise
        finally:
            self._in_flight -= 1
            self._start_ready()

    async def _send(self, requests: list[Any], futures: list[asyncio.Future]) -> None:
        if self.batch_unimplemented:  # queued before the server said so
            await self._alone(requests, futures)
            return

        def on_final(index: int, result: Any) -> None:
            if isinstance(result, DedupRpcError):
                _settle(futures[index], error=as_unary_error(result, index))
            else:
                _settle(futures[index], result=result)

        try:
            await self._client._batch(  # noqa: SLF001 - same package
                self._method, self._make_request, requests, on_final)
        except grpc.RpcError as error:
            if (rpc_code(error) == grpc.StatusCode.RESOURCE_EXHAUSTED
                    and server_retry_delay_s(error) is None and len(requests) > 1):
                # A message size limit: each item as its unary call would go.
                await asyncio.gather(*(
                    self._send([request], [future])
                    for request, future in zip(requests, futures)))
                return
            if self._fallback is not None and is_missing_method(error):
                # An older server: nothing happened (the first RPC was
                # refused); remembered.
                self.batch_unimplemented = True
                await self._alone(requests, futures)
                return
            for future in futures:
                _settle(future, error=_own_copy(error))


async def _each_alone(
    fallback: Callable[[Any], Awaitable[Any]], request: Any, future: asyncio.Future
) -> None:
    try:
        _settle(future, result=await fallback(request))
    except Exception as error:  # noqa: BLE001 - the caller's
        _settle(future, error=error)


def _settle(
    future: asyncio.Future, *, result: Any = None, error: Optional[BaseException] = None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()
