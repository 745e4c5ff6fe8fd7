"""Waiting for a dedupd's ready file (--ready_file: JSON written atomically
once it serves, server/ready_file.h). The one Python reader of it: the crash
and fault tests, the Python client's integration tests and the Prometheus
tests all wait through wait_ready. No dependencies beyond the standard
library."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Optional


class NotReady(Exception):
    """The process exited (exit_code set) or wrote no ready file in time
    (exit_code None)."""

    def __init__(self, message: str, exit_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_ready(path: str | os.PathLike) -> Optional[dict]:
    """The ready file's JSON, or None while there is none (it is written by
    rename: absent or whole)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def wait_ready(path: str | os.PathLike, process: subprocess.Popen,
               timeout_s: float, name: str = "dedupd",
               poll_s: float = 0.01) -> dict:
    """Polls `path` until it holds `process`'s pid (delete any old file
    before starting the process) and returns its JSON. NotReady when the
    process exits first or after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = read_ready(path)
        if ready is not None and ready.get("pid") == process.pid:
            return ready
        if process.poll() is not None:
            raise NotReady(f"{name} exited with {process.returncode} before "
                           f"writing its ready file {path}", process.returncode)
        time.sleep(poll_s)
    raise NotReady(f"{name} wrote no ready file ({path}) within {timeout_s} s")
