"""Begins refused for the result budget of a BeginBatch answer (dedupd's
--max_batch_response_bytes: UNAVAILABLE with reason RESULT_BUDGET, or from an
older server only the message "... ask for this item again ...") against a
scripted server: CoalescingClient and Client.begin_batch send them again in
batches that fit without spending attempts, and still give up when nothing
fits. (Against the real dedupd: integration/test_result_budget.py.)"""

from __future__ import annotations

import unittest

import grpc

from batch_server import ScriptedBatchServer
from dedup_client import Client, CoalescingClient, DedupRpcError, dedup_pb2
from dedup_client.batch import (
    RESULT_BUDGET_REASON,
    is_result_budget_refusal,
    item_results,
    renumber,
)

DUPLICATE = dedup_pb2.BeginResponse.DUPLICATE
# What dedupd answers an item past the budget (storage/store.h).
BUDGET_MESSAGE = ("results: the answers to this request passed their 200000 bytes "
                  "of stored results; ask for this item again, alone or in a later batch")


# How a scripted server marks a refusal for the budget: as dedupd does now
# (reason, here with a message that does not say it, so that only the reason
# can be what the client reads), or as older servers did (message).
MARKS = ("reason", "message")


def budget_error(mark: str) -> dedup_pb2.ItemError:
    if mark == "reason":
        return dedup_pb2.ItemError(code=grpc.StatusCode.UNAVAILABLE.value[0],
                                   message="results: over this answer's budget",
                                   reason=RESULT_BUDGET_REASON)
    return dedup_pb2.ItemError(code=grpc.StatusCode.UNAVAILABLE.value[0],
                               message=BUDGET_MESSAGE)


def fitting(fit: int, mark: str):
    """A BeginBatch handler answering the first `fit` items DUPLICATE with a
    result and refusing the rest for the budget, as dedupd does."""

    def answer(request, context):
        response = dedup_pb2.BeginBatchResponse()
        for index, _ in enumerate(request.items):
            item = response.items.add()
            if index < fit:
                item.response.status = DUPLICATE
                item.response.result = b"stored"
            else:
                item.error.CopyFrom(budget_error(mark))
        return response

    return answer


class ResultBudgetTest(unittest.TestCase):
    def serve(self, fit: int, mark: str = "reason") -> ScriptedBatchServer:
        server = ScriptedBatchServer(fitting(fit, mark))
        self.addCleanup(server.stop)
        return server

    def client(self, server: ScriptedBatchServer, max_attempts: int) -> Client:
        client = Client(server.target, max_attempts=max_attempts,
                        backoff_base_s=0.001, backoff_cap_s=0.002)
        self.addCleanup(client.close)
        return client

    def test_the_reason_marks_the_refusal(self) -> None:
        unavailable = grpc.StatusCode.UNAVAILABLE
        response = dedup_pb2.BeginBatchResponse()
        response.items.add().error.CopyFrom(budget_error("reason"))
        [refused] = item_results("BeginBatch", 1, response.items)
        self.assertEqual(refused.reason, RESULT_BUDGET_REASON)
        self.assertTrue(is_result_budget_refusal(refused))
        # Kept when renumbered for the caller's batch.
        self.assertTrue(is_result_budget_refusal(renumber(
            DedupRpcError(unavailable, "items[0].results: over", reason=RESULT_BUDGET_REASON),
            0, 5)))
        # Another reason is not one, whatever the message says; nor a code
        # other than UNAVAILABLE (only that one says that nothing happened).
        self.assertFalse(is_result_budget_refusal(
            DedupRpcError(unavailable, BUDGET_MESSAGE, reason="OTHER")))
        self.assertFalse(is_result_budget_refusal(
            DedupRpcError(grpc.StatusCode.ABORTED, "over", reason=RESULT_BUDGET_REASON)))

    def test_without_a_reason_the_message_marks_the_refusal(self) -> None:
        unavailable = grpc.StatusCode.UNAVAILABLE
        self.assertTrue(is_result_budget_refusal(DedupRpcError(unavailable, BUDGET_MESSAGE)))
        self.assertFalse(is_result_budget_refusal(DedupRpcError(unavailable, "not leading")))
        self.assertFalse(is_result_budget_refusal(
            DedupRpcError(grpc.StatusCode.ABORTED, BUDGET_MESSAGE)))

    def test_coalesced_begins_go_again_in_batches_that_fit(self) -> None:
        for mark in MARKS:
            with self.subTest(mark=mark):
                self.check_coalesced_begins_go_again_in_batches_that_fit(mark)

    def check_coalesced_begins_go_again_in_batches_that_fit(self, mark: str) -> None:
        # 20 calls queue behind a held one and are answered two at a time.
        # With 2 attempts, re-sending the refused 18 together would answer
        # two more and fail 16 callers.
        server = self.serve(fit=2, mark=mark)
        coalescing = CoalescingClient(self.client(server, max_attempts=2),
                                      max_batches_in_flight=1)
        self.addCleanup(coalescing.close, 10)
        server.hold()
        first = coalescing.begin_future("ns", "k", owner="o0")
        self.assertTrue(server.holding.wait(10))
        waiting = [coalescing.begin_future("ns", "k", owner=f"o{i}") for i in range(1, 21)]
        server.release()
        for future in [first, *waiting]:
            self.assertEqual(future.result(10).result, b"stored")
        self.assertEqual(server.batch_sizes(), [1, 20] + [2] * 9)

    def test_coalesced_begin_gives_up_when_nothing_fits(self) -> None:
        for mark in MARKS:
            with self.subTest(mark=mark):
                self.check_coalesced_begin_gives_up_when_nothing_fits(mark)

    def check_coalesced_begin_gives_up_when_nothing_fits(self, mark: str) -> None:
        # Nothing answered, so the re-sends are not free: max_attempts.
        server = self.serve(fit=0, mark=mark)
        coalescing = CoalescingClient(self.client(server, max_attempts=3))
        self.addCleanup(coalescing.close, 10)
        with self.assertRaises(grpc.RpcError) as caught:
            coalescing.begin("ns", "k", owner="o")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(caught.exception.details(), budget_error(mark).message)
        self.assertEqual(server.batch_sizes(), [1, 1, 1])

    def test_begin_batch_sends_refused_items_again_in_batches_that_fit(self) -> None:
        for mark in MARKS:
            with self.subTest(mark=mark):
                self.check_begin_batch_sends_refused_items_again_in_batches_that_fit(mark)

    def check_begin_batch_sends_refused_items_again_in_batches_that_fit(self, mark: str) -> None:
        server = self.serve(fit=3, mark=mark)
        client = self.client(server, max_attempts=1)
        results = client.begin_batch(
            [dedup_pb2.BeginRequest(namespace="ns", key="k", owner=f"o{i}") for i in range(10)])
        self.assertEqual([r.result for r in results], [b"stored"] * 10)
        self.assertEqual(server.batch_sizes(), [10, 3, 3, 1])
        # The owners went again in order, each once.
        owners = [item.owner for batch in server.begin_batches[1:] for item in batch]
        self.assertEqual(owners, [f"o{i}" for i in range(3, 10)])

    def test_begin_batch_gives_up_when_nothing_fits(self) -> None:
        for mark in MARKS:
            with self.subTest(mark=mark):
                self.check_begin_batch_gives_up_when_nothing_fits(mark)

    def check_begin_batch_gives_up_when_nothing_fits(self, mark: str) -> None:
        server = self.serve(fit=0, mark=mark)
        client = self.client(server, max_attempts=2)
        results = client.begin_batch(
            [dedup_pb2.BeginRequest(namespace="ns", key="k", owner=f"o{i}") for i in range(2)])
        for i, result in enumerate(results):
            self.assertIsInstance(result, DedupRpcError)
            self.assertEqual(result.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(result.details(), budget_error(mark).message)
        self.assertEqual(server.batch_sizes(), [2, 2])


if __name__ == "__main__":
    unittest.main()
