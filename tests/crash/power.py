"""Power cuts for the crash test's --power-loss mode (tests/powerfs).

dedupd's data dir lives inside a powerfs mount (RUN/mnt, backed by
RUN/backing); its ready file, log and working directory stay outside, so a
power cut takes only what a real machine would lose: every write to the
data dir that was not made durable. One cut, two ways, picked at random:

- "running": powerfs powers off while dedupd goes on. dedupd meets EIO (then
  ENOTCONN once the mount is detached) on every file operation and must not
  acknowledge a write it could not sync. It keeps serving for a random
  moment (the clients see what it answers), then is SIGKILLed.
- "stopped": dedupd is SIGSTOPped, the power goes off, dedupd is SIGKILLed:
  the machine died between two instructions.

Then powerfs mounts what survived and dedupd restarts on it. Each cut's
powerfs report (bytes_lost, names_restored, names_removed, files, and the
paths it hit) goes into the cycle's record.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from typing import Callable

# tests/, for the powerfs driver (tests/powerfs/powerfs.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from powerfs.powerfs import PowerFs, PowerFsError, available  # noqa: E402,F401

MODES = ("running", "stopped")
# How long dedupd serves on after the power went off in "running" mode.
LINGER_S = (0.0, 0.5)
# Paths of a cut kept in the cycle record (the full report goes to
# RUN/powerfs_reports.jsonl).
PATHS_KEPT = 8


class PowerCuts:
    """The powerfs mount of a run and the cuts made to it. Start and cut
    from the main thread (powerfs is tied to the thread that forked it)."""

    def __init__(self, binary: str, run_dir: str, lying_sync: bool) -> None:
        self.run_dir = run_dir
        self.fs = PowerFs(binary, backing=os.path.join(run_dir, "backing"),
                          mount=os.path.join(run_dir, "mnt"),
                          log_path=os.path.join(run_dir, "powerfs.log"),
                          lying_sync=lying_sync)
        self.data_dir = os.path.join(self.fs.mount, "data")
        self.reports_path = os.path.join(run_dir, "powerfs_reports.jsonl")

    def power_on(self) -> None:
        """Mounts what the backing directory holds. The data dir is made
        (history.process, at each start) without syncing its name: dedupd
        must make it durable itself, or the first cut takes the whole
        directory with it (with --lying_sync it does, at every cut)."""
        self.fs.start()

    def cut(self, server, rng: random.Random, now: Callable[[], float]) -> dict:
        """Cuts the power under `server` (a running DedupdProcess), SIGKILLs
        it and returns the record of the cut: mode, t_cut (history time of
        the power-off command), t_off (when powerfs had powered off: the
        cut came in between), t_kill, linger_s, exited_during_cut (dedupd's exit
        code if it ended on its own before the SIGKILL), and powerfs's
        counts. The mount is left detached: power_on() before a restart."""
        mode = rng.choice(MODES)
        linger = 0.0
        if mode == "stopped":
            server.signal(signal.SIGSTOP)
            t_cut = now()
            report = self.fs.power_off()
            t_off = now()
        else:
            linger = rng.uniform(*LINGER_S)
            t_cut = now()
            report = self.fs.power_off()
            t_off = now()
            time.sleep(linger)
        exited = server.exited_unexpectedly()
        t_kill = now()
        server.kill()
        with open(self.reports_path, "a") as f:
            f.write(json.dumps({"t_cut": t_cut, **report}, sort_keys=True) + "\n")
        paths = report.get("paths", {})
        return {"mode": mode, "t_cut": round(t_cut, 4), "t_off": round(t_off, 4),
                "t_kill": round(t_kill, 4),
                "linger_s": round(linger, 3), "exited_during_cut": exited,
                "files": report.get("files", 0),
                "bytes_lost": report.get("bytes_lost", 0),
                "names_restored": report.get("names_restored", 0),
                "names_removed": report.get("names_removed", 0),
                "paths": {k: v[:PATHS_KEPT] for k, v in paths.items() if v}}

    def off(self) -> None:
        """A clean unmount if powerfs runs, else only the detach."""
        try:
            self.fs.stop()
        except PowerFsError:
            self.fs.kill()


def file_kind(path: str) -> str:
    """What a data dir file is, by RocksDB's and dedupd's names."""
    name = os.path.basename(path)
    if name.endswith(".log"):
        return "wal"
    if name.startswith("MANIFEST-"):
        return "manifest"
    if name.endswith(".sst"):
        return "table"
    if name == "DEDUP-DURABLE":
        return "marker"
    return "other"


def kinds_hit(cut: dict) -> dict:
    """{"data": kinds whose unsynced data the cut undid, "names": kinds of
    names it restored or removed} (from the paths powerfs reported)."""
    paths = cut.get("paths", {})
    return {"data": sorted({file_kind(p) for p in paths.get("data", [])}),
            "names": sorted({file_kind(p) for k in ("restored", "removed")
                             for p in paths.get(k, [])})}


def cut_figures(cuts: list[dict]) -> dict:
    """What the run's cuts discarded, for the summary. A cut that lost no
    bytes tested nothing: `lossy_cuts` counts those that did."""
    lost = [c["bytes_lost"] for c in cuts]
    return {"cuts": len(cuts),
            "lossy_cuts": sum(1 for b in lost if b > 0),
            "by_mode": {m: sum(1 for c in cuts if c["mode"] == m) for m in MODES},
            "bytes_lost_total": sum(lost),
            "bytes_lost_min": min(lost, default=0),
            "bytes_lost_median": sorted(lost)[len(lost) // 2] if lost else 0,
            "bytes_lost_max": max(lost, default=0),
            "power_off_ms_max": round(max((c["t_off"] - c["t_cut"] for c in cuts),
                                          default=0) * 1000, 1),
            "names_restored_total": sum(c["names_restored"] for c in cuts),
            "names_removed_total": sum(c["names_removed"] for c in cuts),
            "exited_during_cut": sum(1 for c in cuts
                                     if c["exited_during_cut"] is not None),
            # Cuts that undid unsynced data of each kind of file (wal,
            # manifest, table, marker, other), and that restored or removed
            # names of each kind.
            "cuts_losing_data_of": _count_kinds(cuts, "data"),
            "cuts_undoing_names_of": _count_kinds(cuts, "names")}


def _count_kinds(cuts: list[dict], which: str) -> dict:
    counts: dict[str, int] = {}
    for c in cuts:
        for kind in kinds_hit(c)[which]:
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))
