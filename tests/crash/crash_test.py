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

--power-loss (power.py, tests/powerfs): the power goes off instead. The data
dir is RUN/mnt/data, in a powerfs mount of RUN/backing that discards every
unsynced write at each cut; a cut is made with dedupd running (it meets EIO,
then is SIGKILLed) or SIGSTOPped, at random; powerfs then mounts what
survived and dedupd restarts on it. The summary records each cut's powerfs
report, and the run fails if fewer than half the cuts lost any bytes (they
tested too little). --report-loss turns violations into a report of what
was lost (for --durability=async and none); --lying-sync makes powerfs's
fsync a no-op, which must produce violations. Exits 77 (skip) when powerfs
cannot run here (not root, no /dev/fuse).
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
    p.add_argument("--report-loss", action="store_true",
                   help="violations are reported (acknowledged Completes lost, "
                   "fences repeated), not a failure: for --durability=async "
                   "and none, which may lose acknowledged writes to a power cut")
    p.add_argument("--power-loss", action="store_true",
                   help="cut the power instead of SIGKILLing: dedupd's data dir "
                   "lives in a powerfs mount that discards every unsynced write "
                   "at each cut (needs root and /dev/fuse; exits 77 without)")
    p.add_argument("--powerfs", default=os.environ.get("POWERFS"),
                   help="the powerfs binary (default: $POWERFS)")
    p.add_argument("--lying-sync", action="store_true",
                   help="with --power-loss: powerfs's fsync makes nothing durable, "
                   "so a cut loses everything since the mount (proves that the "
                   "test sees a loss: use with --expect-violations)")
    args = p.parse_args(argv)
    if args.lying_sync and not args.power_loss:
        p.error("--lying-sync needs --power-loss")
    if args.report_loss and args.expect_violations:
        p.error("--report-loss and --expect-violations exclude each other")
    return args


def durability(server_flags: list[str]) -> str:
    """The --durability dedupd runs with (its default: sync)."""
    mode = "sync"
    for f in server_flags:
        if f.startswith("--durability="):
            mode = f.split("=", 1)[1]
    return mode


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
    if args.power_loss:
        from power import available  # noqa: E402
        why_not = available()
        if why_not is not None:
            print(f"crash test: SKIP: --power-loss needs powerfs ({why_not})", flush=True)
            return 77
        if not args.powerfs or not os.access(args.powerfs, os.X_OK):
            print(f"crash test: no powerfs binary (--powerfs or $POWERFS): "
                  f"{args.powerfs}", file=sys.stderr)
            return 2
        args.powerfs = os.path.abspath(args.powerfs)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="dedup-crash-")
    os.makedirs(run_dir, exist_ok=True)
    gen = args.gen or generate_stubs(os.path.join(run_dir, "gen"))
    sys.path.insert(0, gen)

    from dedup.v1 import dedup_pb2  # noqa: E402
    from history.client import GaveUp, History  # noqa: E402
    from history.process import NodeFailure  # noqa: E402
    from history.workload import NAMESPACE, KeyPool  # noqa: E402
    from load import BatchWorker, NodeClient, UnaryWorker, begin_item  # noqa: E402
    from power import PowerCuts, PowerFsError  # noqa: E402
    from server import Server  # noqa: E402

    def on_signal(signum, _frame):
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    flags = " ".join(args.server_flag) or "(default flags: --durability=sync)"
    what = "SIGKILL"
    if args.power_loss:
        what = "power-loss" + (" (powerfs --lying_sync)" if args.lying_sync else "")
    log(f"seed {seed}, {args.cycles} {what} cycles, {args.workers}+{args.batch_workers} "
        f"workers, dedupd {flags}, run dir {run_dir}")
    rng = random.Random(seed)
    # Every restart runs this copy: a rebuild during the run cannot swap
    # (or, mid-write, break) the binary between two cycles.
    dedupd = os.path.join(run_dir, "dedupd")
    shutil.copy2(args.dedupd, dedupd)
    power = PowerCuts(args.powerfs, run_dir, args.lying_sync) if args.power_loss else None
    server = Server(run_dir, dedupd, args.server_flag,
                    data_dir=power.data_dir if power else None)
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

    def restart(n: int) -> None:
        """Restarts dedupd after cycle n (power back on first, if cut)."""
        if power is None:
            server.start()
            return
        power.power_on()
        try:
            server.start()
        except NodeFailure as e:
            c = cycles[-1]
            refused = ""
            if getattr(e.__cause__, "exit_code", None) == 3:
                refused = (f"; exit 3: dedupd REFUSED the data dir this power cut "
                           f"left (a product finding under sync); it is kept, as "
                           f"the cut left it, in {power.fs.backing}/data")
            raise NodeFailure(
                f"dedupd did not restart after power cut {n} ({c['mode']}, "
                f"{c['bytes_lost']} bytes lost, {c['names_restored']} names restored, "
                f"{c['names_removed']} removed: {json.dumps(c['paths'])}): {e}"
                f"{refused}") from e

    try:
        if power is not None:
            power.power_on()
            log(f"powerfs mounted {power.fs.mount} (backing {power.fs.backing})")
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
            cycle = {"n": n, "pid": server.pid, "t_listen": round(t_listen, 4),
                     "t_first_write": round(t_first, 4), "hold_s": round(hold, 3)}
            if power is None:
                cycle["t_kill"] = round(history.now(), 4)
                server.kill()
            else:
                cycle.update(power.cut(server, rng, history.now))
            cycle["exit"] = server.last_exit
            cycles.append(cycle)
            restart(n)
            t_listen = history.now()
            cycle["restart_s"] = round(t_listen - cycle["t_kill"], 3)
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
        if power is not None:
            power.off()
    except (LivenessFailure, NodeFailure, RuntimeError, GaveUp, PowerFsError) as e:
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
        if power is not None:
            power.off()
        for w in workers:
            w.join(timeout=5)

    ops = history.snapshot()
    final["cycles"] = cycles
    with open(os.path.join(run_dir, "history.jsonl"), "w") as f:
        for o in ops:
            f.write(json.dumps(o, sort_keys=True) + "\n")
    with open(os.path.join(run_dir, "final.json"), "w") as f:
        json.dump(final, f, indent=1)
    summary = summarize(args, ops, final, cycles, failure, seed, run_dir,
                        time.monotonic() - started)
    ok = verdict(args, summary, server)
    if not ok or args.keep or args.run_dir:
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if ok else 1


def summarize(args: argparse.Namespace, ops: list[dict], final: dict,
              cycles: list[dict], failure, seed: int, run_dir: str,
              wall_s: float) -> dict:
    """Checks the history, writes summary.json (and --summary) and logs the
    figures; returns the summary, with the Violations under "_violations"."""
    import crash_checker  # noqa: E402
    from history.checker import _short as short_op  # noqa: E402
    from history.client import is_write_ack  # noqa: E402
    from power import cut_figures  # noqa: E402

    t_check = time.monotonic()
    violations = crash_checker.check(ops, final if failure is None else None)
    check_s = time.monotonic() - t_check
    st = crash_checker.stats(ops)

    def cut_at(c: dict) -> float:
        return c.get("t_cut", c["t_kill"])

    acked_per_cycle = [sum(1 for o in ops if o["outcome"] == "ok" and
                           c["t_listen"] <= o["t_done"] <= cut_at(c)) for c in cycles]
    in_flight_at_kill = sum(1 for c in cycles for o in ops
                            if o["outcome"] == "unknown" and
                            o["t_inv"] <= cut_at(c) <= o["t_done"])
    summary = {
        "seed": seed, "cycles": len(cycles), "cycles_requested": args.cycles,
        "server_flags": args.server_flag, "durability": durability(args.server_flag),
        "power_loss": args.power_loss, "lying_sync": args.lying_sync,
        "wall_s": round(wall_s, 1),
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
        "failure": failure}
    if args.power_loss:
        summary["power"] = cut_figures(cycles)
        # Writes invoked once powerfs had powered off (dedupd still
        # serving, every file operation failing) yet acknowledged: none can
        # be durable, so under sync there should be none.
        late = [o for c in cycles if c["mode"] == "running" for o in ops
                if is_write_ack(o) and c["t_off"] < o["t_inv"] <= c["t_kill"]]
        summary["power"]["writes_acked_after_power_off"] = len(late)
        summary["power"]["writes_acked_after_power_off_list"] = [
            short_op(o) for o in late[:20]]
        summary["loss"] = crash_checker.power_losses(ops, cycles)
        summary["loss"]["fence_repeats"] = crash_checker.fence_repeats(violations)
    summary.update({"stats": st, "cycle_log": cycles,
                    "violation_list": violations.items[:200], "run_dir": run_dir})
    for path in filter(None, [os.path.join(run_dir, "summary.json"), args.summary]):
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)

    kind = "power-loss" if args.power_loss else "SIGKILL/restart"
    log(f"{len(cycles)} {kind} cycles, {st['operations']} attempts "
        f"({st.get('ok', 0)} acknowledged, {st.get('unknown', 0)} unknown, "
        f"{st.get('fail', 0)} refused; {in_flight_at_kill} in flight at a cut), "
        f"{summary['acked_completes']} acknowledged Completes, "
        f"{summary['acked_started']} acknowledged STARTED, "
        f"{summary['batch_items']} batch items, {st['keys']} keys, "
        f"acknowledged per cycle {summary['acked_per_cycle_min']}.."
        f"{summary['acked_per_cycle_max']}, {summary['wall_s']} s "
        f"(read-back {summary['read_back_s']} s, check {summary['check_s']} s)")
    if args.power_loss:
        log_power(summary, args)
    summary["_violations"] = violations
    return summary


# What the README ("Durability") says each mode may lose to a power cut.
DOCUMENTED_LOSS = {
    "sync": "nothing acknowledged (an answer leaves once the WAL holding it is fsynced)",
    "async": "the writes of the last --async_sync_interval_ms before the cut "
             "(the WAL is fsynced every interval)",
    "none": "everything not yet flushed to a table file (no WAL; memtables are "
            "flushed on a clean stop or when full)",
}


def log_power(summary: dict, args: argparse.Namespace) -> None:
    p, loss = summary["power"], summary["loss"]
    log(f"power cuts: {p['cuts']} ({p['by_mode']['running']} with dedupd running, "
        f"{p['by_mode']['stopped']} with it stopped); {p['lossy_cuts']} of them lost "
        f"unsynced bytes (per cut min {p['bytes_lost_min']}, median "
        f"{p['bytes_lost_median']}, max {p['bytes_lost_max']}, total "
        f"{p['bytes_lost_total']}); names restored {p['names_restored_total']}, "
        f"removed {p['names_removed_total']}; dedupd ended on its own during "
        f"{p['exited_during_cut']} cuts")
    log(f"cuts that undid unsynced data, by file: {p['cuts_losing_data_of']}; "
        f"that restored or removed names: {p['cuts_undoing_names_of']}; "
        f"writes invoked after a power off and acknowledged: "
        f"{p['writes_acked_after_power_off']}")
    age = loss["lost_age_ms"]
    log(f"acknowledged Completes: {loss['acked_completes']}, "
        f"{loss['acked_completes_checked']} of them read back after a later cut; "
        f"LOST {loss['acked_completes_lost']} (in {loss['cuts_that_lost_completes']} "
        f"cuts; {loss['lost_acked_after_power_off']} acknowledged after the power "
        f"went off; {loss['lost_without_a_cut']} with no cut to explain them)"
        + ("" if age is None else
           f", acknowledged {age['min']}..{age['max']} ms (median {age['median']}) "
           f"before their cut")
        + f"; fence repeats or regressions: {loss['fence_repeats'] or 'none'}")
    mode = summary["durability"]
    interval = next((f.split("=", 1)[1] for f in args.server_flag
                     if f.startswith("--async_sync_interval_ms=")), "100")
    documented = DOCUMENTED_LOSS.get(mode, "?").replace(
        "--async_sync_interval_ms", f"--async_sync_interval_ms ({interval} ms)")
    log(f"durability {mode}: the README documents that a power cut loses {documented}")
    if mode == "async" and age is not None:
        within = age["max"] <= 2 * float(interval)
        log(f"  async: the oldest lost Complete was acknowledged {age['max']} ms "
            f"before its cut: {'within' if within else 'BEYOND'} twice the sync "
            f"interval")


def verdict(args: argparse.Namespace, summary: dict, server) -> bool:
    """Logs the violations and the outcome; True if the run passes."""
    violations = summary.pop("_violations")
    failure = summary["failure"]
    if violations:
        limit = 30 if args.expect_violations or args.report_loss else 100
        print(violations.render(limit=limit), flush=True)
        log(f"violations by check: {summary['violation_counts']}")
    too_few = None
    if args.power_loss and summary["cycles"] and summary["durability"] == "none":
        # No WAL: between flushes dedupd writes nothing, so there is no
        # unsynced data for a cut to lose; what it loses was only in memory.
        log("durability none writes no WAL: the cuts' lost bytes are not "
            "required (what a cut loses was in dedupd's memory)")
    elif args.power_loss and summary["cycles"]:
        p = summary["power"]
        if 2 * p["lossy_cuts"] < p["cuts"]:
            too_few = (f"only {p['lossy_cuts']} of {p['cuts']} power cuts lost any "
                       f"unsynced bytes (fewer than half): the cuts tested too little")
            log(f"FAILURE: {too_few}")
    if failure:
        log(f"FAILURE: {failure}")
        log(f"--- tail of dedupd's log ({server.log_path}) ---")
        print(server.log_tail(), flush=True)
        bt = server.backtraces()
        if bt:
            log("--- dedupd crashed ---")
            print(bt, flush=True)
    ok = failure is None and too_few is None
    if args.expect_violations:
        ok = ok and len(violations) > 0
        log(f"{len(violations)} violations, expected some: "
            f"{'detected, as expected' if ok else 'FAILED to detect'}")
    elif args.report_loss:
        log(f"{len(violations)} violations, reported (--report-loss), not a failure")
    else:
        ok = ok and not violations
        log(f"{len(violations)} violations")
    return ok

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
