"""Checks a crash run's history: history.checker's per-key checks,
plus two of a single node, plus that the run read every completed key back
after its last crash. Exits 0 only when there is no violation.

    /usr/bin/python3 tests/crash/crash_checker.py RUN_DIR   (re-checks a kept run)

The history is history.client's (every attempt, `ok`, `fail` or
`unknown`; batch items logged one by one like unary calls), so the per-key
checks apply unchanged, and across restarts: a SIGKILL only turns the calls
in flight into `unknown` ones, which may or may not have taken effect, and
which no check treats as an acknowledgement. Those checks include:

complete_lost   once a Complete was answered OK, every Begin invoked later
                answered DUPLICATE, and every Get invoked later found the
                record COMPLETED, with its fence, outcome and result (so a
                Begin answered STARTED after it is a violation too).
fence_unique,   acknowledged STARTED fences of a key name one owner each,
fence_order     and never go back in real-time order.
two_completes, phantom_result, stale_read, lease_overlap, fresh_claim:
                see tests/history/checker.py.

Single node (storage/fence_allocator.h: one node-wide counter, resumed above
its last durable reservation after a restart):

fence_reused    one fence acknowledged STARTED for two different keys.
node_fence_order
                claim A (a key and fence acknowledged STARTED) was
                answered before any Begin that may have issued claim B was
                invoked, and fence(B) <= fence(A): the allocator went back,
                e.g. after a restart that lost a reservation.

Coverage (with the run's final.json, written by crash_test.py):

not_read_back   a key with an acknowledged Complete has no answered Get and
                no answered Begin invoked after the final read-back started
                (after the last crash and restart). Without these reads a
                lost Complete could go unnoticed, so the run would prove
                nothing about that key.

Power loss (crash_test.py --power-loss): the same checks; power_losses()
and fence_repeats() also count what the cuts lost (acknowledged Completes,
repeated or regressing fences), which is the report of a --report-loss run
(durability async and none may lose acknowledged writes to a power cut).
"""

from __future__ import annotations

import bisect
import os
import sys
from collections import Counter, defaultdict
from typing import Optional

# tests/, for the history package (this is also a CLI).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from history import checker  # noqa: E402
from history.checker import Violations, load, stats  # noqa: E402,F401


def _started(op: dict) -> bool:
    return op["outcome"] == "ok" and op["op"] == "begin" and \
        op["resp"]["status"] == "STARTED"


def check_node_fences(ops: list[dict], out: Violations) -> None:
    """fence_reused and node_fence_order (see the module doc).

    A claim is a (key, fence) acknowledged STARTED. Its fence was issued
    before its first acknowledgement (`hi`), and not before the first
    attempt of a Begin by its owner for its key was invoked (`lo`: a Begin
    that timed out may have issued it; a re-entrant Begin only repeats it).
    Claim A precedes claim B in real time when hi(A) < lo(B)."""
    claims: dict[tuple, dict] = {}
    for o in ops:
        if _started(o):
            c = claims.setdefault((o["key"], o["resp"]["fence"]),
                                  {"key": o["key"], "fence": o["resp"]["fence"],
                                   "owner": o["req"]["owner"], "hi": o["t_done"],
                                   "op": o})
            if o["t_done"] < c["hi"]:
                c["hi"], c["op"] = o["t_done"], o
    first_try: dict[tuple, float] = {}
    for o in ops:
        if o["op"] == "begin":
            k = (o["key"], o["req"].get("owner"))
            first_try[k] = min(first_try.get(k, o["t_inv"]), o["t_inv"])
    for c in claims.values():
        c["lo"] = first_try[(c["key"], c["owner"])]
    keys_of = defaultdict(dict)  # fence -> {key: claim}
    for c in claims.values():
        keys_of[c["fence"]][c["key"]] = c
    for fence, by_key in sorted(keys_of.items()):
        if len(by_key) > 1:
            out.add("fence_reused", None,
                    f"fence {fence} granted for {len(by_key)} keys",
                    [by_key[k]["op"] for k in sorted(by_key)])
    # Sweep claims by lo, keeping the largest fence among the claims
    # acknowledged (hi) before it.
    by_hi = sorted(claims.values(), key=lambda c: c["hi"])
    best: Optional[dict] = None
    i = 0
    for b in sorted(claims.values(), key=lambda c: c["lo"]):
        while i < len(by_hi) and by_hi[i]["hi"] < b["lo"]:
            if best is None or by_hi[i]["fence"] > best["fence"]:
                best = by_hi[i]
            i += 1
        if best is not None and b["fence"] <= best["fence"]:
            out.add("node_fence_order", b["key"],
                    f"fence {b['fence']} issued after fence {best['fence']} "
                    f"(key {best['key']}) had been acknowledged", [best["op"], b["op"]])


def check_read_back(ops: list[dict], read_back_t: float, out: Violations) -> None:
    """not_read_back (see the module doc)."""
    completed = sorted({o["key"] for o in ops
                        if o["op"] == "complete" and o["outcome"] == "ok" and
                        o["resp"]["status"] == "OK"})
    read = defaultdict(set)
    for o in ops:
        if o["outcome"] == "ok" and o["t_inv"] >= read_back_t and \
                o["op"] in ("get", "begin"):
            read[o["key"]].add(o["op"])
    for key in completed:
        missing = {"get", "begin"} - read[key]
        if missing:
            out.add("not_read_back", key,
                    f"acknowledged Complete never read back after the last restart "
                    f"(no answered {' or '.join(sorted(missing))} after t={read_back_t:.3f})")


def check(ops: list[dict], final: Optional[dict] = None) -> Violations:
    """Every check; the coverage one only with a final.json that has
    read_back_t (a run that failed before its read-back has none)."""
    out = checker.check(ops)
    check_node_fences(ops, out)
    if final is not None and final.get("read_back_t") is not None:
        check_read_back(ops, final["read_back_t"], out)
    return out


# The checks that a fence repeated or went back (for a key or node-wide).
FENCE_CHECKS = ("fence_unique", "fence_order", "fence_reused", "node_fence_order",
                "stale_read")


def _stored(o: dict) -> Optional[tuple]:
    """(fence, outcome, result) an answered Begin or Get saw stored; None
    if it saw none (a Begin that claimed the key, a Get that found no
    completed record)."""
    return checker._completion(o)


def power_losses(ops: list[dict], cuts: list[dict]) -> dict:
    """What the power cuts lost, counted once per acknowledged Complete
    (the first one of its key): for --report-loss (durability async and
    none, which may lose writes by design) and the summary.

    `cuts`: the run's cycles, each with t_cut (power off) and t_kill. A
    Complete is lost when an answered Begin or Get invoked after its
    acknowledgement did not find it stored. It is charged to the first cut
    whose SIGKILL came after the Complete was invoked (its answer can reach
    the client just after the kill) and whose power off came before that
    read; its age is t_cut - t_ack (negative: acknowledged after the power
    went off, by a dedupd still serving). A loss with no such cut is
    `lost_without_a_cut` (never explained by power loss). `checked`:
    acknowledged Completes read back (answered) after such a cut, i.e.
    those a cut could have lost."""
    cuts = sorted(cuts, key=lambda c: c["t_kill"])
    kills = [c["t_kill"] for c in cuts]
    per_key = defaultdict(list)
    for o in ops:
        if o["outcome"] == "ok":
            per_key[o["key"]].append(o)
    acked = checked = 0
    lost: list[dict] = []
    for key, kops in per_key.items():
        oks = [o for o in kops if o["op"] == "complete" and o["resp"]["status"] == "OK"]
        if not oks:
            continue
        acked += 1
        first = min(oks, key=lambda o: o["t_done"])
        want = (first["req"]["fence"], first["req"]["outcome"], first["req"]["result"])
        reads = sorted((o for o in kops if o["op"] in ("begin", "get") and
                        o["t_inv"] > first["t_done"]), key=lambda o: o["t_inv"])
        i = bisect.bisect_left(kills, first["t_inv"])
        cut = cuts[i] if i < len(cuts) else None
        if cut is not None and any(r["t_inv"] > cut["t_kill"] for r in reads):
            checked += 1
        miss = next((r for r in reads if _stored(r) != want), None)
        if miss is None:
            continue
        if cut is None or cut["t_cut"] >= miss["t_inv"]:
            lost.append({"key": key, "cycle": None, "age_ms": None})
        else:
            lost.append({"key": key, "cycle": cut.get("n"),
                         "age_ms": round((cut["t_cut"] - first["t_done"]) * 1000, 1)})
    ages = sorted(x["age_ms"] for x in lost if x["age_ms"] is not None)
    by_cut = Counter(x["cycle"] for x in lost if x["cycle"] is not None)
    return {
        "acked_completes": acked, "acked_completes_checked": checked,
        "acked_completes_lost": len(lost),
        "lost_without_a_cut": sum(1 for x in lost if x["cycle"] is None),
        "lost_acked_after_power_off": sum(1 for a in ages if a < 0),
        "lost_age_ms": None if not ages else {
            "min": ages[0], "median": ages[len(ages) // 2], "max": ages[-1]},
        "cuts_that_lost_completes": len(by_cut),
        "lost_by_cycle": dict(sorted(by_cut.items())),
        "lost_keys": [x["key"] for x in lost[:50]]}


def fence_repeats(violations: Violations) -> dict:
    """Violations that show a fence repeated or going back, by check."""
    counts = Counter(v["check"] for v in violations.items if v["check"] in FENCE_CHECKS)
    return dict(sorted(counts.items()))


def main(argv: list[str]) -> int:
    return checker.main(argv, __doc__, check)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
