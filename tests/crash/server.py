"""The one dedupd process of a crash run (single-node mode), started,
SIGKILLed and restarted by PID on the same data directory and port.

It reuses tests/fault/cluster.py's Node for everything but starting: kill
(SIGKILL and reap), terminate (SIGTERM, exit code 0 expected),
exited_unexpectedly, log_tail and backtraces only need the attributes set
here. The first start binds port 0 and reads the port dedupd picked from its
"listening" line; every restart binds that port again, so the clients'
channels reconnect to the same address.

dedupd runs under `setpriv --pdeathsig KILL` (which execs prlimit, which
execs dedupd: the Popen PID is dedupd's), so it dies with the runner even
when the runner is SIGKILLed. Start it from the main thread (the death
signal follows the thread that forked).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Optional

from cluster import LISTENING, Node, NodeFailure

_LISTENING_RE = re.compile(rb"dedupd listening on (\S+) ")


class Server(Node):
    def __init__(self, run_dir: str, dedupd: str, extra_flags: list[str]) -> None:
        # Not Node.__init__: no namespace, no Cluster service channel.
        self.id = 1
        self.data_dir = os.path.join(run_dir, "data")
        self.log_path = os.path.join(run_dir, "dedupd.log")
        # Where a crash of dedupd itself leaves its core (core_pattern "core").
        self.cwd = os.path.join(run_dir, "cwd")
        self.dedupd = dedupd
        self.extra_flags = extra_flags
        self.address: Optional[str] = None  # fixed by the first start
        self.proc: Optional[subprocess.Popen] = None
        self.stopped = False
        self.last_exit: Optional[int] = None
        self.starts = 0

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts dedupd on its data directory and waits for its
        "listening" line; NodeFailure if it exits first (exit 4: the port
        was taken in between, 3: data dir unusable) or is not listening
        within timeout_s."""
        if self.running:
            raise NodeFailure("dedupd is already running")
        os.makedirs(self.cwd, exist_ok=True)
        address = self.address or "127.0.0.1:0"
        with open(self.log_path, "ab") as log:
            log.write(f"=== crash test: start #{self.starts + 1} at "
                      f"{time.time():.3f} ===\n".encode())
            offset = log.tell()
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "prlimit", "--core=unlimited",
                 self.dedupd, f"--address={address}", f"--data_dir={self.data_dir}",
                 "--event_log=off", "--metrics_address=", *self.extra_flags],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.cwd)
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                m = _LISTENING_RE.search(f.read())
            if m:
                self.address = self.address or m.group(1).decode()
                return
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise NodeFailure(f"dedupd exited with {code} at start #{self.starts}")
            time.sleep(0.01)
        raise NodeFailure(f"dedupd did not listen within {timeout_s} s "
                          f"(no {LISTENING!r} line)")

    def close(self) -> None:
        pass  # no channel of its own
