"""Background lease renewal against a real dedupd, blocking and asyncio:

- a function that runs three times its 600 ms lease keeps its claim: a second
  caller trying the same key all along only ever sees IN_USE (no takeover),
  and the first completes OK;
- when renewal becomes impossible (an operator Forgets the record, and
  another caller claims the key), the running function is told
  (claim.lost), claim.check() raises ClaimLost, its outcome is not reported
  as a success, and the other caller's result is the one replayed.
"""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
import uuid

from dedup_client import (
    AsyncClient,
    ClaimLost,
    Client,
    args_hash,
    current_claim,
    dedup_pb2,
    with_idempotency,
    with_idempotency_async,
)
from dedupd_process import Dedupd

SERVER: Dedupd
Begin = dedup_pb2.BeginResponse
LEASE_MS = 600
NS = "reports:render"


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd()


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


class Prober:
    """A second caller trying the key (Begin, no wait, fresh owner) every
    50 ms on its own thread and client until stopped; records the answers."""

    def __init__(self, key: str, args: dict) -> None:
        self.answers: list[Begin] = []
        self._key, self._hash = key, args_hash(args)
        self._stop = threading.Event()
        self._client = Client(SERVER.target)
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.answers.append(self._client.begin(
                NS, self._key, self._hash, owner=str(uuid.uuid4())))

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(10)
        self._client.close()
        return [Begin.Status.Name(a.status) for a in self.answers]


class BlockingRenewalTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.key = f"report-{uuid.uuid4()}"
        self.args = {"report": self.key}

    def test_a_function_running_3x_its_lease_is_never_taken_over(self) -> None:
        prober: list[Prober] = []

        answers: list[str] = []

        def render() -> str:
            prober.append(Prober(self.key, self.args))
            time.sleep(3 * LEASE_MS / 1000)
            current_claim().check()  # still ours
            # Stopped before the Complete, whose DUPLICATE would be fair.
            answers.extend(prober[0].stop())
            return "rendered"

        outcome = with_idempotency(self.client, NS, self.args, render, self.key,
                                   lease_ms=LEASE_MS)
        self.assertFalse(outcome.duplicate)
        self.assertFalse(outcome.takeover)
        self.assertGreater(len(answers), 10)  # it kept trying all along...
        self.assertEqual(set(answers), {"IN_USE"})  # ...and never got in
        replay = self.client.begin(NS, self.key, args_hash(self.args), owner="later")
        self.assertEqual((replay.status, replay.result, replay.fence),
                         (Begin.DUPLICATE, b'"rendered"', outcome.fence))

    def test_a_forgotten_claim_is_signalled_and_not_reported_as_success(self) -> None:
        seen: dict = {}

        def render() -> str:
            claim = current_claim()
            self.assertTrue(self.client.forget(NS, self.key).existed)  # an operator
            started = time.monotonic()
            seen["signalled"] = claim.lost.wait(5)
            seen["after_s"] = time.monotonic() - started
            with self.assertRaises(ClaimLost):
                claim.check()
            return "rendered too late"

        with self.assertRaises(ClaimLost) as caught:
            with_idempotency(self.client, NS, self.args, render, self.key, lease_ms=LEASE_MS)
        self.assertTrue(seen["signalled"])
        self.assertLess(seen["after_s"], LEASE_MS / 1000)  # the next renewal told it
        self.assertEqual(caught.exception.answer, "NOT_FOUND")
        self.assertEqual(caught.exception.result, "rendered too late")
        self.assertFalse(self.client.get(NS, self.key).found)  # nothing recorded

    def test_a_takeover_is_signalled_and_the_new_owners_result_stands(self) -> None:
        def render() -> str:
            claim = current_claim()
            self.client.forget(NS, self.key)
            # Another caller claims the key and finishes while we still run.
            other = with_idempotency(self.client, NS, self.args, lambda: "theirs", self.key)
            self.assertGreater(other.fence, claim.fence)
            self.assertTrue(claim.lost.wait(5))
            claim.check()  # raises ClaimLost: we stop before any side effect
            return "ours"

        with self.assertRaises(ClaimLost) as caught:
            with_idempotency(self.client, NS, self.args, render, self.key, lease_ms=LEASE_MS)
        # Renew answers STALE_FENCE (or ALREADY_COMPLETED) for a higher
        # fence's record.
        self.assertIn(caught.exception.answer, ("STALE_FENCE", "ALREADY_COMPLETED"))
        self.assertGreater(caught.exception.current_fence, caught.exception.fence)
        replay = with_idempotency(self.client, NS, self.args, lambda: "again", self.key)
        self.assertEqual((replay.duplicate, replay.result), (True, "theirs"))


class AsyncRenewalTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = AsyncClient(SERVER.target)
        self.addAsyncCleanup(self.client.close)
        self.key = f"report-{uuid.uuid4()}"
        self.args = {"report": self.key}

    async def test_a_coroutine_running_3x_its_lease_is_never_taken_over(self) -> None:
        prober: list[Prober] = []

        answers: list[str] = []

        async def render() -> str:
            prober.append(Prober(self.key, self.args))
            await asyncio.sleep(3 * LEASE_MS / 1000)
            current_claim().check()
            # Stopped before the Complete, whose DUPLICATE would be fair (the
            # prober runs on its own thread).
            answers.extend(await asyncio.to_thread(prober[0].stop))
            return "rendered"

        outcome = await with_idempotency_async(
            self.client, NS, self.args, render, self.key, lease_ms=LEASE_MS)
        self.assertFalse(outcome.duplicate)
        self.assertGreater(len(answers), 10)
        self.assertEqual(set(answers), {"IN_USE"})
        replay = await self.client.begin(NS, self.key, args_hash(self.args), owner="later")
        self.assertEqual((replay.status, replay.result), (Begin.DUPLICATE, b'"rendered"'))

    async def test_a_forgotten_claim_sets_the_asyncio_event(self) -> None:
        async def render() -> str:
            claim = current_claim()
            await self.client.forget(NS, self.key)
            await asyncio.wait_for(claim.lost.wait(), LEASE_MS / 1000)
            claim.check()
            return "unreachable"

        with self.assertRaises(ClaimLost) as caught:
            await with_idempotency_async(
                self.client, NS, self.args, render, self.key, lease_ms=LEASE_MS)
        self.assertEqual(caught.exception.answer, "NOT_FOUND")
        self.assertIsNone(caught.exception.result)
        self.assertFalse((await self.client.get(NS, self.key)).found)


if __name__ == "__main__":
    unittest.main()
