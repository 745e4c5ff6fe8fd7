"""Power-loss faults of the fault test (fault_test.py --power-loss).

Each node's data dir <run dir>/nN (RocksDB in state/, libraft's segments,
metadata and snapshots in raft/) is a powerfs mount (tests/powerfs) of
<run dir>/nN.backing, mounted before the node starts (cluster.py). A power
cut (PowerFs.power_off) puts the backing directory back to what the node
had made durable and refuses its I/O; the node is then SIGKILLed (its
power is off: whatever it does after the cut never reaches the disk) and,
after a hold, its file system is mounted again and it restarts on what
survived.

Kinds (driver.py runs one at a time, after the group settled):
  power_one       one node, leader or follower at random, loses power:
                  either cut then SIGKILL, or SIGSTOP, cut, SIGKILL (at
                  random); held 1-3 s, remounted, restarted
  power_all       the whole group: SIGSTOP all three (so none answers after
                  the cut), cut all three at once, SIGKILL, hold 1-3 s,
                  remount and restart all: only what each node synced counts
  power_snapshot  a follower loses power and stays down while the leader
                  writes past --snapshot_threshold + --snapshot_trailing
                  entries (so it compacts the follower's entries away); on
                  restart the leader sends it InstallSnapshot, and it loses
                  power again during the install: 0-1.5 s after its restart
                  (a quarter of the time), or 0-50 ms after its log says it
                  started fetching
  power_truncate  the leader is isolated (both ways) while the clients keep
                  calling it, so it appends entries nobody commits, until
                  the others elected a leader and 0.3-1 s more (short
                  enough that the new leader still holds the entries the
                  deposed one must replace); on healing it learns the new
                  leader and truncates that suffix: it loses power 0-0.3 s
                  after the heal (a quarter of the time), or is frozen the
                  moment its segment files show a chosen stage of the
                  truncation (segment closed, truncated copy being written,
                  copy in place beside the original)

A cut hits what powerfs reports in `paths` (data lost, names restored,
names removed); classify() tells which of those cuts met a snapshot
install (state.incoming, state.old: the fetched checkpoint and the
directory swap), a snapshot being stored (raft/snapshot-*) or a log
truncation (segments holding the deposed leader's uncommitted entries, or
the truncated copy). The summary counts them: the run says when a kind
never hit what it is there for.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import threading
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
POWER_KINDS = ["power_one", "power_all", "power_snapshot", "power_truncate"]

_SEGMENT = re.compile(r"^raft/(\d+)-(\d+)$")
# A snapshot install fetches a checkpoint into state.incoming, then swaps:
# state -> state.old, state.incoming -> state, fsync of the data dir
# (storage/state_dir_swap.h); state.old is deleted later.
_INCOMING = re.compile(r"^state\.incoming(/|$)")
_OLD = re.compile(r"^state\.old(/|$)")
# The node's whole Raft log and whole database.
_TOP_DIRS = ("raft", "state")
_SNAPSHOT_FILE = re.compile(r"^raft/snapshot-")
# What a node's log says while it installs a snapshot
# (replication/snapshot_prefetch.cc, snapshot_transfer.cc).
_FETCHING = b": fetching the state from "
_INSTALLED = b"installed a snapshot"


def load_powerfs():
    """tests/powerfs/powerfs.py as a module (not a package on sys.path)."""
    path = os.path.join(os.path.dirname(HERE), "powerfs", "powerfs.py")
    spec = importlib.util.spec_from_file_location("powerfs_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def node_flags(threshold: int, trailing: int) -> list[str]:
    """dedupd flags for power mode: frequent snapshots and short trailing
    logs, so that cuts meet snapshots taken, stored and installed."""
    return [f"--snapshot_threshold={threshold}",
            f"--snapshot_trailing={trailing}"]


def remove_stale_mounts() -> list[str]:
    """Detaches the powerfs mounts of dead runs (their daemon died with the
    runner, leaving a mount that answers ENOTCONN). Returns them."""
    removed = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return removed
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ")
        fstype = line.split(" - ", 1)[1].split()[0]
        if not fstype.startswith("fuse") or \
                not re.search(r"/dedup-fault-[^/]+/n\d+$", mount):
            continue
        try:
            os.stat(mount)
            continue  # alive: another run's
        except OSError:
            pass
        subprocess.run(["umount", "-l", mount], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        removed.append(mount)
    return removed


def report_paths(report: dict) -> list[tuple[str, str]]:
    """(list name, path) for every path a cut's report names."""
    paths = report.get("paths", {}) or {}
    return [(which, p.lstrip("/")) for which in ("data", "restored", "removed")
            for p in paths.get(which, []) or []]


def classify(report: dict, suffix: Optional[tuple[int, int]] = None,
             before: Optional[set[str]] = None) -> dict:
    """What a cut hit, as counts of paths:
    install         the fetched checkpoint (state.incoming/...) lost data or
                    names, or the swap was undone (state.old removed)
    install_cleanup the removal of state.old after an install was undone
    snapshot_files  a libraft snapshot (raft/snapshot-*) not yet durable
    segments        Raft log segments (raft/N-M, raft/open-N)
    truncation      with suffix=(C, L), the deposed leader's commit and last
                    index, and `before`, its segment files at the heal: a
                    closed segment overlapping C+1..L, or an open segment of
                    `before`, restored or removed (the truncation of that
                    suffix, the barrier closing the segments before it, or
                    the rewrite after it, was not durable yet)
    lost_dirs       raft or state themselves removed: the node's whole Raft
                    log or database was never made durable (a finding)"""
    out = {"install": 0, "install_cleanup": 0, "snapshot_files": 0,
           "segments": 0, "truncation": 0, "lost_dirs": 0}
    for which, p in report_paths(report):
        if _INCOMING.match(p) or (_OLD.match(p) and which == "removed"):
            out["install"] += 1
        if _OLD.match(p) and which == "restored":
            out["install_cleanup"] += 1
        if _SNAPSHOT_FILE.match(p):
            out["snapshot_files"] += 1
        seg = _SEGMENT.match(p)
        if seg or p.startswith("raft/open-"):
            out["segments"] += 1
        if suffix is not None and which in ("restored", "removed"):
            if seg:
                first, last = int(seg.group(1)), int(seg.group(2))
                if first <= suffix[1] and last > suffix[0]:
                    out["truncation"] += 1
            elif before and p.startswith("raft/open-") and p[5:] in before:
                out["truncation"] += 1
        if suffix is not None and p.startswith("raft/tmp-"):
            out["truncation"] += 1  # the truncated copy, not yet in place
        if which == "removed" and p in _TOP_DIRS:
            out["lost_dirs"] += 1
    return out


class PowerFinding(RuntimeError):
    """A power cut showed a product durability bug (the run stops there,
    the backing directories as the cut left them)."""


def _segment_names(names) -> set[str]:
    return {f for f in names if f.startswith("open-") or _SEGMENT.match("raft/" + f)}


def _segments(raft_dir: str) -> set[str]:
    """The Raft log's segment files (read through the mount)."""
    try:
        return _segment_names(os.listdir(raft_dir))
    except OSError:
        return set()


def _rewritten(names: set[str], before: set[str]) -> bool:
    """Two closed segments from the same first index: the truncated copy
    renamed into place, the original not yet unlinked."""
    firsts = [m.group(1) for m in (_SEGMENT.match("raft/" + n) for n in names) if m]
    return len(firsts) != len(set(firsts))


# Stages of a truncation on disk, as predicates over (names now, before).
_TRUNCATION_STAGES = {
    "changed": lambda names, before: _segment_names(names) != before,
    "tmp": lambda names, before: any(n.startswith("tmp-") for n in names),
    "rewritten": _rewritten,
}


def _cores(cwd: str) -> set[str]:
    try:
        return {f for f in os.listdir(cwd) if f.startswith("core")}
    except OSError:
        return set()


class PowerFaults:
    """Runs the power kinds for driver.Driver (same cluster, rng, log)."""

    def __init__(self, driver, threshold: int, trailing: int,
                 check_dirs: bool = True) -> None:
        """check_dirs: a cut that removes raft/ or state/ is a finding (off
        with a lying disk, which loses them by design)."""
        self.d = driver
        self.threshold = threshold
        self.trailing = trailing
        self.check_dirs = check_dirs
        self.lost_dirs = 0  # cuts that removed raft/ or state/
        self.pending_finding: Optional[str] = None

    # --- primitives ------------------------------------------------------

    def _cut(self, node, stop_first: bool) -> dict:
        """Cuts node's power (SIGSTOP first if asked), SIGKILLs it; returns
        the record: powerfs's report, how the process ended."""
        before = _cores(node.cwd)
        if stop_first:
            node.signal(signal.SIGSTOP)
        report = node.power.power_off()
        node.kill()
        return self._after_cut(node, report, stop_first, before)

    def _after_cut(self, node, report: dict, stop_first: bool,
                   cores_before: set[str]) -> dict:
        # A node that met EIO may exit (6) or abort on its own before the
        # SIGKILL: that is after its power went off, so it never counts,
        # and the core it left is no finding (removed, but counted).
        new_cores = _cores(node.cwd) - cores_before
        for c in new_cores:
            try:
                os.remove(os.path.join(node.cwd, c))
            except OSError:
                pass
        cut = {"node": node.id, "stop_first": stop_first,
               "exit": node.last_exit, "cores_removed": len(new_cores),
               "report": report}
        lost = [p for which, p in report_paths(report)
                if which == "removed" and p in _TOP_DIRS]
        if lost:
            cut["lost_dirs"] = lost
            self.lost_dirs += 1
            if self.check_dirs and self.pending_finding is None:
                self.pending_finding = (
                    f"node {node.id}'s power cut removed {', '.join(lost)} from its "
                    f"data dir ({node.data_dir}): their names were never made durable "
                    f"(an fsync of the data dir), so the node lost its whole Raft log "
                    f"(term, vote, entries) and/or database; backing kept as the cut "
                    f"left it: {node.power.backing}")
        return cut

    def _restart(self, node, fault: dict) -> None:
        self._check(fault)
        node.power.start()
        node.start()

    def _log_offset(self, node) -> int:
        try:
            return os.path.getsize(node.log_path)
        except OSError:
            return 0

    def _log_since(self, node, offset: int) -> bytes:
        try:
            with open(node.log_path, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    # --- kinds -----------------------------------------------------------

    def run(self, kind: str, fault: dict, leader: int, followers: list[int]) -> None:
        """Injects `kind`; fills fault (node, t_inject, held_s, cuts...).
        PowerFinding if a cut lost a node's raft/ or state/ (before the node
        restarts: its backing stays as the cut left it)."""
        getattr(self, kind)(fault, leader, followers)

    def _check(self, fault: dict) -> None:
        if self.pending_finding is not None:
            self.d.faults.append(fault)  # in the summary's fault log
            raise PowerFinding(self.pending_finding)

    def power_one(self, fault: dict, leader: int, followers: list[int]) -> None:
        nodes = self.d.cluster.nodes
        target = self.d.rng.choice(list(nodes))
        fault["node"] = target
        cut = self._cut(nodes[target], self.d.rng.random() < 0.5)
        fault["t_inject"] = self.d.history.now()
        fault["cuts"] = [cut]
        fault["held_s"] = self.d._hold(1.0, 3.0, fault if target == leader else None)
        self._restart(nodes[target], fault)

    def power_all(self, fault: dict, leader: int, followers: list[int]) -> None:
        nodes = list(self.d.cluster.nodes.values())
        fault["node"] = 0  # all
        cores = {n.id: _cores(n.cwd) for n in nodes}
        for n in nodes:  # none may answer after the first cut
            n.signal(signal.SIGSTOP)
        reports: dict[int, dict] = {}
        errors: list[BaseException] = []

        def off(n) -> None:
            try:
                reports[n.id] = n.power.power_off()
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        # All three SIGUSR1s within a millisecond or so; each waits for
        # its own report.
        threads = [threading.Thread(target=off, args=(n,)) for n in nodes]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fault["cut_spread_s"] = round(time.monotonic() - t0, 3)
        for n in nodes:
            n.kill()
        if errors:
            raise errors[0]
        fault["t_inject"] = self.d.history.now()
        fault["cuts"] = [self._after_cut(n, reports[n.id], True, cores[n.id])
                         for n in nodes]
        fault["held_s"] = self.d._hold(1.0, 3.0)
        self._check(fault)
        for n in nodes:
            n.power.start()
        for n in nodes:
            n.start()

    def power_snapshot(self, fault: dict, leader: int, followers: list[int]) -> None:
        nodes = self.d.cluster.nodes
        target = self.d.rng.choice(followers)
        node = nodes[target]
        fault["node"] = target
        st = node.status()
        behind_from = st.last_index if st is not None else 0
        cut = self._cut(node, self.d.rng.random() < 0.5)
        fault["t_inject"] = self.d.history.now()
        fault["cuts"] = [cut]
        # Down until the leader has written past what it keeps for it.
        need = behind_from + self.threshold + self.trailing + 32
        t0 = time.monotonic()
        lead_index = 0
        while time.monotonic() - t0 < 20.0:
            lst = nodes[leader].status()
            lead_index = lst.last_index if lst is not None else lead_index
            if lead_index >= need and time.monotonic() - t0 >= 1.0:
                break
            time.sleep(0.05)
        fault["behind"] = {"follower_last": behind_from, "leader_last": lead_index,
                           "compacted_past": lead_index >= need}
        fault["held_s"] = time.monotonic() - t0
        offset = self._log_offset(node)
        self._restart(node, fault)
        t_up = time.monotonic()
        if self.d.rng.random() < 0.25:  # the fetch may be over: rarely hits
            mode = "delay"
            time.sleep(self.d.rng.uniform(0.0, 1.5))
        else:
            mode = "watch"  # the fetch has started: cut within 50 ms
            while time.monotonic() - t_up < 5.0 and \
                    _FETCHING not in self._log_since(node, offset):
                time.sleep(0.005)
            time.sleep(self.d.rng.uniform(0.0, 0.05))
        fault["second_cut_after_s"] = round(time.monotonic() - t_up, 3)
        fault["mode"] = mode
        second = self._cut(node, self.d.rng.random() < 0.5)
        logged = self._log_since(node, offset)
        second["install_started"] = _FETCHING in logged
        second["install_logged_done"] = _INSTALLED in logged
        fault["cuts"].append(second)
        self.d._hold(0.5, 1.5)
        self._restart(node, fault)

    def power_truncate(self, fault: dict, leader: int, followers: list[int]) -> None:
        node = self.d.cluster.nodes[leader]
        topology = self.d.topology
        fault["node"] = leader
        topology.partition(leader, inbound=True, outbound=True)
        fault["t_inject"] = self.d.history.now()
        # Isolated until the others elected a leader, then 0.3-1 s more:
        # the new leader must still hold the entries after the deposed
        # one's commit index (--snapshot_trailing), or the deposed leader
        # gets a snapshot instead of a truncation.
        t0 = time.monotonic()
        self.d._watch_election(fault, t0 + 5.0)
        time.sleep(self.d.rng.uniform(0.3, 1.0) * self.d.hold_scale)
        fault["held_s"] = time.monotonic() - t0
        st = node.status()
        suffix = None
        if st is not None:
            suffix = (st.commit_index, st.last_index)
            fault["suffix"] = {"commit": st.commit_index, "last": st.last_index,
                               "last_term": st.last_log_term,
                               "entries": st.last_index - st.commit_index}
            new = self.d.cluster.leader()
            lst = self.d.cluster.nodes[new].status() if new not in (None, leader) else None
            if lst is not None:
                fault["suffix"]["new_leader_ahead"] = lst.last_index - st.commit_index
        offset = self._log_offset(node)
        raft_dir = os.path.join(node.data_dir, "raft")
        before = _segments(raft_dir)
        topology.heal(leader)
        t_heal = time.monotonic()
        if self.d.rng.random() < 0.25 or st is None:  # rarely hits
            mode = "delay"
            time.sleep(self.d.rng.uniform(0.0, 0.3))
        else:
            # A stage of the truncation, seen in its segment files (libraft:
            # close the open segment (rename open-N to A-B), copy the kept
            # entries to tmp-A-C, rename it to A-C, unlink A-B, each with a
            # directory fsync): freeze the node the moment it is reached.
            # A deposed leader appends nothing before. No sleep: the whole
            # truncation is a few ms of FUSE calls.
            mode = "watch:" + self.d.rng.choice(["changed", "tmp", "tmp", "rewritten"])
            reached = _TRUNCATION_STAGES[mode[6:]]
            while time.monotonic() - t_heal < 3.0:
                try:
                    names = set(os.listdir(raft_dir))
                except OSError:
                    continue
                if reached(names, before):
                    fault["stage_seen"] = True
                    break
        fault["mode"] = mode
        fault["cut_after_heal_s"] = round(time.monotonic() - t_heal, 3)
        # Watching, freeze it at once (SIGSTOP lands sooner than the cut).
        cut = self._cut(node, mode != "delay" or self.d.rng.random() < 0.5)
        cut["suffix"] = suffix
        cut["segments_before"] = sorted(before)
        # What survived (the backing dir is the durable state now).
        cut["segments_after"] = sorted(_segments(os.path.join(node.power.backing, "raft")))
        # Too far behind, it was sent a snapshot instead.
        fault["snapshot_instead"] = _FETCHING in self._log_since(node, offset)
        fault["cuts"] = [cut]
        self.d._hold(0.5, 1.5)
        self._restart(node, fault)


HIT_NAMES = ["install", "install_cleanup", "snapshot_files", "segments",
             "truncation", "lost_dirs"]


def cut_hits(fault: dict) -> dict:
    """classify() over the fault's cuts, summed."""
    total = dict.fromkeys(HIT_NAMES, 0)
    for cut in fault.get("cuts", []):
        suffix = cut.get("suffix")
        c = classify(cut["report"], tuple(suffix) if suffix else None,
                     set(cut.get("segments_before", [])))
        for k, v in c.items():
            total[k] += v
    return total


def summarize(faults: list[dict]) -> dict:
    """Counts for the summary: power losses, and per kind how many faults
    had a cut that hit each thing classify() tells."""
    out: dict = {"single_node_losses": 0, "whole_group_losses": 0,
                 "self_exits_after_cut": 0, "cores_removed": 0,
                 "bytes_lost": 0, "kinds": {}}
    for f in faults:
        if f["kind"] not in POWER_KINDS:
            continue
        k = out["kinds"].setdefault(f["kind"], {
            "faults": 0, "lost_nothing": 0,
            **{"hit_" + name: 0 for name in HIT_NAMES}})
        k["faults"] += 1
        if f["kind"] == "power_all":
            out["whole_group_losses"] += 1
        else:
            out["single_node_losses"] += len(f.get("cuts", []))
        hits = cut_hits(f)
        f["hits"] = hits
        for name, v in hits.items():
            if v:
                k["hit_" + name] += 1
        lost = 0
        for cut in f.get("cuts", []):
            r = cut["report"]
            lost += r.get("bytes_lost", 0) + r.get("names_restored", 0) + \
                r.get("names_removed", 0)
            out["bytes_lost"] += r.get("bytes_lost", 0)
            if cut.get("exit") not in (None, -signal.SIGKILL):
                out["self_exits_after_cut"] += 1
            out["cores_removed"] += cut.get("cores_removed", 0)
        if lost == 0:
            k["lost_nothing"] += 1
        if f["kind"] == "power_snapshot":
            k.setdefault("compacted_past", 0)
            k.setdefault("install_started_before_cut", 0)
            k.setdefault("install_unfinished_at_cut", 0)
            if f.get("behind", {}).get("compacted_past"):
                k["compacted_past"] += 1
            second = f["cuts"][-1] if len(f.get("cuts", [])) > 1 else {}
            if second.get("install_started"):
                k["install_started_before_cut"] += 1
                if not second.get("install_logged_done"):
                    k["install_unfinished_at_cut"] += 1
        if f["kind"] == "power_truncate":
            k.setdefault("had_suffix", 0)
            k.setdefault("stage_seen", 0)
            k.setdefault("snapshot_instead", 0)
            if f.get("snapshot_instead"):
                k["snapshot_instead"] += 1
            if f.get("suffix", {}).get("entries", 0) > 0:
                k["had_suffix"] += 1
            if f.get("stage_seen"):
                k["stage_seen"] += 1
    return out


def coverage_lines(summary: dict) -> list[str]:
    """Human lines for the run's end, saying what was not covered."""
    lines = [f"power losses: {summary['single_node_losses']} single-node, "
             f"{summary['whole_group_losses']} whole-group; "
             f"{summary['bytes_lost']} unsynced bytes dropped; "
             f"{summary['self_exits_after_cut']} nodes exited on their own "
             f"between the cut and the SIGKILL"]
    for kind, k in sorted(summary["kinds"].items()):
        extra = ""
        if kind == "power_snapshot":
            extra = (f", follower compacted past {k['compacted_past']}, "
                     f"install started before the cut {k['install_started_before_cut']} "
                     f"(unfinished {k['install_unfinished_at_cut']})")
        if kind == "power_truncate":
            extra = (f", uncommitted suffix at heal {k['had_suffix']}, "
                     f"cut at a truncation stage seen in its files {k['stage_seen']}, "
                     f"sent a snapshot instead {k['snapshot_instead']}")
        lines.append(f"  {kind:<15} n={k['faults']:<3} cut hit: install "
                     f"{k['hit_install']} (cleanup {k['hit_install_cleanup']}), "
                     f"snapshot files {k['hit_snapshot_files']}, "
                     f"segments {k['hit_segments']}, truncation {k['hit_truncation']}, "
                     f"raft/ or state/ lost {k['hit_lost_dirs']}; "
                     f"lost nothing {k['lost_nothing']}{extra}")
    snap = summary["kinds"].get("power_snapshot")
    if snap is not None and snap["hit_install"] == 0:
        lines.append("  NOT COVERED: no cut hit a snapshot install "
                     "(state.incoming / state.old)")
    trunc = summary["kinds"].get("power_truncate")
    if trunc is not None and trunc["hit_truncation"] == 0:
        lines.append("  NOT COVERED: no cut hit a log truncation")
    return lines
