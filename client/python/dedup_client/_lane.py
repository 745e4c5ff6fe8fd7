"""The machinery behind CoalescingClient (coalescing.py says what callers
get): a _Lane per kind of call gathers calls into batch RPCs, sends them with
the Client's leader following and retries, and settles each item into its
caller's future; _Outstanding counts the calls not yet answered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Generic, Optional, TypeVar, Union

import grpc

from dedup_client.batch import (
    MAX_BATCH_BYTES,
    as_unary_error,
    holds_result,
    is_result_budget_refusal,
    item_results,
    refit,
)
from dedup_client.client import Client
from dedup_client.errors import DedupRpcError, is_missing_method, rpc_code, rpc_details
from dedup_client.outcome import outcome_unknown_error
from dedup_client.retry_decision import Action, decide_retry, item_resendable

_Answer = TypeVar("_Answer")


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
                 "hops", "attempt", "sealed", "via")

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
        # The current attempt's route: the Router, or the GroupRoute of the
        # batch's shard group (a batch is split per group when sent).
        self.via: Any = None

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
                self._client._update_shard_map_later()  # noqa: SLF001
                parts = self._split(batch)
                if len(parts) > 1:
                    with self._lock:
                        self._in_flight += len(parts) - 1
                    self._send_all([(part, attempt, False) for part in parts])
                    return
                timeout = self._client.deadline_s
                batch.via = self._router.route_for(batch.requests[0])
                batch.address = batch.via.leader()
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

    def _split(self, batch: _Batch) -> list[_Batch]:
        """`batch` as one batch per shard group of its items (itself when
        they are all of one group, or without a shard map)."""
        split = self._router.shards.split(batch.requests)
        groups = split(list(range(len(batch.requests)))) if split is not None else []
        if len(groups) <= 1:
            return [batch]
        parts = []
        for indexes in groups:
            part = _Batch()
            part.attempt, part.sealed = batch.attempt, batch.sealed
            for i in indexes:
                part.add(batch.requests[i], batch.futures[i], batch.unknown[i])
            parts.append(part)
        return parts

    def _on_done(self, batch: _Batch, attempt: int, address: str, call: Any) -> None:
        # Runs on a gRPC thread: it must not block, and must answer every
        # caller whatever happens.
        keeps_slot = False
        via = batch.via
        grouped = via is not self._router
        try:
            error = call.exception()
            if error is None:
                via.follow(address)
                if grouped:
                    via.answered_with(call.trailing_metadata())
                keeps_slot = self._deliver(batch, attempt, call.result())
                return
            if grouped:
                via.failed_with(error)
            # A whole batch's unknown outcome is settled item by item, so
            # that only the items safe to resend go again.
            decision = decide_retry(
                error, address=address, attempt=attempt,
                max_attempts=self._client.max_attempts, hops=batch.hops,
                max_leader_hops=self._client.max_leader_hops,
                can_follow=via.can_follow,
                time_left_s=batch.deadline - time.monotonic(),
                resend_unknown=False, backoff_s=self._client.retry_delay_s)
            if decision.leader is not None:
                via.follow(decision.leader)
            if decision.advance:
                via.failed(address)
            if decision.action is Action.HOP:
                # Started here: a gRPC call does not block.
                batch.address = decision.leader
                batch.hops += 1
                self._send_all([(batch, attempt, True)])
                keeps_slot = True
            elif decision.action is Action.RETRY:
                self._retry_later(batch, attempt, decision.delay_s)
                keeps_slot = True
            elif decision.action is Action.GIVE_UP:
                self._fail(batch, error)
            elif decision.outcome_unknown:  # every item's, then
                aborted = DedupRpcError(grpc.StatusCode.ABORTED, rpc_details(error))
                keeps_slot = self._settle_items(
                    batch, attempt, [aborted] * len(batch.requests)
                )
            elif self._fallback is not None and is_missing_method(error):
                # An older server: nothing happened; remembered.
                self.batch_unimplemented = True
                self._divert(batch)
            elif (rpc_code(error) == grpc.StatusCode.RESOURCE_EXHAUSTED
                  and len(batch.requests) > 1):
                # Without a RetryInfo (decide_retry retries those): too large
                # for a message limit; each item goes alone, as unary.
                self._send_alone(batch)
            else:
                self._fail(batch, error)
        except BaseException as error:  # noqa: BLE001 - never strand a caller
            self._fail(batch, error)
        finally:
            if not keeps_slot:
                self._release_slot()

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
            elif item_resendable(result, request) and not last_try:
                retry.add(request, future, unknown or code == grpc.StatusCode.ABORTED)
            elif unknown or code == grpc.StatusCode.ABORTED:
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
