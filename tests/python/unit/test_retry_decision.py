"""decide_retry on hand-built errors: no server, no network."""

from __future__ import annotations

import unittest
from typing import Any

import grpc

from dedup_client.errors import DedupRpcError
from dedup_client._proto import dedup_pb2
from dedup_client.retry_decision import (
    Action,
    RetryDecision,
    decide_retry,
    item_resendable,
)
from test_server_retry_delay import status_details

SELF = "10.0.0.1:7000"
OTHER = "10.0.0.2:7000"


class Error(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, **trailers: Any) -> None:
        super().__init__()
        self._code = code
        self._trailers = tuple((k.replace("_", "-"), v) for k, v in trailers.items())

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "refused"

    def trailing_metadata(self) -> tuple:
        return self._trailers


def over_limit(delay_s: float) -> Error:
    return Error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                 grpc_status_details_bin=status_details(delay_s))


def unknown() -> Error:
    return Error(grpc.StatusCode.ABORTED, dedup_outcome="unknown")


def decide(error: BaseException, attempt: int = 0, **kw: Any) -> RetryDecision:
    args: dict[str, Any] = dict(
        address=SELF, attempt=attempt, max_attempts=5, hops=0, max_leader_hops=3,
        can_follow=True, time_left_s=1.0, resend_unknown=True,
        backoff_s=lambda retry: 0.1 * (retry + 1))
    args.update(kw)
    return decide_retry(error, **args)


class DecideRetryTest(unittest.TestCase):
    def test_other_errors_are_the_answer(self) -> None:
        for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                     grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
                     grpc.StatusCode.RESOURCE_EXHAUSTED):
            self.assertEqual(decide(Error(code, dedup_leader=OTHER)),
                             RetryDecision(Action.ANSWER), code)

    def test_follows_a_leader_hint_within_the_attempt(self) -> None:
        self.assertEqual(
            decide(Error(grpc.StatusCode.UNAVAILABLE, dedup_leader=OTHER), hops=2),
            RetryDecision(Action.HOP, leader=OTHER))

    def test_no_time_left_follows_the_hint_on_the_next_attempt(self) -> None:
        self.assertEqual(
            decide(Error(grpc.StatusCode.UNAVAILABLE, dedup_leader=OTHER),
                   attempt=1, time_left_s=0.0),
            RetryDecision(Action.RETRY, leader=OTHER, delay_s=0.2))

    def test_hops_used_up_advance_and_back_off(self) -> None:
        self.assertEqual(
            decide(Error(grpc.StatusCode.UNAVAILABLE, dedup_leader=OTHER), hops=3),
            RetryDecision(Action.RETRY, delay_s=0.1, advance=True))

    def test_a_node_naming_itself_is_left(self) -> None:
        self.assertEqual(
            decide(Error(grpc.StatusCode.UNAVAILABLE, dedup_leader=SELF), attempt=2),
            RetryDecision(Action.RETRY, delay_s=0.30000000000000004, advance=True))

    def test_an_unreachable_leader_is_not_followed(self) -> None:
        self.assertEqual(
            decide(Error(grpc.StatusCode.UNAVAILABLE, dedup_leader=OTHER),
                   can_follow=False),
            RetryDecision(Action.RETRY, delay_s=0.1, advance=True))

    def test_unavailable_on_the_last_attempt_gives_up(self) -> None:
        self.assertEqual(decide(Error(grpc.StatusCode.UNAVAILABLE), attempt=4),
                         RetryDecision(Action.GIVE_UP, advance=True))

    def test_server_delay_replaces_the_backoff(self) -> None:
        decision = decide(over_limit(1.5), attempt=3)
        self.assertEqual(decision.action, Action.RETRY)
        self.assertAlmostEqual(decision.delay_s, 1.5)
        self.assertFalse(decision.advance)
        self.assertEqual(decide(over_limit(3600)).delay_s, 30.0)

    def test_server_delay_on_the_last_attempt_gives_up(self) -> None:
        self.assertEqual(decide(over_limit(1.0), attempt=4),
                         RetryDecision(Action.GIVE_UP))

    def test_unknown_outcome_retried_when_safe(self) -> None:
        self.assertEqual(decide(unknown(), attempt=1),
                         RetryDecision(Action.RETRY, delay_s=0.2, outcome_unknown=True))
        # The error this client raises for one counts too.
        raised = DedupRpcError(grpc.StatusCode.ABORTED, "x", outcome_unknown=True)
        self.assertTrue(decide(raised).outcome_unknown)

    def test_unknown_outcome_answered_when_not_safe(self) -> None:
        self.assertEqual(decide(unknown(), resend_unknown=False),
                         RetryDecision(Action.ANSWER, outcome_unknown=True))

    def test_unknown_outcome_on_the_last_attempt_gives_up(self) -> None:
        self.assertEqual(decide(unknown(), attempt=4),
                         RetryDecision(Action.GIVE_UP, outcome_unknown=True))

    def test_backoff_is_asked_only_for_a_retry(self) -> None:
        def no_backoff(retry: int) -> float:
            raise AssertionError("backoff asked")
        for error in (Error(grpc.StatusCode.UNAVAILABLE, dedup_leader=OTHER),
                      Error(grpc.StatusCode.INTERNAL)):
            decide(error, backoff_s=no_backoff)
        decide(Error(grpc.StatusCode.UNAVAILABLE), attempt=4, backoff_s=no_backoff)


class ItemResendableTest(unittest.TestCase):
    def test_unavailable_always_aborted_only_when_safe(self) -> None:
        owned = dedup_pb2.BeginRequest(key="k", owner="o")
        anonymous = dedup_pb2.BeginRequest(key="k")
        complete = dedup_pb2.CompleteRequest(key="k", fence=1)
        unavailable = DedupRpcError(grpc.StatusCode.UNAVAILABLE, "x")
        aborted = DedupRpcError(grpc.StatusCode.ABORTED, "x")
        self.assertTrue(item_resendable(unavailable, anonymous))
        self.assertTrue(item_resendable(aborted, owned))
        self.assertTrue(item_resendable(aborted, complete))
        self.assertFalse(item_resendable(aborted, anonymous))
        for code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
                     grpc.StatusCode.FAILED_PRECONDITION):
            self.assertFalse(item_resendable(DedupRpcError(code, "x"), owned), code)


if __name__ == "__main__":
    unittest.main()
