"""The Python snippets of the root README ("Use from an MCP server") and of
client/python/README.md, run as is against a real dedupd, with a fake mailer
that writes to a list. A snippet may be the blocking form (`def
send_invoice`, mailer.send returns) or the asyncio form (`async def
send_invoice`, `await mailer.send(...)`, an `async def main()` returning the
receipt, run by `asyncio.run(main())` under `if __name__ == "__main__"`)."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import unittest
from pathlib import Path
from typing import Any
from unittest import mock

from dedup_client import RetryableError
from dedupd_process import Dedupd

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
CLIENT_README = REPO / "client" / "python" / "README.md"


def snippet(readme: Path) -> str:
    text = readme.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- python-snippet:begin -->\n```python\n(.*?)```\n<!-- python-snippet:end -->",
        text, re.S)
    if not match:
        raise AssertionError(f"no python snippet between markers in {readme}")
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


class AsyncFakeMailer(FakeMailer):
    async def send(self, to: str, subject: str) -> str:  # type: ignore[override]
        await asyncio.sleep(0)
        return FakeMailer.send(self, to, subject)


class ReadmeSnippetTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Dedupd()
        self.addCleanup(self.server.stop)

    def run_snippet(self, readme: Path) -> None:
        code = snippet(readme)
        is_async = "async def send_invoice" in code
        mailer = AsyncFakeMailer() if is_async else FakeMailer()
        scope: dict[str, Any] = {"mailer": mailer, "__name__": "readme_snippet"}
        # DEDUP_ADDRESS is the variable every client reads; DEDUP_TARGET is
        # what the root README's snippet read before it was renamed.
        with mock.patch.dict(os.environ, {"DEDUP_ADDRESS": self.server.target,
                                          "DEDUP_TARGET": self.server.target}):
            exec(compile(code, str(readme), "exec"), scope)
        send_invoice = scope["send_invoice"]
        self.assertEqual(inspect.iscoroutinefunction(send_invoice), is_async)
        if is_async:
            asyncio.run(self.check_async(scope, mailer))
        else:
            self.addCleanup(scope["dedup"].close)
            self.check(scope["receipt"], send_invoice, mailer)

    async def check_async(self, scope: dict[str, Any], mailer: FakeMailer) -> None:
        # The snippet's main() runs in this loop (its asyncio.run only runs as
        # __main__), and so does the rest: the client's channels live in one loop.
        try:
            receipt = await scope["main"]()
            send_invoice = scope["send_invoice"]
            self.assertEqual(mailer.sent, [("ana@example.com", "Invoice inv-981: 129.99 EUR")])
            self.assertEqual(receipt, {"message_id": "msg-1"})
            mailer.fail_next = True
            with self.assertRaises(RetryableError):
                await send_invoice("inv-982", "bo@example.com", 500)
            self.assertEqual(len(mailer.sent), 1)
            self.assertEqual(await send_invoice("inv-982", "bo@example.com", 500),
                             {"message_id": "msg-2"})
            again = await send_invoice.with_outcome("inv-982", "bo@example.com", 500)
            self.assertTrue(again.duplicate)
            self.assertEqual(len(mailer.sent), 2)
        finally:
            await scope["dedup"].close()

    def check(self, receipt: Any, send_invoice: Any, mailer: FakeMailer) -> None:
        self.assertEqual(mailer.sent, [("ana@example.com", "Invoice inv-981: 129.99 EUR")])
        self.assertEqual(receipt, {"message_id": "msg-1"})
        mailer.fail_next = True
        with self.assertRaises(RetryableError):
            send_invoice("inv-982", "bo@example.com", 500)
        self.assertEqual(len(mailer.sent), 1)
        self.assertEqual(send_invoice("inv-982", "bo@example.com", 500), {"message_id": "msg-2"})
        self.assertTrue(send_invoice.with_outcome("inv-982", "bo@example.com", 500).duplicate)
        self.assertEqual(len(mailer.sent), 2)

    def test_root_readme_snippet_sends_once_and_retryable_failures_run_again(self) -> None:
        self.run_snippet(README)

    def test_client_readme_snippet_sends_once_and_retryable_failures_run_again(self) -> None:
        self.run_snippet(CLIENT_README)


if __name__ == "__main__":
    unittest.main()
