"""with_idempotency / @idempotent: how each authority answer maps to running
fn, returning, or raising. Uses a scripted client; tests/python/integration
checks the same flows against the real dedupd."""

from __future__ import annotations

import json
import unittest
import uuid

from dedup_client import (
    ClaimLost,
    ConflictError,
    ExpiredError,
    InUseTimeoutError,
    OutcomeNotRecordedError,
    ReplayedError,
    RetryableError,
    StaleFenceError,
    args_hash,
    current_claim,
    dedup_pb2,
    idempotent,
    with_idempotency,
)
from fakes import ScriptedClient, conflict, duplicate, expired, in_use, started

ARGS = {"to": "ana@example.com", "amount": 12}


class Declined(Exception):
    pass


class AnswerMappingTest(unittest.TestCase):
    def test_started_runs_fn_and_completes_with_json(self) -> None:
        client = ScriptedClient([started(fence=9)])
        seen = []
        out = with_idempotency(
            client, "ns", ARGS, lambda: seen.append(current_claim()) or {"id": 1})
        self.assertEqual((out.result, out.duplicate, out.fence), ({"id": 1}, False, 9))
        self.assertEqual(out.outcome, dedup_pb2.SUCCESS)
        self.assertEqual(seen[0].fence, 9)
        self.assertIsNone(current_claim())  # reset after fn
        name, complete = client.calls[1]
        self.assertEqual((name, complete["fence"], complete["outcome"]),
                         ("complete", 9, dedup_pb2.SUCCESS))
        self.assertEqual(json.loads(complete["result"]), {"id": 1})

    def test_begin_carries_hash_default_key_and_a_fresh_uuid_owner(self) -> None:
        client = ScriptedClient([in_use(), started()])
        with_idempotency(client, "ns", ARGS, lambda: None, wait_per_call_s=0.5)
        first, second = (kw for name, kw in client.calls if name == "begin")
        self.assertEqual(first["args_hash"], args_hash(ARGS))
        self.assertEqual(first["key"], args_hash(ARGS).hex())
        self.assertEqual(uuid.UUID(first["owner"]).version, 4)
        self.assertNotEqual(first["owner"], second["owner"])
        # IN_USE: the next Begin asks the server to wait.
        self.assertEqual((first["wait_ms"], second["wait_ms"]), (0, 500))

    def test_duplicate_success_returns_the_stored_result(self) -> None:
        client = ScriptedClient([duplicate(dedup_pb2.SUCCESS, b'{"id":1}')])
        out = with_idempotency(client, "ns", ARGS, self.fail, key="k")
        self.assertEqual((out.result, out.duplicate), ({"id": 1}, True))
        self.assertEqual(client.names(), ["begin"])

    def test_duplicate_error_raises_replayed_error(self) -> None:
        payload = b'{"name":"Declined","message":"card declined","code":"E42"}'
        client = ScriptedClient([duplicate(dedup_pb2.ERROR, payload, fence=4)])
        with self.assertRaises(ReplayedError) as caught:
            with_idempotency(client, "ns", ARGS, self.fail)
        e = caught.exception
        self.assertEqual((e.name, e.message, e.fence, e.payload),
                         ("Declined", "card declined", 4, payload))
        self.assertEqual(e.stored["code"], "E42")

    def test_replayed_error_from_a_non_json_payload_keeps_the_text(self) -> None:
        client = ScriptedClient([duplicate(dedup_pb2.ERROR, b"smtp said no")])
        with self.assertRaises(ReplayedError) as caught:
            with_idempotency(client, "ns", ARGS, self.fail)
        self.assertEqual((caught.exception.name, caught.exception.message),
                         ("Error", "smtp said no"))

    def test_conflict_raises_without_running(self) -> None:
        client = ScriptedClient([conflict()])
        with self.assertRaises(ConflictError):
            with_idempotency(client, "ns", ARGS, self.fail, key="k")

    def test_in_use_until_the_deadline_raises_timeout(self) -> None:
        client = ScriptedClient([in_use(retry_after_ms=10)] * 50)
        with self.assertRaises(InUseTimeoutError) as caught:
            with_idempotency(client, "ns", ARGS, self.fail, deadline_s=0.05)
        self.assertIsInstance(caught.exception, TimeoutError)
        self.assertNotIn("complete", client.names())


class FailureMappingTest(unittest.TestCase):
    def test_retryable_error_releases_and_propagates(self) -> None:
        client = ScriptedClient([started(fence=5)])
        with self.assertRaises(RetryableError):
            with_idempotency(client, "ns", ARGS, _raiser(RetryableError("try later")))
        self.assertEqual(client.calls[1], ("release", {"key": args_hash(ARGS).hex(), "fence": 5}))

    def test_predicate_marks_other_exceptions_retryable(self) -> None:
        client = ScriptedClient([started()])
        with self.assertRaises(ConnectionError):
            with_idempotency(client, "ns", ARGS, _raiser(ConnectionError("reset")),
                             is_retryable=lambda e: isinstance(e, ConnectionError))
        self.assertEqual(client.names(), ["begin", "release"])

    def test_permanent_error_is_recorded_and_propagates(self) -> None:
        client = ScriptedClient([started(fence=5)])
        with self.assertRaises(Declined):
            with_idempotency(client, "ns", ARGS, _raiser(Declined("card declined")))
        name, complete = client.calls[1]
        self.assertEqual((name, complete["outcome"]), ("complete", dedup_pb2.ERROR))
        stored = json.loads(complete["result"])
        self.assertEqual(stored, {"name": f"{__name__}.Declined", "message": "card declined"})

    def test_unencodable_result_is_recorded_as_error_not_left_to_rerun(self) -> None:
        client = ScriptedClient([started()])
        with self.assertRaises(TypeError):
            with_idempotency(client, "ns", ARGS, lambda: object())
        self.assertEqual(client.calls[1][1]["outcome"], dedup_pb2.ERROR)

    def test_stale_fence_on_complete(self) -> None:
        client = ScriptedClient([started(fence=5)], dedup_pb2.CompleteResponse.STALE_FENCE)
        with self.assertRaises(StaleFenceError) as caught:
            with_idempotency(client, "ns", ARGS, lambda: "sent")
        e = caught.exception
        self.assertEqual((e.answer, e.fence, e.current_fence, e.result),
                         ("STALE_FENCE", 5, 6, "sent"))

    def test_other_refusals_are_not_stale_fence(self) -> None:
        for status in (dedup_pb2.CompleteResponse.NOT_FOUND,
                       dedup_pb2.CompleteResponse.ALREADY_COMPLETED):
            with self.subTest(status):
                client = ScriptedClient([started()], status)
                with self.assertRaises(OutcomeNotRecordedError) as caught:
                    with_idempotency(client, "ns", ARGS, lambda: "sent")
                self.assertNotIsInstance(caught.exception, StaleFenceError)

    def test_failed_error_recording_keeps_the_original_exception(self) -> None:
        client = ScriptedClient([started()], dedup_pb2.CompleteResponse.STALE_FENCE)
        with self.assertRaises(Declined) as caught:
            with_idempotency(client, "ns", ARGS, _raiser(Declined("no")))
        self.assertIn("NOT recorded", "".join(getattr(caught.exception, "__notes__", [])))


class DecoratorTest(unittest.TestCase):
    def test_hashes_arguments_by_name_and_returns_the_plain_result(self) -> None:
        client = ScriptedClient([started(), duplicate(dedup_pb2.SUCCESS, b'"sent:7"')])

        @idempotent(client, "mail:send", key_from=lambda a: f"order-{a['order']}")
        def send(order: int, to: str, subject: str = "hi", **extra: object) -> str:
            """Sends."""
            return f"sent:{order}"

        self.assertEqual(send.__name__, "send")
        self.assertEqual(send.__doc__, "Sends.")
        self.assertEqual(send.arguments_of(7, "a@b", urgent=True),
                         {"order": 7, "to": "a@b", "subject": "hi", "urgent": True})
        self.assertEqual(send(7, to="a@b"), "sent:7")
        begin = client.calls[0][1]
        self.assertEqual(begin["key"], "order-7")
        self.assertEqual(begin["args_hash"],
                         args_hash({"order": 7, "to": "a@b", "subject": "hi"}))
        out = send.with_outcome(order=7, to="a@b")
        self.assertEqual((out.result, out.duplicate), ("sent:7", True))

    def test_a_default_sent_or_not_by_position_or_name_is_one_call(self) -> None:
        client = ScriptedClient([started(fence=1), duplicate(dedup_pb2.SUCCESS, b'"ok"'),
                                 duplicate(dedup_pb2.SUCCESS, b'"ok"'), started(fence=2)])

        @idempotent(client, "mail:send")
        def send(invoice: str, cents: int = 100, *rest: object) -> str:
            return "ok"

        same = [send.arguments_of("inv-9"), send.arguments_of("inv-9", 100),
                send.arguments_of(invoice="inv-9"),
                send.arguments_of(cents=100, invoice="inv-9")]
        self.assertEqual(same, [{"invoice": "inv-9", "cents": 100}] * 4)
        self.assertEqual(send.arguments_of("inv-9", 100, "x"),
                         {"invoice": "inv-9", "cents": 100, "rest": ("x",)})
        send("inv-9")
        send("inv-9", 100)
        send(invoice="inv-9")
        send("inv-9", 101)  # another value: another call
        hashes = [kw["args_hash"] for name, kw in client.calls if name == "begin"]
        self.assertEqual(hashes[:3], [args_hash({"invoice": "inv-9", "cents": 100})] * 3)
        self.assertEqual(hashes[3], args_hash({"invoice": "inv-9", "cents": 101}))
        self.assertNotEqual(hashes[3], hashes[0])
        keys = [kw["key"] for name, kw in client.calls if name == "begin"]
        self.assertEqual(len(set(keys[:3])), 1)  # the default key, the args hash
        self.assertNotEqual(keys[3], keys[0])


def _raiser(error: Exception):
    def fn():
        raise error

    return fn


if __name__ == "__main__":
    unittest.main()


class ExpiredAndCheckpointMappingTest(unittest.TestCase):
    def test_expired_raises_expired_error_without_running_or_completing(self) -> None:
        completed_at = 1_795_163_400_000  # 2026-11-20T08:30:00Z
        client = ScriptedClient([expired(dedup_pb2.SUCCESS, fence=4, completed_at=completed_at)])
        with self.assertRaises(ExpiredError) as caught:
            with_idempotency(client, "ns", ARGS, self.fail, key="k")
        e = caught.exception
        self.assertNotIsInstance(e, ReplayedError)
        self.assertEqual(
            (e.key, e.fence, e.outcome, e.outcome_name, e.completed_at_ms, e.attempts,
             e.tombstone_expires_at_ms),
            ("k", 4, dedup_pb2.SUCCESS, "SUCCESS", completed_at, 1, completed_at + 1000))
        self.assertIn("2026-11-20T08:30:00.000Z", str(e))
        self.assertIn("no longer kept", str(e))
        self.assertEqual(client.names(), ["begin"])
        self.assertNotIn("accept_rerun", client.calls[0][1])

    def test_accept_rerun_is_sent_and_a_rerun_shows_in_claim_and_result(self) -> None:
        client = ScriptedClient([started(fence=9, rerun=True)])
        seen = []
        out = with_idempotency(client, "ns", ARGS, lambda: seen.append(current_claim().rerun),
                               accept_rerun=True)
        self.assertTrue(client.calls[0][1]["accept_rerun"])
        self.assertEqual((seen, out.rerun, out.fence), ([True], True, 9))

    def test_takeover_sees_the_last_checkpoint_and_checkpoints_store_json(self) -> None:
        previous = dedup_pb2.CheckpointInfo(step="charged", data=b'{"charge":"ch_1"}',
                                            fence=6, recorded_at=55)
        client = ScriptedClient([started(fence=7, takeover=True, checkpoint=previous)])

        def fn() -> str:
            claim = current_claim()
            last = claim.last_checkpoint
            self.assertEqual((last.step, last.data, last.fence, last.recorded_at_ms),
                             ("charged", {"charge": "ch_1"}, 6, 55))
            claim.checkpoint("shipped", {"parcel": 12})
            claim.checkpoint("noted")
            return "ok"

        with_idempotency(client, "ns", ARGS, fn, lease_ms=900, renew=False)
        checkpoints = [kw for name, kw in client.calls if name == "checkpoint"]
        self.assertEqual([(c["step"], c["data"], c["fence"], c["lease_ms"]) for c in checkpoints],
                         [("shipped", b'{"parcel":12}', 7, 900), ("noted", b"null", 7, 900)])

    def test_no_checkpoint_is_none_and_non_json_data_raises_on_access(self) -> None:
        raw = dedup_pb2.CheckpointInfo(step="s", data=b"\xff\x00", fence=1, recorded_at=2)
        client = ScriptedClient([started(checkpoint=raw), started()])
        seen = []
        with_idempotency(client, "ns", ARGS, lambda: seen.append(current_claim().last_checkpoint))
        with_idempotency(client, "ns", ARGS, lambda: seen.append(current_claim().last_checkpoint))
        self.assertEqual(seen[0].raw, b"\xff\x00")
        with self.assertRaises(ValueError):
            seen[0].data
        self.assertIsNone(seen[1])

    def test_a_refused_checkpoint_loses_the_claim_and_nothing_is_completed(self) -> None:
        for status in ("STALE_FENCE", "NOT_FOUND", "ALREADY_COMPLETED"):
            with self.subTest(status=status):
                client = ScriptedClient(
                    [started(fence=7)],
                    checkpoint_status=dedup_pb2.CheckpointResponse.Status.Value(status))
                lost = []

                def fn() -> str:
                    claim = current_claim()
                    try:
                        claim.checkpoint("step-1", 1)
                    except ClaimLost:
                        lost.append(claim.lost.is_set())
                        # Once lost, a checkpoint is not even sent.
                        self.assertRaises(ClaimLost, claim.checkpoint, "step-2")
                    return "done anyway"

                with self.assertRaises(ClaimLost) as caught:
                    with_idempotency(client, "ns", ARGS, fn, renew=False)
                e = caught.exception
                self.assertEqual((e.call, e.answer, e.fence, e.result),
                                 ("Checkpoint", status, 7, "done anyway"))
                self.assertEqual(lost, [True])
                self.assertEqual(client.names(), ["begin", "checkpoint"])
