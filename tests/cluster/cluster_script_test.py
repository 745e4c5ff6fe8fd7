"""scripts/cluster's shapes: `start --nodes=N --groups=G [--replication_factor=R]`
on 127.0.0.1..N, with status, restart and stop reading the shape start saved.

One group (any dedupd): 4 nodes start, one leads and three follow, no
--groups reaches dedupd, restart --node 4 brings node 4 back, stop stops all.
Three groups: --groups and --replication_factor reach every dedupd; with a
dedupd that runs groups, each node hosts all 3, the 3 are led, and a rolling
restart (the per-group hand-over and catch-up) works; a dedupd from before
sharding must refuse the flag (and nothing else). Free ports, data in a temp
dir; $DEDUPD and $DEDUPCTL name the binaries.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def port_free_on(hosts: int) -> int:
    """A port that 127.0.0.1..hosts can all bind right now."""
    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                for n in range(2, hosts + 1):
                    with socket.socket() as other:
                        other.bind((f"127.0.0.{n}", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no common free port")


class ClusterScriptTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="dedup-cluster-script-")
        self.addCleanup(tmp.cleanup)
        self.data = Path(tmp.name) / "cluster"
        self.env = dict(
            os.environ, CLUSTER_DATA=str(self.data), CLUSTER_CLIENT_PORT=str(port_free_on(4)),
            CLUSTER_RAFT_PORT=str(port_free_on(4)), CLUSTER_METRICS_PORT="",
            CLUSTER_TIMEOUT_S="30")
        self.addCleanup(self.cluster, "stop")  # (before the dir goes)

    def cluster(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(REPO / "scripts/cluster"), *args], env=self.env,
                              capture_output=True, text=True, timeout=200)

    def roles(self) -> dict[int, str]:
        status = self.cluster("status")
        self.assertEqual(status.returncode, 0, status.stderr)
        return {int(line.split()[1]): line.split(maxsplit=3)[3]
                for line in status.stdout.splitlines()}

    def groups_led(self) -> dict[int, str]:
        """Roles once the nodes together lead 3 groups (a leadership moving
        meanwhile, e.g. to its preferred leader, can count twice or not at
        all for a moment); the last roles seen after 15 s."""
        deadline = time.monotonic() + 15
        while True:
            roles = self.roles()
            led = [re.search(r"leads=(\d+)", r) for r in roles.values()]
            if (all(led) and sum(int(m.group(1)) for m in led) == 3) or time.monotonic() > deadline:
                return roles
            time.sleep(0.2)

    def test_four_nodes_one_group(self) -> None:
        started = self.cluster("start", "--nodes=4", "--groups=1", "--event_log=off")
        self.assertEqual(started.returncode, 0, started.stderr)
        port = self.env["CLUSTER_CLIENT_PORT"]
        lines = started.stdout.splitlines()
        self.assertEqual([line.rsplit(" ", 1)[0] for line in lines],
                         [f"node {n} 127.0.0.{n}:{port}" for n in range(1, 5)])
        self.assertEqual((self.data / "cluster.shape").read_text().split(), ["4", "1"])
        for n in range(1, 5):
            self.assertNotIn("--groups", (self.data / f"n{n}.cmd").read_text())
        roles = self.roles()
        self.assertEqual(sorted(roles.values()), ["follower"] * 3 + ["leader"], roles)

        pid_before = (self.data / "n4.pid").read_text()
        restarted = self.cluster("restart", "--node", "4")
        self.assertEqual(restarted.returncode, 0, restarted.stderr)
        self.assertIn("node 4: serving again", restarted.stdout)
        self.assertNotEqual((self.data / "n4.pid").read_text(), pid_before)

        stopped = self.cluster("stop")
        self.assertEqual(stopped.returncode, 0, stopped.stderr)
        self.assertEqual(set(self.roles().values()), {"down"})

    def test_three_groups(self) -> None:
        started = self.cluster("start", "--groups=3", "--replication_factor=3", "--event_log=off")
        first = (self.data / "n1.cmd").read_text()
        self.assertIn("--groups=3", first)
        self.assertIn("--replication_factor=3", first)
        if started.returncode != 0:
            # A dedupd from before sharding: it must be the flag it refused.
            log = (self.data / "n1.log").read_text()
            self.assertRegex(log, r"unknown flag --groups", started.stderr)
            self.skipTest("this dedupd has no --groups")
        roles = self.groups_led()
        for n in (1, 2, 3):
            self.assertRegex(roles[n], r"^up hosts=3 leads=[0-3]$", roles)
        self.assertEqual(sum(int(re.search(r"leads=(\d)", r).group(1)) for r in roles.values()), 3,
                         roles)
        restarted = self.cluster("restart")
        self.assertEqual(restarted.returncode, 0, restarted.stdout + restarted.stderr)
        for n in (1, 2, 3):
            self.assertIn(f"node {n}: serving again", restarted.stdout)
        roles = self.groups_led()
        self.assertEqual(sum(int(re.search(r"leads=(\d)", r).group(1)) for r in roles.values()), 3,
                         roles)


if __name__ == "__main__":
    unittest.main()
