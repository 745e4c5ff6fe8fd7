"""Starts a real dedupd for a test and stops it cleanly (SIGTERM).

The binary comes from $DEDUPD. The server binds 127.0.0.1:0 and, once
serving, writes its bound addresses to its --ready_file (JSON, written
atomically: server/ready_file.h), which wait_ready reads; its output goes to
a file (not a pipe nobody reads, which could fill up and block it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Callable, Optional, Sequence

# tests/, for the ready-file reader all Python harnesses share.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from history import ready as ready_file  # noqa: E402


def port_of(address: str) -> int:
    """The port of "HOST:PORT"."""
    return int(address.rsplit(":", 1)[1])


def wait_ready(path: Path, process: subprocess.Popen[bytes], timeout_s: float,
               log: Callable[[], str], name: str = "dedupd") -> dict:
    """The ready file `process` writes at `path` (delete any old one before
    starting it): polled until it holds the process's pid. RuntimeError with
    the log's tail if the process exits first, TimeoutError after timeout_s."""
    try:
        return ready_file.wait_ready(path, process, timeout_s, name)
    except ready_file.NotReady as e:
        if e.exit_code is not None:
            raise RuntimeError(f"{name} exited {e.exit_code}: {log()}") from e
        raise TimeoutError(f"{e}: {log()}") from e


def _die_with_parent(argv: list[str]) -> list[str]:
    """argv under util-linux setpriv --pdeathsig: if the test process is
    killed (e.g. a CTest timeout) the server goes too instead of lingering.
    setpriv execs the server, so the pid stays the server's. (Not
    preexec_fn: it is unsafe once gRPC's threads exist.)"""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class Dedupd:
    """One dedupd process with its own data directory (durability none).

    metrics=True serves /metrics on a free port (metrics_port); otherwise
    metrics are off, so parallel servers never collide on the default port.
    """

    def __init__(
        self, start_timeout_s: float = 20.0, *, metrics: bool = False,
        args: Sequence[str] = (), port: int = 0, data_dir: Optional[str] = None,
    ) -> None:
        """args: extra flags (e.g. --tenants_file=...). port and data_dir:
        those of an earlier server (e.g. one kill()ed) to start again, which
        must not be stop()ped before this one (stop() removes its dir)."""
        binary = os.environ.get("DEDUPD")
        if not binary:
            raise RuntimeError("set DEDUPD to the dedupd binary")
        self._tmp = tempfile.TemporaryDirectory(prefix="dedup-py-")
        self.log_path = Path(self._tmp.name) / "dedupd.log"
        self.ready_path = Path(self._tmp.name) / "ready.json"
        self.data_dir = data_dir or f"{self._tmp.name}/data"
        self._log = open(self.log_path, "wb")
        self.process: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
            _die_with_parent([binary, f"--address=127.0.0.1:{port}",
                              "--metrics_address=" + ("127.0.0.1:0" if metrics else ""),
                              f"--data_dir={self.data_dir}", "--durability=none",
                              f"--ready_file={self.ready_path}", *args]),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )
        try:
            ready = wait_ready(self.ready_path, self.process, start_timeout_s, self.log)
        except BaseException:
            self.stop()
            raise
        self.port = port_of(ready["address"])
        self.metrics_port = (
            port_of(ready["metrics_address"]) if ready["metrics_address"] else None)
        self.target = ready["address"]

    def metric(self, sample: str) -> float:
        """The value of one /metrics sample, e.g.
        'dedup_request_duration_seconds_count{method="Begin"}' (0 if absent)."""
        if self.metrics_port is None:
            raise RuntimeError("started without metrics=True")
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as reply:
            text = reply.read().decode()
        for row in text.splitlines():
            if row.startswith(sample + " "):
                return float(row.split()[-1])
        return 0.0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL and wait: a crash. The data dir stays, for a restart;
        stop() still cleans up."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            self.process = None

    def stop(self) -> int:
        """SIGTERM, wait (SIGKILL after 30 s); returns the exit code."""
        code = 0
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                code = self.process.wait()
            self.process = None
        self._log.close()
        self._tmp.cleanup()
        return code
