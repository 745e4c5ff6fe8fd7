"""The "Use from an MCP server" Python snippet of the root README, run as
is against a real dedupd, with a fake mailer that writes to a ledger."""

from __future__ import annotations

import os
import re
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

from dedup_client import RetryableError
from dedupd_process import Dedupd

README = Path(__file__).resolve().parents[3] / "README.md"


def snippet() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- python-snippet:begin -->\n```python\n(.*?)```\n<!-- python-snippet:end -->",
        text, re.S)
    if not match:
        raise AssertionError(f"no python snippet between markers in {README}")
    return match.group(1)


class FakeMailer:
    """Sends by appending to a list; fails once with TemporaryFailure if asked."""

    class TemporaryFailure(Exception):
        pass

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail_next = False

    def send(self, to: str, subject: str) -> str:
        if self.fail_next:
            self.fail_next = False
            raise self.TemporaryFailure("421 try again later")
        self.sent.append((to, subject))
        return f"msg-{len(self.sent)}"


class ReadmeSnippetTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Dedupd()
        self.addCleanup(self.server.stop)

    def test_snippet_sends_once_and_retryable_failures_run_again(self) -> None:
        mailer = FakeMailer()
        scope: dict[str, Any] = {"mailer": mailer, "__name__": "readme_snippet"}
        with mock.patch.dict(os.environ, {"DEDUP_TARGET": self.server.target}):
            exec(compile(snippet(), str(README), "exec"), scope)
        self.addCleanup(scope["dedup"].close)
        self.assertEqual(mailer.sent, [("ana@example.com", "Invoice inv-981: 129.99 EUR")])
        self.assertEqual(scope["receipt"], {"message_id": "msg-1"})

        send_invoice = scope["send_invoice"]
        mailer.fail_next = True
        with self.assertRaises(RetryableError):
            send_invoice("inv-982", "bo@example.com", 500)
        self.assertEqual(len(mailer.sent), 1)
        self.assertEqual(send_invoice("inv-982", "bo@example.com", 500), {"message_id": "msg-2"})
        self.assertTrue(send_invoice.with_outcome("inv-982", "bo@example.com", 500).duplicate)
        self.assertEqual(len(mailer.sent), 2)


if __name__ == "__main__":
    unittest.main()
