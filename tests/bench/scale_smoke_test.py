"""bench/scale --quick on the (3 nodes, 1 group) cell: the report has a row
per workload with throughput, latency and every node's CPU above zero and no
error, and the cgroups the run made are gone afterwards. No speed assertion.

Usage: scale_smoke_test.py BUILD_DIR OUT_FILE. Exit 77 (skipped) without
root or the cgroup v1 cpu controller, which bench/scale needs.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CGROUP_CPU = "/sys/fs/cgroup/cpu"
COLUMNS = ["cell", "load to", "workload", "in flight", "units/s", "unit", "spread", "p50 ms", "p99 ms",
           "CPU µs/unit per node (mean; min–max)", "node CPU % of quota (mean; max)",
           "load CPU % of quota", "others", "errors"]


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("%"))


def main() -> int:
    build_dir, out = sys.argv[1], Path(sys.argv[2])
    if os.geteuid() != 0 or not os.path.exists(f"{CGROUP_CPU}/cpu.cfs_quota_us"):
        print("skipped: bench/scale needs root and the cgroup v1 cpu controller")
        return 77
    out.unlink(missing_ok=True)
    run = subprocess.Popen(
        [str(REPO / "bench/scale"), "--quick", "--cells=3x1", "--skip_build",
         f"--build_dir={build_dir}", f"--out={out}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = run.communicate(timeout=240)
    print(output)
    problems = []
    if run.returncode != 0:
        problems.append(f"bench/scale exited {run.returncode}")
    left = glob.glob(f"{CGROUP_CPU}/dedup-scale-{run.pid}-*")
    if left:
        problems.append(f"cgroups left behind: {left}")
    if not out.exists():
        problems.append(f"no report at {out}")
        return report(problems)

    lines = out.read_text().splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("| cell |")]
    if len(header) != 1:
        return report(problems + [f"want one table header, found {len(header)}"])
    names = [c.strip() for c in lines[header[0]].strip("|").split("|")]
    if names != COLUMNS:
        problems.append(f"columns {names}, want {COLUMNS}")
    rows = {}
    for line in lines[header[0] + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(COLUMNS, (c.strip() for c in line.strip("|").split("|"))))
        rows[(cells["cell"], cells["workload"])] = cells
    want_units = {"pairs": "pairs", "keys": "keys"}
    if sorted(rows) != [("3x1", "keys"), ("3x1", "pairs")]:
        problems.append(f"rows {sorted(rows)}, want 3x1 pairs and keys")
    for (cell, workload), r in sorted(rows.items()):
        where = f"{cell} {workload}"
        if r["load to"] != "leader":
            problems.append(f"{where}: load to {r['load to']}, want the leader (one group)")
        if r["in flight"] != "64":
            problems.append(f"{where}: in flight {r['in flight']}, want the default 64")
        if r["unit"] != want_units.get(workload):
            problems.append(f"{where}: unit {r['unit']}")
        for column in ("units/s", "p50 ms", "p99 ms", "load CPU % of quota"):
            if not number(r[column]) > 0:
                problems.append(f"{where}: {column} is {r[column]}")
        # "mean (min–max)" over the nodes: every node used CPU.
        for column in ("CPU µs/unit per node (mean; min–max)", "node CPU % of quota (mean; max)"):
            figures = [float(x) for x in re.findall(r"[0-9.]+", r[column])]
            if len(figures) < 2 or not all(f > 0 for f in figures):
                problems.append(f"{where}: {column} is {r[column]}")
        if r["errors"] != "0":
            problems.append(f"{where}: {r['errors']} errors")
    return report(problems)


def report(problems: list[str]) -> int:
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
