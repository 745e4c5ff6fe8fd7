"""TLS settings and the bearer token (dedup_client.security): what is read
from where, what is refused, that the token never shows, and that it goes
with every call: unary, batched, coalesced, a given channel, a leader
redirect. (Against a real dedupd with real certificates:
tests/python/integration/test_auth.py.)"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from pathlib import Path

import grpc

from cluster_server import ScriptedNode
from dedup_client import (
    BearerToken,
    Client,
    CoalescingClient,
    TlsConfig,
    dedup_pb2,
)
from dedup_client.security import is_loopback_address, read_pem

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class SecurityTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="dedup-py-sec-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name: str, data: bytes | str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def test_pem_from_a_path_or_the_pem_itself(self) -> None:
        path = self.path("ca.pem", PEM)
        self.assertEqual(read_pem(path, "root_ca"), PEM)
        self.assertEqual(read_pem(Path(path), "root_ca"), PEM)
        self.assertEqual(read_pem(PEM, "root_ca"), PEM)
        self.assertEqual(read_pem(PEM.decode(), "root_ca"), PEM)
        self.assertIsNone(read_pem(None, "root_ca"))
        with self.assertRaisesRegex(ValueError, "root_ca: cannot read .*missing.pem"):
            read_pem(os.path.join(self.dir, "missing.pem"), "root_ca")
        with self.assertRaisesRegex(ValueError, "no PEM block"):
            read_pem(self.path("junk", b"not a certificate"), "root_ca")
        with self.assertRaisesRegex(ValueError, "no PEM block"):
            read_pem(b"not a certificate", "root_ca")

    def test_a_client_certificate_needs_its_key(self) -> None:
        with self.assertRaisesRegex(ValueError, "together"):
            TlsConfig(client_cert=PEM)
        with self.assertRaisesRegex(ValueError, "together"):
            TlsConfig(client_key=PEM)
        with self.assertRaises(ValueError):
            TlsConfig(server_name="")
        self.assertEqual(TlsConfig(server_name="dedup.internal").channel_options(),
                         [("grpc.ssl_target_name_override", "dedup.internal")])

    def test_a_missing_tls_file_fails_when_the_client_is_made(self) -> None:
        with self.assertRaisesRegex(ValueError, "TLS root_ca: cannot read"):
            Client("127.0.0.1:1", tls=TlsConfig(root_ca=os.path.join(self.dir, "nope.pem")))

    def test_the_token_never_shows(self) -> None:
        secret = "s3cr3t-token"
        token = BearerToken(secret)
        self.assertEqual(token.value(), secret)
        self.assertEqual(token.metadata(), ("authorization", "Bearer " + secret))
        self.assertNotIn(secret, repr(token))
        self.assertNotIn(secret, str(token))
        for bad in ("two words", "tab\there", "é-token"):
            with self.assertRaises(ValueError) as caught:
                BearerToken(bad)
            self.assertNotIn(bad, str(caught.exception))
        with self.assertRaisesRegex(ValueError, "empty"):
            BearerToken("  ")
        with self.assertRaises(ValueError):
            BearerToken()
        with self.assertRaises(ValueError):
            BearerToken("t", file=self.path("t", "t"))

    def test_a_token_file_is_read_again_when_it_changes(self) -> None:
        path = self.path("token", "first-token\n")
        token = BearerToken(file=path)
        self.assertEqual(token.value(), "first-token")
        self.assertNotIn("first-token", repr(token))
        self.assertIn(path, repr(token))
        os.replace(self.path("token.new", "second-token"), path)
        self.assertEqual(token.value(), "second-token")
        os.remove(path)
        with self.assertRaisesRegex(ValueError, "token file"):
            token.value()
        with self.assertRaisesRegex(ValueError, "token file"):
            BearerToken(file=path)  # missing at the start: refused at once
        with self.assertRaisesRegex(ValueError, "give token or token_file"):
            Client("127.0.0.1:1", token="t", token_file=self.path("t", "t"))

    def test_loopback_addresses(self) -> None:
        for address in ("127.0.0.1:50051", "127.0.0.3:1", "localhost:1", "[::1]:50051",
                        "ipv4:127.0.0.1:5", "dns:///localhost:5", "unix:/tmp/dedup.sock"):
            self.assertTrue(is_loopback_address(address), address)
        for address in ("10.0.0.1:50051", "dedup.example:443", "[2001:db8::1]:1",
                        "0.0.0.0:1", "dns:///dedup.example:5"):
            self.assertFalse(is_loopback_address(address), address)

    def test_a_token_goes_in_plaintext_only_to_loopback(self) -> None:
        # Constructing opens no connection: no traffic leaves this machine.
        with self.assertRaisesRegex(ValueError, "plaintext to dedup.example:50051"):
            Client(["127.0.0.1:1", "dedup.example:50051"], token="t")
        with self.assertRaisesRegex(ValueError, "plaintext"):
            CoalescingClient("dedup.example:50051", token="t")
        Client("dedup.example:50051", token="t", allow_insecure_token=True).close()
        Client("dedup.example:50051", token="t", tls=True).close()
        Client("dedup.example:50051").close()  # no token: plaintext as before

    def test_tls_does_not_combine_with_a_channel_or_a_factory(self) -> None:
        channel = grpc.insecure_channel("127.0.0.1:1")
        self.addCleanup(channel.close)
        with self.assertRaises(ValueError):
            Client(channel, tls=True)
        with self.assertRaises(ValueError):
            Client("127.0.0.1:1", tls=True, channel_factory=grpc.insecure_channel)
        with self.assertRaises(ValueError):
            Client("127.0.0.1:1", channel_options=[("grpc.primary_user_agent", "x")],
                   channel_factory=grpc.insecure_channel)
        with self.assertRaisesRegex(ValueError, "token"):
            CoalescingClient(Client("127.0.0.1:1"), token="t")

    def test_the_token_goes_with_every_call_redirects_and_batches_included(self) -> None:
        leader = ScriptedNode()
        self.addCleanup(leader.stop)
        follower = ScriptedNode(leader=leader.target)
        self.addCleanup(follower.stop)
        token_file = self.path("token", "file-token")
        with Client([follower.target], token_file=token_file) as client:
            client.get("ns", "k")  # redirected to the leader
            client.begin_batch([dedup_pb2.BeginRequest(namespace="ns", key="k1", owner="o")])
            coalescing = CoalescingClient(client)
            coalescing.begin("ns", "k2", owner="o")
            coalescing.complete("ns", "k2", 2, dedup_pb2.SUCCESS)
            coalescing.close(10)
        self.assertEqual(follower.methods(), ["Get"])
        self.assertEqual(leader.methods(), ["Get", "BeginBatch", "BeginBatch", "CompleteBatch"])
        for metadata in follower.metadata + leader.metadata:
            self.assertEqual(metadata.get("authorization"), "Bearer file-token")

        # A coalescing client made from a target, and a given channel.
        with CoalescingClient(leader.target, token="made-token") as coalescing:
            coalescing.begin("ns", "k3", owner="o")
        self.assertEqual(leader.metadata[-1].get("authorization"), "Bearer made-token")
        channel = grpc.insecure_channel(leader.target)
        with Client(channel, token="channel-token") as client:
            client.forget("ns", "k")
        channel.close()
        self.assertEqual(leader.metadata[-1].get("authorization"), "Bearer channel-token")

        # And none without a token, as before.
        with Client(leader.target) as client:
            client.get("ns", "k")
        self.assertNotIn("authorization", leader.metadata[-1])


if __name__ == "__main__":
    unittest.main()
