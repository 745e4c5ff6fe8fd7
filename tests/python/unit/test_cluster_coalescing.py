"""CoalescingClient against scripted in-process nodes of a replicated group:
batches follow a follower's redirect and share the Client's leader; items
answered ABORTED (and whole batches with an unknown outcome) go again with
the same owner, fence and result, after the backoff delay on a timer thread
(a gRPC thread is never held meanwhile); what stays unknown raises
DedupRpcError(outcome_unknown=True)."""

from __future__ import annotations

import threading
import time
import unittest

import grpc

from cluster_server import ScriptedNode, aborted_items, unavailable, unavailable_items, unknown
from dedup_client import Client, CoalescingClient, DedupRpcError, dedup_pb2

ABORTED = grpc.StatusCode.ABORTED


class CoalescingClusterTest(unittest.TestCase):
    def node(self, leader: str | None = None) -> ScriptedNode:
        node = ScriptedNode(leader)
        self.addCleanup(node.stop)
        return node

    def coalesce(self, targets, **kw) -> CoalescingClient:
        kw.setdefault("backoff_base_s", 0.001)
        kw.setdefault("backoff_cap_s", 0.002)
        client = Client(targets, **kw)
        self.addCleanup(client.close)
        coalescing = CoalescingClient(client)
        # Bounded: a test that strands a call fails instead of hanging here.
        self.addCleanup(coalescing.close, 10)
        return coalescing

    def test_batches_follow_the_leader_and_share_it_with_the_client(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        coalescing = self.coalesce([follower.target])
        self.assertEqual(coalescing.begin("ns", "k4", owner="o").fence, 4)
        self.assertEqual(coalescing.client.leader_address(), leader.target)
        self.assertEqual(coalescing.complete("ns", "k4", 4, dedup_pb2.SUCCESS).status,
                         dedup_pb2.CompleteResponse.OK)
        self.assertFalse(coalescing.get("ns", "k4").found)  # through the Client
        self.assertEqual(follower.methods(), ["BeginBatch"])
        self.assertEqual(leader.methods(), ["BeginBatch", "CompleteBatch", "Get"])

    def test_redirect_hops_are_bounded(self) -> None:
        a, b = self.node(), self.node()
        a.leader, b.leader = b.target, a.target
        coalescing = self.coalesce([a.target], max_attempts=1, max_leader_hops=2)
        with self.assertRaises(grpc.RpcError) as caught:
            coalescing.begin("ns", "k1", owner="o")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(a.calls) + len(b.calls), 3)  # 1 + 2 hops

    def test_no_leader_named_moves_on_to_the_next_address(self) -> None:
        electing = self.node(leader="")
        leader = self.node()
        coalescing = self.coalesce([electing.target, leader.target])
        self.assertEqual(coalescing.begin("ns", "k2", owner="o").fence, 2)
        self.assertEqual((len(electing.calls), len(leader.calls)), (1, 1))

    def test_aborted_items_go_again_with_the_same_owner(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0))
        coalescing = self.coalesce(node.target)
        self.assertEqual(coalescing.begin("ns", "k3", b"h", owner="me").fence, 3)
        first, second = node.requests("BeginBatch")
        self.assertEqual(first, second)
        self.assertEqual(second.items[0].owner, "me")

    def test_a_whole_batch_with_unknown_outcome_goes_again(self) -> None:
        node = self.node().then("CompleteBatch", unknown)
        coalescing = self.coalesce(node.target)
        answer = coalescing.complete("ns", "k", 9, dedup_pb2.ERROR, b"{}", ttl_s=5)
        self.assertEqual(answer.status, dedup_pb2.CompleteResponse.OK)
        first, second = node.requests("CompleteBatch")
        self.assertEqual(first, second)
        self.assertEqual((second.items[0].fence, second.items[0].result), (9, b"{}"))

    def test_unavailable_items_go_again(self) -> None:
        node = self.node().then("BeginBatch", unavailable_items(0))
        coalescing = self.coalesce(node.target)
        self.assertEqual(coalescing.begin("ns", "k6").fence, 6)  # even anonymous
        self.assertEqual(len(node.calls), 2)

    def test_unavailable_items_left_after_the_attempts_stay_unavailable(self) -> None:
        node = self.node().then("BeginBatch", *[unavailable_items(0)] * 2)
        coalescing = self.coalesce(node.target, max_attempts=2)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.begin("ns", "k1", owner="o")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertFalse(caught.exception.outcome_unknown)

    def test_an_unknown_item_refused_later_is_still_unknown(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0), unavailable_items(0))
        coalescing = self.coalesce(node.target, max_attempts=2)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.begin("ns", "k1", owner="o")
        self.assertTrue(caught.exception.outcome_unknown)

    def test_an_anonymous_begin_is_not_resent(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0))
        coalescing = self.coalesce(node.target)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.begin("ns", "k1")
        self.assertEqual(caught.exception.code(), ABORTED)
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(len(node.calls), 1)

    def test_exhausted_retries_raise_outcome_unknown(self) -> None:
        node = self.node().then("BeginBatch", *[aborted_items(0)] * 3)
        coalescing = self.coalesce(node.target, max_attempts=3)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.begin("ns", "k1", owner="o")
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(len(node.calls), 3)

    def test_unavailable_after_an_unknown_outcome_is_still_unknown(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0), *[unavailable] * 4)
        coalescing = self.coalesce(node.target, max_attempts=5)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.begin("ns", "k1", owner="o")
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(caught.exception.code(), ABORTED)
        self.assertEqual(len(node.calls), 5)

    def test_the_retry_delay_does_not_hold_the_grpc_thread(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0))
        # A long backoff delay: the Begin's retry waits 1 s.
        coalescing = self.coalesce(node.target, backoff_base_s=1.0, backoff_cap_s=1.0,
                                   uniform01=lambda: 1.0)
        begun = coalescing.begin_future("ns", "k5", owner="o")
        deadline = time.monotonic() + 10
        while len(node.calls) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # the ABORTED answer arrives; its retry is pending
        started = time.monotonic()
        # An answer on the same channel is delivered meanwhile.
        self.assertEqual(coalescing.complete("ns", "k", 1, dedup_pb2.SUCCESS).status,
                         dedup_pb2.CompleteResponse.OK)
        self.assertLess(time.monotonic() - started, 0.5)
        self.assertFalse(begun.done())
        self.assertEqual(begun.result(10).fence, 5)

    def test_a_split_batch_keeps_the_unknown_outcome(self) -> None:
        def slow(request, context):
            time.sleep(0.2)  # k1 and k2 queue up behind k0 meanwhile
            return dedup_pb2.BeginBatchResponse(items=[
                dedup_pb2.BeginBatchResponse.Item(
                    response=dedup_pb2.BeginResponse(status=dedup_pb2.BeginResponse.STARTED))])

        def too_large(request, context):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too large")

        node = self.node().then("BeginBatch", slow, aborted_items(0, 1), too_large,
                                *[unavailable] * 4)
        client = Client(node.target, max_attempts=2, backoff_base_s=0.001)
        self.addCleanup(client.close)
        coalescing = CoalescingClient(client, max_batches_in_flight=1)
        self.addCleanup(coalescing.close, 10)
        first = coalescing.begin_future("ns", "k0", owner="o")
        deadline = time.monotonic() + 10
        while not node.calls and time.monotonic() < deadline:
            time.sleep(0.005)
        queued = [coalescing.begin_future("ns", f"k{i}", owner="o") for i in (1, 2)]
        self.assertEqual(first.result(10).status, dedup_pb2.BeginResponse.STARTED)
        for future in queued:
            # ABORTED, resent together (refused as too large), then alone
            # (UNAVAILABLE twice each): still unknown, not UNAVAILABLE.
            error = future.exception(10)
            self.assertIsInstance(error, DedupRpcError)
            self.assertTrue(error.outcome_unknown)
        self.assertEqual([len(r.items) for r in node.requests("BeginBatch")],
                         [1, 2, 2, 1, 1, 1, 1])
    def test_an_unavailable_item_of_a_good_batch_is_retried_after_the_backoff(self) -> None:
        """Issue 15: an item refused UNAVAILABLE (ItemError code 14) inside a
        batch whose other items were answered is sent again alone, after the
        backoff delay, as its unary call would have been; the others are
        answered at once."""
        gate = threading.Event()
        arrived: list[float] = []

        def held(request, context):  # k0 alone, while k1 and k2 queue up
            arrived.append(time.monotonic())
            gate.wait(10)
            return dedup_pb2.BeginBatchResponse(items=[
                dedup_pb2.BeginBatchResponse.Item(response=dedup_pb2.BeginResponse(
                    status=dedup_pb2.BeginResponse.STARTED, fence=1))])

        def timed(action):
            def act(request, context):
                arrived.append(time.monotonic())
                return action(request, context)
            return act

        node = self.node().then("BeginBatch", held, timed(unavailable_items(1)),
                                timed(lambda request, context: dedup_pb2.BeginBatchResponse(
                                    items=[dedup_pb2.BeginBatchResponse.Item(
                                        response=dedup_pb2.BeginResponse(
                                            status=dedup_pb2.BeginResponse.STARTED,
                                            fence=22))])))
        delays: list[float] = []
        client = Client(node.target, backoff_base_s=0.3, backoff_cap_s=0.3,
                        uniform01=lambda: delays.append(1.0) or 1.0)
        self.addCleanup(client.close)
        coalescing = CoalescingClient(client, max_batches_in_flight=1)
        self.addCleanup(coalescing.close, 10)
        first = coalescing.begin_future("ns", "k0", owner="o0")
        deadline = time.monotonic() + 10
        while not node.calls and time.monotonic() < deadline:
            time.sleep(0.005)
        good, refused = (coalescing.begin_future("ns", f"k{i}", owner=f"o{i}") for i in (1, 2))
        gate.set()
        self.assertEqual(first.result(10).fence, 1)
        self.assertEqual(good.result(10).fence, 1)  # answered by the shared batch
        self.assertEqual(refused.result(10).fence, 22)  # retried, not raised
        self.assertEqual([[(i.key, i.owner) for i in r.items] for r in node.requests("BeginBatch")],
                         [[("k0", "o0")], [("k1", "o1"), ("k2", "o2")], [("k2", "o2")]])
        self.assertEqual(delays, [1.0], "one backoff delay")
        self.assertGreaterEqual(arrived[2] - arrived[1], 0.25)


if __name__ == "__main__":
    unittest.main()
