"""Checks a run's history (client.py's log of every attempt) against
dedup's contract, key by key: the fault test's checks, and the per-key part
of the crash test's (tests/crash/crash_checker.py). Exits 0 only when there
is no violation.

    /usr/bin/python3 tests/history/checker.py RUN_DIR   (re-checks a kept fault run)

Operations and time
-------------------
An attempt is `ok` (answered), `fail` (certainly did not happen: ignored
here) or `unknown` (may take effect at any moment after it was invoked, even
after the client gave up: a proposal of a deposed leader can still be
committed by its successor). Times are the clients' monotonic clock: an
answered operation took effect between its t_inv and t_done; an unknown one
after its t_inv or never. "A before B in real time" means A was answered
before B was invoked, so a linearizable service applies A before B.

Server times (lease_expires_at) are the replicated clock: each log entry
carries its leader's clock, never going back, and every replica decides
leases from it. A Begin's claim starts at lease_expires_at - lease_ms (a
re-entrant Begin or a Renew moves lease_expires_at later, so the earliest
such value over a claim's grants is an upper bound of its start). A claim's
lease ends at or after the largest lease_expires_at acknowledged for it
(Renews use the claim's lease_ms, so a lease only grows).

Fences come from one counter of the replicated state, so for one key a
larger fence means a later claim in the log, whatever the real-time order
of the acknowledgements.

The checks
----------
fence_unique   Every acknowledged STARTED with fence F names the same owner
               (a re-entrant Begin of the same owner gets the same fence).
fence_order    STARTED A answered before STARTED B was invoked:
               fence(A) <= fence(B).
stale_read     The same for every answer that shows the key's current fence
               (Begin STARTED / IN_USE / DUPLICATE, Get of a live record): a
               later call never sees an older fence. A deposed leader that
               answered from its own state would fail this.
complete_lost  Once a Complete(F, outcome, result) was answered OK, every
               Begin invoked later answered DUPLICATE with that fence,
               outcome and result, and every Get invoked later found the
               record COMPLETED with them; this includes the final Gets made
               after healing and after restarting every node.
two_completes  At most one (fence, outcome, result) is ever answered OK or
               seen stored (DUPLICATE, Get) for a key.
phantom_result A stored outcome seen by a reader was sent by a Complete that
               may have happened (answered OK, or unknown), and by none that
               was answered STALE_FENCE, NOT_FOUND or ALREADY_COMPLETED
               (those conditions are permanent: a fence that is not current
               never becomes current again, and a released or completed
               claim never comes back).
lease_overlap  Never two live claims without a takeover. Let X and Y be
               acknowledged claims with fence(X) < fence(Y). If Y started
               (replicated clock) before X's acknowledged lease end, X's
               claim cannot have ended by expiry: a takeover needs the
               replicated clock past X's lease end, and Y comes no earlier
               than that takeover in the log. It cannot have ended by a
               Complete either (a completed record is never claimed again
               while it lives, and records outlive the run). So X was
               Released: some Release(fence(X)) answered OK or unknown must
               have been invoked before Y was answered. Otherwise Y was
               granted while X's holder still owned the key.
fresh_claim    A STARTED whose record shows attempts == 1 is a fresh claim
               (no record existed; a takeover counts attempts up, a
               re-entrant Begin shows the claim's count). If an acknowledged
               claim X of the same key has fence(X) < fence(Y), the record
               created by X must have gone, and only a Release removes a
               record during a run: a Release with fence(X) <= its fence <
               fence(Y), answered OK or unknown, invoked before Y was
               answered. The takeover flag must agree: takeover=true only
               with attempts >= 2.
replicas       After healing, and again after restarting all nodes, every
               node reports its Cluster.Digest at the same applied index and
               the digests (and live record counts) are equal; in a sharded
               cluster, every replica of each group (fences of keys in
               different groups come from different counters and may be
               equal: the per-key checks never compare them).
placement      Sharded runs: in each phase's read-back, the keys found in
               group g (by the clients' slot function) are as many as g's
               live records.
hosting        Sharded runs: after healing and after the restart, group g
               lives exactly on its expected replicas: the layout the run
               started with, with every completed move applied in order (g
               moved from F to T: F replaced by T). Every node was asked for
               g's digest: the expected replicas answer it, every other node
               answers NOT_FOUND, and the nodes holding g's directory on
               disk are the expected replicas (a moved-away replica's copy
               is deleted). With `replicas` (the digests of the nodes that
               answer are equal) this puts the moved group's state on T and
               nowhere on F.
move           Every move the run started completed, and the replicas it
               reported are the expected ones after it.

Each check is a necessary condition that only uses answered facts and
treats unknown operations as possibly applied, so a violation is a real
contract breach (given that `fail` is only used for refusals that certainly
did nothing, see client.py).
"""

from __future__ import annotations

import bisect
import json
import os
import sys
from collections import defaultdict
from typing import Callable, Iterable, Optional

INF = float("inf")


def _done(op: dict) -> float:
    """When the operation certainly had happened (inf: maybe never)."""
    return op["t_done"] if op["outcome"] == "ok" else INF


def _short(op: dict) -> str:
    """One line describing an attempt, for violation reports."""
    req = op.get("req", {})
    parts = [f"#{op['id']} {op['worker']} {op['op']}({op['key']}"]
    for k in ("owner", "fence", "lease_ms", "outcome", "result"):
        if k in req:
            v = req[k]
            parts.append(f"{k}={v[:8] if k == 'owner' else v}")
    s = " ".join(parts) + f") node {op.get('node')} [{op['t_inv']:.3f}, "
    if op["outcome"] == "ok":
        s += f"{op['t_done']:.3f}] -> {json.dumps(op['resp'], sort_keys=True)}"
    else:
        s += f"{op['t_done']:.3f}] -> {op['outcome']} {op.get('code')} {op.get('details', '')!r}"
    return s


class Violations:
    def __init__(self) -> None:
        self.items: list[dict] = []

    def add(self, check: str, key: Optional[str], message: str,
            ops: Iterable[dict] = ()) -> None:
        self.items.append({"check": check, "key": key, "message": message,
                           "ops": [_short(o) for o in ops]})

    def __len__(self) -> int:
        return len(self.items)

    def render(self, limit: int = 50) -> str:
        lines = []
        for v in self.items[:limit]:
            lines.append(f"VIOLATION {v['check']} key={v['key']}: {v['message']}")
            lines.extend(f"    {o}" for o in v["ops"])
        if len(self.items) > limit:
            lines.append(f"... and {len(self.items) - limit} more")
        return "\n".join(lines)


def _fence_seen(op: dict) -> Optional[int]:
    """The key's current fence an answer shows, if it shows one."""
    if op["outcome"] != "ok":
        return None
    r = op["resp"]
    if op["op"] == "begin" and r["status"] in ("STARTED", "IN_USE", "DUPLICATE"):
        return r["fence"]
    if op["op"] == "get" and r.get("found"):
        return r["fence"]
    return None


def _check_fence_order(key: str, ops: list[dict], out: Violations) -> None:
    """fence_order and stale_read: a sweep in invocation order over the
    answers, keeping the largest fence answered before each invocation."""
    seen = [o for o in ops if _fence_seen(o) is not None]
    by_done = sorted(seen, key=lambda o: o["t_done"])
    best: Optional[dict] = None
    i = 0
    for b in sorted(seen, key=lambda o: o["t_inv"]):
        while i < len(by_done) and by_done[i]["t_done"] < b["t_inv"]:
            a = by_done[i]
            if best is None or _fence_seen(a) > _fence_seen(best):
                best = a
            i += 1
        if best is not None and _fence_seen(best) > _fence_seen(b):
            both_started = (best["op"] == "begin" and b["op"] == "begin" and
                            best["resp"]["status"] == "STARTED" and
                            b["resp"]["status"] == "STARTED")
            out.add("fence_order" if both_started else "stale_read", key,
                    f"answered fence {_fence_seen(b)} after fence "
                    f"{_fence_seen(best)} had been answered", [best, b])


def _completion(op: dict) -> Optional[tuple]:
    """(fence, outcome, result) a reader saw stored, if any."""
    if op["outcome"] != "ok":
        return None
    r = op["resp"]
    if op["op"] == "begin" and r["status"] == "DUPLICATE":
        return (r["fence"], r["outcome"], r["result"])
    if op["op"] == "get" and r.get("found") and r.get("state") == "COMPLETED":
        return (r["fence"], r["outcome"], r["result"])
    return None


def _check_completes(key: str, ops: list[dict], out: Violations) -> None:
    completes = [o for o in ops if o["op"] == "complete"]

    def sent(o: dict) -> tuple:
        return (o["req"]["fence"], o["req"]["outcome"], o["req"]["result"])

    oks = [o for o in completes if o["outcome"] == "ok" and o["resp"]["status"] == "OK"]
    acked = {sent(o) for o in oks}
    seen = defaultdict(list)
    for o in ops:
        c = _completion(o)
        if c is not None:
            seen[c].append(o)
    if len(acked | set(seen)) > 1:
        examples = []
        for v in sorted(acked | set(seen), key=str):
            examples.append(next((o for o in oks if sent(o) == v), None) or seen[v][0])
        out.add("two_completes", key,
                f"{len(acked | set(seen))} different completions acknowledged or seen",
                examples)
    for v, readers in seen.items():
        senders = [o for o in completes if sent(o) == v]
        if not senders:
            out.add("phantom_result", key,
                    f"stored (fence, outcome, result) {v} was never sent", readers[:1])
            continue
        refused = [o for o in senders if o["outcome"] == "ok" and o["resp"]["status"] != "OK"]
        if refused:
            out.add("phantom_result", key,
                    "stored outcome was sent by a Complete that was refused",
                    refused[:1] + readers[:1])
    if not oks:
        return
    first = min(oks, key=lambda o: o["t_done"])
    want = sent(first)
    for o in ops:
        if o["outcome"] != "ok" or o["t_inv"] <= first["t_done"]:
            continue
        if o["op"] == "begin":
            r = o["resp"]
            if r["status"] != "DUPLICATE" or (r["fence"], r["outcome"], r["result"]) != want:
                out.add("complete_lost", key,
                        "Begin invoked after an acknowledged Complete did not "
                        "answer DUPLICATE with its outcome", [first, o])
        elif o["op"] == "get":
            if _completion(o) != want:
                out.add("complete_lost", key,
                        "Get invoked after an acknowledged Complete did not find "
                        "it stored", [first, o])


class _Claim:
    def __init__(self, fence: int) -> None:
        self.fence = fence
        self.grants: list[dict] = []
        self.start = INF        # replicated ms, upper bound
        self.lease_end = -INF   # replicated ms, lower bound
        self.first_ack = INF    # client time
        self.fresh = False


def _check_claims(key: str, ops: list[dict], out: Violations) -> None:
    claims: dict[int, _Claim] = {}
    for o in ops:
        if o["op"] == "begin" and o["outcome"] == "ok" and o["resp"]["status"] == "STARTED":
            r = o["resp"]
            c = claims.setdefault(r["fence"], _Claim(r["fence"]))
            c.grants.append(o)
            c.start = min(c.start, r["lease_expires_at"] - o["req"]["lease_ms"])
            c.lease_end = max(c.lease_end, r["lease_expires_at"])
            c.first_ack = min(c.first_ack, o["t_done"])
            if r["attempts"] == 1:
                c.fresh = True
            if r["takeover"] and r["attempts"] < 2:
                out.add("fresh_claim", key, "takeover=true with attempts < 2", [o])
    for fence, owners in _owners(claims).items():
        if len(owners) > 1:
            out.add("fence_unique", key,
                    f"fence {fence} granted to {len(owners)} owners",
                    [next(g for g in claims[fence].grants if g['req']['owner'] == w)
                     for w in sorted(owners)])
    for o in ops:
        if o["op"] == "renew" and o["outcome"] == "ok" and o["resp"]["status"] == "OK":
            c = claims.get(o["req"]["fence"])
            if c is not None:
                c.lease_end = max(c.lease_end, o["resp"]["lease_expires_at"])
    # Releases that may have happened: answered OK or unknown.
    releases = sorted(
        (o for o in ops if o["op"] == "release" and
         (o["outcome"] == "unknown" or o["resp"]["status"] == "OK")),
        key=lambda o: o["req"]["fence"])
    release_fences = [o["req"]["fence"] for o in releases]
    by_fence = sorted(claims.values(), key=lambda c: c.fence)

    def released(lo: int, hi: int, before: float) -> bool:
        """A Release with lo <= fence < hi invoked before `before`."""
        i = bisect.bisect_left(release_fences, lo)
        while i < len(releases) and release_fences[i] < hi:
            if releases[i]["t_inv"] < before:
                return True
            i += 1
        return False

    for j, y in enumerate(by_fence):
        if y.fresh and j > 0:
            x = by_fence[j - 1]
            if not released(x.fence, y.fence, y.first_ack):
                out.add("fresh_claim", key,
                        f"fresh claim (attempts=1) with fence {y.fence} although "
                        f"claim {x.fence} was never released before it",
                        [x.grants[0], y.grants[0]])
        for x in by_fence[:j]:
            if y.start < x.lease_end and not released(x.fence, x.fence + 1, y.first_ack):
                out.add("lease_overlap", key,
                        f"claim {y.fence} started at {y.start} while claim {x.fence}'s "
                        f"lease ran to {x.lease_end} and it was never released",
                        [x.grants[0], y.grants[0]])


def _owners(claims: dict) -> dict:
    return {f: {g["req"]["owner"] for g in c.grants} for f, c in claims.items()}


def check_replicas(final: dict, out: Violations) -> None:
    """One group: final["digests"][phase] = {"converged", "nodes"}; a
    sharded cluster: {"groups": {group id: {"converged", "nodes"}}}, each
    group's replicas compared among themselves."""
    for phase in ("healed", "restarted"):
        d = final.get("digests", {}).get(phase)
        if d is None:
            out.add("replicas", None, f"no digests taken after the run was {phase}")
            continue
        if "groups" not in d:
            _check_group_digests(phase, d, out)
            continue
        if not d["groups"]:
            out.add("replicas", None, f"{phase}: no group's digests")
        for group, gd in sorted(d["groups"].items(), key=lambda kv: int(kv[0])):
            _check_group_digests(f"{phase}, group {group}", gd, out)


def _check_group_digests(what: str, d: dict, out: Violations) -> None:
    nodes = d.get("nodes", {})
    if not d.get("converged"):
        out.add("replicas", None,
                f"{what}: nodes did not reach one applied index: {json.dumps(nodes)}")
        return
    if len({(n["digest"], n["live_records"]) for n in nodes.values()}) != 1:
        out.add("replicas", None,
                f"{what}: digests differ at applied index "
                f"{next(iter(nodes.values()))['applied_index']}: {json.dumps(nodes)}")


def check(ops: list[dict], final: Optional[dict] = None) -> Violations:
    out = Violations()
    per_key = defaultdict(list)
    for o in ops:
        if o["outcome"] != "fail":
            per_key[o["key"]].append(o)
    for key in sorted(per_key):
        kops = per_key[key]
        _check_fence_order(key, kops, out)
        _check_completes(key, kops, out)
        _check_claims(key, kops, out)
    if final is not None:
        check_replicas(final, out)
        check_placement(ops, final, out)
        check_hosting(final, out)
    return out


def expected_replicas(final: dict, out: Optional["Violations"] = None) -> dict:
    """Group id (str) -> its expected replicas (sorted node ids): the
    layout with every completed move applied in order; `move` violations
    into `out` for a move that did not complete or reported other
    replicas."""
    expected = {g: sorted(ids) for g, ids in final.get("layout", {}).items()}
    for m in final.get("moves", []):
        g = str(m["group"])
        what = f"move {m['n']} of group {g} from node {m['from']} to node {m['to']}"
        if not m.get("completed"):
            if out is not None:
                out.add("move", None, f"{what} did not complete "
                        f"({len(m.get('attempts', []))} attempts)")
            continue
        after = sorted((set(expected.get(g, [])) - {m["from"]}) | {m["to"]})
        if out is not None and m.get("replicas") != after:
            out.add("move", None, f"{what} reported replicas {m.get('replicas')}, "
                    f"expected {after}")
        expected[g] = after
    return expected


def check_hosting(final: dict, out: Violations) -> None:
    """Sharded runs that recorded their layout: see `hosting` and `move`."""
    if "layout" not in final:
        return
    expected = expected_replicas(final, out)
    nodes = set(final.get("nodes", []))
    for phase in ("healed", "restarted"):
        d = final.get("digests", {}).get(phase)
        if not d or "groups" not in d:
            continue
        for g, want in sorted(expected.items(), key=lambda kv: int(kv[0])):
            gd = d["groups"].get(g)
            if gd is None:
                out.add("hosting", None, f"{phase}: no digests of group {g}")
                continue
            checks = [  # what, the nodes that did, the nodes that should
                ("answer its digest", sorted(int(n) for n in gd.get("nodes", {})),
                 want),
                ("answer NOT_FOUND", sorted(gd.get("not_hosted", [])),
                 sorted(nodes - set(want))),
                ("hold its directory", sorted(gd.get("dirs", [])), want)]
            for what, did, should in checks:
                if did != should:
                    out.add("hosting", None,
                            f"{phase}: group {g}'s replicas should be nodes {want}: "
                            f"nodes {did} {what}, expected {should}")


# The read-back of each phase: the runner's reader threads' names.
_READERS = {"healed": "final", "restarted": "restarted"}


def check_placement(ops: list[dict], final: dict, out: Violations) -> None:
    """Sharded runs (digests per group, reads naming their key's group):
    the keys a phase's read-back found in group g are as many as the live
    records of g's replicas (the clients' slot function puts keys where
    the servers do, and no group holds another's key or lost one)."""
    for phase, reader in _READERS.items():
        d = final.get("digests", {}).get(phase)
        if not d or "groups" not in d:
            continue
        found: dict[str, tuple] = {}
        for o in ops:
            if (o["op"] == "get" and o["outcome"] == "ok" and "group" in o
                    and o["worker"].startswith(reader)
                    and o["worker"][len(reader):].isdigit()):
                found[o["key"]] = (o["group"], o["resp"].get("found", False))
        per_group = defaultdict(int)
        for group, was_found in found.values():
            per_group[str(group)] += int(was_found)
        for group, gd in d["groups"].items():
            live = {n["live_records"] for n in gd.get("nodes", {}).values() if n}
            if gd.get("converged") and len(live) == 1 and \
                    next(iter(live)) != per_group.get(group, 0):
                out.add("placement", None,
                        f"{phase}: group {group} holds {next(iter(live))} live records, "
                        f"the read-back found {per_group.get(group, 0)} of its keys")


def stats(ops: list[dict]) -> dict:
    s = defaultdict(int)
    for o in ops:
        s[f"{o['op']}.{o['outcome']}"] += 1
        s[o["outcome"]] += 1
        if o["outcome"] == "ok" and o["op"] == "begin":
            s[f"begin.{o['resp']['status']}"] += 1
            if o["resp"]["status"] == "STARTED" and o["resp"]["takeover"]:
                s["begin.takeover"] += 1
        if o["outcome"] == "ok" and o["op"] != "begin" and "status" in o["resp"]:
            s[f"{o['op']}.{o['resp']['status']}"] += 1
    s["operations"] = len(ops)
    s["keys"] = len({o["key"] for o in ops})
    return dict(sorted(s.items()))


def load(run_dir: str) -> tuple[list[dict], Optional[dict]]:
    with open(os.path.join(run_dir, "history.jsonl")) as f:
        ops = [json.loads(line) for line in f if line.strip()]
    final = None
    path = os.path.join(run_dir, "final.json")
    if os.path.exists(path):
        with open(path) as f:
            final = json.load(f)
    return ops, final


def main(argv: list[str], usage: str = __doc__,
         check_run: Callable[[list[dict], Optional[dict]], Violations] | None = None) -> int:
    """The checker's command line (a kept run's directory), for this checker
    or another one built on it (`check_run`, its `usage` text)."""
    if len(argv) != 2:
        print(usage.split("\n\n")[1], file=sys.stderr)
        return 64
    ops, final = load(argv[1])
    v = (check_run or check)(ops, final)
    print(json.dumps(stats(ops), indent=1))
    if v:
        print(v.render(limit=200))
    print(f"{len(v)} violations")
    return 1 if v else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
