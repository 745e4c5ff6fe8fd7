"""The DEDUP_* environment variables (dedup_client.environment) against a
real dedupd with TLS, client certificates and tenants: DEDUP_ADDRESS as a
comma-separated list (the first node down), DEDUP_CA_FILE, DEDUP_CERT_FILE
and DEDUP_KEY_FILE (mTLS), DEDUP_TOKEN_FILE, for Client and AsyncClient;
explicit arguments win over every one of them."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import unittest
from typing import Any
from unittest import mock

import grpc

from dedupd_process import Dedupd
from dedup_client import AsyncClient, AsyncCoalescingClient, Client, CoalescingClient
from test_auth import BILLING_TOKEN, pki, setUpModule, tearDownModule, tenants_json, write_file

__all__ = ["setUpModule", "tearDownModule"]  # the PKI, made once per module

STARTED = 1  # BeginResponse.STARTED


def dedup_free_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}


class EnvironmentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="dedup-py-env-")
        tenants = os.path.join(cls.dir, "tenants.json")
        write_file(tenants, tenants_json())
        cls.token_file = os.path.join(cls.dir, "billing.token")
        write_file(cls.token_file, BILLING_TOKEN + "\n")
        cls.server = Dedupd(args=[
            f"--tenants_file={tenants}",
            f"--tls_cert_file={pki('server.pem')}", f"--tls_key_file={pki('server.key')}",
            f"--tls_client_ca_file={pki('ca.pem')}"])

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def env(self, **variables: str) -> Any:
        """os.environ without DEDUP_* but for `variables`, for the test."""
        environ = dedup_free_environ()
        environ.update({f"DEDUP_{k.upper()}": v for k, v in variables.items()})
        patch = mock.patch.dict(os.environ, environ, clear=True)
        patch.start()
        self.addCleanup(patch.stop)

    def full_env(self) -> None:
        self.env(address=f"127.0.0.1:1, {self.server.target}", ca_file=pki("ca.pem"),
                 token_file=self.token_file)

    def test_client_from_address_list_ca_and_token_file(self) -> None:
        self.full_env()
        with Client() as client:
            self.assertEqual(client.addresses, ("127.0.0.1:1", self.server.target))
            begun = client.begin("billing:env", "sync-1", b"h")
            self.assertEqual(begun.status, STARTED)

    def test_async_client_from_the_environment(self) -> None:
        self.full_env()

        async def main() -> int:
            client = AsyncClient()
            try:
                return (await client.begin("billing:env", "async-1", b"h")).status
            finally:
                await client.close()

        self.assertEqual(asyncio.run(main()), STARTED)

    def test_coalescing_clients_without_a_client_use_the_environment(self) -> None:
        self.full_env()
        coalescing = CoalescingClient()
        self.addCleanup(coalescing.close, 10)
        self.assertEqual(coalescing.begin("billing:env", "co-1", b"h").status, STARTED)

        async def main() -> int:
            aio = AsyncCoalescingClient()
            try:
                return (await aio.begin("billing:env", "co-2", b"h")).status
            finally:
                await aio.close()

        self.assertEqual(asyncio.run(main()), STARTED)

    def test_client_certificate_from_the_environment(self) -> None:
        self.env(address=self.server.target, ca_file=pki("ca.pem"),
                 cert_file=pki("client-ops.pem"), key_file=pki("client-ops.key"))
        # ops (by its certificate) may use any namespace; billing's token may not.
        with Client() as ops:
            self.assertFalse(ops.get("shipping:env", "k").found)
        self.env(address=self.server.target, ca_file=pki("ca.pem"), token_file=self.token_file)
        with Client(max_attempts=1) as billing:
            with self.assertRaises(grpc.RpcError) as caught:
                billing.get("shipping:env", "k")
            self.assertEqual(caught.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    def test_explicit_arguments_win(self) -> None:
        self.full_env()
        with Client(self.server.target, token="not-a-token", max_attempts=1) as wrong:
            with self.assertRaises(grpc.RpcError) as caught:
                wrong.get("billing:env", "k")
            self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        # Plaintext, as asked: the TLS port does not answer it.
        with Client(self.server.target, tls=False, max_attempts=1, deadline_s=1) as plain:
            with self.assertRaises(grpc.RpcError) as caught:
                plain.get("billing:env", "k")
            self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.env(address="127.0.0.1:1")
        with Client(self.server.target, tls=True, max_attempts=1, deadline_s=1) as system_roots:
            self.assertEqual(system_roots.addresses, (self.server.target,))

    def test_a_comma_separated_target_is_a_list_and_no_target_needs_the_variable(self) -> None:
        self.env()
        with Client("127.0.0.1:7001, 127.0.0.1:7002,127.0.0.1:7001") as client:
            self.assertEqual(client.addresses, ("127.0.0.1:7001", "127.0.0.1:7002"))
            self.assertEqual(client.max_attempts, 10)
        with self.assertRaisesRegex(ValueError, "DEDUP_ADDRESS"):
            Client()
        with self.assertRaisesRegex(ValueError, "empty entry"):
            Client("127.0.0.1:7001,,127.0.0.1:7002")


if __name__ == "__main__":
    unittest.main()
