"""Crash test of a single dedupd node: SIGKILL and restart under durable load.

Client threads (load.py: unary Begin/Renew/Release/Complete/Get as in
tests/fault, and BeginBatch/CompleteBatch) log every attempt while the
driver, cycle after cycle, waits for the restarted node's first answered
write, lets the load run for a random 0.2-1.5 s, SIGKILLs dedupd by PID and
restarts it on the same data directory and port. After the last restart the
load stops and every key is read back (Get, Begin with a fresh owner, and
BeginBatch for the batch keys); dedupd is then stopped with SIGTERM (exit
0 expected) and the checker (crash_checker.py) verifies the history.

Exits 0 only with zero violations; 1 on a violation or a failure (dedupd
exits on its own, does not start, or answers no write within 10 s of a
restart); with --expect-violations (a sabotaged run, e.g. --server-flag=
--durability=none), 0 only when the checker did find violations.

    /usr/bin/python3 tests/crash/crash_test.py --dedupd build/server/dedupd \\
        [--cycles 20] [--seed N] [--gen DIR] [--keep] [--summary FILE]

The run directory (the copy of dedupd every start runs, data/, dedupd.log,
history.jsonl, final.json, summary.json) is kept on failure or with --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for the history package

from history.stubs import generate_stubs  # noqa: E402


def log(msg: str) -> None:
    print(f"[crash] {msg}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dedupd", default=os.environ.get("DEDUPD"),
                   help="the dedupd binary (default: $DEDUPD)")
    p.add_argument("--cycles", type=int, default=20, help="SIGKILL/restart cycles")
    p.add_argument("--seed", type=int, default=None, help="default: random")
    p.add_argument("--workers", type=int, default=6, help="unary client threads")
    p.add_argument("--batch-workers", type=int, default=2,
                   help="BeginBatch/CompleteBatch client threads")
    p.add_argument("--keys", type=int, default=12,
                   help="keys in play at once for the unary workers")
    p.add_argument("--deadline", type=float, default=1.0,
                   help="client call deadline, seconds")
    p.add_argument("--pace-ms", type=float, default=4.0,
                   help="mean pause of a worker between operations (bounds "
                   "the history kept in memory)")
    p.add_argument("--readers", type=int, default=4,
                   help="threads reading every key back at the end")
    p.add_argument("--hold", type=float, nargs=2, default=(0.2, 1.5),
                   metavar=("MIN", "MAX"),
                   help="seconds of load before each SIGKILL (uniform)")
    p.add_argument("--gen", help="directory of generated dedup/v1 Python stubs "
                   "(default: generate them into the run directory)")
    p.add_argument("--run-dir", help="default: a new temp directory")
    p.add_argument("--keep", action="store_true", help="keep the run directory")
    p.add_argument("--summary", help="also write the JSON summary here")
    p.add_argument("--server-flag", action="append", default=[],
                   help="extra dedupd flag (repeatable), e.g. --durability=none")
    p.add_argument("--expect-violations", action="store_true",
                   help="succeed only if the checker finds violations (a "
                   "sabotaged run proving that the test detects losses)")
    return p.parse_args(argv)


class Stop(Exception):
    """SIGTERM or SIGINT."""


class LivenessFailure(Exception):
    """dedupd answered no write in time after a restart."""


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.dedupd or not os.access(args.dedupd, os.X_OK):
        print(f"crash test: no dedupd binary (--dedupd or $DEDUPD): {args.dedupd}",
              file=sys.stderr)
        return 2
    args.dedupd = os.path.abspath(args.dedupd)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="dedup-crash-")
    os.makedirs(run_dir, exist_ok=True)
    gen = args.gen or generate_stubs(os.path.join(run_dir, "gen"))
    sys.path.insert(0, gen)

    import crash_checker  # noqa: E402
    from dedup.v1 import dedup_pb2  # noqa: E402
    from history.client import GaveUp, History  # noqa: E402
    from history.process import NodeFailure  # noqa: E402
    from history.workload import NAMESPACE, KeyPool  # noqa: E402
    from load import BatchWorker, NodeClient, UnaryWorker, begin_item  # noqa: E402
    from server import Server  # noqa: E402

    def on_signal(signum, _frame):
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    flags = " ".join(args.server_flag) or "(default flags: --durability=sync)"
    log(f"seed {seed}, {args.cycles} cycles, {args.workers}+{args.batch_workers} workers, "
        f"dedupd {flags}, run dir {run_dir}")
    rng = random.Random(seed)
    # Every restart runs this copy: a rebuild during the run cannot swap
    # (or, mid-write, break) the binary between two cycles.
    dedupd = os.path.join(run_dir, "dedupd")
    shutil.copy2(args.dedupd, dedupd)
    server = Server(run_dir, dedupd, args.server_flag)
    history = History()
    stop = threading.Event()
    workers: list = []
    cycles: list[dict] = []
    final: dict = {"read_back_t": None}
    failure = None
    started = time.monotonic()

    def check_workers() -> None:
        for w in workers:
            if w.error is not None:
                raise RuntimeError(f"worker {w.name} died: "
                                   f"{''.join(traceback.format_exception(w.error))}")

    def wait_first_write(since: float, what: str, timeout_s: float = 10.0) -> float:
        """Polls until a write is acknowledged after `since` (history time:
        by the dedupd started then); returns when. LivenessFailure after
        timeout_s, NodeFailure if dedupd exits."""
        deadline = time.monotonic() + timeout_s
        while history.last_write_ack <= since:
            code = server.exited_unexpectedly()
            if code is not None:
                raise NodeFailure(f"dedupd exited with {code} on its own ({what})")
            if time.monotonic() > deadline:
                raise LivenessFailure(f"no write answered within {timeout_s} s {what}")
            check_workers()
            time.sleep(0.01)
        return history.last_write_ack

    try:
        server.start()
        log(f"dedupd serving on {server.address} (pid {server.pid})")
        pool = KeyPool(rng, args.keys)
        pace = args.pace_ms / 1000
        workers = [UnaryWorker(f"w{i}", server.address, history, pool,
                               rng.randrange(1 << 62), args.deadline, stop, pace)
                   for i in range(args.workers)]
        workers += [BatchWorker(f"b{i}", server.address, history, rng.randrange(1 << 62),
                                args.deadline, stop, pace)
                    for i in range(args.batch_workers)]
        for w in workers:
            w.start()
        t_listen = history.now()
        for n in range(1, args.cycles + 1):
            t_first = wait_first_write(t_listen, f"after start #{server.starts}")
            hold = rng.uniform(*args.hold)
            time.sleep(hold)
            code = server.exited_unexpectedly()
            if code is not None:
                raise NodeFailure(f"dedupd exited with {code} on its own in cycle {n}")
            pid = server.pid
            t_kill = history.now()
            server.kill()
            cycles.append({"n": n, "pid": pid, "t_listen": round(t_listen, 4),
                           "t_first_write": round(t_first, 4), "hold_s": round(hold, 3),
                           "t_kill": round(t_kill, 4), "exit": server.last_exit})
            server.start()
            t_listen = history.now()
            check_workers()
            if n % 10 == 0 or n == args.cycles:
                log(f"cycle {n}/{args.cycles}: {len(history.ops)} attempts logged")
        # The state the last crash left must serve writes again, then the
        # load stops and every key is read back.
        wait_first_write(t_listen, "after the last restart")
        stop.set()
        for w in workers:
            w.join(timeout=30)
        if any(w.is_alive() for w in workers):
            raise RuntimeError("a worker did not stop within 30 s")
        check_workers()
        rejected = sum(w.client.rejected for w in workers)
        if rejected:
            raise RuntimeError(f"{rejected} calls were rejected as invalid (workload bug?)")

        final["read_back_t"] = history.now()
        keys = sorted({o["key"] for o in history.snapshot()})
        errors: list[str] = []

        def read_back(part: int) -> None:
            """Get every key of this part, then Begin it with a fresh owner:
            unary for the unary workers' keys (k...), BeginBatch for the
            batch workers' keys."""
            mine = keys[part::args.readers]
            reader = NodeClient(server.address, history, f"final{part}", args.deadline,
                                random.Random(seed + part))
            try:
                for key in mine:
                    reader.run("get", dedup_pb2.GetRequest(namespace=NAMESPACE, key=key),
                               {}, key, budget_s=30)
                    if key.startswith("k"):
                        req, fields = begin_item(key, f"final-{key}", 100)
                        reader.run("begin", req, fields, key, budget_s=30)
                batch_keys = [k for k in mine if not k.startswith("k")]
                for i in range(0, len(batch_keys), 100):
                    items = [begin_item(k, f"final-{k}", 100) for k in batch_keys[i:i + 100]]
                    reader.run_batch("begin", [x[0] for x in items],
                                     [x[1] for x in items], budget_s=30)
            except GaveUp as e:
                errors.append(f"read-back: {e}")
            except Exception:  # noqa: BLE001 - reported by the runner
                errors.append(traceback.format_exc())
            finally:
                reader.close()

        readers = [threading.Thread(target=read_back, args=(i,))
                   for i in range(args.readers)]
        for r in readers:
            r.start()
        for r in readers:
            r.join()
        if errors:
            raise RuntimeError(errors[0])
        final["read_back_done_t"] = history.now()
        server.terminate()
    except (LivenessFailure, NodeFailure, RuntimeError, GaveUp) as e:
        failure = f"{type(e).__name__}: {e}"
    except Stop as e:
        failure = f"stopped by {e}"
    except Exception:  # noqa: BLE001 - a bug of the test: report it whole
        failure = traceback.format_exc()
    finally:
        stop.set()
        try:
            if server.running:
                server.kill()
        except Exception:  # noqa: BLE001 - cleanup goes on
            pass
        for w in workers:
            w.join(timeout=5)

    ops = history.snapshot()
    final["cycles"] = cycles
    with open(os.path.join(run_dir, "history.jsonl"), "w") as f:
        for o in ops:
            f.write(json.dumps(o, sort_keys=True) + "\n")
    with open(os.path.join(run_dir, "final.json"), "w") as f:
        json.dump(final, f, indent=1)
    t_check = time.monotonic()
    violations = crash_checker.check(ops, final if failure is None else None)
    check_s = time.monotonic() - t_check
    st = crash_checker.stats(ops)
    acked_per_cycle = []
    for c in cycles:
        acked_per_cycle.append(sum(1 for o in ops if o["outcome"] == "ok" and
                                   c["t_listen"] <= o["t_done"] <= c["t_kill"]))
    in_flight_at_kill = sum(1 for c in cycles for o in ops
                            if o["outcome"] == "unknown" and
                            o["t_inv"] <= c["t_kill"] <= o["t_done"])
    summary = {
        "seed": seed, "cycles": len(cycles), "cycles_requested": args.cycles,
        "server_flags": args.server_flag,
        "wall_s": round(time.monotonic() - started, 1),
        "check_s": round(check_s, 1),
        "read_back_s": None if final.get("read_back_done_t") is None else
        round(final["read_back_done_t"] - final["read_back_t"], 1),
        "operations": st["operations"], "acknowledged": st.get("ok", 0),
        "unknown": st.get("unknown", 0), "failed_definitely": st.get("fail", 0),
        "in_flight_at_kills": in_flight_at_kill,
        "acked_completes": st.get("complete.OK", 0),
        "acked_started": st.get("begin.STARTED", 0),
        "batch_items": sum(1 for o in ops if "batch" in o),
        "keys": st["keys"],
        "acked_per_cycle_min": min(acked_per_cycle, default=0),
        "acked_per_cycle_max": max(acked_per_cycle, default=0),
        "violations": len(violations),
        "violation_counts": {k: sum(1 for v in violations.items if v["check"] == k)
                             for k in sorted({v["check"] for v in violations.items})},
        "failure": failure, "stats": st, "cycle_log": cycles,
        "violation_list": violations.items[:200], "run_dir": run_dir}
    for path in filter(None, [os.path.join(run_dir, "summary.json"), args.summary]):
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)

    log(f"{len(cycles)} SIGKILL/restart cycles, {st['operations']} attempts "
        f"({st.get('ok', 0)} acknowledged, {st.get('unknown', 0)} unknown, "
        f"{st.get('fail', 0)} refused; {in_flight_at_kill} in flight at a kill), "
        f"{summary['acked_completes']} acknowledged Completes, "
        f"{summary['acked_started']} acknowledged STARTED, "
        f"{summary['batch_items']} batch items, {st['keys']} keys, "
        f"acknowledged per cycle {summary['acked_per_cycle_min']}.."
        f"{summary['acked_per_cycle_max']}, {summary['wall_s']} s "
        f"(read-back {summary['read_back_s']} s, check {summary['check_s']} s)")
    if violations:
        print(violations.render(limit=30 if args.expect_violations else 100), flush=True)
        log(f"violations by check: {summary['violation_counts']}")
    if failure:
        log(f"FAILURE: {failure}")
        log(f"--- tail of dedupd's log ({server.log_path}) ---")
        print(server.log_tail(), flush=True)
        bt = server.backtraces()
        if bt:
            log("--- dedupd crashed ---")
            print(bt, flush=True)
    if args.expect_violations:
        ok = failure is None and len(violations) > 0
        log(f"{len(violations)} violations, expected some: "
            f"{'detected, as expected' if ok else 'FAILED to detect'}")
    else:
        ok = failure is None and not violations
        log(f"{len(violations)} violations")
    if not ok or args.keep or args.run_dir:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
