"""The server's RetryInfo: a RESOURCE_EXHAUSTED carrying one (a tenant over
its limits) is retried after exactly its delay (capped at 30 s), as an
attempt; without one, RESOURCE_EXHAUSTED keeps its old handling. Against an
in-process gRPC server that sends the real trailer (grpc-status-details-bin),
so the parsing is exercised end to end; tests/python/integration/
test_tenant_limits.py does the same against a real dedupd."""

from __future__ import annotations

import threading
import time
import unittest
from concurrent import futures
from typing import Optional

import grpc
from google.protobuf import duration_pb2

from batch_server import ScriptedBatchServer, started_for_each
from dedup_client import Client, CoalescingClient, dedup_pb2, dedup_pb2_grpc
from dedup_client._proto import error_details_pb2
from dedup_client.retry_info import server_retry_delay_s

RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
STARTED = dedup_pb2.BeginResponse.STARTED
REFUSAL = 'tenant "slow" is over its limit of 5 requests per second; retry in 250 ms'


def status_details(delay_s: Optional[float], extra_first: bool = False) -> bytes:
    """A serialized google.rpc.Status as dedupd sends it: a RetryInfo of
    `delay_s` in its details (none for None), after an unrelated detail if
    `extra_first`."""
    status = error_details_pb2.RpcStatus(
        code=RESOURCE_EXHAUSTED.value[0], message=REFUSAL)
    if extra_first:
        status.details.add(type_url="type.googleapis.com/google.rpc.DebugInfo",
                           value=b"\x0a\x01x")
    if delay_s is not None:
        seconds = int(delay_s)
        info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
            seconds=seconds, nanos=round((delay_s - seconds) * 1e9)))
        status.details.add(type_url="type.googleapis.com/google.rpc.RetryInfo",
                           value=info.SerializeToString())
    return status.SerializeToString()


def refuse(context: grpc.ServicerContext, delay_s: Optional[float]) -> None:
    context.set_trailing_metadata((("grpc-status-details-bin", status_details(delay_s)),))
    context.abort(RESOURCE_EXHAUSTED, REFUSAL)


class RefusingServer(dedup_pb2_grpc.DedupServicer):
    """Answers the first `refusals` Begins with RESOURCE_EXHAUSTED (with a
    RetryInfo of `delay_s`, none for None), then STARTED."""

    def __init__(self, refusals: int, delay_s: Optional[float]) -> None:
        self.refusals = refusals
        self.delay_s = delay_s
        self.begins: list[dedup_pb2.BeginRequest] = []
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dedup_pb2_grpc.add_DedupServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.target = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.stop(grace=None)

    def Begin(self, request, context):  # noqa: N802 - gRPC's name
        with self._lock:
            self.begins.append(request)
            refused = len(self.begins) <= self.refusals
        if refused:
            refuse(context, self.delay_s)
        return dedup_pb2.BeginResponse(status=STARTED, fence=len(self.begins))


class ParseTest(unittest.TestCase):
    class Error(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode, trailers: tuple) -> None:
            super().__init__()
            self._code, self._trailers = code, trailers

        def code(self) -> grpc.StatusCode:
            return self._code

        def trailing_metadata(self) -> tuple:
            return self._trailers

    def delay(self, code: grpc.StatusCode, details: Optional[bytes]) -> Optional[float]:
        trailers = () if details is None else (("grpc-status-details-bin", details),)
        return server_retry_delay_s(self.Error(code, trailers))

    def test_reads_the_retry_info_among_other_details(self) -> None:
        self.assertAlmostEqual(self.delay(RESOURCE_EXHAUSTED, status_details(0.18)), 0.18)
        self.assertAlmostEqual(
            self.delay(RESOURCE_EXHAUSTED, status_details(1.5, extra_first=True)), 1.5)

    def test_caps_at_30_s(self) -> None:
        self.assertEqual(self.delay(RESOURCE_EXHAUSTED, status_details(3600)), 30.0)

    def test_none_without_a_retry_info_or_for_other_codes(self) -> None:
        self.assertIsNone(self.delay(RESOURCE_EXHAUSTED, None))
        self.assertIsNone(self.delay(RESOURCE_EXHAUSTED, status_details(None)))
        self.assertIsNone(self.delay(RESOURCE_EXHAUSTED, b"\xff\xff not a status"))
        self.assertIsNone(self.delay(grpc.StatusCode.UNAVAILABLE, status_details(0.1)))


class ClientTest(unittest.TestCase):
    def serve(self, refusals: int, delay_s: Optional[float]) -> RefusingServer:
        server = RefusingServer(refusals, delay_s)
        self.addCleanup(server.stop)
        return server

    def client(self, server: RefusingServer, **kw) -> tuple[Client, list[float]]:
        sleeps: list[float] = []
        client = Client(server.target, sleep=sleeps.append, uniform01=lambda: 0.5, **kw)
        self.addCleanup(client.close)
        return client, sleeps

    def test_waits_exactly_the_servers_delay_then_retries(self) -> None:
        server = self.serve(refusals=1, delay_s=0.25)
        client, sleeps = self.client(server, max_attempts=2)
        answer = client.begin("slow:x", "k", owner="o")
        self.assertEqual(answer.status, STARTED)
        self.assertEqual(sleeps, [0.25])  # no jitter added, no backoff
        self.assertEqual([b.owner for b in server.begins], ["o", "o"])

    def test_the_delay_is_capped_at_30_s(self) -> None:
        server = self.serve(refusals=1, delay_s=3600)
        client, sleeps = self.client(server)
        self.assertEqual(client.begin("slow:x", "k", owner="o").status, STARTED)
        self.assertEqual(sleeps, [30.0])

    def test_counts_as_an_attempt_and_reaches_the_caller_when_they_run_out(self) -> None:
        server = self.serve(refusals=3, delay_s=0.1)
        client, sleeps = self.client(server, max_attempts=3)
        with self.assertRaises(grpc.RpcError) as caught:
            client.begin("slow:x", "k", owner="o")
        self.assertEqual(caught.exception.code(), RESOURCE_EXHAUSTED)
        self.assertIn("requests per second", caught.exception.details())
        self.assertEqual(len(server.begins), 3)
        self.assertEqual(sleeps, [0.1, 0.1])  # none after the last attempt

    def test_without_retry_info_it_is_not_retried(self) -> None:
        server = self.serve(refusals=1, delay_s=None)
        client, sleeps = self.client(server)
        with self.assertRaises(grpc.RpcError) as caught:
            client.begin("slow:x", "k", owner="o")
        self.assertEqual(caught.exception.code(), RESOURCE_EXHAUSTED)
        self.assertEqual((len(server.begins), sleeps), (1, []))

    def test_a_refused_batch_is_sent_again_whole(self) -> None:
        refused = []

        def once(request, context):
            if not refused:
                refused.append(True)
                refuse(context, 0.2)
            return started_for_each(request, context)

        server = ScriptedBatchServer(once)
        self.addCleanup(server.stop)
        sleeps: list[float] = []
        client = Client(server.target, sleep=sleeps.append, max_attempts=2)
        self.addCleanup(client.close)
        answers = client.begin_batch([dedup_pb2.BeginRequest(namespace="ns", key=f"k{i}", owner="o")
                                      for i in (1, 2, 3)])
        self.assertEqual([a.fence for a in answers], [1, 2, 3])
        self.assertEqual(server.batch_sizes(), [3, 3])
        self.assertEqual(sleeps, [0.2])


class CoalescingTest(unittest.TestCase):
    def serve(self, handler) -> ScriptedBatchServer:
        server = ScriptedBatchServer(handler)
        self.addCleanup(server.stop)
        return server

    def test_a_refused_batch_waits_the_delay_and_goes_again_whole(self) -> None:
        refused = []

        def once(request, context):
            if not refused:
                refused.append(time.monotonic())
                refuse(context, 0.3)
            return started_for_each(request, context)

        server = self.serve(once)
        coalescing = CoalescingClient(server.target, max_attempts=2)
        self.addCleanup(coalescing.close, 10)
        answer = coalescing.begin("ns", "k5", owner="o")
        elapsed = time.monotonic() - refused[0]
        self.assertEqual((answer.status, answer.fence), (STARTED, 5))
        self.assertEqual(server.batch_sizes(), [1, 1])
        self.assertGreaterEqual(elapsed, 0.3)
        self.assertLess(elapsed, 5)

    def test_out_of_attempts_each_caller_gets_the_refusal_and_no_item_goes_alone(self) -> None:
        def always(request, context):
            refuse(context, 0.01)

        server = self.serve(always)
        coalescing = CoalescingClient(server.target, max_attempts=1, max_batches_in_flight=1)
        self.addCleanup(coalescing.close, 10)
        server.hold()
        calls = [coalescing.begin_future("ns", "k0", owner="o0")]
        self.assertTrue(server.holding.wait(10))
        calls += [coalescing.begin_future("ns", f"k{i}", owner=f"o{i}") for i in (1, 2)]
        server.release()
        for call in calls:
            with self.assertRaises(grpc.RpcError) as caught:
                call.result(timeout=10)
            self.assertEqual(caught.exception.code(), RESOURCE_EXHAUSTED)
            self.assertIn("requests per second", caught.exception.details())
        # A RetryInfo means "later", not "too large": no item-by-item resend.
        self.assertEqual(server.batch_sizes(), [1, 2])


if __name__ == "__main__":
    unittest.main()
