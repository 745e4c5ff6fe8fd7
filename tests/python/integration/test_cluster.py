"""The Python clients against a real 3-node replicated dedupd group: given all
three addresses they find the leader, and when the leader is SIGKILLed the
same client carries on with the new leader within a few seconds, where the
keys completed before read back DUPLICATE with their results. Through a
CoalescingClient the helpers' Begins, checkpoints and Completes (BeginBatch,
CheckpointBatch, CompleteBatch) all carry on across the kill."""

from __future__ import annotations

import threading
import time
import unittest
import uuid
from collections import Counter

import grpc

from dedup_client import (
    Client,
    CoalescingClient,
    current_claim,
    dedup_pb2,
    dedup_pb2_grpc,
    with_idempotency,
)
from dedupd_group import DedupdGroup

Begin = dedup_pb2.BeginResponse
NS = "py-cluster"

# Enough retries to outlast an election (election timeout 500..1000 ms):
# backoff ceilings 50 ms doubling to 500 ms, about 4 s of waiting in all.
CLIENT_OPTIONS = dict(deadline_s=3.0, max_attempts=20, backoff_base_s=0.05,
                      backoff_cap_s=0.5)


def poll(condition, timeout_s: float, what: str):
    """Calls condition() until it returns a true value (which is returned)
    or raises AssertionError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def redirect_of(address: str) -> str | None:
    """The leader a node names in its UNAVAILABLE to a Get (None if it
    answered or named none)."""
    with grpc.insecure_channel(address) as channel:
        try:
            dedup_pb2_grpc.DedupStub(channel).Get(
                dedup_pb2.GetRequest(namespace=NS, key="probe"), timeout=2)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                return None
            return dict(e.trailing_metadata() or ()).get("dedup-leader")
    return None


class ClusterTest(unittest.TestCase):
    def setUp(self) -> None:
        # Followers name the leader instead of forwarding: these tests watch
        # the client follow the hints (forwarding: tests/cluster/forward_test).
        self.group = DedupdGroup(extra_flags=("--forward_to_leader=false",))
        # Stopped by PID however the test ends (after the clients closed:
        # an open connection holds up a node's clean stop).
        self.addCleanup(self._stop_group)
        self.client = Client(self.group.addresses, **CLIENT_OPTIONS)
        self.addCleanup(self.client.close)
        # The first calls wait out the first election.
        poll(lambda: self._answers(), 30, "a leader")

    def _stop_group(self) -> None:
        codes = self.group.stop()
        self.assertEqual(set(codes.values()), {0}, f"exit codes {codes}")

    def _answers(self) -> bool:
        try:
            self.client.get(NS, "warm-up")
            return True
        except grpc.RpcError:
            return False

    def assert_duplicate(self, key: str, result: bytes) -> None:
        dup = self.client.begin(NS, key, b"h", owner=str(uuid.uuid4()))
        self.assertEqual((dup.status, dup.outcome, dup.result),
                         (Begin.DUPLICATE, dedup_pb2.SUCCESS, result), key)

    def complete_keys(self, keys: list[str]) -> None:
        for key in keys:
            begun = self.client.begin(NS, key, b"h", owner=f"owner-{key}")
            self.assertEqual(begun.status, Begin.STARTED, key)
            done = self.client.complete(NS, key, begun.fence, dedup_pb2.SUCCESS,
                                        f"result-{key}".encode())
            self.assertEqual(done.status, dedup_pb2.CompleteResponse.OK, key)
            self.assert_duplicate(key, f"result-{key}".encode())

    def test_the_client_follows_the_new_leader_after_a_sigkill(self) -> None:
        keys = [f"before-{i}-{uuid.uuid4()}" for i in range(5)]
        self.complete_keys(keys)
        leader = self.client.leader_address()
        self.assertIn(leader, self.group.addresses)
        # The other two are followers that name it (the real trailers).
        for address in self.group.addresses:
            if address != leader:
                poll(lambda: redirect_of(address) == leader, 10,
                     f"{address} to name the leader {leader}")

        self.group.kill(self.group.node_at(leader))
        killed_at = time.monotonic()
        after = f"after-{uuid.uuid4()}"
        self.complete_keys([after])
        took = time.monotonic() - killed_at

        new_leader = self.client.leader_address()
        self.assertNotEqual(new_leader, leader)
        self.assertIn(new_leader, self.group.addresses)
        self.assertLess(took, 10.0, "the client took too long to find the new leader")
        for key in keys:
            self.assert_duplicate(key, f"result-{key}".encode())
            got = self.client.get(NS, key)
            self.assertTrue(got.found)
            self.assertEqual(got.record.state, dedup_pb2.COMPLETED)
        # The surviving follower now names the new leader too.
        survivor = next(a for a in self.group.addresses if a not in (leader, new_leader))
        poll(lambda: redirect_of(survivor) == new_leader, 10, "the survivor's redirect")

    def test_concurrent_idempotent_calls_run_once_across_a_leader_kill(self) -> None:
        coalescing = CoalescingClient(self.client)
        self.addCleanup(coalescing.close, 30)
        runs: Counter[str] = Counter()
        runs_lock = threading.Lock()
        failures: list[BaseException] = []
        killed = threading.Event()
        calls_per_thread = 40

        def side_effect(key: str) -> str:
            # A CheckpointBatch item, batched with the other threads'.
            current_claim().checkpoint("sending", {"key": key})
            with runs_lock:
                runs[key] += 1
            return f"sent:{key}"

        def worker(worker_id: int) -> None:
            try:
                for i in range(calls_per_thread):
                    key = f"job-{worker_id}-{i}"
                    out = with_idempotency(coalescing, NS, {"k": key},
                                           lambda: side_effect(key), key=key)
                    self.assertEqual(out.result, f"sent:{key}")
                    if i == calls_per_thread * 3 // 4:
                        # The rest waits for the kill, so that calls are made
                        # after it whatever the timing.
                        killed.wait(30)
            except BaseException as error:  # noqa: BLE001 - re-raised below
                failures.append(error)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        poll(lambda: sum(runs.values()) >= 10, 30, "calls before the kill")
        leader = self.client.leader_address()
        self.group.kill(self.group.node_at(leader))
        killed.set()
        for thread in threads:
            thread.join(timeout=120)
            self.assertFalse(thread.is_alive(), "a caller hung")
        if failures:
            raise failures[0]
        self.assertNotEqual(self.client.leader_address(), leader)
        # Every side effect ran exactly once, and each replays from the new
        # leader.
        self.assertEqual(len(runs), 4 * calls_per_thread)
        self.assertEqual(set(runs.values()), {1})
        for key in ("job-0-0", f"job-3-{calls_per_thread - 1}"):
            self.assert_duplicate_json(key)

    def assert_duplicate_json(self, key: str) -> None:
        out = with_idempotency(self.client, NS, {"k": key}, self.fail, key=key)
        self.assertEqual((out.result, out.duplicate), (f"sent:{key}", True))


if __name__ == "__main__":
    unittest.main()
