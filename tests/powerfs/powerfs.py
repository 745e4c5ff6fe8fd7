"""Drives tests/powerfs's `powerfs` binary from Python (tests/crash, tests/fault).

    fs = PowerFs("build/tests/powerfs/powerfs", backing="/tmp/r/backing",
                 mount="/tmp/r/mnt", log_path="/tmp/r/powerfs.log")
    fs.start()                 # mounted when it returns
    ... run dedupd with --data_dir under fs.mount ...
    report = fs.power_off()    # unsynced writes are gone, the mount detached
    ... SIGKILL the processes that used the mount ...
    fs.start()                 # power back on: a fresh mount of what survived
    fs.stop()                  # clean unmount: nothing lost

Needs root and /dev/fuse (available() says whether they are here). The
process is tied to its parent with `setpriv --pdeathsig KILL`, so a killed
runner leaves no daemon behind (the mount then reports ENOTCONN until
stop() or cleanup() detaches it). Start it from the main thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Optional


class PowerFsError(Exception):
    """powerfs did not mount, did not power off, or exited on its own."""


def available() -> Optional[str]:
    """None if powerfs can run here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    return None


def _detach(mount: str) -> None:
    # umount2(MNT_DETACH) through umount(8): works on a mount whose daemon died.
    subprocess.run(["umount", "-l", mount], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


class PowerFs:
    def __init__(self, binary: str, backing: str, mount: str,
                 log_path: str, lying_sync: bool = False) -> None:
        self.binary = binary
        self.lying_sync = lying_sync
        self.backing = backing
        self.mount = mount
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.power_offs = 0
        self.reports: list[dict] = []

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 10.0) -> None:
        """Mounts the backing directory at `mount` (both made if missing)."""
        if self.running:
            raise PowerFsError("powerfs is already running")
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mount, exist_ok=True)
        if os.path.ismount(self.mount):
            _detach(self.mount)  # a previous daemon that died
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", self.binary,
                 "--backing", self.backing, "--mount", self.mount,
                 "--log", self.log_path,
                 *(["--lying_sync"] if self.lying_sync else [])],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
        deadline = time.monotonic() + timeout_s
        while not os.path.ismount(self.mount):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise PowerFsError(f"powerfs exited with {code} before "
                                   f"mounting (see {self.log_path})")
            if time.monotonic() > deadline:
                self.kill()
                raise PowerFsError(f"powerfs did not mount {self.mount} "
                                   f"within {timeout_s} s")
            time.sleep(0.01)

    def power_off(self, timeout_s: float = 30.0) -> dict:
        """Cuts the power: returns powerfs's report (files, bytes_lost,
        names_restored, names_removed). The mount is detached; processes
        using it must be killed by the caller."""
        if not self.running:
            raise PowerFsError("powerfs is not running")
        self.proc.send_signal(signal.SIGUSR1)
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise PowerFsError(f"powerfs did not power off within {timeout_s} s")
        code = self.proc.returncode
        self.proc = None
        if code != 0:
            raise PowerFsError(f"powerfs exited with {code} at power off "
                               f"(see {self.log_path})")
        report = {}
        for line in out.decode(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "power_off":
                report = event
        if not report:
            raise PowerFsError("powerfs printed no power_off report")
        _detach(self.mount)  # in case a busy mount was left attached
        self.power_offs += 1
        self.reports.append(report)
        return report

    def stop(self, timeout_s: float = 30.0) -> None:
        """Clean unmount (everything written becomes durable)."""
        if not self.running:
            self.cleanup()
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise PowerFsError(f"powerfs ignored SIGTERM for {timeout_s} s")
        self.proc = None
        self.cleanup()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None
        self.cleanup()

    def cleanup(self) -> None:
        if os.path.ismount(self.mount):
            _detach(self.mount)
