"""Client against scripted in-process nodes of a replicated group: it follows
a follower's redirect at once (bounded hops, one deadline), moves on to the
next address with backoff when no leader is named, remembers the leader, and
retries an unknown outcome (ABORTED + dedup-outcome: unknown) only the safe
way, never reporting it as "nothing happened"."""

from __future__ import annotations

import socket
import time
import unittest
from typing import Any

import grpc

from cluster_server import (
    ScriptedNode,
    aborted_items,
    failed_items,
    redirect,
    unavailable,
    unavailable_items,
    unknown,
)
from dedup_client import Client, DedupRpcError, dedup_pb2, with_idempotency

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
ABORTED = grpc.StatusCode.ABORTED
STARTED = dedup_pb2.BeginResponse.STARTED


def free_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterTestCase(unittest.TestCase):
    def node(self, leader: str | None = None) -> ScriptedNode:
        node = ScriptedNode(leader)
        self.addCleanup(node.stop)
        return node

    def client(self, targets, **kw) -> tuple[Client, list[float]]:
        sleeps: list[float] = []
        kw.setdefault("uniform01", lambda: 0.5)
        client = Client(targets, sleep=sleeps.append, **kw)
        self.addCleanup(client.close)
        return client, sleeps


class LeaderFollowingTest(ClusterTestCase):
    def test_a_redirect_is_followed_at_once_and_remembered(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        # The leader is not among the given addresses: it gets a channel too.
        client, sleeps = self.client([follower.target])
        self.assertEqual(client.begin("ns", "k", owner="o").status, STARTED)
        self.assertEqual(sleeps, [])  # no backoff for a redirect
        self.assertEqual(client.leader_address(), leader.target)
        self.assertEqual(client.get("ns", "k").found, False)
        self.assertEqual(follower.methods(), ["Begin"])  # later calls go direct
        self.assertEqual(leader.methods(), ["Begin", "Get"])
        self.assertEqual(leader.requests("Begin")[0].owner, "o")

    def test_hops_are_bounded_per_attempt(self) -> None:
        a, b, c = self.node(), self.node(), self.node()
        # A cycle of followers, each naming the next one.
        a.leader, b.leader, c.leader = b.target, c.target, a.target
        client, sleeps = self.client([a.target], max_attempts=1, max_leader_hops=3)
        with self.assertRaises(grpc.RpcError) as caught:
            client.get("ns", "k")
        self.assertEqual(caught.exception.code(), UNAVAILABLE)
        self.assertEqual([len(n.calls) for n in (a, b, c)], [2, 1, 1])  # 1 + 3 hops
        self.assertEqual(sleeps, [])

    def test_after_the_hops_the_next_attempt_waits_its_backoff(self) -> None:
        a, b = self.node(), self.node()
        a.leader, b.leader = b.target, a.target
        client, sleeps = self.client(
            [a.target], max_attempts=3, max_leader_hops=1, backoff_base_s=0.01)
        with self.assertRaises(grpc.RpcError):
            client.get("ns", "k")
        self.assertEqual(len(a.calls) + len(b.calls), 3 * 2)
        self.assertEqual(sleeps, [0.005, 0.01])

    def test_unavailable_without_a_leader_moves_on_after_the_backoff(self) -> None:
        electing = self.node(leader="")  # UNAVAILABLE, no metadata
        leader = self.node()
        client, sleeps = self.client([electing.target, leader.target], backoff_base_s=0.2)
        self.assertEqual(client.get("ns", "k").found, False)
        self.assertEqual(sleeps, [0.1])
        self.assertEqual((len(electing.calls), len(leader.calls)), (1, 1))
        self.assertEqual(client.leader_address(), leader.target)

    def test_an_unreachable_node_moves_on_to_the_next_address(self) -> None:
        leader = self.node()
        client, sleeps = self.client([f"127.0.0.1:{free_port()}", leader.target])
        self.assertEqual(client.forget("ns", "k").existed, True)
        self.assertEqual(len(sleeps), 1)
        self.assertEqual(client.leader_address(), leader.target)

    def test_addresses_are_tried_in_turn_and_wrap_around(self) -> None:
        a, b = self.node(leader=""), self.node(leader="")
        client, sleeps = self.client([a.target, b.target], max_attempts=5)
        with self.assertRaises(grpc.RpcError):
            client.get("ns", "k")
        self.assertEqual((len(a.calls), len(b.calls)), (3, 2))

    def test_the_deadline_is_kept_across_hops(self) -> None:
        leader = self.node()
        follower = self.node()
        remaining: list[float] = []

        def slow_redirect(request, context):
            time.sleep(0.4)
            redirect(leader.target)(request, context)

        def note_remaining(request, context):
            remaining.append(context.time_remaining())
            return dedup_pb2.GetResponse(found=True)

        follower.then("Get", slow_redirect)
        leader.then("Get", note_remaining)
        client, _ = self.client([follower.target], deadline_s=1.0)
        self.assertTrue(client.get("ns", "k").found)
        # The hop got what was left of the attempt's second, not a new one.
        self.assertLess(remaining[0], 0.65)
        self.assertGreater(remaining[0], 0.1)

    def test_a_single_address_still_works_as_before(self) -> None:
        node = self.node().then("Get", unavailable)
        client, sleeps = self.client(node.target)
        self.assertEqual(client.addresses, (node.target,))
        self.assertFalse(client.get("ns", "k").found)
        self.assertEqual((len(node.calls), len(sleeps)), (2, 1))

    def test_rejects_an_empty_address_list(self) -> None:
        with self.assertRaises(ValueError):
            Client([])
        with self.assertRaises(ValueError):
            Client(["127.0.0.1:1"], max_leader_hops=-1)


class UnknownOutcomeTest(ClusterTestCase):
    def test_begin_is_resent_with_the_same_owner(self) -> None:
        node = self.node().then("Begin", unknown)
        client, sleeps = self.client(node.target)
        self.assertEqual(client.begin("ns", "k", b"h", owner="me", lease_ms=9).fence, 7)
        first, second = node.requests("Begin")
        self.assertEqual(first, second)
        self.assertEqual(second.owner, "me")
        self.assertEqual(len(sleeps), 1)  # a new leader takes time: backoff

    def test_an_anonymous_begin_is_not_resent(self) -> None:
        node = self.node().then("Begin", unknown)
        client, _ = self.client(node.target)
        with self.assertRaises(DedupRpcError) as caught:
            client.begin("ns", "k")
        self.assertEqual(caught.exception.code(), ABORTED)
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(len(node.calls), 1)

    def test_complete_is_resent_with_the_same_fence_outcome_and_result(self) -> None:
        node = self.node().then("Complete", unknown, unknown)
        client, _ = self.client(node.target)
        answer = client.complete("ns", "k", 12, dedup_pb2.ERROR, b'{"e":1}', ttl_s=30)
        self.assertEqual(answer.status, dedup_pb2.CompleteResponse.OK)
        sent = node.requests("Complete")
        self.assertEqual(len(sent), 3)
        self.assertTrue(all(r == sent[0] for r in sent))
        self.assertEqual((sent[2].fence, sent[2].outcome, sent[2].result),
                         (12, dedup_pb2.ERROR, b'{"e":1}'))

    def test_renew_and_get_are_resent_as_they_are(self) -> None:
        node = self.node().then("Renew", unknown).then("Get", unknown)
        client, _ = self.client(node.target)
        self.assertEqual(client.renew("ns", "k", 4, lease_ms=100).status,
                         dedup_pb2.RenewResponse.OK)
        self.assertFalse(client.get("ns", "k").found)
        self.assertEqual(node.methods(), ["Renew", "Renew", "Get", "Get"])
        self.assertEqual(node.requests("Renew")[0], node.requests("Renew")[1])

    def test_a_release_retry_that_finds_nothing_reports_released(self) -> None:
        node = self.node().then(
            "Release", unknown,
            dedup_pb2.ReleaseResponse(status=dedup_pb2.ReleaseResponse.NOT_FOUND))
        client, _ = self.client(node.target)
        self.assertEqual(client.release("ns", "k", 5).status, dedup_pb2.ReleaseResponse.OK)
        self.assertEqual(len(node.requests("Release")), 2)

    def test_a_plain_not_found_release_stays_not_found(self) -> None:
        node = self.node().then(
            "Release", dedup_pb2.ReleaseResponse(status=dedup_pb2.ReleaseResponse.NOT_FOUND))
        client, _ = self.client(node.target)
        self.assertEqual(client.release("ns", "k", 5).status,
                         dedup_pb2.ReleaseResponse.NOT_FOUND)

    def test_exhausted_retries_raise_outcome_unknown(self) -> None:
        node = self.node().then("Complete", *[unknown] * 3)
        client, _ = self.client(node.target, max_attempts=3)
        with self.assertRaises(DedupRpcError) as caught:
            client.complete("ns", "k", 1, dedup_pb2.SUCCESS, b"r")
        self.assertEqual(caught.exception.code(), ABORTED)
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertIn("outcome unknown", caught.exception.details())
        self.assertEqual(len(node.calls), 3)

    def test_unavailable_after_an_unknown_outcome_is_still_unknown(self) -> None:
        # Not "nothing happened": the first attempt may have taken effect.
        node = self.node().then("Begin", unknown, unavailable, unavailable)
        client, _ = self.client(node.target, max_attempts=3)
        with self.assertRaises(DedupRpcError) as caught:
            client.begin("ns", "k", owner="o")
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(caught.exception.__cause__.code(), UNAVAILABLE)

    def test_a_refusal_after_an_unknown_outcome_is_still_unknown(self) -> None:
        # A later attempt's error does not undo what the first may have done.
        def internal(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.INTERNAL, "lost its way")

        node = self.node().then("Complete", unknown, internal)
        client, _ = self.client(node.target, max_attempts=3)
        with self.assertRaises(DedupRpcError) as caught:
            client.complete("ns", "k", 1, dedup_pb2.SUCCESS, b"r")
        self.assertTrue(caught.exception.outcome_unknown)
        self.assertEqual(caught.exception.__cause__.code(), grpc.StatusCode.INTERNAL)
        self.assertEqual(len(node.calls), 2)

    def test_an_unknown_outcome_then_a_redirect_goes_to_the_new_leader(self) -> None:
        new_leader = self.node()
        old_leader = self.node().then("Begin", unknown, redirect(new_leader.target))
        client, _ = self.client([old_leader.target])
        self.assertEqual(client.begin("ns", "k", owner="o").status, STARTED)
        self.assertEqual(new_leader.requests("Begin")[0].owner, "o")
        self.assertEqual(client.leader_address(), new_leader.target)

    def test_aborted_without_the_metadata_is_not_retried(self) -> None:
        def aborted(request, context):
            context.abort(ABORTED, "other")

        node = self.node().then("Get", aborted)
        client, _ = self.client(node.target)
        with self.assertRaises(grpc.RpcError) as caught:
            client.get("ns", "k")
        self.assertEqual(caught.exception.code(), ABORTED)
        self.assertFalse(getattr(caught.exception, "outcome_unknown", False))
        self.assertEqual(len(node.calls), 1)

    def test_with_idempotency_survives_an_unknown_complete(self) -> None:
        node = self.node().then("Complete", unknown)
        client, _ = self.client(node.target)
        runs = []
        out = with_idempotency(client, "ns", {"a": 1}, lambda: runs.append(1) or "done")
        self.assertEqual((out.result, out.duplicate, runs), ("done", False, [1]))
        first, second = node.requests("Complete")
        self.assertEqual(first, second)


class BatchUnknownOutcomeTest(ClusterTestCase):
    def items(self, *owners: str) -> list[dedup_pb2.BeginRequest]:
        return [dedup_pb2.BeginRequest(namespace="ns", key=f"k{i + 1}", owner=owner)
                for i, owner in enumerate(owners)]

    def test_aborted_items_are_resent_alone_with_their_owners(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(1, 2))
        client, sleeps = self.client(node.target)
        results = client.begin_batch(self.items("a", "b", "c"))
        self.assertEqual([r.fence for r in results], [1, 2, 3])
        first, second = node.requests("BeginBatch")
        self.assertEqual([(i.key, i.owner) for i in second.items], [("k2", "b"), ("k3", "c")])
        self.assertEqual(list(second.items), list(first.items)[1:])
        self.assertEqual(len(sleeps), 1)

    def test_anonymous_and_exhausted_items_are_outcome_unknown(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0, 1), aborted_items(0))
        client, _ = self.client(node.target, max_attempts=2)
        results = client.begin_batch(self.items("a", "", "c"))
        for result in results[:2]:
            self.assertIsInstance(result, DedupRpcError)
            self.assertEqual(result.code(), ABORTED)
            self.assertTrue(result.outcome_unknown)
        self.assertEqual(results[2].fence, 3)
        # Only the owned item went again; the anonymous one never did.
        self.assertEqual([[i.key for i in b.items] for b in node.requests("BeginBatch")],
                         [["k1", "k2", "k3"], ["k1"]])

    def test_a_whole_batch_with_unknown_outcome_is_resent(self) -> None:
        node = self.node().then("CompleteBatch", unknown)
        client, _ = self.client(node.target)
        items = [dedup_pb2.CompleteRequest(namespace="ns", key=f"k{i}", fence=i,
                                           outcome=dedup_pb2.SUCCESS, result=b"r")
                 for i in (1, 2)]
        results = client.complete_batch(items)
        self.assertEqual([r.status for r in results], [dedup_pb2.CompleteResponse.OK] * 2)
        first, second = node.requests("CompleteBatch")
        self.assertEqual(first, second)

    def test_a_failed_resend_keeps_the_other_answers(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0), *[unavailable] * 5)
        client, _ = self.client(node.target)
        results = client.begin_batch(self.items("a", "b"))
        self.assertTrue(results[0].outcome_unknown)
        self.assertEqual(results[1].fence, 2)

    def test_unavailable_items_are_resent_even_anonymous(self) -> None:
        # Nothing happened to them: the node stopped leading first.
        node = self.node().then("BeginBatch", unavailable_items(0, 2))
        client, _ = self.client(node.target)
        results = client.begin_batch(self.items("", "b", "c"))
        self.assertEqual([r.fence for r in results], [1, 2, 3])
        self.assertEqual([[i.key for i in b.items] for b in node.requests("BeginBatch")],
                         [["k1", "k2", "k3"], ["k1", "k3"]])

    def test_unavailable_items_left_after_the_attempts_stay_unavailable(self) -> None:
        node = self.node().then("BeginBatch", unavailable_items(0), unavailable_items(0))
        client, _ = self.client(node.target, max_attempts=2)
        results = client.begin_batch(self.items("a", "b"))
        self.assertEqual(results[0].code(), UNAVAILABLE)
        self.assertFalse(results[0].outcome_unknown)
        self.assertEqual(results[1].fence, 2)

    def test_an_unknown_item_refused_later_is_still_unknown(self) -> None:
        node = self.node().then("BeginBatch", aborted_items(0), unavailable_items(0))
        client, _ = self.client(node.target, max_attempts=2)
        results = client.begin_batch(self.items("a"))
        self.assertEqual(results[0].code(), ABORTED)
        self.assertTrue(results[0].outcome_unknown)

    def test_an_unknown_item_refused_for_good_later_is_still_unknown(self) -> None:
        node = self.node().then(
            "BeginBatch", aborted_items(0),
            failed_items(grpc.StatusCode.INTERNAL, "lost its way", 0))
        client, _ = self.client(node.target, max_attempts=3)
        results = client.begin_batch(self.items("a"))
        self.assertEqual(results[0].code(), ABORTED)
        self.assertTrue(results[0].outcome_unknown)
        self.assertEqual(len(node.calls), 2)

    def test_batch_redirects_are_followed(self) -> None:
        leader = self.node()
        follower = self.node(leader=leader.target)
        client, _ = self.client([follower.target])
        self.assertEqual(client.begin_batch(self.items("a"))[0].fence, 1)
        self.assertEqual(client.leader_address(), leader.target)


if __name__ == "__main__":
    unittest.main()


class RetryBudgetTest(unittest.TestCase):
    def test_a_list_of_addresses_gets_retries_that_outlast_an_election(self):
        group = Client(["127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1"])
        single = Client("127.0.0.1:1")
        chosen = Client(["127.0.0.1:1", "127.0.0.2:1"], max_attempts=3)
        try:
            self.assertEqual(group.max_attempts, 10)
            self.assertEqual(single.max_attempts, 5)
            self.assertEqual(chosen.max_attempts, 3)
        finally:
            for client in (group, single, chosen):
                client.close()
