"""Fault test of a replicated dedupd cluster: one 3-node group by default,
or a sharded cluster (--nodes N --groups G [--replication_factor R]).

Concurrent clients log every call while a driver kills, stops, restarts and
partitions nodes (driver.py); then every partition is healed, every node
resumed and started, the keys are read back, the replicas' digests compared,
all nodes restarted, the keys read and the digests compared again, and the
checker (tests/history/checker.py) verifies the history. Exits 0 only with zero
violations; 1 on a violation or a failure of the group (a node that exits on
its own, a group that does not recover); 77 when this machine cannot run it
(not root, no network namespaces or nftables).

    sudo /usr/bin/python3 tests/fault/fault_test.py --dedupd build/server/dedupd \
        [--faults 200] [--seed N] [--gen DIR] [--keep] [--summary FILE] \
        [--nodes 4 --groups 5 [--replication_factor 3] [--moves N]]

With --groups > 1 the keys are spread over every group, clients route each
call to its group's leader or (--spread) to a random node that forwards it,
faults pick a group and hit its leader or a follower (and
multi_leader_stop freezes a node leading several groups), and the digests
are compared per group across its replicas (cluster.py, driver.py). With
more nodes than the replication factor, --moves replica moves (default 1)
run among the faults (`dedupctl cluster move`, re-run until complete:
mover.py), and every node is asked for every group at the end: each group
must live exactly on its replicas, moves applied (checker.py `hosting`).

With --power-loss each node's data dir is a powerfs mount (tests/powerfs,
--powerfs or $POWERFS) and the power kinds of power.py run (by default only
they); with --lying-sync fsync makes nothing durable, so power_all loses
acknowledged writes, and --expect-violations makes such a sabotaged run
pass only if the checker sees the loss.

Failover (time from a fault to the first answered write invoked after it)
is printed per kind and written to the JSON summary; it is reported, not
asserted (timings on a shared 2-core CI machine are noisy). The run's
directory (node data, node logs nN.log, history.jsonl, final.json,
summary.json) is kept on failure or with --keep.
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
SKIP = 77

from history.stubs import generate_stubs  # noqa: E402


def log(msg: str) -> None:
    print(f"[fault] {msg}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dedupd", default=os.environ.get("DEDUPD"),
                   help="the dedupd binary (default: $DEDUPD)")
    p.add_argument("--faults", type=int, default=21, help="faults to inject")
    p.add_argument("--nodes", type=int, default=3, help="dedupd nodes")
    p.add_argument("--groups", type=int, default=1,
                   help="Raft groups (the nodes' --groups); > 1: a sharded cluster")
    p.add_argument("--replication_factor", "--replication-factor", type=int, default=0,
                   help="with --groups > 1: replicas per group (the nodes' "
                   "--replication_factor; default: the server's, min(3, nodes))")
    p.add_argument("--moves", type=int, default=None,
                   help="with --groups > 1: replica moves (`dedupctl cluster move`) "
                   "run during the faults, one at a time (default: 1 when --nodes "
                   "exceeds the replication factor, else 0); see mover.py")
    p.add_argument("--dedupctl", default=os.environ.get("DEDUPCTL"),
                   help="the dedupctl binary, for --moves (default: $DEDUPCTL, else "
                   "client/dedupctl beside the build's server/dedupd)")
    p.add_argument("--move-attempt-timeout", type=float, default=120.0,
                   help="seconds before a `dedupctl cluster move` still running is "
                   "killed and run again (the move resumes)")
    p.add_argument("--spread", type=float, default=0.3,
                   help="with --groups > 1: share of calls sent to a random node "
                   "(forwarded one hop) rather than the key's group leader")
    p.add_argument("--seed", type=int, default=None, help="default: random")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--keys", type=int, default=None,
                   help="keys in play at once (default 12, at least 3 per group)")
    p.add_argument("--deadline", type=float, default=1.0,
                   help="client call deadline, seconds")
    p.add_argument("--kinds", default=None,
                   help="comma-separated fault kinds to use (default: all of "
                   "leader_kill, leader_stop, follower_kill, node_term, "
                   "leader_partition, follower_partition, oneway_partition, and "
                   "with --groups > 1 multi_leader_stop; "
                   "with --power-loss: power_one, power_all, power_snapshot, "
                   "power_truncate)")
    p.add_argument("--power-loss", action="store_true",
                   help="each node's data dir on a powerfs mount; enables the "
                   "power_* kinds")
    p.add_argument("--powerfs", default=os.environ.get("POWERFS"),
                   help="the powerfs binary (default: $POWERFS)")
    p.add_argument("--lying-sync", action="store_true",
                   help="powerfs --lying_sync: fsync makes nothing durable "
                   "(a sabotaged run: use with --expect-violations)")
    p.add_argument("--expect-violations", action="store_true",
                   help="succeed only if the checker finds violations")
    p.add_argument("--continue-on-lost-dirs", action="store_true",
                   help="with --power-loss: a cut that loses a node's raft/ or "
                   "state/ is counted, not a failure (to see what follows)")
    p.add_argument("--snapshot-threshold", type=int, default=128,
                   help="with --power-loss: the nodes' --snapshot_threshold")
    p.add_argument("--snapshot-trailing", type=int, default=256,
                   help="with --power-loss: the nodes' --snapshot_trailing")
    p.add_argument("--hold-scale", type=float, default=1.0,
                   help="multiplies how long each fault lasts")
    p.add_argument("--gen", help="directory of generated dedup/v1 Python stubs "
                   "(default: generate them into the run directory)")
    p.add_argument("--run-dir", help="default: a new temp directory")
    p.add_argument("--keep", action="store_true", help="keep the run directory")
    p.add_argument("--summary", help="also write the JSON summary here")
    p.add_argument("--node-flag", action="append", default=[],
                   help="extra dedupd flag for every node (repeatable)")
    return p.parse_args(argv)


class Stop(Exception):
    """SIGTERM or SIGINT."""


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.dedupd or not os.access(args.dedupd, os.X_OK):
        print(f"fault test: no dedupd binary (--dedupd or $DEDUPD): {args.dedupd}",
              file=sys.stderr)
        return 2
    args.dedupd = os.path.abspath(args.dedupd)
    import netns  # noqa: E402 - needs no stubs

    try:
        netns.check_prerequisites()
    except netns.NetnsUnavailable as e:
        print(f"fault test SKIPPED: {e}", file=sys.stderr)
        return SKIP
    import power  # noqa: E402 - needs no stubs
    powerfs = None
    if args.power_loss:
        if not args.powerfs or not os.access(args.powerfs, os.X_OK):
            print(f"fault test: no powerfs binary (--powerfs or $POWERFS): "
                  f"{args.powerfs}", file=sys.stderr)
            return 2
        args.powerfs = os.path.abspath(args.powerfs)
        powerfs = power.load_powerfs()
        why = powerfs.available()
        if why is not None:
            print(f"fault test SKIPPED: powerfs cannot run here: {why}",
                  file=sys.stderr)
            return SKIP

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="dedup-fault-")
    os.makedirs(run_dir, exist_ok=True)
    gen = args.gen or generate_stubs(os.path.join(run_dir, "gen"))
    sys.path.insert(0, gen)

    import driver  # noqa: E402
    import mover  # noqa: E402
    from cluster import Cluster  # noqa: E402
    from dedup.v1 import dedup_pb2  # noqa: E402
    from history import checker  # noqa: E402
    from history.client import GaveUp, History, LeaderClient  # noqa: E402
    from history.process import NodeFailure  # noqa: E402
    from history.workload import NAMESPACE, KeyPool, Worker  # noqa: E402

    sharded = args.groups > 1
    rf = args.replication_factor or min(3, args.nodes)
    if args.moves is None:
        args.moves = 1 if sharded and args.nodes > rf else 0
    if args.moves and not args.dedupctl:
        args.dedupctl = os.path.join(os.path.dirname(os.path.dirname(args.dedupd)),
                                     "client", "dedupctl")
    default_kinds = (power.POWER_KINDS if args.power_loss else
                     driver.SHARDED_KINDS if sharded else driver.KINDS)
    kinds = args.kinds.split(",") if args.kinds else default_kinds
    if args.keys is None:
        args.keys = max(12, 3 * args.groups)
    bad = None
    if args.nodes < 1 or args.groups < 1:
        bad = "--nodes and --groups must be at least 1"
    elif args.power_loss and (sharded or args.nodes != 3):
        bad = "--power-loss runs one 3-node group only"
    elif not sharded and (set(kinds) - set(driver.KINDS) - set(power.POWER_KINDS)):
        bad = f"kinds {sorted(set(kinds) - set(driver.KINDS) - set(power.POWER_KINDS))} " \
              "need --groups > 1"
    elif set(kinds) - set(driver.ALL_KINDS):
        bad = (f"unknown fault kinds {sorted(set(kinds) - set(driver.ALL_KINDS))}; "
               f"known: {','.join(driver.ALL_KINDS)}")
    elif not args.power_loss and set(kinds) & set(power.POWER_KINDS):
        bad = "the power_* kinds need --power-loss"
    elif args.moves < 0 or (args.moves and (not sharded or args.nodes <= rf)):
        bad = "--moves needs --groups > 1 and more nodes than the replication factor"
    elif args.moves and not os.access(args.dedupctl, os.X_OK):
        bad = f"--moves: no dedupctl binary (--dedupctl or $DEDUPCTL): {args.dedupctl}"
    if bad:
        print(f"fault test: {bad}", file=sys.stderr)
        if not args.run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
        return 2

    def on_signal(signum, _frame):
        raise Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    log(f"seed {seed}, {args.faults} faults, {args.workers} workers, "
        f"{args.nodes} nodes" + (f", {args.groups} groups" if sharded else "")
        + f", run dir {run_dir}")
    removed = netns.remove_stale() + power.remove_stale_mounts()
    if removed:
        log(f"removed leftovers of dead runs: {' '.join(removed)}")
    rng = random.Random(seed)
    topology = netns.Topology(args.nodes)
    cluster = None
    drv = None
    moves = None
    stop = threading.Event()
    workers: list = []
    history = History()
    failure = None
    final: dict = {"digests": {}}
    summary: dict = {"seed": seed, "faults_requested": args.faults, "kinds": kinds,
                     "nodes": args.nodes, "groups": args.groups, "moves": args.moves,
                     "power_loss": args.power_loss, "lying_sync": args.lying_sync,
                     "continue_on_lost_dirs": args.continue_on_lost_dirs}
    started = time.monotonic()
    try:
        topology.setup()
        log(f"namespaces {' '.join(topology.namespaces)} (switch {topology.switch}) "
            f"on 10.77.{topology.subnet}.0/24")
        node_flags = list(args.node_flag)
        if sharded:
            node_flags = [f"--groups={args.groups}"] + (
                [f"--replication_factor={args.replication_factor}"]
                if args.replication_factor else []) + node_flags
        make_power = None
        if args.power_loss:
            # The snapshot flags first: a --node-flag may override them.
            node_flags = power.node_flags(args.snapshot_threshold,
                                          args.snapshot_trailing) + node_flags

            def make_power(n: int, data_dir: str):
                return powerfs.PowerFs(
                    args.powerfs, backing=os.path.join(run_dir, f"n{n}.backing"),
                    mount=data_dir, log_path=os.path.join(run_dir, f"n{n}.powerfs.log"),
                    lying_sync=args.lying_sync)
            log(f"power loss: data dirs on powerfs ({args.powerfs}"
                f"{', lying sync' if args.lying_sync else ''}), snapshot threshold "
                f"{args.snapshot_threshold}, trailing {args.snapshot_trailing}")
        cluster = Cluster(topology, run_dir, args.dedupd, node_flags, make_power)
        cluster.start_all()
        if sharded:
            cluster.load_layout()
            if len(cluster.groups) != args.groups:
                raise RuntimeError(f"the shard map has {len(cluster.groups)} groups, "
                                   f"not {args.groups}")
            log("groups (replicas): " + ", ".join(
                f"{g} ({','.join(map(str, ids))})" for g, ids in sorted(cluster.groups.items())))
            final["layout"] = {str(g): ids for g, ids in sorted(cluster.groups.items())}
            final["nodes"] = sorted(cluster.nodes)
        router = cluster.group_of if sharded else None
        drv = driver.Driver(cluster, history, rng, args.hold_scale, log)
        if args.power_loss:
            drv.power = power.PowerFaults(drv, args.snapshot_threshold,
                                          args.snapshot_trailing,
                                          check_dirs=not (args.lying_sync or
                                                          args.continue_on_lost_dirs))
        drv.settle("after start", timeout_s=60)
        pool = (KeyPool(rng, args.keys, cluster.group_of, sorted(cluster.groups))
                if sharded else KeyPool(rng, args.keys))
        workers = [Worker(f"w{i}", cluster.addresses, history, pool, rng.randrange(1 << 62),
                          args.deadline, stop, router=router, spread=args.spread)
                   for i in range(args.workers)]
        for w in workers:
            w.start()
        if args.moves:
            moves = mover.Moves(args.moves, args.faults, cluster,
                                os.path.abspath(args.dedupctl), history.now,
                                random.Random(rng.randrange(1 << 62)), log,
                                attempt_timeout_s=args.move_attempt_timeout)
            log(f"{args.moves} move(s), due at fault(s) {','.join(map(str, moves.due))}")
        for n, kind in enumerate(driver.schedule(args.faults, rng, kinds), 1):
            drv.run_fault(n, args.faults, kind,
                          before_inject=moves.before_fault if moves else None)
            dead = [w for w in workers if w.error is not None]
            if dead:
                raise RuntimeError(f"worker {dead[0].name} died: {dead[0].error!r}")
        time.sleep(1.0)  # a last stretch of normal load
        stop.set()
        for w in workers:
            w.join(timeout=30)
        if any(w.is_alive() for w in workers):
            raise RuntimeError("a worker did not stop within 30 s")
        for w in workers:
            if w.error is not None:
                raise RuntimeError(f"worker {w.name} died: "
                                   f"{''.join(traceback.format_exception(w.error))}")
        rejected = sum(w.client.rejected for w in workers)
        if rejected:
            raise RuntimeError(f"{rejected} calls were rejected as invalid (workload bug?)")

        def read_back(label: str) -> None:
            """Gets every key once, from as many threads as there were
            workers (logged like any call; the checker compares them)."""
            keys = sorted({o["key"] for o in history.snapshot()})
            errors: list[str] = []

            def read(part: int) -> None:
                client = LeaderClient(cluster.addresses, history, f"{label}{part}",
                                      args.deadline, random.Random(seed + part),
                                      router=router, spread=args.spread)
                try:
                    for key in keys[part::args.workers]:
                        client.run("get", dedup_pb2.GetRequest(namespace=NAMESPACE,
                                                               key=key),
                                   {}, key, budget_s=30)
                except GaveUp as e:
                    errors.append(f"{label}: a read did not succeed: {e}")
                finally:
                    client.close()

            readers = [threading.Thread(target=read, args=(i,))
                       for i in range(args.workers)]
            for r in readers:
                r.start()
            for r in readers:
                r.join()
            if errors:
                raise driver.LivenessFailure(errors[0])

        def group_digests(phase: str, group: int) -> dict:
            """The digests of `group`'s replicas; sharded: of every node
            hosting it (the others answer NOT_FOUND: "not_hosted"), and the
            nodes holding its directory on disk ("dirs")."""
            nodes, converged, absent = cluster.converged_digests(timeout_s=30,
                                                                 group=group)
            out = {"converged": converged,
                   "nodes": {str(n): None if d is None else
                             {"applied_index": d.applied_index, "digest": d.digest,
                              "live_records": d.live_records,
                              "replicated_now_ms": d.replicated_now_ms}
                             for n, d in nodes.items()}}
            extra = ""
            if sharded:
                out["not_hosted"] = absent
                out["dirs"] = [n for n in sorted(cluster.nodes)
                               if cluster.group_dir_exists(n, group)]
                extra = f"; not hosted on {','.join(map(str, absent)) or '-'}"
            log(f"digests {phase}{f' group {group}' if sharded else ''}: " + ", ".join(
                f"n{n} {d.applied_index}:{d.digest}" if d else f"n{n} -"
                for n, d in nodes.items()) + extra)
            return out

        def digests(phase: str) -> None:
            if not sharded:
                final["digests"][phase] = group_digests(phase, 0)
                return
            final["digests"][phase] = {"groups": {
                str(g): group_digests(phase, g) for g in sorted(cluster.groups)}}

        # Heal everything, then read every key back and compare replicas.
        topology.heal_all()
        for node in cluster.nodes.values():
            if node.stopped:
                node.signal(signal.SIGCONT)
            if not node.running:
                node.start()
        if moves is not None:
            # Every move completes now (re-run until it does, within
            # mover.py's limits), before the checks of where groups live.
            moves.finish()
        drv.settle("after healing", timeout_s=60, max_lag=0)
        read_back("final")
        drv.settle("after the final reads", timeout_s=60, max_lag=0)
        digests("healed")
        # Restart every node (a cold start: the state comes back from each
        # node's own data), then the same again.
        for node in cluster.nodes.values():
            node.terminate()
        for node in cluster.nodes.values():
            node.start()
        drv.settle("after restarting all nodes", timeout_s=60, max_lag=0)
        read_back("restarted")
        drv.settle("after the reads after restart", timeout_s=60, max_lag=0)
        digests("restarted")
    except (driver.LivenessFailure, NodeFailure, RuntimeError, GaveUp,
            mover.MoveFailure) as e:
        failure = f"{type(e).__name__}: {e}"
    except Stop as e:
        failure = f"stopped by {e}"
    except Exception:  # noqa: BLE001 - a bug of the test: report it whole
        failure = traceback.format_exc()
    finally:
        stop.set()
        if moves is not None:
            moves.stop()
            final["moves"] = moves.records
        if cluster is not None:
            cluster.stop_all()
        topology.teardown()
        for w in workers:
            w.join(timeout=5)

    ops = history.snapshot()
    with open(os.path.join(run_dir, "history.jsonl"), "w") as f:
        for o in ops:
            f.write(json.dumps(o, sort_keys=True) + "\n")
    with open(os.path.join(run_dir, "final.json"), "w") as f:
        json.dump(final, f, indent=1)
    violations = checker.check(ops, final if failure is None else None)
    st = checker.stats(ops)
    faults = drv.faults if drv is not None else []
    figures = driver.failover_figures(faults, ops)
    power_summary = power.summarize(faults) if args.power_loss else None
    summary.update({
        "faults": len(faults),
        "wall_s": round(time.monotonic() - started, 1),
        "operations": st["operations"], "unknown": st.get("unknown", 0),
        "failed_definitely": st.get("fail", 0), "keys": st["keys"],
        "violations": len(violations), "failure": failure,
        "failover": figures, "stats": st, "power": power_summary,
        "fault_log": faults,
        "move_log": final.get("moves", []),
        "violation_list": violations.items[:200],
        "run_dir": run_dir})
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1)

    log(f"{summary['faults']} faults, {st['operations']} operations "
        f"({st.get('ok', 0)} answered, {st.get('unknown', 0)} unknown, "
        f"{st.get('fail', 0)} refused), {st['keys']} keys, "
        f"{st.get('begin.takeover', 0)} takeovers, {summary['wall_s']} s")
    log("failover, fault to first answered write invoked after it (s):")
    for name, fig in figures.items():
        def fmt(x):
            return "-" if x is None else f"{x:.2f}"
        extra = f"  (target p99 < {fig['target_p99_s']} s)" if "target_p99_s" in fig else ""
        log(f"  {name:<28} n={fig['count']:<3} p50 {fmt(fig['p50_s'])}  "
            f"p99 {fmt(fig['p99_s'])}  max {fmt(fig['max_s'])}{extra}")
        if "elected_count" in fig:
            log(f"  {'  of which new leader named':<28} n={fig['elected_count']:<3} "
                f"p50 {fmt(fig['elected_p50_s'])}  p99 {fmt(fig['elected_p99_s'])}  "
                f"max {fmt(fig['elected_max_s'])}")
    lead = figures.get("leader_kill+leader_stop", {})
    if lead.get("p99_s") is not None:
        met = "met" if lead["p99_s"] < lead["target_p99_s"] else "NOT met (reported, not asserted)"
        log(f"failover after a leader's SIGKILL/SIGSTOP: p99 {lead['p99_s']:.2f} s over "
            f"{lead['count']} faults, target < {lead['target_p99_s']:.0f} s: {met}")
    for m in final.get("moves", []):
        faults_during = [f["n"] for f in faults if f.get("moves_under_way", {})
                         .get(str(m["group"])) == [m["from"], m["to"]]]
        took = (f"complete after {len(m['attempts'])} attempt(s), "
                f"{m['t_done'] - m['t_start']:.1f} s" if m["completed"]
                else f"NOT complete ({len(m['attempts'])} attempt(s))")
        log(f"move {m['n']}: group {m['group']} from node {m['from']} to node "
            f"{m['to']}: {took}; faults during it: "
            f"{','.join(map(str, faults_during)) or 'none'}")
    if power_summary is not None:
        for line in power.coverage_lines(power_summary):
            log(line)
    if violations:
        print(violations.render(limit=30 if args.expect_violations else 100), flush=True)
    if failure:
        log(f"FAILURE: {failure}")
    if args.expect_violations:
        if failure is None and violations:
            log(f"{len(violations)} violations, expected some: detected, as expected")
            if args.keep or args.run_dir or cluster_mounted(cluster):
                log(f"run directory kept: {run_dir}")
            else:
                shutil.rmtree(run_dir, ignore_errors=True)
            return 0
        log(f"{len(violations)} violations, expected some: FAILED to detect"
            f"{'' if failure is None else ' (the run failed)'}; "
            f"run directory kept: {run_dir}")
        return 1
    if violations or failure:
        if cluster is not None:
            for node in cluster.nodes.values():
                log(f"--- tail of node {node.id}'s log ({node.log_path}) ---")
                print(node.log_tail(), flush=True)
                bt = node.backtraces()
                if bt:
                    log(f"--- node {node.id} crashed ---")
                    print(bt, flush=True)
        log(f"{len(violations)} violations; run directory kept: {run_dir}")
        return 1
    log("0 violations")
    if args.keep or args.run_dir or cluster_mounted(cluster):
        log(f"run directory kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


def cluster_mounted(cluster) -> bool:
    """True (and says so) if a node's powerfs is still mounted: removing
    the run directory would then reach through the mount."""
    left = cluster.mounted if cluster is not None else []
    if left:
        log(f"still mounted, not removing the run directory: {' '.join(left)}")
    return bool(left)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
