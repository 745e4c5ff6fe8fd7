"""Client and CoalescingClient against a sharded cluster (in-process nodes,
shard_server.py): each call goes to its key's group's leader, batches split
per group and merged back in order, the map refreshed when an answer's
epoch rises (at most once a second), leader hints followed, and without a
map (a single node, or a failed fetch) everything goes where it went
before sharding."""

from __future__ import annotations

import concurrent.futures
import time
import unittest

import grpc

from dedup_client import Client, CoalescingClient, dedup_pb2
from dedup_client import shard_routing
from shard_server import NAMESPACE, ShardNode, group_of, key_in, keys_per_group, shard_map


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def begin_items(keys: list[str]) -> list[dedup_pb2.BeginRequest]:
    return [dedup_pb2.BeginRequest(namespace=NAMESPACE, key=k, owner="o") for k in keys]


class ShardedCase(unittest.TestCase):
    """Three nodes, three groups: group g led by node g (replicas: all)."""

    NODES = 3

    def setUp(self) -> None:
        self.nodes = [ShardNode() for _ in range(self.NODES)]
        for node in self.nodes:
            self.addCleanup(node.stop)
        self.targets = [n.target for n in self.nodes]
        self.set_map(1, self.targets)

    def set_map(self, epoch: int, leaders: list[str]) -> None:
        everyone = [self.targets] * len(leaders)
        for node in self.nodes:
            node.map = shard_map(epoch, leaders, everyone)

    def node_of(self, key: str) -> ShardNode:
        return self.nodes[group_of(key, self.NODES)]

    def client(self, **kw) -> Client:
        client = Client(self.targets[0], max_attempts=3, backoff_base_s=0.01, **kw)
        self.addCleanup(client.close)
        return client

    def assert_landed(self, keys: list[str], method: str) -> None:
        for node in self.nodes:
            expected = sorted(k for k in keys if self.node_of(k) is node)
            self.assertEqual(sorted(node.keys(method)), expected, node.target)


class RoutingTest(ShardedCase):
    def test_each_call_goes_to_its_groups_leader(self) -> None:
        client = self.client()
        keys = keys_per_group(self.NODES, 4)
        for key in keys:
            self.assertEqual(client.begin(NAMESPACE, key, owner="o").fence, int(key[1:]))
            client.get(NAMESPACE, key)
        self.assert_landed(keys, "Begin")
        self.assert_landed(keys, "Get")
        self.assertEqual(client.shard_map().epoch, 1)
        # The last node that answered as a (group's) leader.
        self.assertEqual(client.leader_address(), self.node_of(keys[-1]).target)
        # Fetched once, from the given address.
        self.assertEqual([n.map_calls for n in self.nodes], [1, 0, 0])

    def test_a_batch_splits_per_group_and_answers_in_order(self) -> None:
        client = self.client()
        keys = keys_per_group(self.NODES, 5)
        answers = client.begin_batch(begin_items(keys))
        self.assertEqual([a.fence for a in answers], [int(k[1:]) for k in keys])
        self.assert_landed(keys, "BeginBatch")
        # One RPC per group, each with its group's keys in request order.
        for node in self.nodes:
            self.assertEqual(node.keys("BeginBatch"),
                             [k for k in keys if self.node_of(k) is node])
            self.assertEqual(node.rpc_count("BeginBatch"), 1)
        done = client.complete_batch([
            dedup_pb2.CompleteRequest(namespace=NAMESPACE, key=k, fence=int(k[1:]),
                                      outcome=dedup_pb2.SUCCESS) for k in keys])
        self.assertEqual([a.fence for a in done], [int(k[1:]) for k in keys])
        self.assert_landed(keys, "CompleteBatch")

    def test_a_higher_epoch_refreshes_the_map_at_most_once_a_second(self) -> None:
        client = self.client()
        clock = FakeClock()
        client._router.shards._clock = clock  # noqa: SLF001 - the test's time
        key = key_in(0, self.NODES)
        client.get(NAMESPACE, key)
        self.assertEqual(self.nodes[0].keys("Get"), [key])
        # Group 0 moves to node 1; the nodes now say epoch 2.
        self.set_map(2, [self.targets[1], self.targets[1], self.targets[2]])
        for node in self.nodes:
            node.trailers = (("dedup-shard-epoch", "2"),)
        client.get(NAMESPACE, key)  # learns the epoch; too soon to fetch
        clock.now += 0.5
        client.get(NAMESPACE, key)
        self.assertEqual(self.nodes[0].keys("Get"), [key] * 3)
        self.assertEqual(sum(n.map_calls for n in self.nodes), 1)
        clock.now += 0.6  # a second after the first fetch
        client.get(NAMESPACE, key)
        self.assertEqual(sum(n.map_calls for n in self.nodes), 2)
        self.assertEqual(client.shard_map().epoch, 2)
        self.assertEqual(self.nodes[1].keys("Get"), [key])
        # The same epoch again: no further fetch.
        clock.now += 5
        client.get(NAMESPACE, key)
        self.assertEqual(sum(n.map_calls for n in self.nodes), 2)

    def test_a_leader_hint_moves_the_groups_guess(self) -> None:
        client = self.client()
        key = key_in(0, self.NODES)
        # Node 0 answers (as a forwarder would) naming node 2 the leader.
        self.nodes[0].trailers = (("dedup-leader", self.targets[2]),)
        client.begin(NAMESPACE, key, owner="o")
        client.begin(NAMESPACE, key, owner="o")
        self.assertEqual(self.nodes[0].keys("Begin"), [key])
        self.assertEqual(self.nodes[2].keys("Begin"), [key])
        # Other groups keep their own leaders.
        other = key_in(1, self.NODES)
        client.begin(NAMESPACE, other, owner="o")
        self.assertEqual(self.nodes[1].keys("Begin"), [other])

    def test_a_redirect_is_followed_and_outside_the_map_refreshes_it(self) -> None:
        client = self.client()
        clock = FakeClock()
        client._router.shards._clock = clock  # noqa: SLF001
        key = key_in(0, self.NODES)
        stranger = ShardNode()
        self.addCleanup(stranger.stop)
        stranger.map = shard_map(2, [stranger.target, self.targets[1], self.targets[2]])
        self.nodes[0].redirect_to = stranger.target
        self.assertEqual(client.begin(NAMESPACE, key, owner="o").fence, int(key[1:]))
        self.assertEqual(stranger.keys("Begin"), [key])
        clock.now += 1.5
        for node in self.nodes:
            node.map = stranger.map
        client.begin(NAMESPACE, key, owner="o")
        self.assertEqual(client.shard_map().epoch, 2)
        self.assertEqual(stranger.keys("Begin"), [key, key])

    def test_an_unreachable_group_leader_moves_to_its_next_replica(self) -> None:
        client = self.client()
        client.get(NAMESPACE, "k1")  # the map
        a, b, z = self.nodes
        b.stop()
        keys = keys_per_group(self.NODES, 3)
        answers = client.begin_batch(begin_items(keys))
        self.assertEqual([a.fence for a in answers], [int(k[1:]) for k in keys])
        # Group 1's replicas are [a, b, z]: after b, z.
        self.assertEqual(sorted(z.keys("BeginBatch")),
                         sorted(k for k in keys if group_of(k, 3) != 0))
        self.assertEqual(a.keys("BeginBatch"), [k for k in keys if group_of(k, 3) == 0])


class NoMapTest(unittest.TestCase):
    """Without a map every call goes to the Router's one leader guess."""

    def run_calls(self, nodes: list[ShardNode]) -> Client:
        client = Client([n.target for n in nodes], max_attempts=2, backoff_base_s=0.01)
        self.addCleanup(client.close)
        keys = keys_per_group(3, 3)
        for key in keys:
            client.begin(NAMESPACE, key, owner="o")
        client.begin_batch(begin_items(keys))
        self.assertEqual(nodes[0].keys("Begin"), keys)
        self.assertEqual(nodes[0].keys("BeginBatch"), keys)  # one RPC, unsplit
        self.assertEqual(nodes[0].rpc_count("BeginBatch"), 1)
        for node in nodes[1:]:
            self.assertEqual(node.calls, [])
        self.assertIsNone(client.shard_map())
        return client

    def test_a_single_node_without_the_cluster_service(self) -> None:
        nodes = [ShardNode(serve_map=False) for _ in range(3)]
        for node in nodes:
            self.addCleanup(node.stop)
        self.run_calls(nodes)

    def test_unimplemented_is_never_asked_again(self) -> None:
        nodes = [ShardNode(map_error=grpc.StatusCode.UNIMPLEMENTED) for _ in range(3)]
        for node in nodes:
            self.addCleanup(node.stop)
        client = self.run_calls(nodes)
        client._router.shards._clock = lambda: 1e12  # noqa: SLF001 - much later
        client.get(NAMESPACE, "k1")
        self.assertEqual(nodes[0].map_calls, 1)

    def test_a_failed_fetch_is_asked_again_later(self) -> None:
        nodes = [ShardNode(map_error=grpc.StatusCode.INTERNAL) for _ in range(3)]
        for node in nodes:
            self.addCleanup(node.stop)
        client = self.run_calls(nodes)
        self.assertEqual(nodes[0].map_calls, 1)
        leaders = [n.target for n in nodes]
        for node in nodes:
            node.map_error = None
            node.map = shard_map(1, leaders)
        client._router.shards._clock = lambda: 1e12  # noqa: SLF001 - much later
        key = key_in(2, 3)
        client.get(NAMESPACE, key)
        self.assertEqual(nodes[0].map_calls, 2)
        self.assertEqual(nodes[2].keys("Get"), [key])

    def test_failed_fetches_back_off_up_to_a_minute(self) -> None:
        node = ShardNode(map_error=grpc.StatusCode.DEADLINE_EXCEEDED)
        self.addCleanup(node.stop)
        client = Client(node.target)
        self.addCleanup(client.close)
        clock = FakeClock()
        client._router.shards._clock = clock  # noqa: SLF001 - the test's time
        fetched_at = []
        for _ in range(400):  # 200 s in half seconds, a call each
            before = node.map_calls
            client.get(NAMESPACE, "k1")
            if node.map_calls > before:
                fetched_at.append(clock.now - 1000.0)
            clock.now += 0.5
        self.assertEqual(fetched_at, [0, 1, 3, 7, 15, 31, 63, 127, 191])
        self.assertEqual(node.keys("Get"), ["k1"] * 400)

    def test_a_given_channel_without_a_factory_never_asks(self) -> None:
        node = ShardNode()
        self.addCleanup(node.stop)
        node.map = shard_map(1, [node.target])
        channel = grpc.insecure_channel(node.target)
        self.addCleanup(channel.close)
        client = Client(channel)
        client.get(NAMESPACE, "k1")
        self.assertEqual(node.map_calls, 0)
        self.assertEqual(node.keys("Get"), ["k1"])


class CoalescingRoutingTest(ShardedCase):
    def test_concurrent_begins_go_to_their_groups_in_batches(self) -> None:
        client = self.client()
        client.get(NAMESPACE, "k1")  # the map is fetched (the lane never waits for it)
        coalescing = CoalescingClient(client, max_batches_in_flight=1)
        self.addCleanup(coalescing.close)
        keys = keys_per_group(self.NODES, 20)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(
                lambda k: coalescing.begin(NAMESPACE, k, owner="o"), keys))
        self.assertEqual([a.fence for a in answers], [int(k[1:]) for k in keys])
        self.assert_landed(keys, "BeginBatch")
        futures = [coalescing.complete_future(NAMESPACE, k, int(k[1:]), dedup_pb2.SUCCESS)
                   for k in keys]
        self.assertEqual([f.result(5).fence for f in futures], [int(k[1:]) for k in keys])
        self.assert_landed(keys, "CompleteBatch")

    def test_the_lane_fetches_the_map_without_waiting(self) -> None:
        client = self.client()
        coalescing = CoalescingClient(client)
        self.addCleanup(coalescing.close)
        coalescing.begin(NAMESPACE, "k1", owner="o")  # starts the fetch
        deadline = time.monotonic() + 5
        while client.shard_map() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(client.shard_map().epoch, 1)
        keys = [k for k in keys_per_group(self.NODES, 3) if k != "k1"]
        for key in keys:
            coalescing.begin(NAMESPACE, key, owner="o")
        for node in self.nodes:
            self.assertEqual([k for k in node.keys("BeginBatch") if k != "k1"],
                             [k for k in keys if self.node_of(k) is node])


class ShardMapParsingTest(unittest.TestCase):
    def test_maps_that_cannot_be_routed_by_are_refused(self) -> None:
        good = shard_map(3, ["a:1", "b:1"])
        self.assertIsNotNone(shard_routing.ShardMap.of(good))
        gap = shard_map(3, ["a:1", "b:1"])
        gap.groups[1].first_slot += 1
        self.assertIsNone(shard_routing.ShardMap.of(gap))
        short = shard_map(3, ["a:1", "b:1"])
        short.groups[1].end_slot -= 1
        self.assertIsNone(shard_routing.ShardMap.of(short))
        other_space = shard_map(3, ["a:1"])
        other_space.slot_count = 4096
        self.assertIsNone(shard_routing.ShardMap.of(other_space))


if __name__ == "__main__":
    unittest.main()
