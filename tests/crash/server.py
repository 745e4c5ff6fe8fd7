"""The one dedupd process of a crash run (single-node mode), started,
SIGKILLed and restarted by PID on the same data directory and port
(history.process: setpriv, prlimit, the ready file, kill, terminate, logs
and backtraces).

The first start binds port 0 and reads the port dedupd picked from its
ready file; every restart binds that port again, so the clients' channels
reconnect to the same address. Start it from the main thread (the death
signal follows the thread that forked).
"""

from __future__ import annotations

import os
from typing import Optional

from history.process import DedupdProcess, NodeFailure


class Server(DedupdProcess):
    def __init__(self, run_dir: str, dedupd: str, extra_flags: list[str],
                 data_dir: Optional[str] = None) -> None:
        """data_dir: default RUN/data (--power-loss puts it in a powerfs
        mount; the ready file, log and cwd stay in run_dir, off the mount)."""
        # cwd: where a crash of dedupd itself leaves its core (core_pattern "core").
        super().__init__("dedupd", dedupd,
                         data_dir=data_dir or os.path.join(run_dir, "data"),
                         log_path=os.path.join(run_dir, "dedupd.log"),
                         ready_path=os.path.join(run_dir, "dedupd.ready.json"),
                         cwd=os.path.join(run_dir, "cwd"),
                         extra_flags=extra_flags)
        self.id = 1
        self.address: Optional[str] = None  # fixed by the first start

    def command(self) -> list[str]:
        return [self.dedupd, f"--address={self.address or '127.0.0.1:0'}",
                f"--data_dir={self.data_dir}", "--event_log=off",
                "--metrics_address=", *self.extra_flags]

    def start(self, timeout_s: float = 30.0) -> dict:
        """history.process's start; the first one fixes the address."""
        ready = super().start(timeout_s)
        if self.address is None:
            self.address = ready["address"]
        elif ready["address"] != self.address:
            raise NodeFailure(f"dedupd restarted on {ready['address']}, "
                              f"not {self.address}")
        return ready
