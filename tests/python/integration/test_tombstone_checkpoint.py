"""EXPIRED, accept_rerun and checkpoints against a real dedupd, blocking and
asyncio:

- a completion whose record expired (ttl_s=1) leaves a tombstone: a late
  retry raises ExpiredError (when and how it ran; not a duplicate, fn not
  run); accept_rerun=True runs fn again with a higher fence (rerun);
- a takeover receives the previous owner's last checkpoint (step, JSON data,
  fence), and the previous owner's next checkpoint is refused STALE_FENCE:
  claim.lost is set and ClaimLost (call "Checkpoint") raised, nothing is
  recorded for it;
- the raw checkpoint call (Client: unary; CoalescingClient: batched), Get
  and a re-entering Begin showing it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
import uuid
from typing import Any

import grpc

from dedup_client import (
    AsyncClient,
    ClaimLost,
    Client,
    CoalescingClient,
    ConflictError,
    ExpiredError,
    ReplayedError,
    current_claim,
    dedup_pb2,
    idempotent,
    with_idempotency,
    with_idempotency_async,
)
from dedupd_process import Dedupd

SERVER: Dedupd
Begin = dedup_pb2.BeginResponse
Checkpoint = dedup_pb2.CheckpointResponse
NS = "py-client:tombstone-checkpoint"


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd(args=["--min_lease_ms=100"])


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


def wait_until_expired(client: Client, key: str, timeout_s: float = 5.0) -> None:
    """Polls Get until the record is gone (its TTL ran out)."""
    deadline = time.monotonic() + timeout_s
    while client.get(NS, key).found:
        if time.monotonic() > deadline:
            raise AssertionError(f"record {key} did not expire within {timeout_s} s")
        time.sleep(0.05)


class ExpiredTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.key = f"k-{uuid.uuid4()}"

    def test_late_retry_is_expired_then_accept_rerun_runs_again(self) -> None:
        runs: list[int] = []

        def send() -> str:
            runs.append(1)
            return f"sent-{len(runs)}"

        args = {"invoice": 7}
        first = with_idempotency(self.client, NS, args, send, self.key, ttl_s=1)
        self.assertEqual((first.result, first.duplicate, first.rerun), ("sent-1", False, False))
        wait_until_expired(self.client, self.key)

        with self.assertRaises(ExpiredError) as caught:
            with_idempotency(self.client, NS, args, send, self.key)
        e = caught.exception
        self.assertNotIsInstance(e, ReplayedError)
        self.assertEqual((e.key, e.fence, e.outcome, e.attempts),
                         (self.key, first.fence, dedup_pb2.SUCCESS, 1))
        now_ms = time.time() * 1000
        self.assertTrue(0 < e.completed_at_ms <= now_ms, e.completed_at_ms)
        self.assertGreater(e.tombstone_expires_at_ms, now_ms + 3_600_000)  # 7 days default
        self.assertRegex(str(e), r"already ran .*no longer kept")
        self.assertEqual(len(runs), 1)

        # Other arguments on the tombstone: CONFLICT, as on a live record.
        with self.assertRaises(ConflictError):
            with_idempotency(self.client, NS, {"invoice": 8}, send, self.key, accept_rerun=True)

        seen: list[Any] = []

        def again() -> str:
            claim = current_claim()
            seen.append((claim.rerun, claim.takeover, claim.last_checkpoint))
            return send()

        rerun = with_idempotency(self.client, NS, args, again, self.key, accept_rerun=True)
        self.assertEqual((rerun.result, rerun.duplicate, rerun.rerun), ("sent-2", False, True))
        self.assertGreater(rerun.fence, first.fence)
        self.assertEqual(seen, [(True, False, None)])
        replay = with_idempotency(self.client, NS, args, send, self.key, accept_rerun=True)
        self.assertEqual((replay.result, replay.duplicate, replay.rerun), ("sent-2", True, False))
        self.assertEqual(len(runs), 2)

    def test_raw_begin_answers_expired_then_started_with_rerun(self) -> None:
        c, key = self.client, self.key
        started = c.begin(NS, key, b"h", owner="a", ttl_s=1)
        done = c.complete(NS, key, started.fence, dedup_pb2.ERROR, b"declined")
        self.assertEqual(done.status, dedup_pb2.CompleteResponse.OK)
        wait_until_expired(c, key)
        late = c.begin(NS, key, b"h", owner="b")
        self.assertEqual((late.status, late.fence, late.outcome, late.result),
                         (Begin.EXPIRED, started.fence, dedup_pb2.ERROR, b""))
        self.assertGreater(late.tombstone_expires_at, late.completed_at)
        rerun = c.begin(NS, key, b"h", owner="c", accept_rerun=True)
        self.assertEqual((rerun.status, rerun.rerun, rerun.attempts), (Begin.STARTED, True, 2))
        self.assertGreater(rerun.fence, started.fence)


class AsyncExpiredTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_decorator_raises_expired_then_reruns(self) -> None:
        client = AsyncClient(SERVER.target)
        self.addAsyncCleanup(client.close)
        key = f"k-{uuid.uuid4()}"
        runs: list[str] = []

        async def charge(order: str) -> str:
            runs.append(order)
            return f"charged {order} #{len(runs)}"

        once = idempotent(client, NS, key_from=lambda a: key, ttl_s=1)(charge)
        rerunnable = idempotent(client, NS, key_from=lambda a: key, accept_rerun=True)(charge)
        first = await once.with_outcome("o-1")
        deadline = time.monotonic() + 5
        while (await client.get(NS, key)).found:  # until the TTL ran out
            self.assertLess(time.monotonic(), deadline, "the record did not expire")
            await asyncio.sleep(0.05)
        with self.assertRaises(ExpiredError) as caught:
            await once("o-1")
        self.assertEqual((caught.exception.fence, caught.exception.outcome_name),
                         (first.fence, "SUCCESS"))
        again = await rerunnable.with_outcome("o-1")
        self.assertEqual((again.result, again.rerun, again.duplicate), ("charged o-1 #2", True, False))
        self.assertGreater(again.fence, first.fence)
        self.assertEqual(runs, ["o-1", "o-1"])


class CheckpointTakeoverTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.key = f"k-{uuid.uuid4()}"

    def test_takeover_resumes_from_the_checkpoint_and_the_old_owner_loses(self) -> None:
        args = {"order": 42}
        checkpointed = threading.Event()
        resume = threading.Event()
        outcome: dict[str, Any] = {}

        def first_owner() -> str:
            claim = current_claim()
            claim.checkpoint("charged", {"charge": "ch_1", "amount": 12.5})
            outcome["fence"] = claim.fence
            checkpointed.set()
            resume.wait(20)
            try:
                claim.checkpoint("shipped", {"parcel": 1})
            finally:
                outcome["lost"] = claim.lost.is_set()
            return "must not complete"

        def run_first() -> None:
            try:
                # renew=False and a short lease: the first owner stops
                # renewing (a frozen process); only its checkpoint finds out.
                with_idempotency(self.client, NS, args, first_owner, self.key,
                                 lease_ms=300, renew=False)
            except BaseException as e:  # noqa: BLE001 - examined below
                outcome["error"] = e

        thread = threading.Thread(target=run_first)
        thread.start()
        self.addCleanup(thread.join, 30)
        self.assertTrue(checkpointed.wait(10))

        seen: list[Any] = []

        def second_owner() -> str:
            claim = current_claim()
            seen.append((claim.takeover, claim.last_checkpoint))
            return f"resumed after {claim.last_checkpoint.data['charge']}"

        second = with_idempotency(self.client, NS, args, second_owner, self.key, lease_ms=5000)
        self.assertEqual((second.result, second.takeover), ("resumed after ch_1", True))
        self.assertGreater(second.fence, outcome["fence"])
        takeover, last = seen[0]
        self.assertTrue(takeover)
        self.assertEqual((last.step, last.data, last.fence, last.raw),
                         ("charged", {"charge": "ch_1", "amount": 12.5}, outcome["fence"],
                          b'{"charge":"ch_1","amount":12.5}'))
        self.assertGreater(last.recorded_at_ms, 0)

        resume.set()
        thread.join(30)
        error = outcome.get("error")
        self.assertIsInstance(error, ClaimLost)
        self.assertEqual((error.call, error.answer, error.fence, error.current_fence),
                         ("Checkpoint", "STALE_FENCE", outcome["fence"], second.fence))
        self.assertTrue(outcome["lost"])
        replay = with_idempotency(self.client, NS, args, self.fail, self.key)
        self.assertEqual((replay.result, replay.duplicate), ("resumed after ch_1", True))


class AsyncCheckpointTakeoverTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_takeover_resumes_and_the_old_owner_loses(self) -> None:
        client = AsyncClient(SERVER.target)
        self.addAsyncCleanup(client.close)
        key = f"k-{uuid.uuid4()}"
        checkpointed = asyncio.Event()
        resume = asyncio.Event()
        state: dict[str, Any] = {}

        async def first_owner() -> str:
            claim = current_claim()
            await claim.checkpoint("reserved", ["sku-1", 3])
            state["fence"] = claim.fence
            checkpointed.set()
            await resume.wait()
            try:
                await claim.checkpoint("charged")
            finally:
                state["lost"] = claim.lost.is_set()
            return "must not complete"

        first = asyncio.create_task(with_idempotency_async(
            client, NS, {}, first_owner, key, lease_ms=300, renew=False))
        await asyncio.wait_for(checkpointed.wait(), 10)

        async def second_owner() -> str:
            last = current_claim().last_checkpoint
            return f"{last.step}:{last.data}:{last.fence}"

        second = await with_idempotency_async(client, NS, {}, second_owner, key, lease_ms=5000)
        self.assertEqual((second.result, second.takeover),
                         (f"reserved:['sku-1', 3]:{state['fence']}", True))
        resume.set()
        with self.assertRaises(ClaimLost) as caught:
            await first
        self.assertEqual((caught.exception.call, caught.exception.answer,
                          caught.exception.current_fence),
                         ("Checkpoint", "STALE_FENCE", second.fence))
        self.assertTrue(state["lost"])


class RawCheckpointTest(unittest.TestCase):
    def test_checkpoint_get_reentry_and_refusals_also_through_coalescing(self) -> None:
        coalescing = CoalescingClient(SERVER.target)
        self.addCleanup(coalescing.close)
        c, key = coalescing.client, f"k-{uuid.uuid4()}"
        begin = coalescing.begin(NS, key, b"h", owner="w1", lease_ms=200)
        self.assertFalse(begin.HasField("checkpoint"))
        ok = coalescing.checkpoint(NS, key, begin.fence, "reserved", b"\x00\x01", lease_ms=5000)
        self.assertEqual(ok.status, Checkpoint.OK)
        self.assertGreaterEqual(ok.lease_expires_at, begin.lease_expires_at + 4000)
        record = c.get(NS, key).record
        self.assertEqual((record.checkpoint.step, record.checkpoint.data, record.checkpoint.fence),
                         ("reserved", b"\x00\x01", begin.fence))
        reentry = c.begin(NS, key, b"h", owner="w1")
        self.assertEqual((reentry.status, reentry.fence, reentry.checkpoint.step),
                         (Begin.STARTED, begin.fence, "reserved"))

        c.complete(NS, key, begin.fence, dedup_pb2.SUCCESS, b"1")
        self.assertEqual(c.checkpoint(NS, key, begin.fence, "late").status,
                         Checkpoint.ALREADY_COMPLETED)
        self.assertFalse(c.get(NS, key).record.HasField("checkpoint"))
        self.assertEqual(c.checkpoint(NS, f"k-{uuid.uuid4()}", 3, "s").status,
                         Checkpoint.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as caught:
            c.checkpoint(NS, key, begin.fence, "")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    unittest.main()
