"""The fault test's network: one network namespace per dedupd node, and
a "switch" namespace holding a bridge that joins them by veth pairs, on a
/24 of its own (10.77.S.0/24: node N is 10.77.S.N). The clients run in the
root namespace, on a veth into the same bridge (10.77.S.254). The bridge sits
in a namespace of its own so that whatever firewall the host has (bridged
traffic may go through the host's iptables when br_netfilter is loaded)
never sees the traffic between nodes.

A partition is an nftables table inside a node's namespace that drops its
traffic to and/or from the other nodes' addresses; the clients' address
stays reachable, so an isolated (perhaps deposed) leader still gets calls
and must not answer them from a stale state. Healing deletes the table.

Every name carries the runner's PID (namespaces dedup-fault-<pid>-nN and
dedup-fault-<pid>-sw, the root side's link dft<pid>c), so parallel runs
never collide, and a run killed without cleaning up is recognised and
cleaned by the next one (remove_stale). Needs root (CAP_NET_ADMIN) and the `ip` and `nft` tools.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from typing import Optional, Sequence

NS_PREFIX = "dedup-fault-"
LINK_PREFIX = "dft"
TABLE = "dedupfault"


class NetnsUnavailable(Exception):
    """This machine cannot run the test (not root, no ip/nft, no netns)."""


def _run(args: Sequence[str], check: bool = True, stdin: Optional[str] = None) -> str:
    done = subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=30
    )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return done.stdout


def check_prerequisites() -> None:
    """Raises NetnsUnavailable saying what is missing."""
    if os.geteuid() != 0:
        raise NetnsUnavailable("needs root (network namespaces and nftables)")
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(
                f"needs `{tool}` (scripts/install-deps --test installs it)"
            )
    probe = f"{NS_PREFIX}probe-{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe])
    except (RuntimeError, OSError) as e:
        raise NetnsUnavailable(f"cannot create a network namespace: {e}") from e
    try:
        _run(["ip", "netns", "exec", probe, "nft", "list", "ruleset"])
    except (RuntimeError, OSError) as e:
        raise NetnsUnavailable(f"nftables does not work in a namespace: {e}") from e
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Deletes the namespaces and links of earlier runs whose process is
    gone (a run killed by SIGKILL cannot clean up). Returns what it removed."""
    removed = []
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(re.escape(NS_PREFIX) + r"(\d+)-(n\d+|sw)", name)
        if m and not _pid_alive(int(m.group(1))):
            # Its nodes died with it (they run with PR_SET_PDEATHSIG).
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    for line in _run(["ip", "-o", "link", "show"], check=False).splitlines():
        m = re.match(r"\d+: (" + LINK_PREFIX + r"(\d+)c)[@:]", line)
        if m and not _pid_alive(int(m.group(2))):
            _run(["ip", "link", "del", m.group(1)], check=False)
            removed.append(m.group(1))
    return removed


def _pick_subnet(first: int) -> int:
    """A third octet S whose 10.77.S.0/24 no route on this machine covers."""
    routes = _run(["ip", "-4", "route", "show", "table", "all"], check=False)
    used = []
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("default", "broadcast", "local", "unreachable"):
            continue
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for i in range(250):
        s = (first + i) % 250 + 1
        net = ipaddress.ip_network(f"10.77.{s}.0/24")
        if not any(net.overlaps(u) for u in used):
            return s
    raise NetnsUnavailable("no free 10.77.S.0/24 subnet")


class Topology:
    """The namespaces, veths and bridge of one run. Call setup(), then
    teardown() (idempotent; also after a failed setup)."""

    def __init__(self, nodes: int = 3) -> None:
        pid = os.getpid()
        self.pid = pid
        self.nodes = nodes
        self.subnet = 0
        self.switch = f"{NS_PREFIX}{pid}-sw"
        self.client_link = f"{LINK_PREFIX}{pid}c"
        self.namespaces = [f"{NS_PREFIX}{pid}-n{i}" for i in range(1, nodes + 1)]
        self._created_links: list[str] = []
        self._created_ns: list[str] = []
        self.partitioned: dict[int, str] = {}  # node id -> how

    def ip(self, node_id: int) -> str:
        return f"10.77.{self.subnet}.{node_id}"

    @property
    def client_ip(self) -> str:
        return f"10.77.{self.subnet}.254"

    def ns(self, node_id: int) -> str:
        return self.namespaces[node_id - 1]

    def _add_ns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._created_ns.append(ns)
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])

    def _plug(self, outside: str, inside: str) -> None:
        """A veth pair whose `inside` end joins the switch's bridge; the
        other end stays in the root namespace (for the caller to move)."""
        _run(["ip", "link", "add", outside, "type", "veth", "peer", "name", inside])
        _run(["ip", "link", "set", inside, "netns", self.switch])
        sw = ["ip", "netns", "exec", self.switch]
        _run(sw + ["ip", "link", "set", inside, "master", "br0"])
        _run(sw + ["ip", "link", "set", inside, "up"])

    def setup(self) -> None:
        self.subnet = _pick_subnet(self.pid % 250)
        self._add_ns(self.switch)
        sw = ["ip", "netns", "exec", self.switch]
        _run(sw + ["ip", "link", "add", "br0", "type", "bridge"])
        _run(sw + ["ip", "link", "set", "br0", "up"])
        # The clients' side, in the root namespace.
        self._plug(self.client_link, f"{LINK_PREFIX}{self.pid}s")
        self._created_links.append(self.client_link)
        _run(["ip", "addr", "add", f"{self.client_ip}/24", "dev", self.client_link])
        _run(["ip", "link", "set", self.client_link, "up"])
        for node_id in range(1, self.nodes + 1):
            ns = self.ns(node_id)
            self._add_ns(ns)
            end = f"{LINK_PREFIX}{self.pid}p{node_id}"
            self._plug(end, f"{LINK_PREFIX}{self.pid}v{node_id}")
            _run(["ip", "link", "set", end, "netns", ns])
            exec_ns = ["ip", "netns", "exec", ns]
            _run(exec_ns + ["ip", "link", "set", end, "name", "eth0"])
            _run(exec_ns + ["ip", "addr", "add", f"{self.ip(node_id)}/24", "dev", "eth0"])
            _run(exec_ns + ["ip", "link", "set", "eth0", "up"])

    def teardown(self) -> None:
        for node_id in list(self.partitioned):
            self.heal(node_id)
        for ns in reversed(self._created_ns):
            for pid in _run(["ip", "netns", "pids", ns], check=False).split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _run(["ip", "netns", "del", ns], check=False)
        self._created_ns.clear()
        for link in reversed(self._created_links):
            if os.path.exists(f"/sys/class/net/{link}"):
                _run(["ip", "link", "del", link], check=False)
        self._created_links.clear()

    # --- partitions -----------------------------------------------------

    def partition(self, node_id: int, inbound: bool = True, outbound: bool = True) -> None:
        """Drops traffic between node_id and the other nodes: packets from
        them (inbound) and/or to them (outbound). Clients are not affected."""
        others = ", ".join(self.ip(n) for n in range(1, self.nodes + 1) if n != node_id)
        rules = [f"table inet {TABLE} {{"]
        rules.append("  chain input { type filter hook input priority 0; policy accept;")
        if inbound:
            rules.append(f"    ip saddr {{ {others} }} drop")
        rules.append("  }")
        rules.append("  chain output { type filter hook output priority 0; policy accept;")
        if outbound:
            rules.append(f"    ip daddr {{ {others} }} drop")
        rules.append("  }")
        rules.append("}")
        _run(["ip", "netns", "exec", self.ns(node_id), "nft", "-f", "-"],
             stdin="\n".join(rules) + "\n")
        self.partitioned[node_id] = (
            "both" if inbound and outbound else "inbound" if inbound else "outbound"
        )

    def heal(self, node_id: int) -> None:
        if node_id not in self.partitioned:
            return
        _run(["ip", "netns", "exec", self.ns(node_id), "nft", "delete", "table",
              "inet", TABLE], check=False)
        del self.partitioned[node_id]

    def heal_all(self) -> None:
        for node_id in list(self.partitioned):
            self.heal(node_id)
