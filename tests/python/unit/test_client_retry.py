"""Client: only UNAVAILABLE is retried, with full-jitter backoff between
attempts, and every call carries a deadline (Begin's includes wait_ms)."""

from __future__ import annotations

import unittest

import grpc

from dedup_client import Client, dedup_pb2
from fakes import FakeChannel, FakeRpcError

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


class ClientRetryTest(unittest.TestCase):
    def make(self, script: list, **kw) -> tuple[Client, FakeChannel, list[float]]:
        channel = FakeChannel(script)
        sleeps: list[float] = []
        client = Client(channel, uniform01=lambda: 0.5, sleep=sleeps.append, **kw)
        return client, channel, sleeps

    def test_unavailable_is_retried_with_growing_jittered_delays(self) -> None:
        ok = dedup_pb2.GetResponse(found=False)
        client, channel, sleeps = self.make(
            [FakeRpcError(UNAVAILABLE)] * 3 + [ok], backoff_base_s=0.1, backoff_cap_s=0.3)
        self.assertEqual(client.get("ns", "k"), ok)
        self.assertEqual(len(channel.calls), 4)
        # uniform01 = 0.5 of ceilings 0.1, 0.2, 0.3 (capped).
        self.assertEqual(sleeps, [0.05, 0.1, 0.15])

    def test_gives_up_after_max_attempts_with_the_last_error(self) -> None:
        client, channel, sleeps = self.make([FakeRpcError(UNAVAILABLE)] * 3, max_attempts=3)
        with self.assertRaises(grpc.RpcError) as caught:
            client.forget("ns", "k")
        self.assertEqual(caught.exception.code(), UNAVAILABLE)
        self.assertEqual(len(channel.calls), 3)
        self.assertEqual(len(sleeps), 2)

    def test_other_codes_are_not_retried(self) -> None:
        for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DEADLINE_EXCEEDED,
                     grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                     grpc.StatusCode.UNKNOWN):
            with self.subTest(code.name):
                client, channel, sleeps = self.make([FakeRpcError(code)])
                with self.assertRaises(grpc.RpcError) as caught:
                    client.release("ns", "k", 1)
                self.assertEqual(caught.exception.code(), code)
                self.assertEqual((len(channel.calls), sleeps), (1, []))

    def test_retries_resend_the_same_begin_so_its_owner_is_kept(self) -> None:
        answer = dedup_pb2.BeginResponse(status=dedup_pb2.BeginResponse.STARTED, fence=3)
        client, channel, _ = self.make([FakeRpcError(UNAVAILABLE), answer])
        self.assertEqual(client.begin("ns", "k", b"h", owner="o-1"), answer)
        owners = [request.owner for _, request, _ in channel.calls]
        self.assertEqual(owners, ["o-1", "o-1"])

    def test_every_call_has_a_deadline_and_begin_adds_its_wait(self) -> None:
        client, channel, _ = self.make(
            [dedup_pb2.BeginResponse(), dedup_pb2.BeginResponse(),
             dedup_pb2.CompleteResponse(), dedup_pb2.ReleaseResponse(),
             dedup_pb2.RenewResponse(), dedup_pb2.GetResponse(), dedup_pb2.ForgetResponse()],
            deadline_s=2.0)
        client.begin("ns", "k")
        client.begin("ns", "k", wait_ms=1500)
        client.complete("ns", "k", 1, dedup_pb2.SUCCESS, b"r")
        client.release("ns", "k", 1)
        client.renew("ns", "k", 1, lease_ms=500)
        client.get("ns", "k")
        client.forget("ns", "k")
        self.assertEqual([t for _, _, t in channel.calls], [2.0, 3.5, 2.0, 2.0, 2.0, 2.0, 2.0])
        self.assertEqual(
            [m.rsplit("/", 1)[1] for m, _, _ in channel.calls],
            ["Begin", "Begin", "Complete", "Release", "Renew", "Get", "Forget"])

    def test_rejects_nonsense_options(self) -> None:
        with self.assertRaises(ValueError):
            Client(FakeChannel([]), max_attempts=0)
        with self.assertRaises(ValueError):
            Client(FakeChannel([]), deadline_s=0)


if __name__ == "__main__":
    unittest.main()
