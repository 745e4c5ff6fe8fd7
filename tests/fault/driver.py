"""The fault driver: one fault at a time, each after the group has settled
(every node up, one leader known to all, followers caught up) and a short
stretch of normal load.

Kinds (the schedule shuffles each round of all seven):
  leader_kill         SIGKILL the leader, restart it 1-3 s later
  leader_stop         SIGSTOP the leader, SIGCONT 2-4 s later
  follower_kill       SIGKILL a follower, restart it 1-3 s later
  node_term           SIGTERM a random node (a clean stop: a leader hands
                      over first), restart it 0.5-1.5 s after it exited
  leader_partition    isolate the leader from both peers for 3-5 s
  follower_partition  isolate a follower from both peers for 3-5 s
  oneway_partition    drop what the peers send to a random node (it can
                      still send to them) for 2-4 s

With --power-loss, power.py adds power_one, power_all, power_snapshot and
power_truncate (a node, or all three, lose every write they had not synced).

Sharded clusters (--groups > 1): each fault picks a group at random, and
"the leader", "a follower" and "a random node" are that group's (a node may lead several
groups, and a group's follower may lead another: a fault hits every group
the node leads). One more kind:
  multi_leader_stop   SIGSTOP a node leading the most groups (at least two:
                      when none does, a group's leadership is first handed
                      to the node leading one, TransferLeadership), SIGCONT
                      2-4 s later
The groups a fault hits are the chosen one and every one its node led;
each must serve a write invoked after the fault (liveness), and the
failover figure is the time until the last of them did.

With moves (mover.py), run_fault's before_inject hook may start one once
the cluster has settled; that fault then picks the moving group, and
"followers" and "a random node" are its members (its replicas and the
node it moves to) while it moves.

Clients keep running throughout and reach every node, isolated or not.
After each fault the driver waits for an acknowledged write invoked after
the fault (liveness: a group that never recovers fails the run). A fault's
time (t_inject) is taken once it is in force (the process killed and
reaped, SIGSTOP sent, the nftables rules loaded); for node_term it is when
SIGTERM is sent, as the node's drain is part of that fault.
"""

from __future__ import annotations

import bisect
import math
import random
import signal
import time
from typing import Callable, Optional

from cluster import Cluster
from history.client import History, is_write_ack
from power import POWER_KINDS

KINDS = ["leader_kill", "leader_stop", "follower_kill", "node_term",
         "leader_partition", "follower_partition", "oneway_partition"]
# Only with --groups > 1.
SHARDED_KINDS = KINDS + ["multi_leader_stop"]
ALL_KINDS = SHARDED_KINDS + POWER_KINDS
# Kinds whose failover is the acceptance figure (p99 < 2 s), and the other
# leader-affecting ones reported beside it.
LEADER_KINDS = ["leader_kill", "leader_stop"]


class LivenessFailure(Exception):
    """The group did not settle or serve a write in time."""


def schedule(count: int, rng: random.Random, kinds: list[str] = KINDS) -> list[str]:
    """count faults: rounds of every kind, each round shuffled."""
    out: list[str] = []
    while len(out) < count:
        cycle = list(kinds)
        rng.shuffle(cycle)
        out.extend(cycle)
    return out[:count]


def first_write_after(ops: list[dict], t: float) -> Optional[dict]:
    """The earliest-answered write acknowledgement of an operation invoked
    at or after t. `ops` in logging order, which is completion order up to
    thread scheduling (hence the one-second margin when scanning back)."""
    best = None
    for o in reversed(ops):
        if o["t_done"] < t - 1.0:
            break
        if o["t_inv"] >= t and is_write_ack(o):
            if best is None or o["t_done"] < best["t_done"]:
                best = o
    return best


class Driver:
    def __init__(self, cluster: Cluster, history: History, rng: random.Random,
                 hold_scale: float = 1.0, log=print) -> None:
        self.cluster = cluster
        self.topology = cluster.topology
        self.history = history
        self.rng = rng
        self.hold_scale = hold_scale
        self.log = log
        self.faults: list[dict] = []
        # power.PowerFaults when the nodes' data dirs are powerfs mounts.
        self.power = None

    def _hold(self, lo: float, hi: float, fault: Optional[dict] = None) -> float:
        """Sleeps for a random hold; with `fault`, meanwhile watches the
        other nodes for the first leader other than the faulted one (see
        _watch_election)."""
        d = self.rng.uniform(lo, hi) * self.hold_scale
        end = time.monotonic() + d
        if fault is not None:
            self._watch_election(fault, end)
        time.sleep(max(0.0, end - time.monotonic()))
        return d

    def _watch_election(self, fault: dict, end: float) -> None:
        """Records in fault["t_elected"] when a node other than the faulted
        one first reports a new leader in a higher term, so that a failover
        splits into the election and the clients' part (failover_figures).
        Polls every 20 ms until `end`."""
        old = fault["leader"]
        group = fault.get("group", 0)
        others = [self.cluster.nodes[i] for i in self.cluster.members(group)
                  if i != fault["node"]]
        while time.monotonic() < end:
            for node in others:
                st = node.status(0.2, group=group)
                if st is not None and st.leader_id not in (0, old):
                    fault["t_elected"] = self.history.now()
                    fault["elected_term"] = st.term
                    return
            time.sleep(0.02)

    def settle(self, what: str, timeout_s: float = 60.0, max_lag: int = 256) -> None:
        reason = self.cluster.wait_settled(timeout_s, max_lag)
        if reason is not None:
            raise LivenessFailure(f"{what}: group not settled after {timeout_s} s: {reason}")

    def _settled_leaders(self, n: int) -> dict:
        """Settles, then every group's leader. Leadership may change hands
        between the settling and the asking without any fault: a move
        hands it over, and in a sharded cluster the leader balancer hands a
        group back to its preferred leader soon after that node returns
        from a fault. A leader missing then is settled and asked again
        (three times in all); still missing, it fails the run."""
        sharded = self.cluster.sharded
        for _ in range(3):
            self.settle(f"before fault {n}")
            time.sleep(self.rng.uniform(0.5, 1.0))  # normal load between faults
            leaders = self.cluster.leaders() if sharded else {0: self.cluster.leader()}
            if None not in leaders.values() or not sharded:
                break
            self.log(f"before fault {n}: no leader of group(s) "
                     f"{[g for g, lead in leaders.items() if lead is None]} "
                     "just after settling: settling again")
        if None in leaders.values():
            raise LivenessFailure(f"before fault {n}: leader lost while settled "
                                  f"({leaders})")
        return leaders

    def run_fault(self, n: int, total: int, kind: str,
                  before_inject: Optional[Callable[[int], Optional[dict]]] = None) -> dict:
        """Fault n of `kind`. before_inject(n), called once the cluster has
        settled and every node is up and connected, may start a move; it
        returns {"group": the moving group (the fault then picks it), ...:
        what to note in the fault's record} or None."""
        leaders = self._settled_leaders(n)
        sharded = self.cluster.sharded
        group = self.rng.choice(sorted(self.cluster.groups)) if sharded else 0
        moving = before_inject(n) if before_inject is not None else None
        if moving is not None:
            group = moving["group"]
        leader = leaders[group]
        followers = [i for i in self.cluster.members(group) if i != leader]
        nodes = self.cluster.nodes
        fault = {"n": n, "kind": kind, "leader": leader}
        if moving is not None:
            fault["move_start"] = moving
        if self.cluster.moving:
            fault["moves_under_way"] = {str(g): list(m)
                                        for g, m in self.cluster.moving.items()}
        if sharded:
            fault["group"] = group
            fault["leaders"] = {str(g): lead for g, lead in leaders.items()}
        if kind == "multi_leader_stop":
            target = self._multi_leader(leaders, fault)
            # Its election watched in one of the groups it leads.
            group = self.rng.choice(fault["led_groups"])
            leader = target
            fault.update({"node": target, "group": group, "leader": target})
            nodes[target].signal(signal.SIGSTOP)
            fault["t_inject"] = self.history.now()
            fault["held_s"] = self._hold(2.0, 4.0, fault)
            nodes[target].signal(signal.SIGCONT)
        elif kind == "leader_kill":
            fault["node"] = leader
            nodes[leader].kill()
            fault["t_inject"] = self.history.now()
            fault["held_s"] = self._hold(1.0, 3.0, fault)
            nodes[leader].start()
        elif kind == "leader_stop":
            fault["node"] = leader
            nodes[leader].signal(signal.SIGSTOP)
            fault["t_inject"] = self.history.now()
            fault["held_s"] = self._hold(2.0, 4.0, fault)
            nodes[leader].signal(signal.SIGCONT)
        elif kind == "follower_kill":
            target = self.rng.choice(followers)
            fault["node"] = target
            nodes[target].kill()
            fault["t_inject"] = self.history.now()
            fault["held_s"] = self._hold(1.0, 3.0)
            nodes[target].start()
        elif kind == "node_term":
            target = self.rng.choice(self.cluster.members(group))
            fault["node"] = target
            fault["t_inject"] = self.history.now()
            fault["exit_code"] = nodes[target].terminate()
            fault["held_s"] = self._hold(0.5, 1.5)
            nodes[target].start()
        elif kind in ("leader_partition", "follower_partition", "oneway_partition"):
            if kind == "leader_partition":
                target = leader
            elif kind == "follower_partition":
                target = self.rng.choice(followers)
            else:
                target = self.rng.choice(self.cluster.members(group))
            fault["node"] = target
            self.topology.partition(target, inbound=True,
                                    outbound=kind != "oneway_partition")
            fault["t_inject"] = self.history.now()
            fault["held_s"] = self._hold(*((2.0, 4.0) if kind == "oneway_partition"
                                           else (3.0, 5.0)),
                                         fault if target == leader else None)
            self.topology.heal(target)
        elif kind in POWER_KINDS:
            if self.power is None:
                raise ValueError(f"{kind} needs --power-loss")
            self.power.run(kind, fault, leader, followers)
        else:
            raise ValueError(kind)
        fault["was_leader"] = fault["node"] == leader
        fault["t_recover"] = self.history.now()
        if sharded:
            # The groups hit: the chosen one and every one its node led.
            fault["groups"] = sorted({group} | {g for g, lead in leaders.items()
                                                if lead == fault["node"]})
        # Liveness: some write invoked after the fault must be answered (in
        # every group hit).
        deadline = time.monotonic() + 30.0
        while not self._served_since(fault):
            if time.monotonic() > deadline:
                raise LivenessFailure(
                    f"fault {n} ({kind} of node {fault['node']}): no write answered "
                    f"within 30 s of recovery"
                    + (f" in group(s) {self._unserved(fault)}" if sharded else ""))
            time.sleep(0.02)
        if sharded:
            fault["first_write_s"] = first_write_in_groups(
                self.history.snapshot(), fault["t_inject"], fault["groups"])
        else:
            w = first_write_after(self.history.snapshot(), fault["t_inject"])
            fault["first_write_s"] = None if w is None else w["t_done"] - fault["t_inject"]
        self.faults.append(fault)
        role = "leader" if fault["was_leader"] else "follower"
        who = "all nodes" if kind == "power_all" else f"node {fault['node']} ({role})"
        if sharded:
            led = [g for g, lead in sorted(leaders.items()) if lead == fault["node"]]
            who = (f"node {fault['node']} (group {group}'s {role}; "
                   f"led {','.join(map(str, led)) or 'none'})")
        fw = fault["first_write_s"]
        self.log(f"fault {n}/{total} {kind:<18} {who} "
                 f"held {fault['held_s']:.1f} s; first write after "
                 f"{'-' if fw is None else f'{fw:.2f} s'}{power_note(fault)}"
                 + move_note(fault))
        return fault

    def _unserved(self, fault: dict) -> list[int]:
        """The groups hit by `fault` with no write answered since it."""
        acks = self.history.last_write_ack_by_group
        return [g for g in fault["groups"] if acks.get(g, -1.0) < fault["t_inject"]]

    def _served_since(self, fault: dict) -> bool:
        if "groups" not in fault:
            return self.history.last_write_ack >= fault["t_inject"]
        return not self._unserved(fault)

    def _multi_leader(self, leaders: dict, fault: dict) -> int:
        """The node leading the most groups, after handing it one more
        group's leadership when none leads two (fault["handed"])."""
        led: dict[int, list[int]] = {}
        for g, lead in leaders.items():
            led.setdefault(lead, []).append(g)
        target = max(sorted(led), key=lambda i: len(led[i]))
        if len(led[target]) < 2:
            spare = [g for g, lead in sorted(leaders.items())
                     if lead != target and target in self.cluster.groups[g]]
            if spare:
                g = self.rng.choice(spare)
                now = self.cluster.nodes[leaders[g]].transfer(g, target)
                fault["handed"] = {"group": g, "from": leaders[g], "leader_after": now}
                if now == target:
                    leaders[g] = target
                    fault["leaders"][str(g)] = target
                    led[target].append(g)
                    # Every replica names the new leader before the fault,
                    # or the election watch would take a stale view for
                    # the next election.
                    self._wait_named(g, target, timeout_s=5.0)
        fault["led_groups"] = sorted(led[target])
        return target


    def _wait_named(self, group: int, leader: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            views = [self.cluster.nodes[i].status(0.2, group=group)
                     for i in self.cluster.groups[group]]
            if all(st is not None and st.leader_id == leader for st in views):
                return
            time.sleep(0.02)


def first_write_in_groups(ops: list[dict], t: float, groups: list[int]) -> Optional[float]:
    """Seconds from t until every group in `groups` answered a write
    invoked at or after t (None when one has not)."""
    firsts: dict[int, float] = {}
    for o in ops:
        g = o.get("group")
        if g in groups and o["t_inv"] >= t and is_write_ack(o):
            firsts[g] = min(firsts.get(g, o["t_done"]), o["t_done"])
    if len(firsts) < len(groups):
        return None
    return max(firsts.values()) - t


def move_note(fault: dict) -> str:
    """The moves a fault overlapped, for its log line."""
    under_way = fault.get("moves_under_way")
    if not under_way:
        return ""
    start = fault.get("move_start")
    return "; during the move of " + ", ".join(
        f"group {g} ({m[0]}->{m[1]})" for g, m in sorted(under_way.items())) + (
        f", aimed at stage {start['stage']} (seen: {start['reached']})" if start else "")


def power_note(fault: dict) -> str:
    """What a power fault's cuts dropped, for its log line."""
    cuts = fault.get("cuts")
    if not cuts:
        return ""
    parts = []
    for c in cuts:
        r = c["report"]
        parts.append(f"n{c['node']} {r.get('bytes_lost', 0)} B, "
                     f"{r.get('names_restored', 0)}+{r.get('names_removed', 0)} names"
                     + ("" if c.get("exit") in (None, -signal.SIGKILL)
                        else f", exited {c['exit']}"))
    note = "; cut lost " + " / ".join(parts)
    for key in ("mode", "suffix"):
        if key in fault:
            note += f"; {key} {fault[key]}"
    return note


def percentile(xs: list[float], q: float) -> Optional[float]:
    """Nearest-rank percentile (q in 0..1)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(1, math.ceil(q * len(s))) - 1]


def failover_figures(faults: list[dict], ops: list[dict]) -> dict:
    """Per fault kind (node_term and oneway_partition split by whether the
    node led): time from the fault to the first answered write invoked
    after it."""
    writes = sorted((o for o in ops if is_write_ack(o)), key=lambda o: o["t_inv"])
    starts = [o["t_inv"] for o in writes]
    groups: dict[str, list[float]] = {}
    missing: dict[str, int] = {}
    for f in faults:
        name = f["kind"]
        if name in ("oneway_partition", "node_term", "power_one"):
            name += "_leader" if f["was_leader"] else "_follower"
        if "groups" in f:  # sharded: until every group hit served again
            later = writes[bisect.bisect_left(starts, f["t_inject"]):]
            s = first_write_in_groups(later, f["t_inject"], f["groups"])
            f["first_write_s"] = s
            best = None if s is None else f["t_inject"] + s
        else:
            best = None
            for o in writes[bisect.bisect_left(starts, f["t_inject"]):]:
                if best is not None and o["t_inv"] > best:
                    break
                best = o["t_done"] if best is None else min(best, o["t_done"])
            f["first_write_s"] = None if best is None else best - f["t_inject"]
        if best is None:
            missing[name] = missing.get(name, 0) + 1
        else:
            groups.setdefault(name, []).append(f["first_write_s"])
    out = {}
    elections: dict[str, list[float]] = {}
    for f in faults:
        if "t_elected" in f:
            name = f["kind"] + ("_leader" if f["kind"] in ("oneway_partition", "node_term",
                                                            "power_one")
                                else "")
            elections.setdefault(name, []).append(f["t_elected"] - f["t_inject"])
    for name in sorted(set(groups) | set(missing)):
        xs = groups.get(name, [])
        out[name] = {"count": len(xs) + missing.get(name, 0),
                     "p50_s": percentile(xs, 0.5), "p99_s": percentile(xs, 0.99),
                     "max_s": max(xs) if xs else None,
                     "no_write": missing.get(name, 0)}
        # The election's share: from the fault until another node named a
        # new leader (the rest is the clients finding it and the write).
        es = elections.get(name, [])
        if es:
            out[name].update({"elected_count": len(es),
                              "elected_p50_s": percentile(es, 0.5),
                              "elected_p99_s": percentile(es, 0.99),
                              "elected_max_s": max(es)})
    leader = [f["first_write_s"] for f in faults
              if f["kind"] in LEADER_KINDS and f["first_write_s"] is not None]
    out["leader_kill+leader_stop"] = {
        "count": len(leader), "p50_s": percentile(leader, 0.5),
        "p99_s": percentile(leader, 0.99), "max_s": max(leader) if leader else None,
        "target_p99_s": 2.0}
    return out
