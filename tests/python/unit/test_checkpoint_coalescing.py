"""Checkpoints through CoalescingClient and AsyncCoalescingClient, against
scripted in-process nodes (cluster_server.ScriptedNode): concurrent
checkpoints share CheckpointBatch calls, each caller gets its own item's
answer or unary-style error, a batch stays under the byte cap, items
answered ABORTED or UNAVAILABLE go again with the same fence, step and data,
batches follow the leader; a node older than CheckpointBatch (UNIMPLEMENTED)
gets unary Checkpoints instead, remembered; and the idempotency helpers'
claim.checkpoint goes through the coalescer they were given. Against a real
dedupd: tests/python/integration/test_checkpoint_batch.py."""

from __future__ import annotations

import asyncio
import threading
import unittest
from typing import Any, Callable

import grpc

from cluster_server import (
    ScriptedNode,
    aborted_items,
    unavailable,
    unavailable_items,
    unimplemented,
    unparseable,
)
from dedup_client import (
    AsyncCoalescingClient,
    Client,
    CoalescingClient,
    DedupRpcError,
    current_claim,
    dedup_pb2,
    with_idempotency,
    with_idempotency_async,
)
from dedup_client.batch import MAX_BATCH_BYTES

OK = dedup_pb2.CheckpointResponse.OK
Action = Callable[[Any, grpc.ServicerContext], Any]


def held(gate: threading.Event, arrived: threading.Event, then: Action | None = None) -> Action:
    """A CheckpointBatch answer that waits for `gate` (setting `arrived`
    first), then answers as `then` (default: OK for each item)."""

    def act(request: Any, context: grpc.ServicerContext) -> Any:
        arrived.set()
        gate.wait(10)
        if then is not None:
            return then(request, context)
        return ok_items(request)

    return act


def ok_items(request: dedup_pb2.CheckpointBatchRequest) -> dedup_pb2.CheckpointBatchResponse:
    return dedup_pb2.CheckpointBatchResponse(items=[
        dedup_pb2.CheckpointBatchResponse.Item(
            response=dedup_pb2.CheckpointResponse(status=OK, fence=item.fence))
        for item in request.items])


def refuse_empty_steps(request: Any, context: grpc.ServicerContext) -> Any:
    """As dedupd: an item with an empty step is refused alone, the others
    answered."""
    response = ok_items(request)
    for index, item in enumerate(request.items):
        if not item.step:
            response.items[index].ClearField("response")
            response.items[index].error.code = grpc.StatusCode.INVALID_ARGUMENT.value[0]
            response.items[index].error.message = (
                f"items[{index}].step: must be 1..128 printable ASCII bytes")
    return response


def sent(node: ScriptedNode, method: str) -> list[list[tuple[str, int, str, bytes, int]]]:
    """What each `method` call carried: (key, fence, step, data, lease_ms) per item."""
    def row(r: dedup_pb2.CheckpointRequest) -> tuple[str, int, str, bytes, int]:
        return (r.key, r.fence, r.step, r.data, r.lease_ms)

    return [[row(i) for i in r.items] if hasattr(r, "items") else [row(r)]
            for r in node.requests(method)]


class CheckpointCoalescingTest(unittest.TestCase):
    def node(self, leader: str | None = None, **kw: Any) -> ScriptedNode:
        node = ScriptedNode(leader, **kw)
        self.addCleanup(node.stop)
        return node

    def coalesce(self, targets: Any, *, max_batches_in_flight: int = 2,
                 **kw: Any) -> CoalescingClient:
        kw.setdefault("backoff_base_s", 0.001)
        kw.setdefault("backoff_cap_s", 0.002)
        client = Client(targets, **kw)
        self.addCleanup(client.close)
        coalescing = CoalescingClient(client, max_batches_in_flight=max_batches_in_flight)
        # Bounded: a test that strands a call fails instead of hanging here.
        self.addCleanup(coalescing.close, 10)
        return coalescing

    def hold_first(self, node: ScriptedNode, coalescing: CoalescingClient,
                   then: Action | None = None) -> tuple[Any, threading.Event]:
        """Sends k0's checkpoint and keeps it on the node until the returned
        gate is set (max_batches_in_flight=1: later calls queue meanwhile)."""
        gate, arrived = threading.Event(), threading.Event()
        self.addCleanup(gate.set)
        node.then("CheckpointBatch", held(gate, arrived, then))
        first = coalescing.checkpoint_future("ns", "k0", 1, "s0", b"d0")
        self.assertTrue(arrived.wait(10))
        return first, gate

    def test_concurrent_checkpoints_share_a_batch_with_their_own_answers(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target, max_batches_in_flight=1)
        first, gate = self.hold_first(node, coalescing)
        waiting = [coalescing.checkpoint_future("ns", f"k{i}", 10 + i, f"s{i}", b"x" * i,
                                                lease_ms=500)
                   for i in range(1, 11)]
        gate.set()
        self.assertEqual((first.result(10).status, first.result(10).fence), (OK, 1))
        self.assertEqual([f.result(10).fence for f in waiting], list(range(11, 21)))
        batches = sent(node, "CheckpointBatch")
        self.assertEqual([len(b) for b in batches], [1, 10])
        self.assertEqual(batches[1][2], ("k3", 13, "s3", b"xxx", 500))
        self.assertEqual(node.methods(), ["CheckpointBatch"] * 2)  # no unary Checkpoint

    def test_a_blocking_checkpoint_is_batched(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target)
        answer = coalescing.checkpoint("ns", "k", 9, "step", b"{}", lease_ms=300)
        self.assertEqual((answer.status, answer.fence), (OK, 9))
        self.assertEqual(sent(node, "CheckpointBatch"), [[("k", 9, "step", b"{}", 300)]])
        self.assertEqual(node.methods(), ["CheckpointBatch"])

    def test_a_batch_stays_under_the_byte_cap(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target, max_batches_in_flight=1)
        first, gate = self.hold_first(node, coalescing)
        data = b"d" * 65536  # the server's largest checkpoint data
        waiting = [coalescing.checkpoint_future("ns", f"k{i}", i, "s", data)
                   for i in range(1, 101)]
        gate.set()
        first.result(10)
        self.assertEqual([f.result(10).fence for f in waiting], list(range(1, 101)))
        requests = node.requests("CheckpointBatch")[1:]
        self.assertGreaterEqual(len(requests), 3)  # 100 x 64 KiB: 6.4 MiB
        for request in requests:
            self.assertLessEqual(request.ByteSize(), MAX_BATCH_BYTES)
        self.assertEqual(sum(len(r.items) for r in requests), 100)
        # Full batches: the cap, not the item count, closed them. (Without
        # the cap the server refuses 6.4 MiB, RESOURCE_EXHAUSTED, and the
        # items go again one by one.)
        self.assertGreater(len(requests[0].items), 40)

    def test_a_refused_item_fails_alone_with_the_unary_message(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target, max_batches_in_flight=1)
        first, gate = self.hold_first(node, coalescing, then=refuse_empty_steps)
        good = [coalescing.checkpoint_future("ns", f"k{i}", i, "s") for i in (1, 2)]
        bad = coalescing.checkpoint_future("ns", "k3", 3, "")
        more = coalescing.checkpoint_future("ns", "k4", 4, "s")
        node.then("CheckpointBatch", refuse_empty_steps)
        gate.set()
        first.result(10)
        self.assertEqual([f.result(10).fence for f in (*good, more)], [1, 2, 4])
        with self.assertRaises(DedupRpcError) as caught:
            bad.result(10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # Its unary message: the batch's "items[2]." prefix is gone.
        self.assertEqual(caught.exception.details(),
                         "step: must be 1..128 printable ASCII bytes")
        self.assertEqual([len(b) for b in sent(node, "CheckpointBatch")], [1, 4])

    def test_aborted_and_unavailable_items_go_again_unchanged(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target, max_batches_in_flight=1)
        first, gate = self.hold_first(node, coalescing)
        node.then("CheckpointBatch", aborted_items(0), unavailable_items(0))
        waiting = [coalescing.checkpoint_future("ns", f"k{i}", i, f"s{i}", b"d")
                   for i in (1, 2)]
        gate.set()
        first.result(10)
        self.assertEqual([f.result(10).status for f in waiting], [OK, OK])
        batches = sent(node, "CheckpointBatch")
        # k1 ABORTED (outcome unknown), sent again, then UNAVAILABLE, again.
        self.assertEqual(batches[1:], [[("k1", 1, "s1", b"d", 0), ("k2", 2, "s2", b"d", 0)],
                                       [("k1", 1, "s1", b"d", 0)], [("k1", 1, "s1", b"d", 0)]])

    def test_an_item_still_unknown_when_attempts_run_out_says_so(self) -> None:
        node = self.node().then("CheckpointBatch", *[aborted_items(0)] * 2)
        coalescing = self.coalesce(node.target, max_attempts=2)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.checkpoint("ns", "k1", 1, "s")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.ABORTED)
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(len(node.requests("CheckpointBatch")), 2)

    def test_batches_follow_the_leader(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        coalescing = self.coalesce([follower.target])
        self.assertEqual(coalescing.checkpoint("ns", "k", 4, "s").fence, 4)
        self.assertEqual(coalescing.client.leader_address(), leader.target)
        self.assertEqual(follower.methods(), ["CheckpointBatch"])
        self.assertEqual(leader.methods(), ["CheckpointBatch"])
        # An election (no leader named) moves on to the next address.
        electing = self.node(leader="")
        coalescing = self.coalesce([electing.target, leader.target])
        self.assertEqual(coalescing.checkpoint("ns", "k", 5, "s").fence, 5)
        self.assertEqual(electing.methods(), ["CheckpointBatch"])

    def test_an_older_server_gets_unary_checkpoints_remembered(self) -> None:
        node = self.node(without=["CheckpointBatch"])
        coalescing = self.coalesce(node.target, max_batches_in_flight=1)
        first, gate = self.hold_first(node, coalescing, then=unimplemented)
        queued = [coalescing.checkpoint_future("ns", f"k{i}", i, f"s{i}", b"d", lease_ms=70)
                  for i in (1, 2, 3)]
        gate.set()
        self.assertEqual(first.result(10).fence, 1)
        self.assertEqual([f.result(10).fence for f in queued], [1, 2, 3])
        # The queued batch never went as CheckpointBatch, nor do later calls.
        self.assertEqual(coalescing.checkpoint("ns", "k4", 4, "s4").fence, 4)
        self.assertEqual(coalescing.checkpoint_future("ns", "k5", 5, "s5").result(10).fence, 5)
        self.assertEqual(len(node.requests("CheckpointBatch")), 1)
        unary = sent(node, "Checkpoint")
        self.assertEqual(sorted(unary), [[("k0", 1, "s0", b"d0", 0)],
                                         [("k1", 1, "s1", b"d", 70)],
                                         [("k2", 2, "s2", b"d", 70)],
                                         [("k3", 3, "s3", b"d", 70)],
                                         [("k4", 4, "s4", b"", 0)],
                                         [("k5", 5, "s5", b"", 0)]])

    def test_an_older_dedupd_refusing_the_batch_as_unparseable_falls_back(self) -> None:
        node = self.node().then("CheckpointBatch", unparseable)
        coalescing = self.coalesce(node.target)
        self.assertEqual(coalescing.checkpoint("ns", "k1", 1, "s").fence, 1)
        self.assertEqual(coalescing.checkpoint("ns", "k2", 2, "s").fence, 2)
        self.assertEqual(node.methods(), ["CheckpointBatch", "Checkpoint", "Checkpoint"])

    def test_unimplemented_after_an_unknown_outcome_falls_back_too(self) -> None:
        # A group's leader changed to an older node while an item was out.
        node = self.node().then("CheckpointBatch", aborted_items(0), unimplemented)
        coalescing = self.coalesce(node.target)
        self.assertEqual(coalescing.checkpoint("ns", "k", 3, "s").fence, 3)
        self.assertEqual(node.methods(), ["CheckpointBatch", "CheckpointBatch", "Checkpoint"])

    def test_a_failed_fallback_after_an_unknown_outcome_is_still_unknown(self) -> None:
        node = self.node().then("CheckpointBatch", aborted_items(0), unimplemented)
        node.then("Checkpoint", *[unavailable] * 2)
        coalescing = self.coalesce(node.target, max_attempts=2)
        with self.assertRaises(DedupRpcError) as caught:
            coalescing.checkpoint("ns", "k", 3, "s")
        self.assertTrue(caught.exception.outcome_unknown)

    def test_other_lanes_do_not_fall_back(self) -> None:
        node = self.node(without=["CompleteBatch"])
        coalescing = self.coalesce(node.target)
        with self.assertRaises(grpc.RpcError) as caught:
            coalescing.complete("ns", "k", 1, dedup_pb2.SUCCESS)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(node.methods(), ["CompleteBatch"])

    def test_close_refuses_new_checkpoints(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target)
        self.assertTrue(coalescing.close(5))
        with self.assertRaises(RuntimeError):
            coalescing.checkpoint("ns", "k", 1, "s")

    def test_with_idempotency_checkpoints_through_the_coalescer(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node.target)

        def fn() -> str:
            current_claim().checkpoint("half", {"done": 1})
            return "ok"

        outcome = with_idempotency(coalescing, "ns", {"a": 1}, fn, "k8", lease_ms=900)
        self.assertEqual(outcome.result, "ok")
        self.assertEqual(node.methods(), ["BeginBatch", "CheckpointBatch", "CompleteBatch"])
        self.assertEqual(sent(node, "CheckpointBatch"), [[("k8", 8, "half", b'{"done":1}', 900)]])


class AsyncCheckpointCoalescingTest(unittest.IsolatedAsyncioTestCase):
    def node(self, **kw: Any) -> ScriptedNode:
        node = ScriptedNode(**kw)
        self.addCleanup(node.stop)
        return node

    def coalesce(self, node: ScriptedNode, **kw: Any) -> AsyncCoalescingClient:
        kw.setdefault("max_batches_in_flight", 1)
        coalescing = AsyncCoalescingClient(node.target, backoff_base_s=0.001,
                                           backoff_cap_s=0.002, **kw)
        self.addAsyncCleanup(coalescing.close, 10)
        return coalescing

    async def test_concurrent_checkpoints_share_batches(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node)
        answers = await asyncio.gather(*(
            coalescing.checkpoint("ns", f"k{i}", i, f"s{i}", b"d", lease_ms=40)
            for i in range(1, 21)))
        self.assertEqual([(a.status, a.fence) for a in answers], [(OK, i) for i in range(1, 21)])
        # The first leaves alone at once; the others share the next batch.
        batches = sent(node, "CheckpointBatch")
        self.assertEqual([len(b) for b in batches], [1, 19])
        self.assertEqual(batches[1][0], ("k2", 2, "s2", b"d", 40))
        self.assertNotIn("Checkpoint", node.methods())

    async def test_a_batch_stays_under_the_byte_cap(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node)
        data = b"d" * 65536
        answers = await asyncio.gather(*(
            coalescing.checkpoint("ns", f"k{i}", i, "s", data) for i in range(1, 101)))
        self.assertEqual([a.fence for a in answers], list(range(1, 101)))
        requests = node.requests("CheckpointBatch")
        self.assertGreaterEqual(len(requests), 4)  # 1, then 99 x 64 KiB: 6.3 MiB
        for request in requests:
            self.assertLessEqual(request.ByteSize(), MAX_BATCH_BYTES)
        self.assertEqual(sum(len(r.items) for r in requests), 100)
        # Full batches: the cap, not the item count, closed them. (Without
        # the cap the server refuses 6.3 MiB, RESOURCE_EXHAUSTED, and the
        # items go again one by one.)
        self.assertGreater(len(requests[1].items), 40)

    async def test_a_refused_item_fails_alone_and_aborted_ones_go_again(self) -> None:
        def refuse_and_abort_the_first(request: Any, context: grpc.ServicerContext) -> Any:
            response = refuse_empty_steps(request, context)
            response.items[0].ClearField("response")
            response.items[0].error.code = grpc.StatusCode.ABORTED.value[0]
            response.items[0].error.message = "outcome unknown"
            return response

        node = self.node().then("CheckpointBatch", refuse_empty_steps,
                                refuse_and_abort_the_first)
        coalescing = self.coalesce(node)
        done = await asyncio.gather(
            *(coalescing.checkpoint("ns", f"k{i}", i, step)
              for i, step in ((1, "s"), (2, "s"), (3, ""), (4, "s"))),
            return_exceptions=True)
        self.assertEqual([done[i].fence for i in (0, 1, 3)], [1, 2, 4])
        self.assertIsInstance(done[2], DedupRpcError)
        self.assertEqual(done[2].code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(done[2].details(), "step: must be 1..128 printable ASCII bytes")
        # k1 alone; k2, k3 (refused) and k4 together, k2 ABORTED there and
        # sent again alone with the same fence and step.
        self.assertEqual([[i[0] for i in b] for b in sent(node, "CheckpointBatch")],
                         [["k1"], ["k2", "k3", "k4"], ["k2"]])

    async def test_batches_follow_the_leader(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        coalescing = AsyncCoalescingClient([follower.target], backoff_base_s=0.001)
        self.addAsyncCleanup(coalescing.close, 10)
        self.assertEqual((await coalescing.checkpoint("ns", "k", 4, "s")).fence, 4)
        self.assertEqual(coalescing.client.leader_address(), leader.target)
        self.assertEqual(follower.methods(), ["CheckpointBatch"])
        self.assertEqual(leader.methods(), ["CheckpointBatch"])

    async def test_an_older_server_gets_unary_checkpoints_remembered(self) -> None:
        node = self.node(without=["CheckpointBatch"])
        coalescing = self.coalesce(node)
        answers = await asyncio.gather(*(
            coalescing.checkpoint("ns", f"k{i}", i, f"s{i}", b"d", lease_ms=70)
            for i in range(1, 6)))
        self.assertEqual([a.fence for a in answers], list(range(1, 6)))
        self.assertEqual((await coalescing.checkpoint("ns", "k6", 6, "s6")).fence, 6)
        # The first batch found out; the queued one and later calls went unary.
        self.assertEqual(len(node.requests("CheckpointBatch")), 1)
        self.assertEqual(sorted(sent(node, "Checkpoint")),
                         [*([[(f"k{i}", i, f"s{i}", b"d", 70)] for i in range(1, 6)]),
                          [("k6", 6, "s6", b"", 0)]])

    async def test_an_older_dedupd_refusing_the_batch_as_unparseable_falls_back(self) -> None:
        node = self.node().then("CheckpointBatch", unparseable)
        coalescing = self.coalesce(node)
        self.assertEqual((await coalescing.checkpoint("ns", "k1", 1, "s")).fence, 1)
        self.assertEqual((await coalescing.checkpoint("ns", "k2", 2, "s")).fence, 2)
        self.assertEqual(node.methods(), ["CheckpointBatch", "Checkpoint", "Checkpoint"])

    async def test_with_idempotency_async_checkpoints_through_the_coalescer(self) -> None:
        node = self.node()
        coalescing = self.coalesce(node)

        async def fn() -> str:
            await current_claim().checkpoint("half", [1, 2])
            return "ok"

        outcome = await with_idempotency_async(coalescing, "ns", {"a": 1}, fn, "k8",
                                               lease_ms=900)
        self.assertEqual(outcome.result, "ok")
        self.assertEqual(node.methods(), ["BeginBatch", "CheckpointBatch", "CompleteBatch"])
        self.assertEqual(sent(node, "CheckpointBatch"), [[("k8", 8, "half", b"[1,2]", 900)]])


if __name__ == "__main__":
    unittest.main()
