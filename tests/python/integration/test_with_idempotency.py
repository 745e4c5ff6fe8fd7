"""with_idempotency and @idempotent against a real dedupd: side effects
(lines appended to a ledger file) happen exactly as often as promised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path

from dedup_client import (
    Client,
    ConflictError,
    ReplayedError,
    RetryableError,
    StaleFenceError,
    current_claim,
    idempotent,
    with_idempotency,
)
from dedupd_process import Dedupd

SERVER: Dedupd


def setUpModule() -> None:
    global SERVER
    SERVER = Dedupd()


def tearDownModule() -> None:
    code = SERVER.stop()
    assert code == 0, f"dedupd exited {code}"


class Declined(Exception):
    pass


class LedgerTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(SERVER.target)
        self.addCleanup(self.client.close)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.ledger = Path(tmp.name) / "ledger.txt"
        self.ledger.touch()
        # A fresh key per test: the server is shared by the module.
        self.key = f"op-{uuid.uuid4()}"

    def charge(self, line: str = "charged") -> dict:
        with self.ledger.open("a") as f:
            f.write(line + "\n")
        return {"receipt": line, "lines": self.lines()}

    def lines(self) -> int:
        return len(self.ledger.read_text().splitlines())


class WithIdempotencyTest(LedgerTestCase):
    def test_same_call_twice_runs_the_side_effect_once(self) -> None:
        args = {"amount": 5, "to": "ana"}
        first = with_idempotency(self.client, "billing:charge", args, self.charge, self.key)
        second = with_idempotency(self.client, "billing:charge", args, self.charge, self.key)
        self.assertEqual(self.lines(), 1)
        self.assertFalse(first.duplicate)
        self.assertTrue(second.duplicate)
        self.assertEqual(second.result, first.result)
        self.assertEqual(second.fence, first.fence)

    def test_default_key_is_the_args_hash(self) -> None:
        first = with_idempotency(
            self.client, "billing:charge", {"nonce": self.key, "amount": 5}, self.charge)
        # The same arguments in another key order and number spelling are the
        # same call.
        again = with_idempotency(
            self.client, "billing:charge", {"amount": 5.0, "nonce": self.key}, self.charge)
        self.assertEqual((first.duplicate, again.duplicate, self.lines()), (False, True, 1))

    def test_same_key_other_args_is_a_conflict_and_runs_nothing(self) -> None:
        with_idempotency(self.client, "billing:charge", {"amount": 5}, self.charge, self.key)
        with self.assertRaises(ConflictError):
            with_idempotency(self.client, "billing:charge", {"amount": 6}, self.charge, self.key)
        self.assertEqual(self.lines(), 1)

    def test_permanent_error_is_replayed_without_rerunning(self) -> None:
        runs = []

        def decline() -> None:
            runs.append(1)
            raise Declined("card declined")

        with self.assertRaises(Declined):
            with_idempotency(self.client, "billing:charge", {"a": 1}, decline, self.key)
        with self.assertRaises(ReplayedError) as caught:
            with_idempotency(self.client, "billing:charge", {"a": 1}, decline, self.key)
        self.assertEqual(len(runs), 1)
        self.assertEqual(caught.exception.name, f"{__name__}.Declined")
        self.assertEqual(caught.exception.message, "card declined")

    def test_retryable_failure_releases_so_the_next_call_runs(self) -> None:
        def flaky() -> None:
            raise RetryableError("smtp 451, try later")

        with self.assertRaises(RetryableError):
            with_idempotency(self.client, "billing:charge", {"a": 1}, flaky, self.key)
        self.assertFalse(self.client.get("billing:charge", self.key).found)
        ran = with_idempotency(self.client, "billing:charge", {"a": 1}, self.charge, self.key)
        self.assertEqual((ran.duplicate, self.lines()), (False, 1))
        again = with_idempotency(self.client, "billing:charge", {"a": 1}, self.charge, self.key)
        self.assertEqual((again.duplicate, self.lines()), (True, 1))

    def test_a_waiting_caller_gets_the_running_callers_result(self) -> None:
        started = threading.Event()

        def slow() -> dict:
            started.set()
            time.sleep(0.4)
            return self.charge()

        results = {}
        runner = threading.Thread(target=lambda: results.update(
            a=with_idempotency(self.client, "billing:charge", {}, slow, self.key)))
        runner.start()
        started.wait(5)
        results["b"] = with_idempotency(self.client, "billing:charge", {}, self.charge, self.key)
        runner.join()
        self.assertEqual(self.lines(), 1)
        self.assertEqual((results["a"].duplicate, results["b"].duplicate), (False, True))
        self.assertEqual(results["b"].result, results["a"].result)

    def test_takeover_makes_the_slow_owner_stale(self) -> None:
        slow_running = threading.Event()
        takeover_done = threading.Event()
        outcome: dict = {}

        def slow_owner() -> dict:
            slow_running.set()
            time.sleep(0.3)  # Outlives its 100 ms lease...
            takeover_done.wait(5)  # ...until someone else took over and finished.
            return self.charge("slow")

        def run_slow() -> None:
            try:
                # renew=False: without it the lease would be renewed in the
                # background and nobody could take over (test_lease_renewal.py).
                with_idempotency(self.client, "billing:charge", {}, slow_owner, self.key,
                                 lease_ms=100, renew=False)
            except StaleFenceError as e:
                outcome["error"] = e

        slow = threading.Thread(target=run_slow)
        slow.start()
        # Once the slow owner runs, our Begin finds its lease live (and waits
        # for it to lapse) or already lapsed: either way we take over.
        self.assertTrue(slow_running.wait(5))

        def fast() -> dict:
            outcome["takeover"] = current_claim().takeover
            return self.charge("fast")

        fast_result = with_idempotency(self.client, "billing:charge", {}, fast, self.key)
        takeover_done.set()
        slow.join()
        self.assertTrue(outcome["takeover"])
        self.assertFalse(fast_result.duplicate)
        error = outcome["error"]
        self.assertEqual(error.answer, "STALE_FENCE")
        self.assertGreater(error.current_fence, error.fence)
        self.assertEqual(error.result["receipt"], "slow")  # It ran; not recorded.
        replay = with_idempotency(self.client, "billing:charge", {}, self.charge, self.key)
        self.assertEqual(replay.result["receipt"], "fast")

    def test_decorator(self) -> None:
        @idempotent(self.client, "billing:charge", key_from=lambda a: f"{self.key}-{a['invoice']}")
        def charge_invoice(invoice: str, cents: int) -> dict:
            return self.charge(f"{invoice}:{cents}")

        self.assertEqual(charge_invoice("inv-1", 500)["receipt"], "inv-1:500")
        again = charge_invoice.with_outcome(invoice="inv-1", cents=500)
        self.assertTrue(again.duplicate)
        with self.assertRaises(ConflictError):
            charge_invoice("inv-1", 501)
        charge_invoice("inv-2", 500)
        self.assertEqual(self.lines(), 2)


class ConcurrentProcessesTest(LedgerTestCase):
    def test_competing_processes_run_the_side_effect_once(self) -> None:
        worker = Path(__file__).with_name("ledger_worker.py")
        procs = [
            subprocess.Popen(
                [sys.executable, str(worker), SERVER.target, "billing:charge", self.key,
                 str(self.ledger)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
            for _ in range(4)
        ]
        try:
            for p in procs:
                self.assertEqual(p.stdout.readline().strip(), "ready")
            for p in procs:  # Go, all at once.
                p.stdin.write("go\n")
                p.stdin.flush()
            outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertEqual([p.returncode for p in procs], [0] * 4)
        self.assertEqual(self.lines(), 1)
        self.assertEqual(sorted(o["duplicate"] for o in outs), [False, True, True, True])
        self.assertEqual(len({o["result"] for o in outs}), 1)


if __name__ == "__main__":
    unittest.main()
