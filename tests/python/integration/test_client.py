"""Client against a real dedupd: the answers arrive as typed responses, bad
input is a gRPC error that is not retried, and UNAVAILABLE is retried."""

from __future__ import annotations

import socket
import unittest
import uuid

import grpc

from dedup_client import Client, dedup_pb2
from dedupd_process import Dedupd

SERVER: Dedupd
Begin = dedup_pb2.BeginResponse


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd()


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        self.key = f"k-{uuid.uuid4()}"

    def test_lifecycle(self) -> None:
        c, ns, key = self.client, "mail", self.key
        first = c.begin(ns, key, b"h", owner="a")
        self.assertEqual(first.status, Begin.STARTED)
        self.assertEqual(c.begin(ns, key, b"h", owner="a").fence, first.fence)  # re-entry
        busy = c.begin(ns, key, b"h", owner="b")
        self.assertEqual(busy.status, Begin.IN_USE)
        self.assertEqual(c.begin(ns, key, b"other", owner="b").status, Begin.CONFLICT)
        self.assertEqual(c.renew(ns, key, first.fence, lease_ms=5000).status,
                         dedup_pb2.RenewResponse.OK)
        self.assertEqual(c.complete(ns, key, first.fence + 1, dedup_pb2.SUCCESS, b"r").status,
                         dedup_pb2.CompleteResponse.STALE_FENCE)
        self.assertEqual(c.complete(ns, key, first.fence, dedup_pb2.SUCCESS, b"r").status,
                         dedup_pb2.CompleteResponse.OK)
        dup = c.begin(ns, key, b"h")
        self.assertEqual((dup.status, dup.outcome, dup.result),
                         (Begin.DUPLICATE, dedup_pb2.SUCCESS, b"r"))
        got = c.get(ns, key)
        self.assertTrue(got.found)
        self.assertEqual(got.record.state, dedup_pb2.COMPLETED)
        self.assertEqual(c.release(ns, key, first.fence).status,
                         dedup_pb2.ReleaseResponse.ALREADY_COMPLETED)
        self.assertTrue(c.forget(ns, key).existed)
        self.assertFalse(c.get(ns, key).found)
        self.assertGreater(c.begin(ns, key, b"h").fence, first.fence)

    def test_bad_input_is_invalid_argument_and_not_retried(self) -> None:
        sleeps: list[float] = []
        client = Client(SERVER.target, sleep=sleeps.append)
        self.addCleanup(client.close)
        with self.assertRaises(grpc.RpcError) as caught:
            client.begin("bad namespace!", self.key)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("namespace", caught.exception.details())
        self.assertEqual(sleeps, [])

    def test_unavailable_is_retried_then_raised(self) -> None:
        with socket.socket() as s:  # A port nobody listens on.
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        sleeps: list[float] = []
        client = Client(f"127.0.0.1:{port}", max_attempts=3, sleep=sleeps.append)
        self.addCleanup(client.close)
        with self.assertRaises(grpc.RpcError) as caught:
            client.get("mail", self.key)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(len(sleeps), 2)
        self.assertTrue(0 <= sleeps[0] <= 0.05 and 0 <= sleeps[1] <= 0.1)


if __name__ == "__main__":
    unittest.main()
