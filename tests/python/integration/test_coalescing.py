"""CoalescingClient and begin_batch against a real dedupd: concurrent callers
get the answers unary calls would give while the server sees batch RPCs, and
with_idempotency through it still runs each side effect exactly once."""

from __future__ import annotations

import threading
import unittest
import uuid
from collections import Counter

import grpc

from dedup_client import (
    Client,
    CoalescingClient,
    DedupRpcError,
    dedup_pb2,
    with_idempotency,
)
from dedupd_process import Dedupd

SERVER: Dedupd
Begin = dedup_pb2.BeginResponse


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd(metrics=True)


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


def rpcs(method: str) -> float:
    return SERVER.metric(f'dedup_request_duration_seconds_count{{method="{method}"}}')


def run_threads(count: int, body) -> None:
    """Runs body(i) on `count` threads; re-raises the first failure."""
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            body(i)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            failures.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a caller hung"
    if failures:
        raise failures[0]


class CoalescingIntegrationTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.coalescing = CoalescingClient(self.client)
        self.addCleanup(self.coalescing.close)
        self.prefix = f"t-{uuid.uuid4()}"

    def test_concurrent_callers_get_unary_answers_over_batches(self) -> None:
        threads, rounds = 16, 15
        unary_before = rpcs("Begin") + rpcs("Complete")
        batches_before = rpcs("BeginBatch")
        answers: Counter[str] = Counter()
        shared_started: list[int] = []
        lock = threading.Lock()
        c = self.coalescing

        def caller(t: int) -> None:
            for r in range(rounds):
                key = f"{self.prefix}/{t}/{r}"
                owner = str(uuid.uuid4())
                first = c.begin("py", key, b"h", owner=owner)
                done = c.complete("py", key, first.fence, dedup_pb2.SUCCESS, f"r{t}.{r}".encode())
                again = c.begin("py", key, b"h", owner=str(uuid.uuid4()))
                # Every thread also races for one key per round.
                shared = c.begin("py", f"{self.prefix}/shared/{r}", b"h", owner=owner)
                with lock:
                    answers[Begin.Status.Name(first.status)] += 1
                    answers[dedup_pb2.CompleteResponse.Status.Name(done.status)] += 1
                    ok = again.status == Begin.DUPLICATE and again.result == f"r{t}.{r}".encode()
                    answers["duplicate-with-result" if ok else "wrong-duplicate"] += 1
                    if shared.status == Begin.STARTED:
                        shared_started.append(r)

        run_threads(threads, caller)
        calls = threads * rounds
        self.assertEqual(answers, Counter({"STARTED": calls, "OK": calls,
                                           "duplicate-with-result": calls}))
        self.assertEqual(sorted(shared_started), list(range(rounds)))  # one owner each
        self.assertEqual(rpcs("Begin") + rpcs("Complete"), unary_before)
        begin_batches = rpcs("BeginBatch") - batches_before
        self.assertGreater(begin_batches, 0)
        self.assertLess(begin_batches, 3 * calls)  # three Begins per round

    def test_a_refused_item_fails_alone_with_the_unary_message(self) -> None:
        c = self.coalescing
        good = [c.begin_future("py", f"{self.prefix}/{i}", owner="o") for i in range(10)]
        bad = c.begin_future("py", "", owner="o")
        self.assertTrue(all(f.result(30).status == Begin.STARTED for f in good))
        with self.assertRaises(grpc.RpcError) as caught:
            bad.result(30)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # Exactly what the unary call says about the same request.
        with self.assertRaises(grpc.RpcError) as unary:
            self.client.begin("py", "", owner="o")
        self.assertEqual(caught.exception.details(), unary.exception.details())

    def test_with_idempotency_through_it_runs_each_side_effect_once(self) -> None:
        runs: Counter[int] = Counter()
        duplicates: list[int] = []
        lock = threading.Lock()

        def caller(t: int) -> None:
            order = t % 6

            def send() -> dict:
                with lock:
                    runs[order] += 1
                return {"order": order}

            outcome = with_idempotency(
                self.coalescing, "py-orders", {"order": order, "run": self.prefix}, send
            )
            self.assertEqual(outcome.result, {"order": order})
            if outcome.duplicate:
                with lock:
                    duplicates.append(order)

        run_threads(24, caller)
        self.assertEqual(runs, Counter({order: 1 for order in range(6)}))
        self.assertEqual(len(duplicates), 18)

    def test_begin_batch_answers_item_by_item(self) -> None:
        key = f"{self.prefix}/batch"
        results = self.client.begin_batch([
            dedup_pb2.BeginRequest(namespace="py", key=key, args_hash=b"h", owner="a"),
            dedup_pb2.BeginRequest(namespace="py", key=""),
            dedup_pb2.BeginRequest(namespace="py", key=key, args_hash=b"other", owner="b"),
        ])
        self.assertEqual(results[0].status, Begin.STARTED)
        self.assertIsInstance(results[1], DedupRpcError)
        self.assertEqual(results[1].code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(results[1].details().startswith("items[1].key: "), results[1].details())
        self.assertEqual(results[2].status, Begin.CONFLICT)
        done = self.client.complete_batch([dedup_pb2.CompleteRequest(
            namespace="py", key=key, fence=results[0].fence, outcome=dedup_pb2.SUCCESS)])
        self.assertEqual(done[0].status, dedup_pb2.CompleteResponse.OK)


if __name__ == "__main__":
    unittest.main()
