"""Many callers of one key with a large result against a real dedupd whose
BeginBatch answers carry at most two such results
(--max_batch_response_bytes): every caller still gets the DUPLICATE with
the result, through CoalescingClient and through Client.begin_batch."""

from __future__ import annotations

import unittest
import uuid

import grpc

from dedup_client import Client, CoalescingClient, dedup_pb2
from dedup_client._proto import dedup_pb2_grpc
from dedup_client.batch import RESULT_BUDGET_REASON
from dedupd_process import Dedupd

SERVER: Dedupd
DUPLICATE = dedup_pb2.BeginResponse.DUPLICATE
RESULT = b"r" * 100_000
CALLERS = 200


def setUpModule() -> None:
    global SERVER
    # Two 100 KB results fit one answer.
    SERVER = Dedupd(metrics=True, args=["--max_result_bytes=150000",
                                        "--max_batch_response_bytes=200000",
                                        "--event_log=off"])


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


class ResultBudgetIntegrationTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.key = f"big-{uuid.uuid4()}"
        begun = self.client.begin("py-budget", self.key, b"h", owner="writer")
        self.assertEqual(begun.status, dedup_pb2.BeginResponse.STARTED)
        done = self.client.complete("py-budget", self.key, begun.fence,
                                    dedup_pb2.SUCCESS, RESULT)
        self.assertEqual(done.status, dedup_pb2.CompleteResponse.OK)

    def capped(self) -> float:
        return SERVER.metric("dedup_batch_results_capped_total")

    def batches(self) -> float:
        return SERVER.metric('dedup_request_duration_seconds_count{method="BeginBatch"}')

    def assert_all_duplicates(self, answers: list) -> None:
        wrong = [a for a in answers
                 if isinstance(a, BaseException) or a.status != DUPLICATE or a.result != RESULT]
        self.assertEqual(len(wrong), 0, f"{len(wrong)} callers, e.g. {wrong[:1]!r:.300}")

    def test_concurrent_coalesced_begins_all_get_the_result(self) -> None:
        capped, batches = self.capped(), self.batches()
        coalescing = CoalescingClient(self.client)
        self.addCleanup(coalescing.close, 60)
        futures = [coalescing.begin_future("py-budget", self.key, b"h", owner=f"o{i}")
                   for i in range(CALLERS)]
        answers = []
        for future in futures:
            try:
                answers.append(future.result(60))
            except Exception as error:  # noqa: BLE001 - counted as wrong
                answers.append(error)
        self.assert_all_duplicates(answers)
        self.assertGreater(self.capped(), capped)  # the cap is what they met
        self.assertLess(self.batches() - batches, CALLERS)  # not each alone

    def test_the_server_marks_refusals_with_the_reason(self) -> None:
        # What the clients rely on: code UNAVAILABLE, reason RESULT_BUDGET.
        channel = grpc.insecure_channel(SERVER.target)
        self.addCleanup(channel.close)
        response = dedup_pb2_grpc.DedupStub(channel).BeginBatch(
            dedup_pb2.BeginBatchRequest(items=[
                dedup_pb2.BeginRequest(namespace="py-budget", key=self.key, args_hash=b"h",
                                       owner=f"o{i}") for i in range(3)]),
            timeout=10)
        self.assertEqual([item.WhichOneof("result") for item in response.items],
                         ["response", "response", "error"])
        self.assertEqual(response.items[2].error.code, grpc.StatusCode.UNAVAILABLE.value[0])
        self.assertEqual(response.items[2].error.reason, RESULT_BUDGET_REASON)

    def test_begin_batch_gets_every_item_its_result(self) -> None:
        capped = self.capped()
        answers = self.client.begin_batch([
            dedup_pb2.BeginRequest(namespace="py-budget", key=self.key, args_hash=b"h",
                                   owner=f"o{i}") for i in range(CALLERS)])
        self.assert_all_duplicates(answers)
        self.assertGreater(self.capped(), capped)


if __name__ == "__main__":
    unittest.main()
