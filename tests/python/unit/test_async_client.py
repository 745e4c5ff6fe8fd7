"""AsyncClient and AsyncCoalescingClient against scripted in-process nodes
(real gRPC servers whose answers a test scripts): the retry rules they share
with the blocking Client (dedup_client.policy) hold on grpc.aio too: a
redirect is followed at once, an election waits the backoff (awaited, on the
injected sleep), an unknown outcome is retried only the safe way, a tenant's
RetryInfo is waited out, the token goes on every call. Against a real dedupd:
tests/python/integration/test_async.py."""

from __future__ import annotations

import asyncio
import inspect
import unittest

import grpc

from cluster_server import ScriptedNode, aborted_items, unavailable, unknown
from dedup_client import (
    AsyncClient,
    AsyncCoalescingClient,
    Client,
    DedupRpcError,
    dedup_pb2,
    idempotent,
    with_idempotency_async,
)
from test_server_retry_delay import RefusingServer

STARTED = dedup_pb2.BeginResponse.STARTED
ABORTED = grpc.StatusCode.ABORTED


class AsyncTestCase(unittest.IsolatedAsyncioTestCase):
    def node(self, leader: str | None = None) -> ScriptedNode:
        node = ScriptedNode(leader)
        self.addCleanup(node.stop)
        return node

    def client(self, targets, **kw) -> tuple[AsyncClient, list[float]]:
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)

        kw.setdefault("uniform01", lambda: 0.5)
        client = AsyncClient(targets, sleep=sleep, **kw)
        self.addAsyncCleanup(client.close)
        return client, sleeps


class AsyncClientTest(AsyncTestCase):
    async def test_a_redirect_is_followed_at_once_and_remembered(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        client, sleeps = self.client([follower.target])
        self.assertEqual((await client.begin("ns", "k", owner="o")).status, STARTED)
        self.assertEqual(sleeps, [])
        self.assertEqual(client.leader_address(), leader.target)
        await client.get("ns", "k")
        self.assertEqual(follower.methods(), ["Begin"])
        self.assertEqual(leader.methods(), ["Begin", "Get"])

    async def test_an_election_moves_on_after_the_backoff(self) -> None:
        first = self.node().then("Begin", unavailable)
        second = self.node()
        client, sleeps = self.client([first.target, second.target])
        self.assertEqual((await client.begin("ns", "k", owner="o")).status, STARTED)
        self.assertEqual(sleeps, [client.backoff.ceiling(0) * 0.5])
        self.assertEqual(client.leader_address(), second.target)

    async def test_an_unknown_begin_is_resent_with_its_owner_only(self) -> None:
        node = self.node().then("Begin", unknown, unknown)
        client, _ = self.client(node.target)
        self.assertEqual((await client.begin("ns", "k", owner="o")).status, STARTED)
        self.assertEqual([r.owner for r in node.requests("Begin")], ["o"] * 3)
        node.then("Begin", unknown)
        with self.assertRaises(DedupRpcError) as caught:
            await client.begin("ns", "anonymous")  # no owner: not re-entrant
        self.assertEqual(caught.exception.code(), ABORTED)
        self.assertTrue(caught.exception.outcome_unknown)

    async def test_retries_run_out_as_unavailable(self) -> None:
        node = self.node().then("Get", *[unavailable] * 3)
        client, sleeps = self.client(node.target, max_attempts=3)
        with self.assertRaises(grpc.RpcError) as caught:
            await client.get("ns", "k")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(sleeps), 2)

    async def test_a_tenants_retry_info_is_waited_out_exactly(self) -> None:
        server = RefusingServer(refusals=2, delay_s=0.25)
        self.addCleanup(server.stop)
        client, sleeps = self.client(server.target)
        self.assertEqual((await client.begin("ns", "k", owner="o")).fence, 3)
        self.assertEqual(sleeps, [0.25, 0.25])

    async def test_the_token_goes_on_every_call_redirects_included(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        client, _ = self.client([follower.target], token="s3cret")
        await client.renew("ns", "k", 4)
        for node in (follower, leader):
            self.assertEqual(node.metadata[0].get("authorization"), "Bearer s3cret")

    async def test_unknown_batch_items_are_resent_alone_with_their_owners(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(1))
        client, sleeps = self.client(node.target)
        items = [dedup_pb2.BeginRequest(namespace="ns", key=f"k{i}", owner=f"o{i}")
                 for i in (1, 2, 3)]
        results = await client.begin_batch(items)
        self.assertEqual([r.fence for r in results], [1, 2, 3])
        self.assertEqual([[i.owner for i in r.items] for r in node.requests("BeginBatch")],
                         [["o1", "o2", "o3"], ["o2"]])
        self.assertEqual(len(sleeps), 1)


class AsyncCoalescingTest(AsyncTestCase):
    async def test_concurrent_calls_share_batches_and_get_their_own_answers(self) -> None:
        node = self.node()
        client, _ = self.client(node.target)
        coalescing = AsyncCoalescingClient(client, max_batches_in_flight=1)
        answers = await asyncio.gather(*(
            coalescing.begin("ns", f"k{i}", owner=f"o{i}") for i in range(1, 21)))
        await coalescing.close()
        self.assertEqual([a.fence for a in answers], list(range(1, 21)))
        batches = node.requests("BeginBatch")
        # The first call leaves alone at once; the others share the next batch.
        self.assertEqual([len(b.items) for b in batches], [1, 19])
        self.assertNotIn("Begin", node.methods())

    async def test_a_refused_item_raises_as_its_unary_call_would(self) -> None:
        def refuse_empty_keys(request, context):
            response = dedup_pb2.BeginBatchResponse()
            for index, item in enumerate(request.items):
                if not item.key:
                    response.items.add().error.CopyFrom(dedup_pb2.ItemError(
                        code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                        message=f"items[{index}].key: must not be empty"))
                else:
                    response.items.add().response.CopyFrom(
                        dedup_pb2.BeginResponse(status=STARTED, fence=9))
            return response

        node = self.node().then("BeginBatch", *[refuse_empty_keys] * 3)
        coalescing = AsyncCoalescingClient(node.target, max_batches_in_flight=1)
        self.addAsyncCleanup(coalescing.close)
        done = await asyncio.gather(
            *(coalescing.begin("ns", key, owner="o") for key in ("a", "b", "", "c")),
            return_exceptions=True)
        # ("a" left alone; "b", "" and "c" shared a batch, "" as its items[1].)
        self.assertEqual([len(b.items) for b in node.requests("BeginBatch")], [1, 3])
        self.assertEqual([done[i].fence for i in (0, 1, 3)], [9, 9, 9])
        self.assertIsInstance(done[2], DedupRpcError)
        self.assertEqual(done[2].code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(done[2].details(), "key: must not be empty")

    async def test_waiting_begins_and_the_rest_go_unary(self) -> None:
        node = self.node()
        coalescing = AsyncCoalescingClient(node.target)
        await coalescing.begin("ns", "k", owner="o", wait_ms=100)
        await coalescing.renew("ns", "k", 7)
        await coalescing.release("ns", "k", 7)
        self.assertTrue(await coalescing.close(timeout_s=5))
        self.assertEqual(node.methods(), ["Begin", "Renew", "Release"])
        with self.assertRaises(RuntimeError):
            await coalescing.begin("ns", "k", owner="o")


class AsyncDecoratorTest(AsyncTestCase):
    async def test_async_def_needs_an_async_client(self) -> None:
        blocking = Client("127.0.0.1:1")
        self.addCleanup(blocking.close)
        with self.assertRaises(TypeError):
            @idempotent(blocking, "ns")
            async def tool() -> None:
                pass
        with self.assertRaises(TypeError):
            await with_idempotency_async(blocking, "ns", {}, lambda: None)

    async def test_the_decorated_tool_is_an_async_def_with_its_signature(self) -> None:
        node = self.node()
        client, _ = self.client(node.target)

        @idempotent(client, "ns", key_from=lambda a: a["invoice"])
        async def send(invoice: str, cents: int = 0) -> dict:
            """Sends."""
            return {"sent": invoice}

        self.assertTrue(inspect.iscoroutinefunction(send))
        self.assertEqual(list(inspect.signature(send).parameters), ["invoice", "cents"])
        self.assertEqual(inspect.signature(send).parameters["cents"].default, 0)
        self.assertEqual((send.__name__, send.__doc__), ("send", "Sends."))
        self.assertEqual(send.arguments_of("inv-1"), send.arguments_of(invoice="inv-1", cents=0))
        self.assertEqual(await send("inv-1"), {"sent": "inv-1"})
        outcome = await send.with_outcome("inv-2", cents=5)
        self.assertEqual((outcome.fence, outcome.duplicate), (7, False))
        self.assertEqual([r.key for r in node.requests("Begin")], ["inv-1", "inv-2"])
        self.assertEqual(node.requests("Complete")[1].result, b'{"sent":"inv-2"}')

    async def test_a_plain_function_with_an_async_client_is_awaited_too(self) -> None:
        node = self.node()
        client, _ = self.client(node.target)

        @idempotent(client, "ns")
        def plain(x: int) -> int:
            return x * 2

        self.assertEqual(await plain(21), 42)


if __name__ == "__main__":
    unittest.main()
