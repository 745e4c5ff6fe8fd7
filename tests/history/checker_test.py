"""The checker on hand-written histories: each contract breach it must catch,
and the legitimate histories it must accept (unknown outcomes, re-entry,
takeovers after expiry, releases)."""

from __future__ import annotations

import os
import sys
import unittest

# tests/, for the history package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from history import checker  # noqa: E402


class H:
    """Builds a history; times are client seconds, server times ms."""

    def __init__(self) -> None:
        self.ops: list[dict] = []

    def _add(self, op, t0, t1, outcome="ok", req=None, resp=None, key="k"):
        o = {"id": len(self.ops), "worker": "w", "op": op, "key": key, "node": 1,
             "t_inv": t0, "t_done": t1, "outcome": outcome, "req": req or {}}
        if outcome == "ok":
            o["resp"] = resp
        else:
            o["code"] = "DEADLINE_EXCEEDED" if outcome == "unknown" else "UNAVAILABLE"
        self.ops.append(o)
        return self

    def started(self, t0, t1, owner, fence, at_ms, lease=1000, attempts=1,
                takeover=False, outcome="ok", key="k"):
        return self._add("begin", t0, t1, outcome,
                         {"owner": owner, "lease_ms": lease, "wait_ms": 0},
                         {"status": "STARTED", "fence": fence, "takeover": takeover,
                          "attempts": attempts, "lease_expires_at": at_ms + lease,
                          "outcome": "OUTCOME_UNSPECIFIED", "result": ""}, key)

    def begin(self, t0, t1, owner, status, fence, outcome_="SUCCESS", result="",
              key="k"):
        return self._add("begin", t0, t1, "ok",
                         {"owner": owner, "lease_ms": 1000, "wait_ms": 0},
                         {"status": status, "fence": fence, "takeover": False,
                          "attempts": 1, "lease_expires_at": 0,
                          "outcome": outcome_ if status == "DUPLICATE" else
                          "OUTCOME_UNSPECIFIED",
                          "result": result}, key)

    def complete(self, t0, t1, fence, result, status="OK", outcome="ok", key="k"):
        return self._add("complete", t0, t1, outcome,
                         {"fence": fence, "outcome": "SUCCESS", "result": result},
                         {"status": status, "fence": fence}, key)

    def release(self, t0, t1, fence, status="OK", outcome="ok", key="k"):
        return self._add("release", t0, t1, outcome, {"fence": fence},
                         {"status": status, "fence": fence}, key)

    def renew(self, t0, t1, fence, until_ms, lease=1000, key="k"):
        return self._add("renew", t0, t1, "ok", {"fence": fence, "lease_ms": lease},
                         {"status": "OK", "fence": fence,
                          "lease_expires_at": until_ms}, key)

    def get(self, t0, t1, found=True, state="COMPLETED", fence=0, result="", key="k"):
        resp = {"found": False}
        if found:
            resp = {"found": True, "state": state, "fence": fence, "owner": "",
                    "outcome": "SUCCESS" if state == "COMPLETED" else
                    "OUTCOME_UNSPECIFIED", "result": result, "attempts": 1,
                    "lease_expires_at": 0}
        return self._add("get", t0, t1, "ok", {}, resp, key)

    def checks(self) -> list[str]:
        return sorted({v["check"] for v in checker.check(self.ops).items})


class AcceptsLegalHistories(unittest.TestCase):
    def test_begin_complete_duplicate(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .begin(4, 5, "b", "DUPLICATE", 10, result="r")
             .get(6, 7, fence=10, result="r"))
        self.assertEqual(h.checks(), [])

    def test_reentry_same_fence(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .started(2, 3, "a", 10, 1000))
        self.assertEqual(h.checks(), [])

    def test_takeover_after_expiry(self):
        h = (H().started(0, 1, "a", 10, 1000, lease=300)
             .started(2, 3, "b", 11, 1400, attempts=2, takeover=True))
        self.assertEqual(h.checks(), [])

    def test_fresh_after_release_even_unknown(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .release(2, 3, 10, outcome="unknown")
             .started(4, 5, "b", 12, 1100))
        self.assertEqual(h.checks(), [])

    def test_unknown_complete_may_take_effect(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r", outcome="unknown")
             .get(4, 5, fence=10, result="r"))
        self.assertEqual(h.checks(), [])

    def test_overlapping_calls_are_not_ordered(self):
        # B was invoked before A was answered: either order is fine.
        h = (H().started(0, 5, "a", 11, 1000)
             .started(1, 2, "b", 10, 900, lease=50))
        self.assertNotIn("fence_order", h.checks())

    def test_definite_failures_are_ignored(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r", outcome="fail")
             .started(4, 5, "a", 10, 1000))
        self.assertEqual(h.checks(), [])


class CatchesBreaches(unittest.TestCase):
    def test_same_fence_two_owners(self):
        h = H().started(0, 1, "a", 10, 1000).started(0, 1, "b", 10, 1000)
        self.assertIn("fence_unique", h.checks())

    def test_fence_goes_back(self):
        h = H().started(0, 1, "a", 11, 1000, lease=100).started(2, 3, "b", 10, 1200,
                                                               lease=100)
        self.assertIn("fence_order", h.checks())

    def test_stale_read(self):
        h = (H().started(0, 1, "a", 11, 1000)
             .get(2, 3, state="IN_FLIGHT", fence=10))
        self.assertEqual(h.checks(), ["stale_read"])

    def test_lost_complete_final_read(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .get(9, 10, found=False))
        self.assertEqual(h.checks(), ["complete_lost"])

    def test_begin_after_complete_not_duplicate(self):
        h = (H().started(0, 1, "a", 10, 1000, lease=100)
             .complete(2, 3, 10, "r")
             .started(4, 5, "b", 11, 5000, attempts=2, takeover=True))
        self.assertIn("complete_lost", h.checks())

    def test_duplicate_with_other_result(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r")
             .begin(4, 5, "b", "DUPLICATE", 10, result="other"))
        got = h.checks()
        self.assertIn("complete_lost", got)
        self.assertIn("two_completes", got)
        self.assertIn("phantom_result", got)

    def test_refused_complete_stored(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .complete(2, 3, 10, "r", status="STALE_FENCE")
             .get(4, 5, fence=10, result="r"))
        self.assertEqual(h.checks(), ["phantom_result"])

    def test_two_live_claims(self):
        # b took over while a's lease (until 2000) was live, a never released.
        h = (H().started(0, 1, "a", 10, 1000, lease=1000)
             .started(2, 3, "b", 11, 1500, attempts=2, takeover=True))
        self.assertEqual(h.checks(), ["lease_overlap"])

    def test_renewed_lease_counts(self):
        h = (H().started(0, 1, "a", 10, 1000, lease=300)
             .renew(1, 2, 10, 1700, lease=300)
             .started(3, 4, "b", 11, 1500, lease=300, attempts=2, takeover=True))
        self.assertEqual(h.checks(), ["lease_overlap"])

    def test_fresh_claim_without_release(self):
        # Lease long expired, but a fresh claim (attempts 1) needs the record
        # gone, and nobody released it.
        h = (H().started(0, 1, "a", 10, 1000, lease=100)
             .started(5, 6, "b", 11, 9000))
        self.assertEqual(h.checks(), ["fresh_claim"])

    def test_release_of_other_fence_does_not_excuse(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .release(2, 3, 9, outcome="unknown")
             .started(4, 5, "b", 12, 1100))
        self.assertIn("lease_overlap", h.checks())

    def test_release_invoked_after_the_claim_does_not_excuse(self):
        h = (H().started(0, 1, "a", 10, 1000)
             .started(4, 5, "b", 12, 1100)
             .release(6, 7, 10, outcome="unknown"))
        self.assertIn("fresh_claim", h.checks())

    def test_replicas_differ(self):
        final = {"digests": {
            "healed": {"converged": True, "nodes": {
                "1": {"applied_index": 5, "digest": "a", "live_records": 1},
                "2": {"applied_index": 5, "digest": "b", "live_records": 1},
                "3": {"applied_index": 5, "digest": "a", "live_records": 1}}},
            "restarted": {"converged": False, "nodes": {}}}}
        v = checker.check([], final)
        self.assertEqual([x["check"] for x in v.items], ["replicas", "replicas"])

    def test_replicas_equal(self):
        nodes = {str(n): {"applied_index": 5, "digest": "a", "live_records": 1}
                 for n in (1, 2, 3)}
        final = {"digests": {p: {"converged": True, "nodes": nodes}
                             for p in ("healed", "restarted")}}
        self.assertEqual(len(checker.check([], final)), 0)

    def test_replicas_per_group(self):
        # Each group's replicas agree among themselves; groups differ from
        # each other (their own states), which is no violation.
        def group(digest, ids):
            return {"converged": True, "nodes": {
                str(n): {"applied_index": 7, "digest": digest, "live_records": 2}
                for n in ids}}
        def check(final):
            out = checker.Violations()
            checker.check_replicas(final, out)
            return out
        ok = {"groups": {"0": group("a", (1, 2, 3)), "1": group("b", (2, 3, 4))}}
        final = {"digests": {"healed": ok, "restarted": ok}}
        self.assertEqual(len(check(final)), 0)
        bad = {"groups": {"0": group("a", (1, 2, 3)), "1": group("b", (2, 3, 4))}}
        bad["groups"]["1"]["nodes"]["4"]["digest"] = "c"
        v = check({"digests": {"healed": ok, "restarted": bad}})
        self.assertEqual([x["check"] for x in v.items], ["replicas"])
        self.assertIn("restarted, group 1", v.items[0]["message"])
        v = check({"digests": {"healed": {"groups": {}}, "restarted": ok}})
        self.assertEqual([x["check"] for x in v.items], ["replicas"])

    def test_placement(self):
        def group(live):
            return {"converged": True, "nodes": {
                str(n): {"applied_index": 7, "digest": "d", "live_records": live}
                for n in (1, 2, 3)}}
        final = {"digests": {p: {"groups": {"0": group(1), "1": group(2)}}
                             for p in ("healed", "restarted")}}

        def reads(reader, found):
            return [{"id": i, "worker": f"{reader}{i % 2}", "op": "get", "key": k,
                     "req": {}, "group": g, "node": 1, "t_inv": 100 + i,
                     "t_done": 100.5 + i, "outcome": "ok", "resp": {"found": f}}
                    for i, (k, g, f) in enumerate(found)]
        def check(ops):
            out = checker.Violations()
            checker.check_placement(ops, final, out)
            return out
        good = [("a", 0, True), ("b", 1, True), ("c", 1, True), ("d", 0, False)]
        self.assertEqual(len(check(reads("final", good) + reads("restarted", good))), 0)
        # A key of group 1 the read-back no longer finds.
        lost = [("a", 0, True), ("b", 1, True), ("c", 1, False), ("d", 0, False)]
        v = check(reads("final", good) + reads("restarted", lost))
        self.assertEqual([x["check"] for x in v.items], ["placement"])
        self.assertIn("restarted: group 1", v.items[0]["message"])

    def test_hosting_after_a_move(self):
        # 4 nodes, group 0 on 1,2,3 and group 1 on 2,3,4; group 1 moves
        # from node 4 to node 1.
        def group(ids, dirs=None):
            return {"converged": True,
                    "nodes": {str(n): {"applied_index": 7, "digest": "d",
                                       "live_records": 2} for n in ids},
                    "not_hosted": sorted({1, 2, 3, 4} - set(ids)),
                    "dirs": sorted(ids if dirs is None else dirs)}
        move = {"n": 1, "group": 1, "from": 4, "to": 1, "completed": True,
                "replicas": [1, 2, 3], "attempts": [{}, {}]}

        def final(g1, moves=(move,)):
            phase = {"groups": {"0": group([1, 2, 3]), "1": g1}}
            return {"layout": {"0": [1, 2, 3], "1": [2, 3, 4]}, "nodes": [1, 2, 3, 4],
                    "moves": list(moves),
                    "digests": {"healed": phase, "restarted": phase}}

        def check(f):
            out = checker.Violations()
            checker.check_hosting(f, out)
            return [x["check"] for x in out.items], out
        self.assertEqual(check(final(group([1, 2, 3])))[0], [])
        # Still where the layout put it: the move is not reflected.
        checks, out = check(final(group([2, 3, 4])))
        self.assertEqual(checks, ["hosting"] * 6)
        self.assertIn("group 1's replicas should be nodes [1, 2, 3]",
                      out.items[0]["message"])
        # Served from the new node, but the old one kept its copy on disk.
        checks, out = check(final(group([1, 2, 3], dirs=[1, 2, 3, 4])))
        self.assertEqual(checks, ["hosting"] * 2)
        self.assertIn("hold its directory", out.items[0]["message"])
        # A move that never completed: the layout is expected, and flagged.
        unfinished = dict(move, completed=False, replicas=None)
        self.assertEqual(check(final(group([2, 3, 4]), [unfinished]))[0], ["move"])
        # A move whose answer names other replicas.
        odd = dict(move, replicas=[1, 2, 4])
        self.assertEqual(check(final(group([1, 2, 3]), [odd]))[0], ["move"])
        # Runs without a layout (one group) are not checked.
        self.assertEqual(check({"digests": {}})[0], [])


if __name__ == "__main__":
    unittest.main()
