"""The reconnect backoff of the channels a Client opens (dedup_client.reconnect):
set by default, and a caller's own channel_options win. Its effect against a
real restarted dedupd: integration/test_reconnect.py."""

from __future__ import annotations

import unittest
from unittest import mock

from dedup_client.reconnect import RECONNECT_BACKOFF_OPTIONS, with_reconnect_backoff
from dedup_client.security import channel_factory


class ReconnectOptionsTest(unittest.TestCase):
    def test_defaults_fill_in_what_the_caller_did_not_set(self) -> None:
        self.assertEqual(with_reconnect_backoff([]), list(RECONNECT_BACKOFF_OPTIONS))
        self.assertEqual(
            dict(with_reconnect_backoff([("grpc.max_reconnect_backoff_ms", 5000),
                                         ("grpc.keepalive_time_ms", 1)])),
            {"grpc.max_reconnect_backoff_ms": 5000, "grpc.keepalive_time_ms": 1,
             "grpc.initial_reconnect_backoff_ms": 100})

    def test_the_channels_a_client_opens_carry_them(self) -> None:
        opened = []

        def insecure_channel(address, options=()):
            opened.append(dict(options))
            return mock.MagicMock()

        # What Client uses to open its channels when given no factory.
        with mock.patch("grpc.insecure_channel", insecure_channel):
            channel_factory(None, None)("127.0.0.1:1")
            channel_factory(None, None, options=[("grpc.max_reconnect_backoff_ms", 5000)])(
                "127.0.0.1:2")
        self.assertEqual(opened[0], {"grpc.initial_reconnect_backoff_ms": 100,
                                     "grpc.max_reconnect_backoff_ms": 1000})
        self.assertEqual(opened[1], {"grpc.initial_reconnect_backoff_ms": 100,
                                     "grpc.max_reconnect_backoff_ms": 5000})

if __name__ == "__main__":
    unittest.main()
