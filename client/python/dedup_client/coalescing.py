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
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar, Union

import grpc

from dedup_client._proto import dedup_pb2
from dedup_client.batch import (
    MAX_BATCH_BYTES,
    as_unary_error,
    holds_result,
    is_result_budget_refusal,
    item_results,
    refit,
)
from dedup_client.client import Client, is_retryable_rpc_error
from dedup_client.errors import DedupRpcError, is_missing_method, rpc_code, rpc_details
from dedup_client.messages import begin_request, checkpoint_request, complete_request
from dedup_client.outcome import (
    is_outcome_unknown,
    may_retry_unknown,
    outcome_unknown_error,
)
from dedup_client.retry_info import server_retry_delay_s

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
        client: Union[str, Sequence[str], Client],
        *,
        max_batch_items: int = 256,
        max_batches_in_flight: int = 2,
        **client_options: Any,
    ) -> None:
        """client: supplies the channels, leader, deadline, attempts and
        backoff; a Client is shared (left open by close()), a "host:port"
        target or a list of them gets a Client(target, **client_options) of
        its own (e.g. tls=TlsConfig(...), token=..., deadline_s=...; the
        batches carry its token like every call).
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


class _Outstanding:
    """Counts the calls not yet answered, so close() can wait for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._closed = False

    def new_future(self) -> Future:
        """A running Future for a call, tracked (raises once closed)."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        self.track(future)
        return future

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
    __slots__ = ("requests", "futures", "unknown", "size", "address", "deadline",
                 "hops", "attempt", "sealed")

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.futures: list[Future] = []
        # Per item: an earlier send's outcome is unknown, so a later failure
        # must not read as "nothing happened".
        self.unknown: list[bool] = []
        self.size = 0
        self.address = ""  # where the current attempt went
        self.deadline = 0.0  # the current attempt's, time.monotonic()
        self.hops = 0  # redirects followed in the current attempt
        # The attempt it starts as: 0, or for items re-sent because an
        # answer's result budget was spent, the attempt that answer came in.
        self.attempt = 0
        # Holds only such re-sent items: calls joining it would make it
        # larger than the answer it is sized to fit.
        self.sealed = False

    def add(self, request: Any, future: Future, unknown: bool = False) -> None:
        self.requests.append(request)
        self.futures.append(future)
        self.unknown.append(unknown)


class _Lane(Generic[_Answer]):
    """The queue and in-flight batches of one kind of call."""

    def __init__(
        self,
        method: str,
        make_request: Callable[..., Any],
        client: Client,
        max_items: int,
        max_in_flight: int,
        outstanding: _Outstanding,
        fallback: Optional[Callable[[Any, Future, bool], None]] = None,
    ) -> None:
        """fallback(request, future, unknown), if given, sends one item by
        other means, without blocking, once the server answered `method`
        UNIMPLEMENTED (an older dedupd); without it that answer fails the
        batch's callers like any other error."""
        self._method = method
        self._unary = method[: -len("Batch")]  # as callers know the call
        self._make_request = make_request
        self._client = client
        self._router = client._router  # noqa: SLF001 - same package, same channels
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
        self._fallback = fallback
        # Set (never cleared) when the server answered `method` UNIMPLEMENTED:
        # the batches still queued, and later calls, go to the fallback. A
        # plain bool: read without the lock, a stale False only costs one
        # more UNIMPLEMENTED batch.
        self.batch_unimplemented = False

    def submit(self, request: Any) -> "Future[_Answer]":
        # Once queued a call goes out with its batch: it cannot be cancelled.
        future = self._outstanding.new_future()
        size = request.ByteSize()
        with self._lock:
            last = self._queue[-1] if self._queue else None
            if (last is None or last.sealed or len(last.requests) >= self._max_items
                    or (last.size > 0 and last.size + size > MAX_BATCH_BYTES)):
                last = _Batch()
                self._queue.append(last)
            last.add(request, future)
            last.size += size
            ready = self._take_ready_locked()
        self._send_all([(batch, batch.attempt, False) for batch in ready])
        return future

    def _send_all(self, batches: list[tuple[_Batch, int, bool]]) -> None:
        """Sends each (batch, attempt, hop): a hop goes to batch.address
        within the attempt's deadline, else a new attempt to the leader."""
        work = getattr(self._sending, "work", None)
        if work is not None:  # an outer _send_all on this thread sends them
            work.extend(batches)
            return
        work = self._sending.work = list(batches)
        try:
            while work:
                batch, attempt, hop = work.pop(0)
                self._send(batch, attempt, hop)
        finally:
            self._sending.work = None

    def _take_ready_locked(self) -> list[_Batch]:
        ready = []
        while self._in_flight < self._max_in_flight and self._queue:
            ready.append(self._queue.popleft())
            self._in_flight += 1
        return ready

    def _send(self, batch: _Batch, attempt: int, hop: bool) -> None:
        if self.batch_unimplemented:  # queued before the server said so
            self._divert(batch)
            self._release_slot()
            return
        try:
            if hop:
                timeout = batch.deadline - time.monotonic()
            else:
                timeout = self._client.deadline_s
                batch.address = self._router.leader()
                batch.deadline = time.monotonic() + timeout
                batch.hops = 0
            address = batch.address
            rpc = getattr(self._router.stub(address), self._method)
            call = rpc.future(self._make_request(items=batch.requests), timeout=timeout)
            call.add_done_callback(
                lambda done: self._on_done(batch, attempt, address, done)
            )
        except Exception as error:  # noqa: BLE001 - handed to the callers
            try:
                self._fail(batch, error)
            finally:
                self._release_slot()

    def _on_done(self, batch: _Batch, attempt: int, address: str, call: Any) -> None:
        # Runs on a gRPC thread: it must not block, and must answer every
        # caller whatever happens.
        keeps_slot = False
        try:
            error = call.exception()
            if error is None:
                self._router.follow(address)
                keeps_slot = self._deliver(batch, attempt, call.result())
            elif is_retryable_rpc_error(error):
                keeps_slot = self._unavailable(batch, attempt, address, error)
            elif is_outcome_unknown(error):  # every item's, then
                aborted = DedupRpcError(grpc.StatusCode.ABORTED, rpc_details(error))
                keeps_slot = self._settle_items(
                    batch, attempt, [aborted] * len(batch.requests)
                )
            elif self._fallback is not None and is_missing_method(error):
                # An older server: nothing happened; remembered.
                self.batch_unimplemented = True
                self._divert(batch)
            elif (delay_s := server_retry_delay_s(error)) is not None:
                # Over a limit (a tenant's): nothing happened; the whole
                # batch goes again after the server's delay, as an attempt.
                if attempt + 1 < self._client.max_attempts:
                    self._retry_later(batch, attempt, delay_s)
                    keeps_slot = True
                else:
                    self._fail(batch, error)
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

    def _unavailable(
        self, batch: _Batch, attempt: int, address: str, error: BaseException
    ) -> bool:
        """A follower's redirect is followed at once (a gRPC call is started
        here, which does not block); otherwise the batch is retried after the
        backoff delay on a timer thread. True when the batch keeps its slot."""
        leader = (self._router.redirect(address, error)
                  if batch.hops < self._client.max_leader_hops else None)
        if leader is None:
            self._router.failed(address)
        elif batch.deadline > time.monotonic():
            batch.address = leader
            batch.hops += 1
            self._send_all([(batch, attempt, True)])
            return True
        if attempt + 1 < self._client.max_attempts:
            self._retry_later(batch, attempt)
            return True
        self._fail(batch, error)
        return False

    def _retry_later(
        self, batch: _Batch, attempt: int, delay_s: Optional[float] = None
    ) -> None:
        """Sends `batch` again (to the leader, as attempt + 1) after `delay_s`
        (default: the backoff delay), from a timer thread: never sleeps on a
        gRPC thread."""
        timer = threading.Timer(
            self._client.retry_delay_s(attempt) if delay_s is None else delay_s,
            self._send_all, ([(batch, attempt + 1, False)],),
        )
        timer.daemon = True
        timer.start()

    def _deliver(self, batch: _Batch, attempt: int, response: Any) -> bool:
        try:
            results = item_results(self._method, len(batch.requests), response.items)
        except DedupRpcError as error:
            self._fail(batch, error)
            return False
        return self._settle_items(batch, attempt, results)

    def _settle_items(self, batch: _Batch, attempt: int, results: list[Any]) -> bool:
        """Answers each caller. Items answered UNAVAILABLE (the node stopped
        leading before proposing them) or ABORTED (outcome unknown, where a
        resend is safe) go again as one batch after the backoff delay, in
        this batch's slot (True: the slot is kept).

        Except Begins refused because the answer already held the server's
        --max_batch_response_bytes of stored results: many callers of one
        key with a large result would otherwise go again all together, a
        few answered each time, until their attempts ran out. They are not
        failures: they go first in the queue (no backoff, no attempt spent)
        in sealed batches of at most as many items as this answer held
        results, about what fits one answer; items such a batch still cannot
        fit split again the same way. That ends: a re-send is free only when
        the answer held a result, so each sealed batch is smaller than the
        batch it came from. One that held none (a single result larger than
        the whole budget, e.g. stored under a larger --max_result_bytes)
        spends attempts like any UNAVAILABLE."""
        retry = _Batch()
        refused: list[tuple[Any, Future, bool]] = []
        fitted = sum(1 for result in results if holds_result(result))
        last_try = attempt + 1 >= self._client.max_attempts
        for index, (request, future, unknown, result) in enumerate(
                zip(batch.requests, batch.futures, batch.unknown, results)):
            code = result.code() if isinstance(result, DedupRpcError) else None
            if code is None:
                _settle(future, result=result)
            elif fitted and is_result_budget_refusal(result):
                refused.append((request, future, unknown))
            elif code == grpc.StatusCode.ABORTED:
                if may_retry_unknown(request) and not last_try:
                    retry.add(request, future, unknown=True)
                else:
                    _settle(future, error=outcome_unknown_error(self._unary, result))
            elif code == grpc.StatusCode.UNAVAILABLE and not last_try:
                retry.add(request, future, unknown)
            elif unknown:
                _settle(future, error=outcome_unknown_error(self._unary, result))
            else:
                _settle(future, error=as_unary_error(result, index))
        if refused:
            self._queue_first(refit(refused, fitted), attempt)
        if not retry.requests:
            return False
        self._retry_later(retry, attempt)
        return True

    def _queue_first(self, groups: list[list[tuple[Any, Future, bool]]],
                     attempt: int) -> None:
        """Queues each group of (request, future, unknown) as a sealed batch
        starting at `attempt`, ahead of the calls made since (they waited
        longer), and sends what a free slot allows."""
        batches = []
        for group in groups:
            batch = _Batch()
            batch.attempt = attempt
            batch.sealed = True
            for request, future, unknown in group:
                batch.add(request, future, unknown)
            batches.append(batch)
        with self._lock:
            self._queue.extendleft(reversed(batches))
            ready = self._take_ready_locked()
        self._send_all([(batch, batch.attempt, False) for batch in ready])

    def _send_alone(self, batch: _Batch) -> None:
        """Each item as a batch of its own, as its unary call would have gone
        (say, several DUPLICATEs with large results overflowed the answer)."""
        singles = []
        for request, future, unknown in zip(batch.requests, batch.futures, batch.unknown):
            single = _Batch()
            single.add(request, future, unknown)
            singles.append(single)
        with self._lock:
            self._in_flight += len(singles)
        self._send_all([(single, 0, False) for single in singles])

    def _divert(self, batch: _Batch) -> None:
        """Hands every item of `batch` to the fallback (which must not block)."""
        assert self._fallback is not None
        for request, future, unknown in zip(batch.requests, batch.futures, batch.unknown):
            try:
                self._fallback(request, future, unknown)
            except Exception as error:  # noqa: BLE001 - e.g. closed: the caller's
                _settle(future, error=error)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        """Fails every caller of `batch`; one whose earlier send's outcome is
        unknown gets the outcome-unknown error, never "nothing happened"."""
        for future, unknown in zip(batch.futures, batch.unknown):
            if unknown and rpc_code(error) is not None:
                _settle(future, error=outcome_unknown_error(self._unary, error))
            else:
                _settle(future, error=_own_copy(error))

    def _release_slot(self) -> None:
        with self._lock:
            self._in_flight -= 1
            ready = self._take_ready_locked()
        self._send_all([(batch, batch.attempt, False) for batch in ready])


def _own_copy(error: BaseException) -> BaseException:
    """Each caller of a failed batch gets its own exception: one object
    raised in many threads would collect all their tracebacks (and notes).
    A gRPC error becomes a DedupRpcError with its code and details."""
    code = rpc_code(error)
    if code is None:
        return error
    copy = DedupRpcError(code, rpc_details(error))
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
