"""Background lease renewal in with_idempotency and with_idempotency_async,
against a scripted in-process node: renewals every third of the lease while
fn runs, none after; a refused renewal sets claim.lost, claim.check() raises
ClaimLost, and no Complete reports a success. Against a real dedupd:
tests/python/integration/test_lease_renewal.py."""

from __future__ import annotations

import asyncio
import time
import unittest

from cluster_server import ScriptedNode, unavailable
from dedup_client import (
    AsyncClient,
    ClaimLost,
    Client,
    OutcomeNotRecordedError,
    current_claim,
    dedup_pb2,
    with_idempotency,
    with_idempotency_async,
)
from dedup_client.claim import Claim, lease_length_ms

STARTED = dedup_pb2.BeginResponse.STARTED
RENEW_OK = dedup_pb2.RenewResponse.OK
STALE = dedup_pb2.RenewResponse.STALE_FENCE


def started(lease_ms: int, attempts: int = 1, created_at: int = 1_000_000) -> dedup_pb2.BeginResponse:
    return dedup_pb2.BeginResponse(
        status=STARTED, fence=5, attempts=attempts, created_at=created_at,
        lease_expires_at=created_at + lease_ms)


class LeaseLengthTest(unittest.TestCase):
    def test_a_fresh_claim_uses_the_servers_grant(self) -> None:
        self.assertEqual(lease_length_ms(started(600), 0), 600)
        # The smaller of what was asked and what was granted (a server clamps).
        self.assertEqual(lease_length_ms(started(600), 5000), 600)
        self.assertEqual(lease_length_ms(started(60000), 900), 900)

    def test_a_takeover_uses_the_local_clock_for_the_default_lease(self) -> None:
        takeover = started(600, attempts=2, created_at=1_000_000)
        self.assertEqual(lease_length_ms(takeover, 0, now_ms=1_000_000 + 100), 1000)  # floor
        self.assertEqual(lease_length_ms(takeover, 0, now_ms=1_000_000 - 4400), 5000)
        self.assertEqual(lease_length_ms(takeover, 700), 700)

    def test_no_lease_no_renewal(self) -> None:
        self.assertIsNone(lease_length_ms(dedup_pb2.BeginResponse(status=STARTED), 600))

    def test_check_raises_once_lost(self) -> None:
        claim = Claim("ns", "k", 5, False, 1, 0)
        claim.check()
        claim._lose("STALE_FENCE", 6)  # noqa: SLF001 - what a renewer does
        with self.assertRaises(ClaimLost) as caught:
            claim.check()
        self.assertIsInstance(caught.exception, OutcomeNotRecordedError)
        self.assertEqual((caught.exception.answer, caught.exception.current_fence),
                         ("STALE_FENCE", 6))


class RenewalTestCase(unittest.TestCase):
    def node(self) -> ScriptedNode:
        node = ScriptedNode()
        self.addCleanup(node.stop)
        return node

    def renew_times(self, node: ScriptedNode) -> int:
        return len(node.requests("Renew"))


class SyncRenewalTest(RenewalTestCase):
    def test_renews_every_third_of_the_lease_while_fn_runs(self) -> None:
        node = self.node().then("Begin", started(300))
        client = Client(node.target)
        self.addCleanup(client.close)
        result = with_idempotency(client, "ns", {}, lambda: time.sleep(0.55) or "done",
                                  lease_ms=300)
        self.assertEqual(result.result, "done")
        renewals = self.renew_times(node)
        # At 0.1, 0.2, 0.3, 0.4, (0.5) s; fewer on a loaded machine, but more
        # than one lease's worth would be needed without renewal.
        self.assertTrue(3 <= renewals <= 5, renewals)
        self.assertEqual([r.lease_ms for r in node.requests("Renew")], [300] * renewals)
        self.assertEqual(node.methods()[-1], "Complete")
        time.sleep(0.25)
        self.assertEqual(self.renew_times(node), renewals)  # stopped

    def test_renew_false_never_renews(self) -> None:
        node = self.node().then("Begin", started(150))
        client = Client(node.target)
        self.addCleanup(client.close)
        with_idempotency(client, "ns", {}, lambda: time.sleep(0.3), renew=False)
        self.assertEqual(self.renew_times(node), 0)

    def test_a_failed_renewal_is_not_a_loss(self) -> None:
        node = self.node().then("Begin", started(300)).then("Renew", unavailable)
        client = Client(node.target, max_attempts=1)
        self.addCleanup(client.close)
        result = with_idempotency(client, "ns", {}, lambda: time.sleep(0.35) or 1)
        self.assertEqual(result.result, 1)
        self.assertGreaterEqual(self.renew_times(node), 2)

    def test_a_refused_renewal_signals_fn_and_nothing_is_completed(self) -> None:
        node = self.node().then("Begin", started(300)).then(
            "Renew", dedup_pb2.RenewResponse(status=STALE, fence=6))
        client = Client(node.target)
        self.addCleanup(client.close)
        seen = {}

        def fn() -> str:
            claim = current_claim()
            seen["signalled"] = claim.lost.wait(5)
            with self.assertRaises(ClaimLost):
                claim.check()
            return "ran anyway"

        with self.assertRaises(ClaimLost) as caught:
            with_idempotency(client, "ns", {}, fn)
        self.assertTrue(seen["signalled"])
        self.assertEqual(caught.exception.result, "ran anyway")
        self.assertEqual((caught.exception.answer, caught.exception.current_fence),
                         ("STALE_FENCE", 6))
        self.assertNotIn("Complete", node.methods())
        self.assertEqual(self.renew_times(node), 1)

    def test_fn_stopping_on_the_signal_propagates_claim_lost(self) -> None:
        node = self.node().then("Begin", started(300)).then(
            "Renew", dedup_pb2.RenewResponse(status=dedup_pb2.RenewResponse.NOT_FOUND))
        client = Client(node.target)
        self.addCleanup(client.close)

        def fn() -> None:
            for _ in range(100):
                current_claim().check()
                time.sleep(0.02)

        with self.assertRaises(ClaimLost) as caught:
            with_idempotency(client, "ns", {}, fn)
        self.assertEqual(caught.exception.answer, "NOT_FOUND")
        # Neither a Complete(ERROR) nor a Release: both would be refused.
        self.assertEqual(node.methods(), ["Begin", "Renew"])


class AsyncRenewalTest(RenewalTestCase, unittest.IsolatedAsyncioTestCase):
    async def test_renews_while_fn_runs_and_stops_after(self) -> None:
        node = self.node().then("Begin", started(300))
        client = AsyncClient(node.target)
        self.addAsyncCleanup(client.close)

        async def fn() -> str:
            await asyncio.sleep(0.55)
            return "done"

        result = await with_idempotency_async(client, "ns", {}, fn, lease_ms=300)
        self.assertEqual(result.result, "done")
        renewals = self.renew_times(node)
        self.assertTrue(3 <= renewals <= 5, renewals)
        await asyncio.sleep(0.25)
        self.assertEqual(self.renew_times(node), renewals)

    async def test_a_refused_renewal_sets_the_asyncio_event(self) -> None:
        node = self.node().then("Begin", started(300)).then(
            "Renew", dedup_pb2.RenewResponse(status=STALE, fence=6))
        client = AsyncClient(node.target)
        self.addAsyncCleanup(client.close)

        async def fn() -> None:
            claim = current_claim()
            await asyncio.wait_for(claim.lost.wait(), 5)
            claim.check()

        with self.assertRaises(ClaimLost):
            await with_idempotency_async(client, "ns", {}, fn)
        self.assertEqual(node.methods(), ["Begin", "Renew"])


if __name__ == "__main__":
    unittest.main()
