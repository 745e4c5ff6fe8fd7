"""dedupd's data-dir check after a power cut (issue 28), on powerfs.

1. A single node on powerfs answers Begin+Complete for a while, goes quiet,
   loses power (frozen first, so nothing is answered after the cut) and
   restarts: the directory the cut left is accepted, every acknowledged
   Complete replays, and DEDUP-DURABLE (synced in the background) already
   covers them.
2. More writes, another cut, and then the disk "loses" the WAL bytes that
   were synced (truncated in the backing directory, as a lying disk would
   leave it): dedupd must refuse the directory (exit 3, naming the WAL)
   instead of starting without acknowledged writes.

    sudo /usr/bin/python3 tests/powerfs/data_dir_power_test.py \\
        --dedupd build/server/dedupd --dedupctl build/client/dedupctl \\
        --powerfs build/tests/powerfs/powerfs

Exits 0 on success, 1 on failure, 77 when it cannot run here (not root).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from powerfs import PowerFs, available  # noqa: E402

SKIP = 77


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, args, data_dir: str, log_path: str) -> None:
        self.args = args
        self.data_dir = data_dir
        self.log_path = log_path
        self.address = f"127.0.0.1:{free_port()}"
        self.proc = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", self.args.dedupd,
                 f"--data_dir={self.data_dir}", f"--address={self.address}",
                 "--metrics_address="],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def wait_serving(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dedupd exited with {self.proc.returncode}:"
                                     f"\n{self.tail()}")
            if self.ctl("get", "probe", "probe", check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise AssertionError("dedupd did not serve within 30 s")

    def ctl(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([self.args.dedupctl, f"--address={self.address}",
                              "--deadline_ms=3000", *argv],
                             capture_output=True, text=True)
        if check and out.returncode != 0:
            raise AssertionError(f"dedupctl {' '.join(argv)}: {out.stderr}")
        return out

    def tail(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-15:])


def write_pairs(node: Node, prefix: str, count: int) -> list[str]:
    keys = []
    for i in range(count):
        key = f"{prefix}{i}"
        begun = node.ctl("begin", "ns", key).stdout
        fence = re.search(r"^fence: (\d+)", begun, re.M).group(1)
        node.ctl("complete", "ns", key, fence, f"--result=r-{key}")
        keys.append(key)
    return keys


def cut(fs: PowerFs, node: Node) -> dict:
    node.proc.send_signal(signal.SIGSTOP)  # nothing answered after the cut
    report = fs.power_off()
    node.proc.kill()
    node.proc.wait()
    fs.start()
    return report


def marker_sequence(backing_data: str) -> int:
    with open(os.path.join(backing_data, "DEDUP-DURABLE")) as f:
        return int(re.search(r"sequence=(\d+)", f.read()).group(1))


def run(args, work: str) -> None:
    fs = PowerFs(args.powerfs, os.path.join(work, "backing"),
                 os.path.join(work, "mnt"), os.path.join(work, "powerfs.log"))
    fs.start()
    try:
        node = Node(args, os.path.join(fs.mount, "data"),
                    os.path.join(work, "dedupd.log"))
        node.start()
        node.wait_serving()
        keys = write_pairs(node, "a", 20)
        time.sleep(0.5)  # quiet: the marker is synced in the background
        report = cut(fs, node)
        print(f"cut 1: {report['bytes_lost']} bytes lost "
              f"({', '.join(report['paths']['data']) or 'nothing'})")
        backing_data = os.path.join(fs.backing, "data")
        seq = marker_sequence(backing_data)
        # Each Begin and each Complete is at least one RocksDB write.
        assert seq >= 2 * len(keys), f"DEDUP-DURABLE holds sequence {seq} " \
            f"after {len(keys)} acknowledged pairs: it was not synced"
        node.start()
        node.wait_serving()
        for key in keys:
            got = node.ctl("get", "ns", key).stdout
            assert f"result: r-{key}" in got, f"{key} lost: {got}"
        print(f"restart 1: accepted, {len(keys)} Completes replay, "
              f"marker at sequence {seq}")

        write_pairs(node, "b", 20)
        time.sleep(0.5)
        cut(fs, node)
        fs.stop()  # the next damage is made in the backing directory
        wals = sorted(f for f in os.listdir(backing_data) if f.endswith(".log"))
        assert wals, f"no WAL in {backing_data}: {os.listdir(backing_data)}"
        newest = os.path.join(backing_data, wals[-1])
        print(f"damage: {wals[-1]} cut from {os.path.getsize(newest)} bytes to 0")
        os.truncate(newest, 0)
        fs.start()
        node.start()
        code = node.proc.wait(timeout=60)
        log = node.tail()
        assert code == 3, f"dedupd started on a dir that lost acknowledged " \
            f"writes (exit {code}):\n{log}"
        assert wals[-1] in log, f"the refusal does not name {wals[-1]}:\n{log}"
        print("restart 2: refused with exit 3, naming the WAL")
    finally:
        fs.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dedupd", default=os.environ.get("DEDUPD"))
    p.add_argument("--dedupctl", default=os.environ.get("DEDUPCTL"))
    p.add_argument("--powerfs", default=os.environ.get("POWERFS"))
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    why = available()
    if why is not None:
        print(f"data_dir_power_test: skipped: {why}")
        return SKIP
    work = tempfile.mkdtemp(prefix="data_dir_power_")
    try:
        run(args, work)
    except AssertionError as e:
        print(f"data_dir_power_test: FAILED: {e}\n(kept {work})")
        return 1
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("data_dir_power_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
