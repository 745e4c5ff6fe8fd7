"""The retry rule of the Python clients, as one pure function: what to do
after an attempt failed. Client and AsyncClient (through policy.CallRetry and
policy.AttemptRoute) and the coalescing lanes (_lane._Lane) all obey it; it
reads the error and the numbers it is given, and changes nothing.

The rule, for the grpc.RpcError an attempt failed with:
1. UNAVAILABLE with a `dedup-leader: ADDR` trailer naming another node, when
   the client can open ADDR (can_follow), fewer than max_leader_hops
   redirects were made in this attempt: the leader guess becomes ADDR, and
   if the attempt's deadline has time left the request goes there at once,
   within the attempt (HOP). A node naming itself is on its way out (say,
   stopping), so that hint is ignored.
2. Any other UNAVAILABLE (connection failure, election, hops used up): the
   guess moves past the address (advance), unless rule 1 just followed a
   leader; retry after the backoff delay if attempts remain.
3. RESOURCE_EXHAUSTED with a RetryInfo (a tenant over its limits): retry
   after the server's delay (capped, see retry_info), not the backoff.
4. ABORTED with `dedup-outcome: unknown`: the outcome is unknown; retried
   after the backoff only when the caller says re-sending is safe
   (resend_unknown), otherwise the caller settles it (a batch, item by item).
5. Anything else is the call's answer.
Rules 2-4 with no attempt left: GIVE_UP (the call raises its last error).

item_resendable is the same rule for one item of a batch answer (an item
error carries no trailers): UNAVAILABLE goes again, ABORTED (outcome
unknown) only when that item is safe to resend (outcome.may_retry_unknown).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Optional

import grpc

from dedup_client.errors import rpc_code
from dedup_client.outcome import is_outcome_unknown, may_retry_unknown
from dedup_client.retry_info import server_retry_delay_s
from dedup_client.routing import leader_hint


class Action(enum.Enum):
    ANSWER = "answer"  # the error is the call's answer: not retryable
    HOP = "hop"  # send again at once to `leader`, within the attempt
    RETRY = "retry"  # a new attempt after delay_s
    GIVE_UP = "give_up"  # retryable, but no attempt is left


@dataclass(frozen=True)
class RetryDecision:
    action: Action
    # The leader named by the error: the router's guess becomes it (for HOP,
    # and for a retry when the attempt had no time left to hop).
    leader: Optional[str] = None
    delay_s: float = 0.0  # RETRY: how long to wait first
    # The address failed or knows no leader: the guess moves past it.
    advance: bool = False
    # The error was an unknown outcome: this or an earlier attempt may have
    # taken effect.
    outcome_unknown: bool = False


def decide_retry(
    error: BaseException,
    *,
    address: str,
    attempt: int,
    max_attempts: int,
    hops: int,
    max_leader_hops: int,
    can_follow: bool,
    time_left_s: float,
    resend_unknown: bool,
    backoff_s: Callable[[int], float],
) -> RetryDecision:
    """The rule above for `error`, the failure of attempt number `attempt`
    (0-based) sent to `address` after `hops` redirects within the attempt,
    with `time_left_s` of the attempt's deadline left. backoff_s(attempt) is
    the backoff delay after that attempt; it is called only for a RETRY."""
    attempts_left = attempt + 1 < max_attempts
    code = rpc_code(error)
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = leader_hint(error) if hops < max_leader_hops else None
        leader = hint if hint != address and can_follow else None
        if leader is not None and time_left_s > 0:
            return RetryDecision(Action.HOP, leader=leader)
        if not attempts_left:
            return RetryDecision(Action.GIVE_UP, leader=leader,
                                 advance=leader is None)
        return RetryDecision(Action.RETRY, leader=leader,
                             delay_s=backoff_s(attempt), advance=leader is None)
    delay_s = server_retry_delay_s(error)
    if delay_s is not None:
        if not attempts_left:
            return RetryDecision(Action.GIVE_UP)
        return RetryDecision(Action.RETRY, delay_s=delay_s)
    if is_outcome_unknown(error):
        if not resend_unknown:
            return RetryDecision(Action.ANSWER, outcome_unknown=True)
        if not attempts_left:
            return RetryDecision(Action.GIVE_UP, outcome_unknown=True)
        return RetryDecision(Action.RETRY, delay_s=backoff_s(attempt),
                             outcome_unknown=True)
    return RetryDecision(Action.ANSWER)


def item_resendable(error: BaseException, request: object) -> bool:
    """Whether a batch item refused with `error` goes again in the next
    attempt (if attempts remain)."""
    code = rpc_code(error)
    return code == grpc.StatusCode.UNAVAILABLE or (
        code == grpc.StatusCode.ABORTED and may_retry_unknown(request))


__all__ = ["Action", "RetryDecision", "decide_retry", "item_resendable"]
