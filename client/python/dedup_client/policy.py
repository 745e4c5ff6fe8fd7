"""How Client (blocking) and AsyncClient (asyncio) apply the retry rule
(retry_decision.decide_retry, which the coalescing lanes obey too), kept
here once so both behave alike. The callers only send, sleep (or await a
sleep) and loop.

- CallRetry: one unary call's attempts (UNAVAILABLE, a tenant's RetryInfo,
  an unknown outcome retried only where safe).
- AttemptRoute: one attempt's address and redirects to the leader.
- BatchRun: a BeginBatch/CompleteBatch/CheckpointBatch call's items across
  attempts (items answered UNAVAILABLE or ABORTED resent; result-budget
  refusals resent at once, in smaller groups).

Not thread-safe: one object per call.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional

import grpc

from dedup_client.batch import (
    holds_result,
    is_result_budget_refusal,
    item_results,
    refit,
    renumber,
)
from dedup_client.errors import DedupRpcError, rpc_code, rpc_details
from dedup_client.outcome import (
    after_unknown,
    is_outcome_unknown,
    may_retry_unknown,
    outcome_unknown_error,
)
from dedup_client.retry_decision import (
    Action,
    RetryDecision,
    decide_retry,
    item_resendable,
)
from dedup_client.routing import Router


def is_retryable_rpc_error(error: BaseException) -> bool:
    """True only for UNAVAILABLE: nothing happened, so a retry is safe.

    DEADLINE_EXCEEDED is not retried: the call may have taken effect, and the
    caller's time budget is spent anyway.
    """
    return rpc_code(error) == grpc.StatusCode.UNAVAILABLE


class CallRetry:
    """The attempts of one unary call, as retry_decision.decide_retry says:

        retry = CallRetry(method, request, delay_s, retry_unknown, max_attempts)
        for attempt in range(max_attempts):
            if attempt: sleep(retry.pause_s(attempt))
            route = retry.route(router, timeout_s, max_hops, attempt)
            try: response = <one attempt along route>
            except grpc.RpcError as e: retry.failed(e, route.decision); continue  # may raise
            return retry.answer(response)
        retry.give_up()  # raises

    delay_s(retry) is the backoff before retry number `retry` (0-based).
    Without retry_unknown, an unknown outcome is raised as the server's
    error (the batch calls handle it item by item)."""

    def __init__(
        self, method: str, request: Any, delay_s: Callable[[int], float],
        retry_unknown: bool = True, max_attempts: int = 1,
    ) -> None:
        self._method = method
        self._request = request
        self._delay_s = delay_s
        self._retry_unknown = retry_unknown
        self._max_attempts = max_attempts
        self._last: Optional[BaseException] = None
        self._unknown = False  # an earlier attempt's outcome is unknown
        self._pause_s = 0.0  # before the next attempt, as decided

    def route(self, router: Router, timeout_s: float, max_hops: int,
              attempt: int) -> "AttemptRoute":
        """The route of attempt number `attempt` (0-based)."""
        decide = functools.partial(
            decide_retry, attempt=attempt, max_attempts=self._max_attempts,
            resend_unknown=self._retry_unknown and may_retry_unknown(self._request),
            backoff_s=self._delay_s)
        return AttemptRoute(router, timeout_s, max_hops, decide)

    def pause_s(self, attempt: int) -> float:
        """Seconds to wait before `attempt` (>= 1): the server's delay exactly
        (no jitter on top: it already spreads its tenants' callers), else the
        backoff."""
        return self._pause_s

    def failed(self, error: grpc.RpcError, decision: Optional[RetryDecision]) -> None:
        """Notes a failed attempt (the caller tries again), or raises what
        the call raises. `decision`: the route's for `error`."""
        assert decision is not None
        if decision.action in (Action.RETRY, Action.GIVE_UP):
            # UNAVAILABLE, or over a limit (a tenant's: refused before
            # anything happened), or an unknown outcome safe to resend. (On
            # the last attempt it is raised as it came, or as an unknown
            # outcome after an earlier one.)
            self._unknown = self._unknown or decision.outcome_unknown
            self._last = error
            self._pause_s = decision.delay_s
            return
        if decision.outcome_unknown and self._retry_unknown:
            # Not safe to resend (an anonymous Begin).
            raise outcome_unknown_error(self._method, error) from error
        if self._unknown:
            # An earlier attempt may have taken effect: whatever this one
            # says, the call's outcome is still unknown.
            raise outcome_unknown_error(self._method, error) from error
        raise error

    def answer(self, response: Any) -> Any:
        """What the call returns for an attempt's `response`."""
        return after_unknown(self._request, response) if self._unknown else response

    def give_up(self) -> None:
        """Raises what the call raises once its attempts ran out."""
        assert self._last is not None
        if self._unknown:
            raise outcome_unknown_error(self._method, self._last) from self._last
        raise self._last


class AttemptRoute:
    """One attempt's sends: to the leader guess, then up to max_hops
    redirects at once, all within the attempt's deadline.

        route = retry.route(router, timeout_s, max_hops, attempt)
        while True:
            try: response = stub(route.address).Method(request, timeout=route.timeout)
            except grpc.RpcError as e:
                if route.redirected(e): continue
                raise   # route.decision says what comes next
            route.answered(); return response
    """

    def __init__(self, router: Router, timeout_s: float, max_hops: int,
                 decide: Callable[..., RetryDecision]) -> None:
        """decide: decide_retry with the attempt's numbers bound."""
        self._router = router
        self._deadline = time.monotonic() + timeout_s
        self._max_hops = max_hops
        self._decide = decide
        self._hops = 0
        self.address = router.leader()
        self.timeout = timeout_s
        self.decision: Optional[RetryDecision] = None  # for the last error

    def redirected(self, error: BaseException) -> bool:
        """True when the attempt goes on to the leader `error` named (now
        self.address, with the time left as self.timeout); False when the
        attempt ends with `error` (having moved the guess on as decided)."""
        time_left_s = self._deadline - time.monotonic()
        decision = self.decision = self._decide(
            error, address=self.address, hops=self._hops,
            max_leader_hops=self._max_hops, can_follow=self._router.can_follow,
            time_left_s=time_left_s)
        if decision.leader is not None:
            self._router.follow(decision.leader)
        if decision.advance:
            self._router.failed(self.address)
        if decision.action is not Action.HOP:
            return False
        self.address = decision.leader
        self.timeout = time_left_s
        self._hops += 1
        return True

    def answered(self) -> None:
        self._router.follow(self.address)


class BatchRun:
    """A batch call's items across attempts:

        run = BatchRun(method, items)
        for attempt in range(max_attempts):
            if attempt: sleep(delay_s(attempt - 1))
            for group in run.groups():   # items to send now, in order
                request = make_request(items=run.items_of(group))
                try: response = <the call, retry_unknown=False>
                except grpc.RpcError as e: run.failed(group, e); continue  # may raise
                run.answered(group, response)
            if run.done(): break
        return run.results()

    Against a sharded cluster each attempt sends one RPC per shard group
    (split): the answers are merged back in item order, and an RPC that
    fails after another was answered fails only its own items.

    Items answered UNAVAILABLE (nothing happened: the node stopped leading
    before proposing them) or ABORTED (outcome unknown, where a resend is
    safe) go again as a smaller batch in the next attempt.

    Items refused because the answer already held the server's
    --max_batch_response_bytes of stored results go again at once within the
    attempt, in groups of at most as many items as that answer held results
    (batch.refit): not failures, so they spend no attempt. That ends: each
    group is smaller than the batch it came from, and an answer that held no
    result (one result larger than the whole budget) makes its refused items
    ordinary UNAVAILABLEs.

    on_final(index, result), if given, is called once per item when its
    answer is final (before results() for items answered early)."""

    def __init__(
        self, method: str, items: Any,
        on_final: Optional[Callable[[int, Any], None]] = None,
        split: Optional[Callable[[list[int]], list[list[int]]]] = None,
    ) -> None:
        """split(indexes), if given, groups the item indexes to send (in
        order) by the RPC each group goes in: one per shard group
        (ShardState.split); without it they all go together."""
        self._method = method
        self._split = split
        self._items = items
        self._on_final = on_final
        self._results: list[Any] = [None] * len(items)
        self._unknown = [False] * len(items)  # per item: an earlier outcome unknown
        self._pending = list(range(len(items)))
        self._retry: list[int] = []
        self._queue: list[list[int]] = []
        self._sent = False  # a first RPC that fails has done nothing: it raises

    def groups(self):
        """The groups of item indexes to send in this attempt (more may be
        added while iterating: result-budget refusals)."""
        self._queue = self._split(self._pending) if self._split else [self._pending]
        self._retry = []
        while self._queue:
            yield self._queue.pop(0)

    def items_of(self, group: list[int]) -> list[Any]:
        return [self._items[i] for i in group]

    def failed(self, group: list[int], error: grpc.RpcError) -> None:
        """The whole group's RPC failed; raises when it was the call's first."""
        sent, self._sent = self._sent, True
        if is_outcome_unknown(error):  # every item's
            self._settle(group, [DedupRpcError(grpc.StatusCode.ABORTED, rpc_details(error))
                                 for _ in group])
            return
        if not sent:
            raise error
        # The resent items keep what their last answer said.
        for i in group:
            if self._unknown[i]:
                self._results[i] = outcome_unknown_error(f"{self._method} items[{i}]", error)
            self._final(i)

    def answered(self, group: list[int], response: Any) -> None:
        try:
            answers = item_results(self._method, len(group), response.items)
        except DedupRpcError as error:
            self.failed(group, error)
            return
        self._sent = True
        self._settle(group, answers)

    def _settle(self, group: list[int], answers: list[Any]) -> None:
        fitted = sum(1 for answer in answers if holds_result(answer))
        refused = []
        for position, (i, answer) in enumerate(zip(group, answers)):
            code = answer.code() if isinstance(answer, DedupRpcError) else None
            if code is None:
                self._results[i] = (after_unknown(self._items[i], answer)
                                    if self._unknown[i] else answer)
                self._final(i)
                continue
            if code == grpc.StatusCode.ABORTED:
                self._unknown[i] = True
            if not item_resendable(answer, self._items[i]):
                self._results[i] = (
                    outcome_unknown_error(f"{self._method} items[{i}]", answer)
                    if self._unknown[i]  # this answer's or an earlier one's
                    else renumber(answer, position, i))
                self._final(i)
                continue
            self._results[i] = renumber(answer, position, i)
            if fitted and is_result_budget_refusal(answer):
                refused.append(i)
            else:
                self._retry.append(i)
        self._queue[:0] = refit(refused, fitted) if refused else []

    def done(self) -> bool:
        """Ends the attempt: True when no item is left to resend."""
        self._pending = self._retry
        return not self._pending

    def results(self) -> list[Any]:
        """One entry per item: its answer or its DedupRpcError."""
        for i in self._pending:
            if self._unknown[i]:
                self._results[i] = outcome_unknown_error(
                    f"{self._method} items[{i}]", self._results[i])
            self._final(i)
        self._pending = []
        return self._results

    def _final(self, i: int) -> None:
        if self._on_final is not None:
            self._on_final(i, self._results[i])
