"""TLS, mTLS and tenants end to end: the Python client against a real dedupd
with a tenants file written here (sha256 digests of tokens chosen here) and
certificates made by openssl at test time (tests/testing/make-test-pki).

Refusals are answers, not failures: UNAUTHENTICATED and PERMISSION_DENIED
surface at once with their own code (no retry, no backoff sleep), batches
refuse only the foreign item, and a failed TLS handshake is UNAVAILABLE.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Callable, Optional

import grpc

from dedupd_process import Dedupd
from dedup_client import (
    Client,
    CoalescingClient,
    DedupRpcError,
    TlsConfig,
    dedup_pb2,
    open_channel,
)

MAKE_PKI = Path(__file__).resolve().parents[2] / "testing" / "make-test-pki"

BILLING_TOKEN = "billing-token-py-3c1e"
OPS_TOKEN = "ops-token-py-77d0"

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE

_pki: Optional[str] = None


def setUpModule() -> None:  # noqa: N802 - unittest's name
    global _pki
    _pki = tempfile.mkdtemp(prefix="dedup-py-pki-")
    made = subprocess.run([str(MAKE_PKI), _pki], capture_output=True, text=True)
    if made.returncode != 0:
        raise RuntimeError(f"make-test-pki failed: {made.stdout}{made.stderr}")


def tearDownModule() -> None:  # noqa: N802
    if _pki is not None:
        shutil.rmtree(_pki, ignore_errors=True)


def pki(name: str) -> str:
    assert _pki is not None
    return os.path.join(_pki, name)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def tenants_json(with_billing_token: bool = True) -> str:
    return json.dumps({"tenants": [
        {"name": "billing",
         "token_sha256": [digest(BILLING_TOKEN)] if with_billing_token else [],
         "cert_sans": ["billing-tools"],
         "namespace_prefixes": ["billing:"], "roles": ["client"]},
        {"name": "ops", "token_sha256": [digest(OPS_TOKEN)],
         "cert_sans": ["ops-console"],
         "namespace_prefixes": [""], "roles": ["operator"]},
    ]}, indent=1)


def write_file(path: str, text: str) -> None:
    """Written aside and renamed: a reader never sees half a file."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def stats(channel: grpc.Channel) -> bytes:
    """dedup.v1.Admin/Stats (StatsRequest is empty; the answer is kept as
    bytes: these tests only look at whether it is refused)."""
    call = channel.unary_unary(
        "/dedup.v1.Admin/Stats",
        request_serializer=lambda _: b"",
        response_deserializer=lambda data: data,
    )
    return call(None, timeout=5)


class AuthTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="dedup-py-auth-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.tenants_file = os.path.join(self.dir, "tenants.json")
        write_file(self.tenants_file, tenants_json())
        self.sleeps: list[float] = []

    def start(self, *, tls: bool = False, mtls: bool = False) -> Dedupd:
        flags = [f"--tenants_file={self.tenants_file}"]
        if tls or mtls:
            flags += [f"--tls_cert_file={pki('server.pem')}",
                      f"--tls_key_file={pki('server.key')}"]
        if mtls:
            flags.append(f"--tls_client_ca_file={pki('ca.pem')}")
        server = Dedupd(args=flags)
        self.addCleanup(server.stop)
        return server

    def client(self, server: Dedupd, **kw: Any) -> Client:
        """A Client whose backoff sleeps are recorded (a refusal must not
        cause any) and kept short."""
        kw.setdefault("max_attempts", 3)
        kw.setdefault("backoff_base_s", 0.01)
        kw.setdefault("backoff_cap_s", 0.02)
        if kw.get("tls") is not None:
            # Each client its own connection: a handshake test must not
            # reuse another client's.
            kw.setdefault("channel_options", [("grpc.use_local_subchannel_pool", 1)])

        def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)
            time.sleep(seconds)

        client = Client(server.target, sleep=sleep, **kw)
        self.addCleanup(client.close)
        return client

    def coalescing(self, client: Client) -> CoalescingClient:
        coalescing = CoalescingClient(client)
        self.addCleanup(coalescing.close, 10)
        return coalescing

    def assertRefused(self, code: grpc.StatusCode, call: Callable[[], Any]) -> grpc.RpcError:  # noqa: N802
        """`call` raises `code` at once: no retry, so no backoff sleep."""
        sleeps = len(self.sleeps)
        with self.assertRaises(grpc.RpcError) as caught:
            call()
        self.assertEqual(caught.exception.code(), code, caught.exception.details())
        self.assertEqual(len(self.sleeps), sleeps, "a refusal was retried")
        return caught.exception

    # ---- tokens (plaintext on loopback) ----

    def test_no_credential_or_a_wrong_token_is_unauthenticated(self) -> None:
        server = self.start()
        nobody = self.client(server)
        e = self.assertRefused(UNAUTHENTICATED, lambda: nobody.begin("billing:inv", "k", b"h"))
        self.assertIn("no credential", e.details())
        wrong = self.client(server, token="not-a-token")
        e = self.assertRefused(UNAUTHENTICATED, lambda: wrong.begin("billing:inv", "k", b"h"))
        self.assertIn("not known", e.details())
        # Batches too: the whole call is refused.
        e = self.assertRefused(UNAUTHENTICATED, lambda: wrong.begin_batch(
            [dedup_pb2.BeginRequest(namespace="billing:inv", key="k", owner="o")]))
        coalesced = self.coalescing(wrong)
        with self.assertRaises(DedupRpcError) as caught:
            coalesced.begin("billing:inv", "k", b"h", owner="o")
        self.assertEqual(caught.exception.code(), UNAUTHENTICATED)
        self.assertEqual(self.sleeps, [])

    def test_a_tenant_works_in_its_own_namespaces(self) -> None:
        server = self.start()
        token_file = os.path.join(self.dir, "billing.token")
        write_file(token_file, BILLING_TOKEN + "\n")
        for billing in (self.client(server, token=BILLING_TOKEN),
                        self.client(server, token_file=token_file)):
            key = f"k-{len(self.sleeps)}-{id(billing)}"
            begun = billing.begin("billing:inv", key, b"h", owner="o")
            self.assertEqual(begun.status, dedup_pb2.BeginResponse.STARTED)
            done = billing.complete("billing:inv", key, begun.fence, dedup_pb2.SUCCESS, b"sent")
            self.assertEqual(done.status, dedup_pb2.CompleteResponse.OK)
            self.assertEqual(billing.get("billing:inv", key).record.result, b"sent")

    def test_a_rotated_token_file_is_read_again(self) -> None:
        server = self.start()
        token_file = os.path.join(self.dir, "token")
        write_file(token_file, "stale-token")
        client = self.client(server, token_file=token_file)
        self.assertRefused(UNAUTHENTICATED, lambda: client.get("billing:x", "k"))
        write_file(token_file, BILLING_TOKEN)
        self.assertFalse(client.get("billing:x", "k").found)

    def test_another_tenants_namespace_is_refused_alike_for_existing_and_missing_keys(self) -> None:
        server = self.start()
        ops = self.client(server, token=OPS_TOKEN)
        billing = self.client(server, token=BILLING_TOKEN)
        ops.begin("ops:jobs", "exists", b"h", owner="o")
        existing = self.assertRefused(PERMISSION_DENIED, lambda: billing.get("ops:jobs", "exists"))
        missing = self.assertRefused(PERMISSION_DENIED, lambda: billing.get("ops:jobs", "missing"))
        self.assertEqual(existing.details(), missing.details())
        self.assertIn("billing:", existing.details())
        self.assertRefused(PERMISSION_DENIED,
                           lambda: billing.begin("ops:jobs", "exists", b"h", owner="o"))
        self.assertRefused(PERMISSION_DENIED,
                           lambda: billing.complete("ops:jobs", "exists", 1, dedup_pb2.SUCCESS))
        # A prefix is a prefix of the namespace, not of the key.
        self.assertRefused(PERMISSION_DENIED, lambda: billing.begin("billing", "k", b"h"))
        # Nothing changed there.
        self.assertEqual(ops.get("ops:jobs", "exists").record.state, dedup_pb2.IN_FLIGHT)

    def test_batches_refuse_only_the_foreign_item(self) -> None:
        server = self.start()
        billing = self.client(server, token=BILLING_TOKEN)
        namespaces = ["billing:a", "ops:b", "billing:c"]
        begun = billing.begin_batch([
            dedup_pb2.BeginRequest(namespace=ns, key="k", args_hash=b"h", owner="o")
            for ns in namespaces])
        self.assertEqual(begun[0].status, dedup_pb2.BeginResponse.STARTED)
        self.assertIsInstance(begun[1], DedupRpcError)
        self.assertEqual(begun[1].code(), PERMISSION_DENIED)
        self.assertTrue(begun[1].details().startswith("items[1].namespace:"), begun[1].details())
        self.assertEqual(begun[2].status, dedup_pb2.BeginResponse.STARTED)
        completed = billing.complete_batch([
            dedup_pb2.CompleteRequest(namespace="billing:a", key="k", fence=begun[0].fence,
                                      outcome=dedup_pb2.SUCCESS, result=b"done"),
            dedup_pb2.CompleteRequest(namespace="ops:b", key="k", fence=1,
                                      outcome=dedup_pb2.SUCCESS),
            dedup_pb2.CompleteRequest(namespace="billing:c", key="k", fence=begun[2].fence,
                                      outcome=dedup_pb2.SUCCESS, result=b"done"),
        ])
        self.assertEqual(completed[0].status, dedup_pb2.CompleteResponse.OK)
        self.assertEqual(completed[1].code(), PERMISSION_DENIED)
        self.assertEqual(completed[2].status, dedup_pb2.CompleteResponse.OK)
        self.assertEqual(self.sleeps, [], "a refused item was retried")

        # Coalesced: concurrent calls share a batch; each caller gets what its
        # unary call would have (the foreign one without the "items[i]." prefix).
        coalesced = self.coalescing(billing)
        futures = [coalesced.begin_future(ns, "coalesced", b"h", owner="o") for ns in namespaces]
        self.assertEqual(futures[0].result(timeout=10).status, dedup_pb2.BeginResponse.STARTED)
        self.assertEqual(futures[2].result(timeout=10).status, dedup_pb2.BeginResponse.STARTED)
        error = futures[1].exception(timeout=10)
        self.assertIsInstance(error, DedupRpcError)
        self.assertEqual(error.code(), PERMISSION_DENIED)
        self.assertTrue(error.details().startswith("namespace:"), error.details())
        self.assertEqual(self.sleeps, [])

    def test_forget_and_admin_need_the_operator_role(self) -> None:
        server = self.start()
        billing = self.client(server, token=BILLING_TOKEN)
        ops = self.client(server, token=OPS_TOKEN)
        billing.begin("billing:x", "k", b"h", owner="o")
        e = self.assertRefused(PERMISSION_DENIED, lambda: billing.forget("billing:x", "k"))
        self.assertIn("operator", e.details())
        for token, code in ((BILLING_TOKEN, PERMISSION_DENIED), (None, UNAUTHENTICATED)):
            with open_channel(server.target, token=token) as channel:
                with self.assertRaises(grpc.RpcError) as caught:
                    stats(channel)
                self.assertEqual(caught.exception.code(), code)
        self.assertTrue(ops.forget("billing:x", "k").existed)
        with open_channel(server.target, token=OPS_TOKEN) as channel:
            self.assertIsInstance(stats(channel), bytes)
        self.assertFalse(ops.get("billing:x", "k").found)

    def test_a_reload_revokes_a_token(self) -> None:
        server = self.start()
        billing = self.client(server, token=BILLING_TOKEN)
        ops = self.client(server, token=OPS_TOKEN)
        self.assertEqual(billing.begin("billing:x", "k", b"h", owner="o").status,
                         dedup_pb2.BeginResponse.STARTED)
        write_file(self.tenants_file, tenants_json(with_billing_token=False))
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGHUP)
        deadline = time.monotonic() + 15
        code = grpc.StatusCode.OK
        while time.monotonic() < deadline:
            try:
                billing.get("billing:x", "k")
            except grpc.RpcError as e:
                code = e.code()
                if code == UNAUTHENTICATED:
                    break
            time.sleep(0.05)
        self.assertEqual(code, UNAUTHENTICATED)
        # The other tenant is untouched.
        self.assertTrue(ops.get("billing:x", "k").found)

    # ---- TLS ----

    def test_tls_trusts_the_servers_ca_and_only_it(self) -> None:
        server = self.start(tls=True)
        with open(pki("ca.pem"), "rb") as f:
            ca_bytes = f.read()
        for tls in (TlsConfig(root_ca=pki("ca.pem")), TlsConfig(root_ca=ca_bytes),
                    TlsConfig(root_ca=Path(pki("ca.pem")), server_name="localhost")):
            client = self.client(server, tls=tls, token=BILLING_TOKEN)
            self.assertFalse(client.get("billing:x", "k").found)
        coalesced = self.coalescing(self.client(server, tls=TlsConfig(root_ca=ca_bytes),
                                                token=BILLING_TOKEN))
        self.assertEqual(coalesced.begin("billing:x", "k", b"h", owner="o").status,
                         dedup_pb2.BeginResponse.STARTED)

        # Fail to connect, fast (few attempts, short backoff): another CA, a
        # name the certificate does not hold, plaintext to a TLS port.
        for kw in ({"tls": TlsConfig(root_ca=pki("ca2.pem"))},
                   {"tls": TlsConfig(root_ca=pki("ca.pem"), server_name="wrong.example")},
                   {}):
            client = self.client(server, token=BILLING_TOKEN, max_attempts=2, deadline_s=3, **kw)
            started = time.monotonic()
            with self.assertRaises(grpc.RpcError) as caught:
                client.get("billing:x", "k")
            self.assertEqual(caught.exception.code(), UNAVAILABLE, kw)
            self.assertLess(time.monotonic() - started, 5, kw)

    # ---- mTLS ----

    def cert(self, name: str) -> TlsConfig:
        return TlsConfig(root_ca=pki("ca.pem"), client_cert=pki(f"{name}.pem"),
                         client_key=pki(f"{name}.key"))

    def test_client_certificates_identify_tenants(self) -> None:
        server = self.start(mtls=True)
        billing = self.client(server, tls=self.cert("client-billing"))
        self.assertEqual(billing.begin("billing:x", "k", b"h", owner="o").status,
                         dedup_pb2.BeginResponse.STARTED)
        self.assertRefused(PERMISSION_DENIED, lambda: billing.begin("ops:x", "k", b"h"))
        self.assertRefused(PERMISSION_DENIED, lambda: billing.forget("billing:x", "k"))
        results = billing.begin_batch([
            dedup_pb2.BeginRequest(namespace=ns, key="batch", owner="o")
            for ns in ("billing:y", "ops:y")])
        self.assertEqual(results[0].status, dedup_pb2.BeginResponse.STARTED)
        self.assertEqual(results[1].code(), PERMISSION_DENIED)

        ops = self.client(server, tls=self.cert("client-ops"))
        self.assertTrue(ops.forget("billing:x", "k").existed)
        with open_channel(server.target, tls=self.cert("client-ops")) as channel:
            self.assertIsInstance(stats(channel), bytes)
        with open_channel(server.target, tls=self.cert("client-billing")) as channel:
            with self.assertRaises(grpc.RpcError) as caught:
                stats(channel)
            self.assertEqual(caught.exception.code(), PERMISSION_DENIED)

        # A valid certificate whose names are in no tenant.
        stranger = self.client(server, tls=self.cert("client-stranger"))
        e = self.assertRefused(UNAUTHENTICATED, lambda: stranger.begin("billing:x", "k", b"h"))
        self.assertIn("stranger", e.details())
        # A certificate from another CA claiming billing's name: no handshake.
        rogue = self.client(server, tls=self.cert("client-rogue"), max_attempts=2, deadline_s=3)
        with self.assertRaises(grpc.RpcError) as caught:
            rogue.get("billing:x", "k")
        self.assertEqual(caught.exception.code(), UNAVAILABLE)
        # No certificate: a token still works; a wrong one beside a good
        # certificate is refused.
        token_only = self.client(server, tls=TlsConfig(root_ca=pki("ca.pem")),
                                 token=BILLING_TOKEN)
        self.assertFalse(token_only.get("billing:x", "k").found)
        wrong = self.client(server, tls=self.cert("client-billing"), token="wrong")
        self.assertRefused(UNAUTHENTICATED, lambda: wrong.get("billing:x", "k"))


if __name__ == "__main__":
    unittest.main()
