"""AsyncClient and AsyncCoalescingClient against a sharded cluster
(in-process nodes, shard_server.py): the routing test_shard_routing.py pins
for the blocking clients holds on grpc.aio too."""

from __future__ import annotations

import asyncio
import unittest

import grpc

from dedup_client import AsyncClient, AsyncCoalescingClient, dedup_pb2
from shard_server import NAMESPACE, ShardNode, group_of, key_in, keys_per_group, shard_map
from test_shard_routing import FakeClock, begin_items

NODES = 3


class AsyncShardedCase(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.nodes = [ShardNode() for _ in range(NODES)]
        for node in self.nodes:
            self.addCleanup(node.stop)
        self.targets = [n.target for n in self.nodes]
        self.set_map(1, self.targets)

    def set_map(self, epoch: int, leaders: list[str]) -> None:
        for node in self.nodes:
            node.map = shard_map(epoch, leaders, [self.targets] * len(leaders))

    def client(self, target=None) -> AsyncClient:
        client = AsyncClient(target or self.targets[0], max_attempts=3, backoff_base_s=0.01)
        self.addAsyncCleanup(client.close)
        return client

    def assert_landed(self, keys: list[str], method: str) -> None:
        for g, node in enumerate(self.nodes):
            self.assertEqual(node.keys(method), [k for k in keys if group_of(k, NODES) == g])


class AsyncRoutingTest(AsyncShardedCase):
    async def test_each_call_goes_to_its_groups_leader(self) -> None:
        client = self.client()
        keys = keys_per_group(NODES, 4)
        for key in keys:
            self.assertEqual((await client.begin(NAMESPACE, key, owner="o")).fence,
                             int(key[1:]))
        self.assert_landed(keys, "Begin")
        self.assertEqual([n.map_calls for n in self.nodes], [1, 0, 0])

    async def test_a_batch_splits_per_group_and_answers_in_order(self) -> None:
        client = self.client()
        keys = keys_per_group(NODES, 5)
        answers = await client.begin_batch(begin_items(keys))
        self.assertEqual([a.fence for a in answers], [int(k[1:]) for k in keys])
        self.assert_landed(keys, "BeginBatch")
        self.assertEqual([n.rpc_count("BeginBatch") for n in self.nodes], [1, 1, 1])

    async def test_a_higher_epoch_refreshes_the_map(self) -> None:
        client = self.client()
        clock = FakeClock()
        client._router.shards._clock = clock  # noqa: SLF001 - the test's time
        key = key_in(0, NODES)
        await client.get(NAMESPACE, key)
        self.set_map(2, [self.targets[2], self.targets[1], self.targets[2]])
        for node in self.nodes:
            node.trailers = (("dedup-shard-epoch", "2"),)
        await client.get(NAMESPACE, key)  # learns the epoch; too soon to fetch
        self.assertEqual(sum(n.map_calls for n in self.nodes), 1)
        clock.now += 1.0
        await client.get(NAMESPACE, key)
        self.assertEqual(client.shard_map().epoch, 2)
        self.assertEqual(self.nodes[0].keys("Get"), [key, key])
        self.assertEqual(self.nodes[2].keys("Get"), [key])

    async def test_a_leader_hint_moves_the_groups_guess(self) -> None:
        client = self.client()
        key = key_in(1, NODES)
        self.nodes[1].trailers = (("dedup-leader", self.targets[0]),)
        await client.begin(NAMESPACE, key, owner="o")
        await client.begin(NAMESPACE, key, owner="o")
        self.assertEqual(self.nodes[1].keys("Begin"), [key])
        self.assertEqual(self.nodes[0].keys("Begin"), [key])

    async def test_without_a_map_everything_goes_to_the_first_address(self) -> None:
        nodes = [ShardNode(serve_map=False), ShardNode(map_error=grpc.StatusCode.UNAVAILABLE)]
        for node in nodes:
            self.addCleanup(node.stop)
        for node in nodes:
            client = self.client(node.target)
            keys = keys_per_group(NODES, 2)
            for key in keys:
                await client.begin(NAMESPACE, key, owner="o")
            await client.begin_batch(begin_items(keys))
            self.assertEqual(node.keys("Begin"), keys)
            self.assertEqual(node.keys("BeginBatch"), keys)
            self.assertEqual(node.rpc_count("BeginBatch"), 1)
            self.assertIsNone(client.shard_map())
        for node in self.nodes:
            self.assertEqual(node.calls, [])


class AsyncCoalescingRoutingTest(AsyncShardedCase):
    async def test_concurrent_begins_go_to_their_groups(self) -> None:
        client = self.client()
        coalescing = AsyncCoalescingClient(client, max_batches_in_flight=1)
        self.addAsyncCleanup(coalescing.close)
        keys = keys_per_group(NODES, 20)
        answers = await asyncio.gather(*(
            coalescing.begin(NAMESPACE, k, owner="o") for k in keys))
        self.assertEqual([a.fence for a in answers], [int(k[1:]) for k in keys])
        for g, node in enumerate(self.nodes):
            self.assertEqual(sorted(node.keys("BeginBatch")),
                             sorted(k for k in keys if group_of(k, NODES) == g))
        done = await asyncio.gather(*(
            coalescing.complete(NAMESPACE, k, int(k[1:]), dedup_pb2.SUCCESS) for k in keys))
        self.assertEqual([a.fence for a in done], [int(k[1:]) for k in keys])


if __name__ == "__main__":
    unittest.main()
