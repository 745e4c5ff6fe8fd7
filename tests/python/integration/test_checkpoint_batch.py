"""Checkpoints through CoalescingClient and AsyncCoalescingClient against a
real dedupd: concurrent checkpoints are answered OK over fewer
CheckpointBatch RPCs than calls (and no unary Checkpoint: the server's
dedup_request_duration_seconds_count by method), a takeover's Begin carries
the last one, a stale fence is refused STALE_FENCE for its item only, and an
invalid item (empty step) raises INVALID_ARGUMENT naming `step`, as its
unary call would, while the others succeed. The helpers' claim.checkpoint
goes through the coalescer too. (A server without CheckpointBatch:
tests/python/unit/test_checkpoint_coalescing.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
import uuid
from concurrent.futures import Future
from typing import Any, Callable

import grpc

from dedup_client import (
    AsyncCoalescingClient,
    Client,
    CoalescingClient,
    current_claim,
    dedup_pb2,
    with_idempotency,
    with_idempotency_async,
)
from dedupd_process import Dedupd

SERVER: Dedupd
NS = "py-client:checkpoint-batch"
Begin = dedup_pb2.BeginResponse
Checkpoint = dedup_pb2.CheckpointResponse


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd(metrics=True, args=["--min_lease_ms=100"])


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


def rpcs(method: str) -> float:
    return SERVER.metric(f'dedup_request_duration_seconds_count{{method="{method}"}}')


class RpcCounts:
    """CheckpointBatch and unary Checkpoint RPCs the server answered since
    it was made."""

    def __init__(self) -> None:
        self._batches, self._unary = rpcs("CheckpointBatch"), rpcs("Checkpoint")

    def batches(self) -> float:
        return rpcs("CheckpointBatch") - self._batches

    def unary(self) -> float:
        return rpcs("Checkpoint") - self._unary


def take_over(client: Client, key: str, owner: str) -> Begin:
    """Begins `key` as `owner` once the current owner's lease ran out
    (polled: IN_USE until then)."""
    deadline = time.monotonic() + 10
    while True:
        begin = client.begin(NS, key, b"h", owner=owner, lease_ms=5000)
        if begin.status != Begin.IN_USE:
            return begin
        if time.monotonic() > deadline:
            raise AssertionError(f"{key}: the first lease did not run out")
        time.sleep(0.02)


def one_batch(
    coalescing: CoalescingClient, calls: Callable[[], list[Future]]
) -> tuple[list[Future], int]:
    """Makes `calls` while the lane's only slot (max_batches_in_flight=1) is
    held by a first checkpoint whose answer's callback waits, so they all
    leave as one CheckpointBatch once it returns. (The callback runs on the
    channel's gRPC thread, before the slot is given back.) Returns their
    futures and how many holding CheckpointBatch RPCs it took: one, unless an
    answer came back before its callback was added (then the callback runs
    here, holds nothing, and another is tried)."""
    gate, answered = threading.Event(), threading.Event()
    here = threading.get_ident()
    ran_here: list[bool] = []

    def hold(_: Future) -> None:
        if threading.get_ident() == here:  # already answered: holds nothing
            ran_here.append(True)
            return
        answered.set()
        gate.wait(10)

    holds = 0
    try:
        while True:
            holds += 1
            # About one in four is answered at once (measured): 50 in a row
            # is not a chance event.
            assert holds <= 50, "every holding checkpoint was answered at once"
            ran_here.clear()
            first = coalescing.checkpoint_future(NS, f"hold-{uuid.uuid4()}", 1, "s")
            first.add_done_callback(hold)
            if not ran_here:
                break
        futures = calls()
        assert answered.wait(10), "the first checkpoint was not answered"
    finally:
        gate.set()
    first.result(10)  # NOT_FOUND (no such claim): its answer does not matter
    return futures, holds


class CoalescedCheckpointTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.coalescing = CoalescingClient(self.client, max_batches_in_flight=1)
        self.addCleanup(self.coalescing.close, 30)
        self.prefix = f"k-{uuid.uuid4()}"

    def begin(self, key: str, owner: str = "w1", lease_ms: int = 5000) -> Begin:
        begin = self.client.begin(NS, key, b"h", owner=owner, lease_ms=lease_ms)
        self.assertEqual(begin.status, Begin.STARTED)
        return begin

    def test_concurrent_threads_checkpoint_over_fewer_rpcs(self) -> None:
        threads, rounds = 16, 6
        coalescing = CoalescingClient(self.client)  # two batches in flight
        self.addCleanup(coalescing.close, 30)
        fences = [self.begin(f"{self.prefix}/{t}").fence for t in range(threads)]
        counts = RpcCounts()
        answers: list[Any] = []
        failures: list[BaseException] = []

        def run(t: int) -> None:
            try:
                for r in range(rounds):
                    answers.append(coalescing.checkpoint(
                        NS, f"{self.prefix}/{t}", fences[t], f"step-{r}", f"{t}.{r}".encode()))
            except BaseException as error:  # noqa: BLE001 - re-raised below
                failures.append(error)

        workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
            self.assertFalse(worker.is_alive(), "a caller hung")
        if failures:
            raise failures[0]
        self.assertEqual([a.status for a in answers], [Checkpoint.OK] * threads * rounds)
        self.assertEqual(counts.unary(), 0)
        self.assertGreater(counts.batches(), 0)
        self.assertLess(counts.batches(), threads * rounds)
        for t in range(threads):  # each key holds its thread's last step
            stored = self.client.get(NS, f"{self.prefix}/{t}").record.checkpoint
            self.assertEqual((stored.step, stored.data, stored.fence),
                             (f"step-{rounds - 1}", f"{t}.{rounds - 1}".encode(), fences[t]))

    def test_queued_checkpoints_leave_as_one_batch(self) -> None:
        keys = [f"{self.prefix}/{i}" for i in range(20)]
        fences = [self.begin(key).fence for key in keys]
        counts = RpcCounts()
        futures, holds = one_batch(self.coalescing, lambda: [
            self.coalescing.checkpoint_future(NS, key, fence, "reserved", b"\x00" * 65536)
            for key, fence in zip(keys, fences)])
        self.assertEqual([f.result(10).status for f in futures], [Checkpoint.OK] * 20)
        # The held one, then the 20 together (1.3 MiB: under the cap).
        self.assertEqual((counts.batches(), counts.unary()), (holds + 1, 0))

    def test_a_takeover_carries_the_last_checkpoint_and_the_stale_fence_item_alone_is_refused(
        self,
    ) -> None:
        key = f"{self.prefix}/taken"
        first = self.begin(key, owner="w1", lease_ms=150)
        self.assertEqual(self.coalescing.checkpoint(NS, key, first.fence, "charged", b"c1").status,
                         Checkpoint.OK)
        self.assertEqual(self.coalescing.checkpoint(NS, key, first.fence, "shipped", b"p2").status,
                         Checkpoint.OK)
        second = take_over(self.client, key, "w2")
        self.assertEqual((second.status, second.takeover), (Begin.STARTED, True))
        self.assertEqual((second.checkpoint.step, second.checkpoint.data,
                          second.checkpoint.fence), ("shipped", b"p2", first.fence))

        others = [f"{self.prefix}/other-{i}" for i in range(3)]
        fences = [self.begin(other).fence for other in others]
        counts = RpcCounts()
        (stale, *fresh), holds = one_batch(self.coalescing, lambda: [
            self.coalescing.checkpoint_future(NS, key, first.fence, "late", b"x"),
            self.coalescing.checkpoint_future(NS, key, second.fence, "resumed", b"r"),
            *(self.coalescing.checkpoint_future(NS, other, fence, "s")
              for other, fence in zip(others, fences))])
        self.assertEqual((stale.result(10).status, stale.result(10).fence),
                         (Checkpoint.STALE_FENCE, second.fence))
        self.assertEqual([f.result(10).status for f in fresh], [Checkpoint.OK] * 4)
        # (dedupd counts an RPC before answering it.)
        self.assertEqual(counts.batches(), holds + 1)  # all five in one batch
        stored = self.client.get(NS, key).record.checkpoint
        self.assertEqual((stored.step, stored.fence), ("resumed", second.fence))

    def test_an_empty_step_is_refused_alone_as_its_unary_call_would_be(self) -> None:
        keys = [f"{self.prefix}/{i}" for i in range(4)]
        fences = [self.begin(key).fence for key in keys]
        counts = RpcCounts()
        futures, holds = one_batch(self.coalescing, lambda: [
            self.coalescing.checkpoint_future(NS, key, fence, "" if i == 2 else "s")
            for i, (key, fence) in enumerate(zip(keys, fences))])
        with self.assertRaises(grpc.RpcError) as caught:
            futures[2].result(10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(caught.exception.details().startswith("step: "),
                        caught.exception.details())
        with self.assertRaises(grpc.RpcError) as unary:
            self.client.checkpoint(NS, keys[2], fences[2], "")
        self.assertEqual(caught.exception.details(), unary.exception.details())
        self.assertEqual([futures[i].result(10).status for i in (0, 1, 3)], [Checkpoint.OK] * 3)
        self.assertEqual(counts.batches(), holds + 1)  # all four in one batch
        self.assertFalse(self.client.get(NS, keys[2]).record.HasField("checkpoint"))

    def test_with_idempotency_checkpoints_go_as_batches(self) -> None:
        counts = RpcCounts()
        seen: list[Any] = []

        def fn() -> str:
            claim = current_claim()
            claim.checkpoint("half", {"done": 1})
            claim.checkpoint("most", {"done": 2})
            seen.append(self.client.get(NS, claim.key).record.checkpoint.data)
            return "ok"

        outcome = with_idempotency(self.coalescing, NS, {"run": self.prefix}, fn,
                                   f"{self.prefix}/helper")
        self.assertEqual((outcome.result, seen), ("ok", [b'{"done":2}']))
        self.assertEqual((counts.batches(), counts.unary()), (2, 0))


class AsyncCoalescedCheckpointTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.coalescing = AsyncCoalescingClient(SERVER.target, max_batches_in_flight=1)
        self.addAsyncCleanup(self.coalescing.close, 30)
        self.client = self.coalescing.client
        self.prefix = f"k-{uuid.uuid4()}"

    async def begin(self, key: str, owner: str = "w1", lease_ms: int = 5000) -> Begin:
        begin = await self.client.begin(NS, key, b"h", owner=owner, lease_ms=lease_ms)
        self.assertEqual(begin.status, Begin.STARTED)
        return begin

    async def test_concurrent_checkpoints_over_two_rpcs(self) -> None:
        keys = [f"{self.prefix}/{i}" for i in range(30)]
        fences = [(await self.begin(key)).fence for key in keys]
        counts = RpcCounts()
        answers = await asyncio.gather(*(
            self.coalescing.checkpoint(NS, key, fence, "reserved", b"d" * 1000)
            for key, fence in zip(keys, fences)))
        self.assertEqual([a.status for a in answers], [Checkpoint.OK] * 30)
        # The first leaves alone at once, the other 29 together.
        self.assertEqual((counts.batches(), counts.unary()), (2, 0))

    async def test_takeover_stale_fence_and_an_empty_step_item_by_item(self) -> None:
        key = f"{self.prefix}/taken"
        first = await self.begin(key, owner="w1", lease_ms=150)
        self.assertEqual((await self.coalescing.checkpoint(
            NS, key, first.fence, "reserved", b'["sku",3]')).status, Checkpoint.OK)
        deadline = time.monotonic() + 10
        while (second := await self.client.begin(
                NS, key, b"h", owner="w2", lease_ms=5000)).status == Begin.IN_USE:
            self.assertLess(time.monotonic(), deadline, "the first lease did not run out")
            await asyncio.sleep(0.02)
        self.assertEqual((second.status, second.takeover), (Begin.STARTED, True))
        self.assertEqual((second.checkpoint.step, second.checkpoint.data,
                          second.checkpoint.fence), ("reserved", b'["sku",3]', first.fence))

        other = f"{self.prefix}/other"
        other_fence = (await self.begin(other)).fence
        counts = RpcCounts()
        done = await asyncio.gather(
            self.coalescing.checkpoint(NS, other, other_fence, "first"),
            self.coalescing.checkpoint(NS, key, first.fence, "late"),
            self.coalescing.checkpoint(NS, key, second.fence, "resumed"),
            self.coalescing.checkpoint(NS, other, other_fence, ""),
            self.coalescing.checkpoint(NS, other, other_fence, "second"),
            return_exceptions=True)
        self.assertEqual(counts.batches(), 2)  # "first" alone, then the four
        self.assertEqual((done[1].status, done[1].fence), (Checkpoint.STALE_FENCE, second.fence))
        self.assertEqual([done[i].status for i in (0, 2, 4)], [Checkpoint.OK] * 3)
        self.assertIsInstance(done[3], grpc.RpcError)
        self.assertEqual(done[3].code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(done[3].details().startswith("step: "), done[3].details())
        record = (await self.client.get(NS, key)).record
        self.assertEqual((record.checkpoint.step, record.checkpoint.fence),
                         ("resumed", second.fence))

    async def test_with_idempotency_async_checkpoints_go_as_batches(self) -> None:
        counts = RpcCounts()

        async def fn() -> str:
            await current_claim().checkpoint("half", [1])
            return "ok"

        outcome = await with_idempotency_async(self.coalescing, NS, {"run": self.prefix}, fn,
                                               f"{self.prefix}/helper")
        self.assertEqual(outcome.result, "ok")
        self.assertEqual((counts.batches(), counts.unary()), (1, 0))


if __name__ == "__main__":
    unittest.main()
