"""Tenant limits end to end: a real dedupd whose tenants file limits the
tenant "slow" to 5 requests per second refuses the excess with
RESOURCE_EXHAUSTED and a RetryInfo; the Python client waits the delay the
server gives and tries again (an attempt like any other), and with no
attempt left the refusal reaches the caller with the server's message.
(The token goes over plaintext to loopback: TLS is test_auth.py's subject.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import unittest

import grpc

from dedupd_process import Dedupd
from dedup_client import Client, CoalescingClient

SLOW_TOKEN = "slow-token-py-5e02"
RPS = 5


class TenantLimitsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="dedup-py-limits-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        tenants_file = os.path.join(self.dir, "tenants.json")
        with open(tenants_file, "w") as f:
            json.dump({"tenants": [{
                "name": "slow",
                "token_sha256": [hashlib.sha256(SLOW_TOKEN.encode()).hexdigest()],
                "namespace_prefixes": ["slow:"], "roles": ["client"],
                "limits": {"rps": RPS, "inflight": 2},
            }]}, f)
        self.server = Dedupd(args=[f"--tenants_file={tenants_file}"])
        self.addCleanup(self.server.stop)

    def client(self, **kw) -> Client:
        client = Client(self.server.target, token=SLOW_TOKEN, **kw)
        self.addCleanup(client.close)
        return client

    def test_two_attempts_wait_out_the_limit_and_every_call_succeeds(self) -> None:
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            time.sleep(seconds)

        client = self.client(max_attempts=2, sleep=sleep)
        start = time.monotonic()
        for i in range(15):
            client.begin("slow:x", f"k{i}", b"args", owner=f"o{i}")
        elapsed = time.monotonic() - start
        # 15 calls at 5 per second, after a burst of at most 5: about 2 s.
        self.assertGreaterEqual(elapsed, 1.5)
        self.assertTrue(slept, "the server never asked the client to wait")
        self.assertTrue(all(0 < s <= 1.0 for s in slept), slept)

    def test_one_attempt_gets_the_refusal_with_its_message(self) -> None:
        client = self.client(max_attempts=1)
        refusal = None
        for i in range(20):
            try:
                client.begin("slow:x", f"j{i}", b"args", owner=f"o{i}")
            except grpc.RpcError as e:
                refusal = e
                break
        self.assertIsNotNone(refusal, "20 calls at once were never refused")
        self.assertEqual(refusal.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("requests per second", refusal.details())

    def test_coalesced_batches_wait_and_go_again_whole(self) -> None:
        coalescing = CoalescingClient(self.server.target, token=SLOW_TOKEN, max_attempts=2)
        self.addCleanup(coalescing.close, 30)
        start = time.monotonic()
        for i in range(10):
            coalescing.begin("slow:x", f"c{i}", b"args", owner=f"o{i}")
        self.assertGreaterEqual(time.monotonic() - start, 0.5)


if __name__ == "__main__":
    unittest.main()
