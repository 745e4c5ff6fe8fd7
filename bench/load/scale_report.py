#!/usr/bin/env python3
"""The markdown report of bench/scale: one row per (cell, workload, operations
in flight), the median round; the ratios 6x6 / 3x3 and 3x3 / 3x1 (median of
the per-round ratios) at each level in flight and, with several levels, of
each cell's peak, against issue 30's targets. Prints the report and writes it
to --out."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess

TARGETS = [("6x6", "3x3", 1.7), ("3x3", "3x1", 1.2)]
LOAD_TO = {"leader": "leader", "shard": "by slot", "every": "every node"}
WORKLOADS = [("pairs", "durable coalesced Begin+Complete pairs"), ("keys", "BeginBatch keys")]


def cpu_us_per_unit(row: dict) -> list[float]:
    units = row["units_per_s"] * row["window_s"]
    return [cpu * 1e6 / units if units > 0 else 0.0 for cpu in row["node_cpu_s"]]


def median_row(rows: list[dict]) -> dict:
    """The round whose throughput is the median (the lower of two)."""
    ordered = sorted(rows, key=lambda r: r["units_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def machine() -> str:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model or platform.machine()}), Linux {platform.release()}"


def revision(root: str) -> str:
    try:
        return subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def level_of(row: dict) -> int:
    return row.get("outstanding", 0)


def ratio_line(rows: list[dict], top: str, bottom: str, name: str, pick) -> str:
    """`name`'s ratios top / bottom per workload: the median over rounds of
    pick(rows of one cell, workload and round)'s throughput ratio."""
    line = f"| {name} |"
    for label, _ in WORKLOADS:
        ratios = []
        for rnd in sorted({r["round"] for r in rows}):
            t = pick([r for r in rows if (r["cell"], r["label"], r["round"]) == (top, label, rnd)])
            b = pick([r for r in rows if (r["cell"], r["label"], r["round"]) == (bottom, label, rnd)])
            if t and b and b["units_per_s"] > 0:
                ratios.append(t["units_per_s"] / b["units_per_s"])
        line += f" {statistics.median(ratios):.2f}× |" if ratios else " - |"
    return line


def ratio_table(rows: list[dict], cells: list[str]) -> list[str]:
    levels = sorted({level_of(r) for r in rows})
    out = ["", "| ratio | " + " | ".join(name for _, name in WORKLOADS) + " | target |",
           "|---|" + "---:|" * len(WORKLOADS) + "---|"]
    for top, bottom, target in TARGETS:
        if top not in cells or bottom not in cells:
            continue
        for level in levels:
            at = (lambda rs, level=level:
                  next((r for r in rs if level_of(r) == level), None))
            name = f"{top} ÷ {bottom}" + (f", {level} in flight" if len(levels) > 1 else "")
            out.append(ratio_line(rows, top, bottom, name, at) + f" ≥ {target}× |")
        if len(levels) > 1:
            peak = lambda rs: max(rs, key=lambda r: r["units_per_s"]) if rs else None
            out.append(ratio_line(rows, top, bottom, f"{top} ÷ {bottom}, each cell's peak", peak)
                       + f" ≥ {target}× |")
    return out


def probe_table(rows: list[dict], cells: list[str]) -> list[str]:
    """With --probe: per (cell, workload), the median round's Raft log writes
    and context switches per node, and the units each write carried."""
    if not any("node_log_writes" in r for r in rows):
        return []
    out = ["", "Probe (`--probe`: perf stat per node over the window; libraft writes each log "
           "append as one durable `io_submit`; each unit is written by its group's replication "
           "factor replicas, so units per log write = units × RF ÷ all nodes' writes):", "",
           "| cell | workload | log writes/s per node (mean; min–max) | units per log write | "
           "context switches per unit per node |",
           "|---|---|---:|---:|---:|"]
    for cell in cells:
        for label, _ in WORKLOADS:
            rs = [r for r in rows if r["cell"] == cell and r["label"] == label
                  and "node_log_writes" in r]
            if not rs:
                continue
            r = median_row(rs)
            window = r["window_s"]
            writes = [w / window for w in r["node_log_writes"]]
            units = r["units_per_s"] * window
            per_write = units * r["replication_factor"] / sum(r["node_log_writes"]) \
                if sum(r["node_log_writes"]) else 0
            switches = statistics.mean(r["node_cswitches"]) / units if units else 0
            out.append(f"| {cell} | {label} | {statistics.mean(writes):,.0f} "
                       f"({min(writes):,.0f}–{max(writes):,.0f}) | {per_write:,.1f} | "
                       f"{switches:.2f} |")
    return out


def cell_table(rows: list[dict], cells: list[str], node_cpu: float, load_cpu: float) -> list[str]:
    """One row per (cell, workload, level in flight): its median round."""
    out = ["", "| cell | load to | workload | in flight | units/s | unit | spread | p50 ms | p99 ms | "
           "CPU µs/unit per node (mean; min–max) | node CPU % of quota (mean; max) | "
           "load CPU % of quota | others | errors |",
           "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    levels = sorted({level_of(r) for r in rows})
    for cell, label, level in ((c, w, n) for c in cells for w, _ in WORKLOADS for n in levels):
        rs = [r for r in rows if r["cell"] == cell and r["label"] == label and level_of(r) == level]
        if not rs:
            continue
        r = median_row(rs)
        us = cpu_us_per_unit(r)
        share = [cpu / r["window_s"] / node_cpu * 100 for cpu in r["node_cpu_s"]]
        tput = [x["units_per_s"] for x in rs]
        spread = (max(tput) - min(tput)) / 2 / statistics.median(tput) * 100 if min(tput) > 0 else 0
        load = r["load_cpu_s"] / r["window_s"] / load_cpu * 100
        others = max(0.0, r.get("machine_busy_s", 0) - sum(r["node_cpu_s"]) - r["load_cpu_s"])
        others /= r["window_s"]
        state = " (FAILED)" if any(x["failed"] for x in rs) else ""
        out.append(
            f"| {cell}{state} | {LOAD_TO.get(r.get('route'), 'every node')} | {label} | "
            f"{level} | {r['units_per_s']:,.0f} | {r['unit']} | ±{spread:.0f}% | "
            f"{r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {statistics.mean(us):.1f} "
            f"({min(us):.1f}–{max(us):.1f}) | {statistics.mean(share):.0f}% ({max(share):.0f}%) | "
            f"{load:.0f}% | {others:.2f} | {sum(x['errors'] for x in rs)} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("results", "out", "node_cpu", "load_cpu", "seconds", "rounds", "outstanding",
                 "quick", "dedupd", "command"):
        p.add_argument(f"--{flag}", required=True)
    a = p.parse_args()
    rows = [json.loads(line) for line in open(a.results) if line.strip()]
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    node_cpu = float(a.node_cpu)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    out = [f"# dedup scale benchmark, {datetime.date.today().isoformat()}", ""]
    out.append(
        f"Command: `{a.command}` at {revision(root)}; {a.rounds} round(s) of {a.seconds} s measured "
        f"per cell, operations in flight in all: {a.outstanding}. Machine: {machine()}.")
    out.append("")
    out.append(
        f"Each dedupd node runs in its own cgroup v1 `cpu` group capped at {node_cpu:g} CPU "
        f"(`cpu.cfs_quota_us` {int(node_cpu * 100000)} per `cpu.cfs_period_us` 100000): an emulated "
        f"machine. The load generator (`dedup-bench`) runs in one more, capped at "
        f"{float(a.load_cpu):g} CPU. A cell `NxG` is N nodes founding G Raft groups (default "
        "replication factor). `load to`: `leader`, the one group's leader; `by slot`: one "
        "`dedup-bench` routing each call, and each group's slice of a batch, straight to its "
        "group's leader by the cluster's shard map, as a sharded client does; `every node`: one "
        "`dedup-bench` per node, each with its share of the operations in flight, the nodes "
        "forwarding each call of a group they do not lead to its leader. "
        "`pairs`: Begin + Complete on fresh keys through the `CoalescingClient` (one channel, two "
        "batches of each kind in flight), durable (`--durability=sync`); `keys`: BeginBatch of 100 "
        "fresh keys. `CPU µs/unit per node`: each node's utime+stime (`/proc/PID/stat`) over the "
        "measured window divided by the cell's units, mean and range over the nodes; `node CPU`: "
        "the same time as a share of the node's quota (100%: the emulated machine is saturated); "
        "`others`: the CPU (in cores) the machine spent on anything but these nodes and the load "
        "generator during the window: other tenants of a shared machine, which a quota does not "
        "keep from taking the cores the nodes were to get (a node far under its quota then).")
    if a.quick == "1":
        out += ["", "**Quick run** (a smoke check): figures too short to read."]
    out += cell_table(rows, cells, node_cpu, float(a.load_cpu))
    out += probe_table(rows, cells)
    out += ratio_table(rows, cells)
    text = "\n".join(out) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
