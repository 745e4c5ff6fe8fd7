"""Replica moves during a sharded fault run (`--moves N`).

A move is `dedupctl cluster move --group G --from F --to T` (the server's
MoveReplica: host an empty replica on T, add it as a learner that catches
up from a checkpoint of G, promote it, hand leadership away from F, remove
F, F deletes its copy). The driver starts one just before a fault and
aims that fault at G, so the fault lands on a random stage of the move;
later faults overlap it too while it lasts.

Choice: G at random; F one of G's replicas (the driver starts a move only
when every node is up, running and unpartitioned, so F is reachable when
the move starts: a move cannot drop F's copy while F is SIGSTOPped or
isolated, and would only wait); T a node not hosting G.

Re-runs: moves resume when run again (steps already done are skipped).
Each attempt asks one node, drawn from the group's replicas and T, to
drive the move (`--follow_leader=false`: that node only, no retry by
dedupctl), so a fault on that node (killed, stopped, isolated) or on the
others (a step that keeps failing) interrupts the attempt, as it would an
operator's; an attempt that fails (dedupctl exits non-zero) is run again
after RETRY_PAUSE_S, from this thread, through another drawn node, until
the move completes. An attempt still running after ATTEMPT_TIMEOUT_S
(--move-attempt-timeout) is killed and counted (its server-side task may
go on: a re-run resumes from whatever it reached, possibly beside it).
Limits: MAX_ATTEMPTS attempts in all, and once the fault schedule is over
and every node healed, HEALED_LIMIT_S for the move to complete; a move
that is refused (FAILED_PRECONDITION and the like: the move does not apply)
or that hits a limit fails the run.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from typing import Callable, Optional

# One dedupctl run: its own deadline is 30 minutes; a run that takes this
# long is stuck behind a fault (an isolated driving node whose peer calls
# wait out their 30 s step deadlines several times).
ATTEMPT_TIMEOUT_S = 120.0
RETRY_PAUSE_S = 1.0
MAX_ATTEMPTS = 40
# After the schedule and the healing: a move that has every node up needs
# one attempt of a few seconds (catching up a small group).
HEALED_LIMIT_S = 180.0
# Refusals that a re-run cannot change (dedupctl's -o json error codes).
FINAL_CODES = {"FAILED_PRECONDITION", "NOT_FOUND", "INVALID_ARGUMENT",
               "PERMISSION_DENIED", "UNAUTHENTICATED", "UNIMPLEMENTED"}


class MoveFailure(Exception):
    """A move was refused, or did not complete within its limits."""


def choose(groups: dict[int, list[int]], nodes: list[int],
           rng: random.Random) -> Optional[tuple[int, int, int]]:
    """(group, from, to) for a move, or None when no node is free to take
    a replica (every group on every node)."""
    options = [g for g, ids in sorted(groups.items()) if set(nodes) - set(ids)]
    if not options:
        return None
    g = rng.choice(options)
    src = rng.choice(sorted(groups[g]))
    dst = rng.choice(sorted(set(nodes) - set(groups[g])))
    return g, src, dst


class Mover(threading.Thread):
    """One move, run (and re-run) by this thread; `record` is its log
    entry for the summary and final.json; `on_done(record)` is called once
    the move completed (from this thread)."""

    def __init__(self, n: int, group: int, src: int, dst: int, dedupctl: str,
                 drivers: Callable[[], list[str]], now: Callable[[], float],
                 rng: random.Random, log=print,
                 on_done: Optional[Callable[[dict], None]] = None,
                 attempt_timeout_s: float = ATTEMPT_TIMEOUT_S) -> None:
        """drivers(): the client addresses of the nodes an attempt may ask
        to drive the move."""
        super().__init__(name=f"move{n}", daemon=True)
        self.dedupctl = dedupctl
        self.drivers = drivers
        self.now = now
        self.rng = rng
        self.log = log
        self.on_done = on_done
        self.attempt_timeout_s = attempt_timeout_s
        self.record: dict = {"n": n, "group": group, "from": src, "to": dst,
                             "t_start": now(), "t_done": None, "completed": False,
                             "replicas": None, "steps": [], "attempts": []}
        self.error: Optional[str] = None
        self._stopping = threading.Event()
        # Set once the schedule is over and every node healed: from then on
        # the move has HEALED_LIMIT_S.
        self._healed_at: Optional[float] = None
        self._proc: Optional[subprocess.Popen] = None

    @property
    def group(self) -> int:
        return self.record["group"]

    def healed(self) -> None:
        """The faults are over and every node is up: the limit starts."""
        self._healed_at = time.monotonic()

    def stop(self) -> None:
        """Ends the thread soon (cleanup): kills a running attempt."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def wait(self, timeout_s: float) -> None:
        """Joins; raises MoveFailure unless the move completed."""
        self.join(timeout_s)
        if self.is_alive():
            raise MoveFailure(f"move {self.describe()}: still running after "
                              f"{timeout_s:.0f} s more")
        if self.error is not None:
            raise MoveFailure(self.error)

    def describe(self) -> str:
        r = self.record
        return f"{r['n']} (group {r['group']} from node {r['from']} to node {r['to']})"

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - reported by wait()
            self.error = f"move {self.describe()}: {type(e).__name__}: {e}"

    def _run(self) -> None:
        r = self.record
        while not self._stopping.is_set():
            if len(r["attempts"]) >= MAX_ATTEMPTS:
                raise MoveFailure(f"not complete after {MAX_ATTEMPTS} attempts")
            if self._healed_at is not None and \
                    time.monotonic() - self._healed_at > HEALED_LIMIT_S:
                raise MoveFailure(f"not complete {HEALED_LIMIT_S:.0f} s after the "
                                  f"faults ended ({len(r['attempts'])} attempts)")
            attempt = self._attempt()
            r["attempts"].append(attempt)
            if attempt["exit"] == 0:
                r.update(completed=True, t_done=self.now(),
                         replicas=attempt["replicas"])
                self.log(f"move {self.describe()} complete after "
                         f"{len(r['attempts'])} attempt(s), "
                         f"{r['t_done'] - r['t_start']:.1f} s; replicas "
                         f"{','.join(map(str, attempt['replicas']))}")
                if self.on_done is not None:
                    self.on_done(r)
                return
            self.log(f"move {self.describe()}: attempt {len(r['attempts'])} via "
                     f"{attempt['via']} failed ({attempt['error']})")
            if attempt.get("code") in FINAL_CODES:
                raise MoveFailure(f"refused: {attempt['error']}")
            self._stopping.wait(RETRY_PAUSE_S)

    def _attempt(self) -> dict:
        r = self.record
        via = self.rng.choice(self.drivers())
        cmd = [self.dedupctl, f"--address={via}", "--follow_leader=false", "-o", "json",
               "cluster", "move", f"--group={r['group']}", f"--from={r['from']}",
               f"--to={r['to']}"]
        attempt: dict = {"t_start": self.now(), "via": via}
        try:
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
            out, err = self._proc.communicate(timeout=self.attempt_timeout_s)
            attempt["exit"] = self._proc.returncode
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, err = self._proc.communicate()
            attempt.update(exit="timeout",
                           error=f"killed after {self.attempt_timeout_s:.0f} s")
        attempt["t_end"] = self.now()
        if attempt["exit"] == 0:
            answer = json.loads(out)
            attempt["replicas"] = sorted(int(i) for i in answer.get("replicas", []))
            r["steps"].extend(answer.get("steps", []))
        elif "error" not in attempt:
            attempt.update(error_of(err, attempt["exit"]))
        return attempt


def error_of(stderr: str, code) -> dict:
    """A failed dedupctl's error: {"code", "error"} from its -o json
    object on stderr, or the stderr tail."""
    for line in reversed(stderr.strip().splitlines()):
        try:
            e = json.loads(line)["error"]
            return {"code": e.get("code"), "error": f"{e.get('code')}: "
                    f"{e.get('message', '')[:300]}"}
        except (ValueError, KeyError, TypeError):
            continue
    return {"code": None, "error": f"exit {code}: {stderr.strip()[-300:]}"}


# The stages of a move a fault may be aimed at, as the group's leader and
# the new node show them: just started; the new node hosts an (empty)
# replica; it is in the group's configuration (a learner catching up, or
# already more); it is a voter; the old node has left the configuration
# (its copy not necessarily deleted yet).
STAGES = ["started", "hosted", "member", "voter", "removed"]
STAGE_WAIT_S = 5.0


def move_stage(cluster, group: int, src: int, dst: int) -> str:
    """The furthest stage of STAGES the move of `group` from src to dst
    shows now (asked of every node that may hold the group)."""
    if cluster.nodes[dst].status(0.3, group=group) is None:
        return "started"
    for n in cluster.members(group):
        st = cluster.nodes[n].status(0.3, group=group)
        if st is None or st.role != "leader":
            continue
        roles = {m.id: m.role for m in st.members}
        if src not in roles and roles.get(dst) == "voter":
            return "removed"
        if roles.get(dst) == "voter":
            return "voter"
        if dst in roles:
            return "member"
    return "hosted"


def wait_for_stage(cluster, mover: "Mover", stage: str,
                   timeout_s: float = STAGE_WAIT_S) -> str:
    """Polls until the move reaches `stage` (or a later one), completes, or
    timeout_s passes; the last stage seen ("done" if it completed)."""
    want = STAGES.index(stage)
    deadline = time.monotonic() + timeout_s
    seen = "started"
    while True:
        if not mover.is_alive():
            return "done"
        seen = move_stage(cluster, mover.group, mover.record["from"],
                          mover.record["to"])
        if STAGES.index(seen) >= want or time.monotonic() > deadline:
            return seen
        time.sleep(0.01)


class Moves:
    """The run's moves: `count` of them, one at a time, each started just
    before a fault (before_fault, the driver's before_inject hook). With F
    faults and M moves, move i is due at a fault drawn from the first half
    of the i-th F/M stretch of the schedule (so faults follow it); a move
    due while the previous one is still under way waits for the next
    fault; a move still not started when the schedule ends starts then
    (finish())."""

    def __init__(self, count: int, faults: int, cluster, dedupctl: str,
                 now: Callable[[], float], rng: random.Random, log=print,
                 attempt_timeout_s: float = ATTEMPT_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.attempt_timeout_s = attempt_timeout_s
        self.dedupctl = dedupctl
        self.now = now
        self.rng = rng
        self.log = log
        stretch = max(1, faults // max(1, count))
        self.due = sorted(i * stretch + rng.randint(1, max(1, stretch // 2))
                          for i in range(count))
        self.movers: list[Mover] = []

    @property
    def records(self) -> list[dict]:
        return [m.record for m in self.movers]

    def _under_way(self) -> Optional[Mover]:
        return next((m for m in self.movers if m.is_alive()), None)

    def _check(self) -> None:
        """A mover that failed fails the run now."""
        for m in self.movers:
            if not m.is_alive() and m.error is not None:
                raise MoveFailure(m.error)

    def before_fault(self, n: int) -> Optional[dict]:
        """Starts the next move if it is due and none is under way, then
        waits until it reaches a stage drawn from STAGES, so that the fault
        lands on it: {"group": the moving group, "stage": the stage waited
        for, "reached": the last stage seen}, or None (no move started)."""
        self._check()
        if not self.due or self.due[0] > n or self._under_way() is not None:
            return None
        mover = self._start()
        if mover is None:
            return None
        stage = self.rng.choice(STAGES)
        reached = wait_for_stage(self.cluster, mover, stage)
        return {"group": mover.group, "stage": stage, "reached": reached}

    def _start(self) -> Optional[Mover]:
        self.due.pop(0)
        choice = choose(self.cluster.groups, sorted(self.cluster.nodes), self.rng)
        if choice is None:
            self.log("no move possible: every node hosts every group")
            return None
        g, src, dst = choice
        self.cluster.start_move(g, src, dst)
        mover = Mover(len(self.movers) + 1, g, src, dst, self.dedupctl,
                      lambda: [self.cluster.nodes[i].client_address
                               for i in self.cluster.members(g)],
                      self.now, self.rng, self.log,
                      on_done=lambda r: self.cluster.moved(r["group"], r["replicas"]),
                      attempt_timeout_s=self.attempt_timeout_s)
        self.log(f"move {mover.describe()} starts; group {g}'s replicas "
                 f"{','.join(map(str, self.cluster.groups[g]))}")
        self.movers.append(mover)
        mover.start()
        return mover

    def finish(self) -> None:
        """After the schedule, every node healed: the moves not started yet
        run now, one after the other, and every move must complete (within
        its limits, see the module doc)."""
        self._check()
        while True:
            m = self._under_way()
            if m is not None:
                m.healed()
                m.wait(HEALED_LIMIT_S + self.attempt_timeout_s + 30.0)
                continue
            if not self.due:
                break
            self.log("the schedule ended before this move was due: it runs "
                     "without faults")
            self._start()
        self._check()
        for m in self.movers:
            if not m.record["completed"]:
                raise MoveFailure(f"move {m.describe()} ended incomplete")

    def stop(self) -> None:
        for m in self.movers:
            m.stop()
        for m in self.movers:
            m.join(timeout=10)
