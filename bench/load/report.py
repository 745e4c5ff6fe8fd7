#!/usr/bin/env python3
"""Turns bench/run's JSON lines into bench/results/<date>.md: the figures,
ratios to dedup and to the bare-gRPC baseline, the targets, and the machine.
A 3-node replicated group of dedupd (configs starting with 3-node) is set
beside the single node.

A cell measured in several rounds shows its median round (by throughput; by
p99 for open-loop cells) and the rounds' spread; a ratio is the median of the
ratios within each round, whose cells ran minutes apart at most. Exits 1 when
a cell is missing, has no figures, or counted errors."""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

# Configurations with matched durability, keyed by class.
DURABLE = {"dedup": "sync", "redis": "appendfsync=always",
           "postgres": "synchronous_commit=on"}
VOLATILE = {"dedup": "none", "redis": "persistence=off",
            "postgres": "synchronous_commit=off"}
WORKLOADS = ["unique", "begin", "duplicates", "hot", "batch", "beginbatch"]
SYSTEMS = ["dedup", "redis", "postgres"]
GROUP = "3-node"  # configs of the replicated group start with this


def single_node_of(config):
    """The single node's config a 3-node group's config is set beside
    ("3-node-coalesced@256" -> "sync-coalesced@256"); None if not the
    group's."""
    if not config.startswith(GROUP) or "half-peak" in config:
        return None
    return "sync" + config[len(GROUP):]


def median_row(rounds):
    """The round whose figure is the median (lower middle of an even count)."""
    if rounds[0]["rate"]:
        ordered = sorted(rounds, key=lambda r: r["latency_ms"]["p99"])
    else:
        ordered = sorted(rounds, key=lambda r: r["units_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def split_at(config):
    """("sync-coalesced@256") -> ("sync-coalesced", "@256"): a config and the
    in-flight count it ran with, when not the run's default."""
    base, at, n = config.partition("@")
    return base, at + n


def table_order(key):
    system, config, workload = key
    begin = WORKLOADS.index("begin")
    # Open-loop cells beside the closed-loop cell their rate comes from.
    if config == "bare-grpc-half-peak":  # the floor of sync-half-peak
        return (begin, False, 0, 0, 0, 2)
    if config == "sync-at-3-node-half-peak":  # the single node at that rate
        return (begin, False, 0, 0, 1, 2)
    config, at = split_at(config)
    base = config.removesuffix("-coalesced")
    group = config.startswith(GROUP)
    cls = (-1 if config == "bare-grpc" else
           0 if DURABLE.get(system) == base or group
           or config == "sync-half-peak" else
           1 if VOLATILE.get(system) == base else 2)
    w = (WORKLOADS + ["setnx", "echo"]).index(workload) \
        if workload in WORKLOADS + ["setnx", "echo"] else 99
    return (w, bool(at), cls, SYSTEMS.index(system) if system in SYSTEMS else 9,
            group, config.endswith("half-peak"), config.endswith("-coalesced"))


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception:  # a missing tool leaves the line empty, nothing more
        return ""


def machine(data_dir, dedupd):
    cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -1")
    mem = sh("free -h | awk '/^Mem:/ {print $2}'")
    disk = sh(f"df -h --output=source,fstype,size '{data_dir}' | tail -1")
    dev = sh(f"df --output=source '{data_dir}' | tail -1 | xargs basename")
    rota = sh(f"cat /sys/block/{dev}/queue/rotational 2>/dev/null")
    kind = {"0": "non-rotational", "1": "rotational"}.get(rota, "unknown kind")
    hyp = sh("lscpu | sed -n 's/^Hypervisor vendor: *//p'")
    hyp = f"{hyp} virtual machine" if hyp else "no hypervisor reported"
    return [
        ("CPU", f"{cpu}, {os.cpu_count()} cores ({hyp})"),
        ("RAM", mem),
        ("Disk (data dirs)", f"{disk} ({kind})"),
        ("Kernel", platform.release()),
        ("OS", sh(". /etc/os-release && echo $PRETTY_NAME")),
        ("dedupd", sh(f"cd '{os.path.dirname(os.path.abspath(__file__))}' && "
                      "git describe --always --dirty 2>/dev/null")),
        ("Redis", sh("redis-server --version | awk '{print $3}'")),
        ("PostgreSQL", sh("/usr/lib/postgresql/15/bin/postgres --version")),
        ("gRPC / RocksDB", sh("dpkg-query -W -f='${Version} ' libgrpc++-dev librocksdb-dev")),
        ("Compiler", sh("c++ --version | head -1")),
    ]


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", default="")
    p.add_argument("--rounds", default="1")
    p.add_argument("--outstanding", default="")
    p.add_argument("--high_outstanding", default="")
    p.add_argument("--smoke", default="0")
    p.add_argument("--dedupd", default="")
    p.add_argument("--data_dir", default="/tmp")
    p.add_argument("--systems", default="dedup dedup3 redis postgres")
    p.add_argument("--leader_changes", default="",
                   help="JSON lines: the 3-node cells during which the leader or "
                   "its term changed")
    p.add_argument("--command", default="",
                   help="the command line that made these figures")
    p.add_argument("--cells", type=int, default=0,
                   help="cells measured")
    p.add_argument("--busy_cells", type=int, default=0,
                   help="cells started while the machine was still busy")
    a = p.parse_args()
    changes = ([json.loads(l) for l in open(a.leader_changes) if l.strip()]
               if a.leader_changes and os.path.exists(a.leader_changes) else [])
    all_rows = [json.loads(l) for l in open(a.results) if l.strip()]
    # A cell's rounds, in the order they ran.
    rounds_of = {}
    for r in all_rows:
        rounds_of.setdefault((r["system"], r["config"], r["workload"]), []).append(r)
    by = {k: median_row(v) for k, v in rounds_of.items()}
    rows = [by[k] for k in sorted(by, key=table_order)]

    def ups(system, config, workload):
        r = by.get((system, config, workload))
        return r["units_per_s"] if r else None

    # Median over rounds of f(round's row of key a, round's row of key b).
    def round_ratio(a_key, b_key, f=lambda x, y: x["units_per_s"] / y["units_per_s"]):
        pairs = list(zip(rounds_of.get(a_key, []), rounds_of.get(b_key, [])))
        values = [f(x, y) for x, y in pairs
                  if x["units_per_s"] > 0 and y["units_per_s"] > 0]
        values = [v for v in values if v]
        return statistics.median(values) if values else None

    def spread(key):
        v = [r["units_per_s"] for r in rounds_of[key]]
        if len(v) < 2 or not statistics.median(v):
            return ""
        return f"±{50 * (max(v) - min(v)) / statistics.median(v):.0f}%"

    echo_key = ("dedup", "bare-grpc", "echo")

    def server_us(r):
        cpu = r.get("server_cpu_s", -1)
        return f"{1e6 * cpu / r['units']:.1f}" if cpu >= 0 and r["units"] else ""

    def steal(r):
        f = r.get("steal_fraction", -1)
        return f"{100 * f:.0f}%" if f >= 0 else ""

    # CPU (server + load generator) per unit: throughput on a machine the
    # two share, without the other guests' interference.
    def cpu_per_unit(r):
        if not r["units"] or r.get("server_cpu_s", -1) < 0:
            return None
        return (r["server_cpu_s"] + r["client_cpu_s"]) / r["units"]

    def cpu_ratio(x, y):  # CPU per unit of y over that of x: x's speed-up
        cx, cy = cpu_per_unit(x), cpu_per_unit(y)
        return cy / cx if cx and cy else None
    out = []
    w = out.append
    w(f"# dedup benchmark, {datetime.date.today().isoformat()}"
      + (" (smoke: figures not meaningful)" if a.smoke == "1" else ""))
    w("")
    command = a.command or f"bench/run{' --smoke' if a.smoke == '1' else ''}"
    w(f"Command: `{command}`; "
      f"{a.rounds} round(s) of {a.seconds} s measured per cell after a "
      f"warmup, closed loop with {a.outstanding} operations in flight "
      f"(dedupd and Redis: 4 connections; PostgreSQL: 32), every system on "
      f"loopback on this machine, driven by the same load generator "
      f"(`dedup-bench`). All servers run throughout; each round measures a "
      f"workload on every system before the next workload, after the "
      f"machine has gone quiet. A row is the cell's median round "
      f"(`spread`: ± half the range of the rounds' throughput); a ratio is "
      f"the median of the ratios within each round. Configs ending in "
      f"`-coalesced` run the same unary callers through the C++ client's "
      f"`CoalescingClient` (one channel; concurrent Begins and Completes "
      f"leave as BeginBatch/CompleteBatch, two batches of each kind in "
      f"flight), as one client process with that option sends them. "
      f"Configs ending in `@{a.high_outstanding}` measure durable pairs again "
      f"with {a.high_outstanding} operations in flight (same connections).")
    w("")
    if any(k[1].startswith(GROUP) for k in rounds_of):
        w("Configs starting with `3-node` are a replicated group of three "
          "dedupd nodes (cluster mode, Raft) on this same machine, driven "
          "through its leader: the three nodes and the load generator share "
          "its cores, and every node does the whole work (each fsyncs the "
          "Raft log and applies every entry to its own RocksDB). Their "
          "`dedup ÷ this` is the single node (`sync`, same config otherwise) "
          "÷ the group, and their `server µs/unit` is the three nodes' CPU "
          "summed. A cell during which the leader or its term changed fails "
          "and is listed under Leader changes.")
        w("")
    w("**The load generator shares the machine's cores with the server under "
      "test**: on a small machine the figures are bounded by both. "
      "`client cpu` is the load generator's CPU use (100% = one core); "
      "`server µs/unit` is the server process's CPU time per unit (dedupd "
      "and Redis; PostgreSQL runs a process per connection and is not "
      "measured), which the other tenants of a shared machine disturb less "
      "than throughput; `steal` is the share of the machine's CPU time the "
      "hypervisor gave to other guests during the cell.")
    w("")
    w("Units: `pairs` = Begin + Complete on a fresh key; `calls` = one "
      "round trip; `begins` = one Begin (duplicates: half replay completed "
      "keys, half are fresh pairs; hot: 64 callers on 4 keys, the winner "
      "Releases); `keys` = keys per second through BeginBatch + CompleteBatch "
      "of 100 (Redis: 100 pipelined EVALSHAs each way; PostgreSQL: 100 "
      "statements in one transaction each way), by BeginBatch of 100 alone "
      "(`beginbatch`), or by Redis `SET NX EX` pipelined 16 deep.")
    w("")
    w("Matched durability: dedup `sync` ~ Redis `appendfsync=always` ~ "
      "PostgreSQL `synchronous_commit=on` (each answers after an fsync, "
      "shared by concurrent writers); dedup `none` ~ Redis persistence off ~ "
      "PostgreSQL `synchronous_commit=off` (PostgreSQL still writes its WAL).")
    w("")
    if a.cells:
        w(f"**This machine is shared** with other users, whose builds and "
          f"tests may run at the same time: {a.busy_cells} of {a.cells} cells started on a "
          f"machine still more than 5% busy after {1 if a.smoke == '1' else 15} s "
          f"of waiting for it to go quiet; those figures are depressed, which "
          f"the spread between rounds shows.")
        w("")
    stolen = [r.get("steal_fraction", -1) for r in all_rows]
    stolen = [f for f in stolen if f >= 0]
    if stolen and statistics.median(stolen) > 0.10:
        w(f"**Warning: other guests of this machine took a median "
          f"{100 * statistics.median(stolen):.0f}% (worst "
          f"{100 * max(stolen):.0f}%) of its CPU during the cells.** "
          f"Throughput and latency are depressed and uneven; ratios within a "
          f"round and `server µs/unit` hold up best.")
        w("")
    w("| system | config | workload | units/s | unit | spread | p50 ms | "
      "p99 ms | p99.9 ms | dedup ÷ this | ÷ bare gRPC Echo | client cpu | "
      "server µs/unit | steal | errors |")
    w("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        key = (r["system"], r["config"], r["workload"])
        config, at = split_at(r["config"])
        cls = DURABLE if DURABLE.get(r["system"]) == config else (
            VOLATILE if VOLATILE.get(r["system"]) == config else None)
        # Against dedup with as many operations in flight.
        vs = (round_ratio(("dedup", cls["dedup"] + at, r["workload"]), key)
              if cls else None)
        # The group against the single node, same config otherwise.
        single = (single_node_of(r["config"]) if r["system"] == "dedup"
                  else None)
        if single:
            vs = round_ratio(("dedup", single, r["workload"]), key)
        vs_dedup = f"{vs:.2f}×" if vs else ""
        ve = (round_ratio(key, echo_key)
              if r["unit"] == "calls" and r["system"] == "dedup"
              and not r["rate"] else None)
        vs_echo = f"{ve:.2f}" if ve else ""
        errors = sum(x["errors"] for x in rounds_of[key])
        lat = r["latency_ms"]
        w(f"| {r['system']} | {r['config']} | {r['workload']}"
          f"{' @' + fmt(r['rate']) + '/s' if r['rate'] else ''} | "
          f"{fmt(r['units_per_s'])} | {r['unit']} | {spread(key)} | "
          f"{lat['p50']:.3f} | {lat['p99']:.3f} | {lat['p999']:.3f} | "
          f"{vs_dedup} | {vs_echo} | "
          f"{100 * r['client_cpu_s'] / max(r['seconds'], 1e-9):.0f}% | "
          f"{server_us(r)} | {steal(r)} | {errors} |")
    w("")

    # Targets, as ratios measured in this run.
    targets = [
        ("Durable Begin+Complete pairs/s ≥ 2× Redis+Lua appendfsync always",
         round_ratio(("dedup", "sync", "unique"),
                     ("redis", "appendfsync=always", "unique")), 2.0, "×"),
        ("Durable Begin+Complete pairs/s ≥ 5× PostgreSQL synchronous_commit on",
         round_ratio(("dedup", "sync", "unique"),
                     ("postgres", "synchronous_commit=on", "unique")), 5.0, "×"),
        ("Unary Begin, new keys, durability none ≥ 80% of bare-gRPC Echo",
         round_ratio(("dedup", "none", "begin"), echo_key), 0.8, ""),
        ("Same, by CPU per call (server + load generator): Echo's ÷ Begin's",
         round_ratio(("dedup", "none", "begin"), echo_key, cpu_ratio), 0.8, ""),
        ("Begin calls through the CoalescingClient, durability none ÷ "
         "bare-gRPC Echo (for reference)",
         round_ratio(("dedup", "none-coalesced", "begin"), echo_key), None, ""),
        ("Same pairs through the C++ client's CoalescingClient ÷ Redis+Lua "
         "appendfsync always (not the target's unary calls; for reference)",
         round_ratio(("dedup", "sync-coalesced", "unique"),
                     ("redis", "appendfsync=always", "unique")), None, "×"),
        ("Same pairs through the CoalescingClient ÷ PostgreSQL "
         "synchronous_commit on (for reference)",
         round_ratio(("dedup", "sync-coalesced", "unique"),
                     ("postgres", "synchronous_commit=on", "unique")), None, "×"),
    ]
    high = f"@{a.high_outstanding}"
    for label, config in (("unary", "sync"),
                          ("through the CoalescingClient", "sync-coalesced")):
        targets += [
            (f"Durable pairs with {a.high_outstanding} in flight, {label}, ÷ "
             f"Redis+Lua appendfsync always (for reference)",
             round_ratio(("dedup", config + high, "unique"),
                         ("redis", "appendfsync=always" + high, "unique")), None, "×"),
            (f"Durable pairs with {a.high_outstanding} in flight, {label}, ÷ "
             f"PostgreSQL synchronous_commit on (for reference)",
             round_ratio(("dedup", config + high, "unique"),
                         ("postgres", "synchronous_commit=on" + high, "unique")),
             None, "×"),
        ]
    targets += [
        ("BeginBatch keys/s (sync) ≥ Redis pipelined SET NX EX (pipeline 16, "
         "appendfsync always)",
         round_ratio(("dedup", "sync", "beginbatch"),
                     ("redis", "appendfsync=always", "setnx")), 1.0, "×"),
    ]
    group_high = GROUP + high
    targets += [
        ("3-node group: BeginBatch keys/s ≥ 0.5× the single node (sync)",
         round_ratio(("dedup", GROUP, "beginbatch"),
                     ("dedup", "sync", "beginbatch")), 0.5, "×"),
        ("3-node group: durable pairs through the CoalescingClient ≥ 0.5× "
         "the single node (sync-coalesced)",
         round_ratio(("dedup", GROUP + "-coalesced", "unique"),
                     ("dedup", "sync-coalesced", "unique")), 0.5, "×"),
        (f"3-node group ÷ single node: coalesced durable pairs with "
         f"{a.high_outstanding} in flight (for reference)",
         round_ratio(("dedup", GROUP + "-coalesced" + high, "unique"),
                     ("dedup", "sync-coalesced" + high, "unique")), None, "×"),
        ("3-node group ÷ single node: unary durable pairs (for reference)",
         round_ratio(("dedup", GROUP, "unique"), ("dedup", "sync", "unique")),
         None, "×"),
        (f"3-node group ÷ single node: unary durable pairs with "
         f"{a.high_outstanding} in flight (for reference)",
         round_ratio(("dedup", group_high, "unique"),
                     ("dedup", "sync" + high, "unique")), None, "×"),
        ("3-node group ÷ single node: unary Begin calls, closed loop (for "
         "reference)",
         round_ratio(("dedup", GROUP, "begin"), ("dedup", "sync", "begin")),
         None, "×"),
    ]
    half = by.get(("dedup", "sync-half-peak", "begin"))

    def rounds_p99(key):  # " (rounds: a, b, c)", p99 of each, sorted
        all_p99 = sorted(x["latency_ms"]["p99"] for x in rounds_of[key])
        return (f" (rounds: {', '.join(f'{v:.1f}' for v in all_p99)})"
                if len(all_p99) > 1 else "")
    w("## Targets")
    w("")
    w("| target | measured | met |")
    w("|---|---:|---|")
    for name, value, goal, suffix in targets:
        if value is None:
            w(f"| {name} | not measured | |")
        else:
            met = ("(reference)" if goal is None else
                   "yes" if value >= goal else "NO")
            w(f"| {name} | {value:.2f}{suffix} | {met} |")
    if half:
        p99 = half["latency_ms"]["p99"]
        each = rounds_p99(("dedup", "sync-half-peak", "begin"))
        floor = by.get(("dedup", "bare-grpc-half-peak", "echo"))
        floor_text = (f"; bare gRPC Echo at the same rate: "
                      f"{floor['latency_ms']['p99']:.3f} ms" if floor else "")
        w(f"| p99 Begin latency at half of peak rate ({fmt(half['rate'])}/s, "
          f"open loop), durable < 2 ms | {p99:.3f} ms{each}{floor_text} | "
          f"{'yes' if p99 < 2 else 'NO'} |")
    half3 = by.get(("dedup", GROUP + "-half-peak", "begin"))
    if half3:
        same = by.get(("dedup", "sync-at-3-node-half-peak", "begin"))
        same_text = (f"; the single node at the same rate: "
                     f"{same['latency_ms']['p99']:.3f} ms" if same else "")
        own_text = (f"; the single node at half its own peak "
                    f"({fmt(half['rate'])}/s): {half['latency_ms']['p99']:.3f} ms"
                    if half else "")
        w(f"| p99 Begin latency at half of the 3-node group's peak "
          f"({fmt(half3['rate'])}/s, open loop), beside the single node | "
          f"{half3['latency_ms']['p99']:.3f} ms"
          f"{rounds_p99(('dedup', GROUP + '-half-peak', 'begin'))}"
          f"{same_text}{own_text} | (reported) |")
    w("")
    if changes:
        w("## Leader changes")
        w("")
        w("The 3-node group's leader (or its term) changed during these "
          "cells: their figures and errors include the change of leader, so "
          "they do not measure a steady group.")
        w("")
        for c in changes:
            w(f"- round {c.get('round', '?')}, dedup {c['config']} "
              f"{c['workload']}: {c['before']} → {c.get('after') or 'no leader'}")
        w("")
    w("## Answers per cell")
    w("")
    for r in rows:  # the median round's answers
        st = {k: v for k, v in {**r["begin_status"], **r["fenced_status"]}.items() if v}
        err = f"; first error: {r['first_error']}" if r["errors"] else ""
        w(f"- {r['system']} {r['config']} {r['workload']}: "
          f"{', '.join(f'{k}={v}' for k, v in st.items())}{err}")
    w("")
    w("## Machine")
    w("")
    for k, v in machine(a.data_dir, a.dedupd):
        w(f"- {k}: {v}")
    w("")
    with open(a.out, "w") as f:
        f.write("\n".join(out))

    # Every expected cell must exist, have figures and no error.
    expected = []
    systems = a.systems.split()
    if "dedup" in systems:
        expected += [("dedup", c, wl) for c in ("sync", "none") for wl in WORKLOADS]
        expected += [("dedup", "bare-grpc", "echo")]
        expected += [("dedup", c + "-coalesced", wl)
                     for c in ("sync", "none") for wl in ("unique", "begin")]
        expected += [("dedup", c + high, "unique") for c in ("sync", "sync-coalesced")]
    if "redis" in systems:
        expected += [("redis", c, wl) for c in ("appendfsync=always", "persistence=off")
                     for wl in WORKLOADS + ["setnx", "echo"]]
        expected += [("redis", "appendfsync=always" + high, "unique")]
    if "postgres" in systems:
        expected += [("postgres", c, wl) for c in ("synchronous_commit=on", "synchronous_commit=off")
                     for wl in WORKLOADS + ["echo"]]
        expected += [("postgres", "synchronous_commit=on" + high, "unique")]
    if "dedup3" in systems:
        expected += [("dedup", c, "unique")
                     for c in (GROUP, GROUP + "-coalesced", group_high,
                               GROUP + "-coalesced" + high)]
        expected += [("dedup", c, wl) for c, wl in (
            (GROUP, "begin"), (GROUP + "-half-peak", "begin"),
            (GROUP, "beginbatch"))]
        if "dedup" in systems:
            expected += [("dedup", "sync-at-3-node-half-peak", "begin")]
    bad = [f"missing {e}" for e in expected if e not in by]
    bad += [f"{r['system']} {r['config']} {r['workload']}: units={r['units']} "
            f"errors={r['errors']} {r['first_error']}"
            for r in all_rows if r["units"] <= 0 or r["errors"] > 0]
    bad += [f"leader changed during dedup {c['config']} {c['workload']} "
            f"(round {c.get('round', '?')})" for c in changes]
    for b in bad:
        print("report: " + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
