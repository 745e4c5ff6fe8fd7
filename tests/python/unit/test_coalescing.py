"""CoalescingClient against a scripted in-process gRPC server: calls made
while a batch is out share the next one, each caller gets its own item's
answer or unary-style error, and failed batches are retried or split as
documented. Client.begin_batch maps a batch answer item by item."""

from __future__ import annotations

import threading
import unittest
from concurrent.futures import Future

import grpc

from batch_server import ScriptedBatchServer, started_for_each
from dedup_client import Client, CoalescingClient, DedupRpcError, dedup_pb2

STARTED = dedup_pb2.BeginResponse.STARTED


class CoalescingTest(unittest.TestCase):
    def serve(self, begin_batch=started_for_each) -> ScriptedBatchServer:
        server = ScriptedBatchServer(begin_batch)
        self.addCleanup(server.stop)
        return server

    def coalesce(self, server: ScriptedBatchServer, **kw) -> CoalescingClient:
        client = Client(server.target, backoff_base_s=0.001, backoff_cap_s=0.002)
        self.addCleanup(client.close)
        coalescing = CoalescingClient(client, **kw)
        # Bounded: a test that strands a call fails instead of hanging here.
        self.addCleanup(coalescing.close, 10)
        return coalescing

    def hold_first_batch(
        self, server: ScriptedBatchServer, coalescing: CoalescingClient
    ) -> Future:
        """Sends k0 and keeps it on the server until server.release()."""
        server.hold()
        first = coalescing.begin_future("ns", "k0", owner="o")
        self.assertTrue(server.holding.wait(10))
        return first

    def test_a_lone_call_leaves_at_once_as_a_batch_of_one(self) -> None:
        server = self.serve()
        coalescing = self.coalesce(server)
        answer = coalescing.begin("ns", "k7", b"h", owner="o", lease_ms=50, ttl_s=60)
        self.assertEqual((answer.status, answer.fence), (STARTED, 7))
        self.assertEqual(server.batch_sizes(), [1])
        sent = server.begin_batches[0][0]
        self.assertEqual((sent.namespace, sent.key, sent.args_hash, sent.owner,
                          sent.lease_ms, sent.ttl_s), ("ns", "k7", b"h", "o", 50, 60))

    def test_calls_behind_a_busy_slot_share_one_batch_with_their_own_answers(self) -> None:
        server = self.serve()
        coalescing = self.coalesce(server, max_batches_in_flight=1)
        first = self.hold_first_batch(server, coalescing)
        waiting = [coalescing.begin_future("ns", f"k{i}", owner=f"o{i}")
                   for i in range(1, 21)]
        bad = coalescing.begin_future("ns", "no-digits", owner="x")
        server.release()
        self.assertEqual(first.result(10).fence, 0)
        for i, future in enumerate(waiting, start=1):
            self.assertEqual(future.result(10).fence, i)
        with self.assertRaises(DedupRpcError) as caught:
            bad.result(10)
        # The unary message: the batch's "items[20]." prefix is gone.
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(caught.exception.details(), "key: no number")
        self.assertEqual(server.batch_sizes(), [1, 21])

    def test_batches_close_at_max_batch_items(self) -> None:
        server = self.serve()
        coalescing = self.coalesce(server, max_batch_items=3, max_batches_in_flight=1)
        first = self.hold_first_batch(server, coalescing)
        waiting = [coalescing.begin_future("ns", f"k{i}", owner="o") for i in range(1, 8)]
        server.release()
        first.result(10)
        self.assertEqual([f.result(10).fence for f in waiting], list(range(1, 8)))
        self.assertEqual(server.batch_sizes(), [1, 3, 3, 1])

    def test_unavailable_is_retried_with_the_same_owner(self) -> None:
        failures = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE]

        def flaky(request, context):
            if failures:
                context.abort(failures.pop(), "restarting")
            return started_for_each(request, context)

        server = self.serve(flaky)
        coalescing = self.coalesce(server)
        self.assertEqual(coalescing.begin("ns", "k5", owner="me").fence, 5)
        self.assertEqual([[item.owner for item in batch] for batch in server.begin_batches],
                         [["me"], ["me"], ["me"]])

    def test_retries_give_up_after_max_attempts_and_free_the_slot(self) -> None:
        def down(request, context):
            context.abort(grpc.StatusCode.UNAVAILABLE, "down")

        server = self.serve(down)
        coalescing = self.coalesce(server, max_batches_in_flight=1)
        with self.assertRaises(grpc.RpcError) as caught:
            coalescing.begin("ns", "k1", owner="o")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(server.begin_batches), coalescing.client.max_attempts)
        # The one slot is free again: a later call is sent (and refused).
        later = coalescing.begin_future("ns", "k2", owner="o")
        with self.assertRaises(grpc.RpcError):
            later.result(10)
        self.assertEqual(len(server.begin_batches), 2 * coalescing.client.max_attempts)

    def test_a_retried_batch_gives_its_slot_back(self) -> None:
        failures = [grpc.StatusCode.UNAVAILABLE]

        def flaky(request, context):
            if failures:
                context.abort(failures.pop(), "restarting")
            return started_for_each(request, context)

        server = self.serve(flaky)
        coalescing = self.coalesce(server, max_batches_in_flight=1)
        self.assertEqual(coalescing.begin("ns", "k1", owner="o").fence, 1)
        self.assertEqual(coalescing.begin_future("ns", "k2", owner="o").result(10).fence, 2)

    def test_other_batch_errors_reach_every_caller_unretried(self) -> None:
        def refuse(request, context):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "no")

        server = self.serve(refuse)
        coalescing = self.coalesce(server, max_batches_in_flight=1)
        futures = [coalescing.begin_future("ns", f"k{i}", owner="o") for i in range(5)]
        errors = []
        for future in futures:
            with self.assertRaises(grpc.RpcError) as caught:
                future.result(10)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(caught.exception.details(), "no")
            errors.append(caught.exception)
        # Each caller its own exception object (tracebacks do not mix).
        self.assertEqual(len({id(e) for e in errors}), 5)
        self.assertEqual(sum(server.batch_sizes()), 5)

    def test_a_batch_refused_as_too_large_goes_again_item_by_item(self) -> None:
        def only_singles(request, context):
            if len(request.items) > 1:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "message too large")
            return started_for_each(request, context)

        server = self.serve(only_singles)
        coalescing = self.coalesce(server, max_batches_in_flight=1)
        first = self.hold_first_batch(server, coalescing)
        waiting = [coalescing.begin_future("ns", f"k{i}", owner="o") for i in range(1, 5)]
        server.release()
        first.result(10)
        self.assertEqual([f.result(10).fence for f in waiting], [1, 2, 3, 4])
        self.assertEqual(server.batch_sizes(), [1, 4, 1, 1, 1, 1])
        # Every slot the singles took is free again.
        self.assertEqual(coalescing.begin_future("ns", "k5", owner="o").result(10).fence, 5)

    def test_an_answer_with_the_wrong_item_count_fails_the_whole_batch(self) -> None:
        def one_short(request, context):
            response = started_for_each(request, context)
            del response.items[-1]
            return response

        server = self.serve(one_short)
        coalescing = self.coalesce(server, max_batches_in_flight=1)
        first = self.hold_first_batch(server, coalescing)
        waiting = [coalescing.begin_future("ns", f"k{i}", owner="o") for i in range(1, 4)]
        server.release()
        for future in [first, *waiting]:
            with self.assertRaises(DedupRpcError) as caught:
                future.result(10)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INTERNAL)
        self.assertIn("answered 2 items for 3", str(caught.exception))

    def test_a_closed_channel_fails_every_queued_call_without_recursion(self) -> None:
        server = self.serve()
        client = Client(server.target)
        coalescing = CoalescingClient(client, max_batch_items=1, max_batches_in_flight=1)
        first = self.hold_first_batch(server, coalescing)
        # More queued batches than Python's recursion limit, each of which
        # fails the moment it is sent.
        queued = [coalescing.begin_future("ns", f"k{i}", owner="o") for i in range(1, 1500)]
        client.close()  # cancels the held call; every later send fails at once
        server.release()
        for future in [first, *queued]:
            self.assertIsNotNone(future.exception(10))
        self.assertTrue(coalescing.close(10))  # nothing left outstanding

    def test_completes_are_batched_too(self) -> None:
        server = self.serve()
        coalescing = self.coalesce(server)
        answer = coalescing.complete("ns", "k", 9, dedup_pb2.ERROR, b"{}", ttl_s=5)
        self.assertEqual(answer.status, dedup_pb2.CompleteResponse.OK)
        sent = server.complete_batches[0][0]
        self.assertEqual((sent.key, sent.fence, sent.outcome, sent.result, sent.ttl_s),
                         ("k", 9, dedup_pb2.ERROR, b"{}", 5))

    def test_close_waits_for_outstanding_calls_then_refuses_new_ones(self) -> None:
        server = self.serve()
        coalescing = self.coalesce(server)
        first = self.hold_first_batch(server, coalescing)
        closed = threading.Event()
        closer = threading.Thread(target=lambda: (coalescing.close(), closed.set()))
        closer.start()
        self.assertFalse(closed.wait(0.2))  # the held call is still out
        server.release()
        self.assertTrue(closed.wait(10))
        closer.join()
        self.assertTrue(first.done())
        self.assertTrue(coalescing.close(0))  # nothing outstanding
        with self.assertRaises(RuntimeError):
            coalescing.begin_future("ns", "k1")

    def test_rejects_limits_the_server_would_refuse(self) -> None:
        client = Client("127.0.0.1:1")
        self.addCleanup(client.close)
        with self.assertRaises(ValueError):
            CoalescingClient(client, max_batch_items=1001)
        with self.assertRaises(ValueError):
            CoalescingClient(client, max_batches_in_flight=0)


class BeginBatchTest(unittest.TestCase):
    def test_maps_each_item_to_its_answer_or_its_error(self) -> None:
        server = ScriptedBatchServer()
        self.addCleanup(server.stop)
        client = Client(server.target)
        self.addCleanup(client.close)
        results = client.begin_batch([
            dedup_pb2.BeginRequest(namespace="ns", key="k1"),
            dedup_pb2.BeginRequest(namespace="ns", key="bad"),
            dedup_pb2.BeginRequest(namespace="ns", key="k3"),
        ])
        self.assertEqual([r.fence for r in (results[0], results[2])], [1, 3])
        self.assertIsInstance(results[1], DedupRpcError)
        # Batch answers keep the field's position in the batch.
        self.assertEqual(results[1].details(), "items[1].key: no number")
        self.assertEqual(client.complete_batch(
            [dedup_pb2.CompleteRequest(namespace="ns", key="k1", fence=1)]
        )[0].status, dedup_pb2.CompleteResponse.OK)


if __name__ == "__main__":
    unittest.main()
