"""One dedupd process of a crash or fault run, started, signalled and
restarted by PID, its output appended to one log across restarts.

Every start runs dedupd under `setpriv --pdeathsig KILL` and `prlimit
--core=unlimited` (each execs the next, and so does a command prefix such as
`ip netns exec NS`: the Popen PID is dedupd's), so it dies with the runner
even when the runner is SIGKILLed, and a crash leaves a core in its working
directory. Start processes from the main thread (the death signal follows
the thread that forked).

dedupd tells that it serves, and where, by its ready file (--ready_file:
JSON written atomically once serving, server/ready_file.h). Each start
deletes the file first and waits for one holding the new PID, so a restart
on the same paths never mistakes the previous process's file for its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Optional

from history.ready import NotReady, wait_ready


class NodeFailure(Exception):
    """A process did not start, or exited when it should not have."""


class DedupdProcess:
    """A dedupd started by start() with command() + --ready_file.

    name: how messages call it ("dedupd", "node 2"). Paths: data_dir (made
    at start), log_path (appended to), ready_path, cwd (where a core goes)."""

    def __init__(self, name: str, dedupd: str, data_dir: str, log_path: str,
                 ready_path: str, cwd: str, extra_flags: list[str]) -> None:
        self.name = name
        self.dedupd = dedupd
        self.data_dir = data_dir
        self.log_path = log_path
        self.ready_path = ready_path
        self.cwd = cwd
        self.extra_flags = extra_flags
        self.proc: Optional[subprocess.Popen] = None
        self.ready: Optional[dict] = None  # the current process's ready file
        self.stopped = False  # SIGSTOPped
        self.last_exit: Optional[int] = None  # of the last kill or terminate
        self.starts = 0

    def command(self) -> list[str]:
        """dedupd's argv (with any prefix such as `ip netns exec`), without
        --ready_file, which start() adds last."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout_s: float = 30.0) -> dict:
        """Starts dedupd and waits for its ready file; returns its contents.
        NodeFailure if it exits first (e.g. 4: a port taken, 3: data dir
        unusable) or writes none within timeout_s."""
        if self.running:
            raise NodeFailure(f"{self.name} is already running")
        os.makedirs(self.data_dir, exist_ok=True)
        os.makedirs(self.cwd, exist_ok=True)
        try:
            os.remove(self.ready_path)  # a SIGKILLed process leaves its file
        except FileNotFoundError:
            pass
        self.ready = None
        with open(self.log_path, "ab") as log:
            log.write(f"=== {self.name}: start #{self.starts + 1} at "
                      f"{time.time():.3f} ===\n".encode())
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "prlimit", "--core=unlimited",
                 *self.command(), f"--ready_file={self.ready_path}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.cwd)
        self.starts += 1
        self.stopped = False
        try:
            self.ready = wait_ready(self.ready_path, self.proc, timeout_s, self.name)
        except NotReady as e:
            if e.exit_code is not None:
                self.proc = None
                raise NodeFailure(f"{self.name} exited with {e.exit_code} at "
                                  f"start #{self.starts}") from e
            raise NodeFailure(str(e)) from e
        return self.ready

    def signal(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.last_exit = self.proc.wait(timeout=30)
        self.proc = None
        self.stopped = False

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (a clean stop: a leader hands leadership over first),
        waits for the exit and returns the exit code (NodeFailure unless 0);
        SIGKILL after timeout_s."""
        if self.proc is None:
            return 0
        if self.stopped:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.last_exit = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise NodeFailure(f"{self.name} ignored SIGTERM for {timeout_s} s")
        self.proc = None
        if self.last_exit != 0:
            raise NodeFailure(f"{self.name} exited with {self.last_exit} "
                              f"after SIGTERM (a clean stop exits 0)")
        return self.last_exit

    def exited_unexpectedly(self) -> Optional[int]:
        """The exit code if the process is gone although nobody stopped it
        (kill and terminate forget the process they stopped)."""
        if self.proc is None:
            return None
        return self.proc.poll()

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-lines:])

    def backtraces(self) -> str:
        """gdb's backtrace of every core this process left, if gdb is here
        (the full `thread apply all bt` goes to <core>.bt)."""
        out = []
        try:
            cores = sorted(f for f in os.listdir(self.cwd) if f.startswith("core"))
        except OSError:
            return ""
        gdb = shutil.which("gdb")
        for core in (c for c in cores if not c.endswith(".bt")):
            path = os.path.join(self.cwd, core)
            if gdb is None:
                out.append(f"core file {path} (no gdb to read it)")
                continue
            full = subprocess.run(
                [gdb, "-batch", "-ex", "bt", "-ex", "thread apply all bt",
                 self.dedupd, path], capture_output=True, text=True, timeout=300)
            with open(path + ".bt", "w") as f:
                f.write(full.stdout + full.stderr)
            crash = full.stdout.split("\nThread ")[0]
            lines: list[str] = []
            for line in crash.splitlines():
                if (line.startswith("#") or "signal" in line) and line not in lines:
                    lines.append(line)
            out.append(f"core {path} (all threads: {path}.bt):\n" + "\n".join(lines[:40]))
        return "\n".join(out)

    def close(self) -> None:
        """Releases what a subclass holds (channels); the process is not touched."""
