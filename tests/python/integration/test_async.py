"""The asyncio client against a real dedupd: AsyncClient's calls answer as
the Client's do, AsyncCoalescingClient's concurrent calls leave as batch
RPCs, and @idempotent on an `async def` tool runs each side effect exactly
once under 32 concurrent calls, the others getting the replayed result."""

from __future__ import annotations

import asyncio
import unittest
import uuid
from collections import Counter

import grpc

from dedup_client import (
    AsyncClient,
    AsyncCoalescingClient,
    ConflictError,
    DedupRpcError,
    ReplayedError,
    RetryableError,
    current_claim,
    dedup_pb2,
    idempotent,
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


class Declined(Exception):
    pass


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = AsyncClient(SERVER.target)
        self.addAsyncCleanup(self.client.close)
        self.key = f"k-{uuid.uuid4()}"

    async def test_lifecycle(self) -> None:
        c, ns, key = self.client, "mail", self.key
        first = await c.begin(ns, key, b"h", owner="a")
        self.assertEqual(first.status, Begin.STARTED)
        self.assertEqual((await c.begin(ns, key, b"h", owner="a")).fence, first.fence)
        self.assertEqual((await c.begin(ns, key, b"h", owner="b")).status, Begin.IN_USE)
        self.assertEqual((await c.begin(ns, key, b"other", owner="b")).status, Begin.CONFLICT)
        renewed = await c.renew(ns, key, first.fence, lease_ms=5000)
        self.assertEqual(renewed.status, dedup_pb2.RenewResponse.OK)
        done = await c.complete(ns, key, first.fence, dedup_pb2.SUCCESS, b'"sent"')
        self.assertEqual(done.status, dedup_pb2.CompleteResponse.OK)
        again = await c.begin(ns, key, b"h", owner="c")
        self.assertEqual((again.status, again.result), (Begin.DUPLICATE, b'"sent"'))
        got = await c.get(ns, key)
        self.assertEqual((got.found, got.record.result), (True, b'"sent"'))
        self.assertTrue((await c.forget(ns, key)).existed)
        released = await c.begin(ns, key, b"h", owner="d")
        self.assertEqual((await c.release(ns, key, released.fence)).status,
                         dedup_pb2.ReleaseResponse.OK)

    async def test_bad_input_is_a_grpc_error_not_retried(self) -> None:
        with self.assertRaises(grpc.RpcError) as caught:
            await self.client.begin("mail", "", owner="a")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    async def test_begin_batch_answers_item_by_item(self) -> None:
        results = await self.client.begin_batch([
            dedup_pb2.BeginRequest(namespace="py", key=self.key, args_hash=b"h", owner="a"),
            dedup_pb2.BeginRequest(namespace="py", key=""),
        ])
        self.assertEqual(results[0].status, Begin.STARTED)
        self.assertIsInstance(results[1], DedupRpcError)
        self.assertTrue(results[1].details().startswith("items[1].key: "))
        done = await self.client.complete_batch([dedup_pb2.CompleteRequest(
            namespace="py", key=self.key, fence=results[0].fence, outcome=dedup_pb2.SUCCESS)])
        self.assertEqual(done[0].status, dedup_pb2.CompleteResponse.OK)


class AsyncToolTest(unittest.IsolatedAsyncioTestCase):
    """An `async def` MCP-style tool under concurrent calls."""

    async def asyncSetUp(self) -> None:
        self.run_id = str(uuid.uuid4())
        self.sent: Counter[str] = Counter()

    def tool(self, client):
        @idempotent(client, "billing:send_invoice", key_from=lambda a: a["invoice_id"])
        async def send_invoice(invoice_id: str, run: str) -> dict:
            self.sent[invoice_id] += 1
            # Long enough that the other calls of this key arrive while it runs.
            await asyncio.sleep(0.2)
            return {"invoice": invoice_id, "message": f"msg-{self.sent[invoice_id]}",
                    "fence": current_claim().fence}

        return send_invoice

    async def run_32_calls_over_4_keys(self, client) -> None:
        send_invoice = self.tool(client)
        invoices = [f"{self.run_id}-inv-{i % 4}" for i in range(32)]
        outcomes = await asyncio.gather(
            *(send_invoice.with_outcome(invoice, self.run_id) for invoice in invoices))
        self.assertEqual(self.sent, Counter({invoice: 1 for invoice in set(invoices)}))
        for invoice in set(invoices):
            mine = [o for o, i in zip(outcomes, invoices) if i == invoice]
            self.assertEqual(sorted(o.duplicate for o in mine), [False] + [True] * 7)
            self.assertEqual(len({repr(o.result) for o in mine}), 1)  # one result, replayed
            self.assertEqual(mine[0].result["message"], "msg-1")
        # A later call is a duplicate too, and the plain call returns the result.
        again = await send_invoice(invoices[0], self.run_id)
        self.assertEqual(again["invoice"], invoices[0])
        self.assertEqual(self.sent[invoices[0]], 1)

    async def test_coalescing_client_runs_each_side_effect_once(self) -> None:
        batches_before = rpcs("BeginBatch")
        dedup = AsyncCoalescingClient(SERVER.target)
        self.addAsyncCleanup(dedup.close)
        await self.run_32_calls_over_4_keys(dedup)
        self.assertGreater(rpcs("BeginBatch"), batches_before)

    async def test_async_client_runs_each_side_effect_once(self) -> None:
        client = AsyncClient(SERVER.target)
        self.addAsyncCleanup(client.close)
        await self.run_32_calls_over_4_keys(client)

    async def test_errors_replayed_released_and_conflicting(self) -> None:
        dedup = AsyncCoalescingClient(SERVER.target)
        self.addAsyncCleanup(dedup.close)
        runs: Counter[str] = Counter()

        @idempotent(dedup, "billing:charge", key_from=lambda a: f"{self.run_id}-{a['what']}")
        async def charge(what: str, cents: int) -> str:
            runs[what] += 1
            if what == "declined":
                raise Declined("card declined")
            if what == "flaky" and runs[what] == 1:
                raise RetryableError("try later")
            return f"charged {cents}"

        with self.assertRaises(Declined):
            await charge("declined", 5)
        with self.assertRaises(ReplayedError) as replayed:
            await charge("declined", 5)
        self.assertEqual(replayed.exception.message, "card declined")
        with self.assertRaises(RetryableError):
            await charge("flaky", 5)
        self.assertEqual(await charge("flaky", 5), "charged 5")  # released: ran again
        with self.assertRaises(ConflictError):
            await charge("flaky", 6)
        self.assertEqual(runs, Counter({"declined": 1, "flaky": 2}))


if __name__ == "__main__":
    unittest.main()
