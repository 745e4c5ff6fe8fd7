"""Writes the compatibility fixture's known records into a running dedupd
(single node, or a group's leader) and prints the manifest: for each record
its kind, what it was written with and what Get answered just before the
server stopped. tests/compat/make_fixture.sh runs it against the previous
release's dedupd with that release's own Python stubs (PYTHONPATH); the
upgrade test (test_upgrade.py) checks a new dedupd against the manifest.

Usage: write_records.py TARGET[,TARGET...] > manifest.json

The kinds (what a Begin answers after the upgrade):
  completed      DUPLICATE with the stored outcome and result (SUCCESS and
                 ERROR; record format 1 and 2)
  error_retry    an ERROR in a namespace whose policy retries errors: a fresh
                 STARTED with a higher fence
  in_flight      IN_USE to another owner while the lease lasts, the owner's
                 own Begin STARTED again with the same fence; after the lease
                 a takeover (STARTED, takeover, higher fence)
  lease_expired  a takeover at once; `checkpoint` when one was recorded
  released       no record: STARTED with a higher fence, not a takeover
  forgotten      no record: the same
  tombstone      expired and retained: EXPIRED with the outcome, Get finds
                 nothing
  expired        expired without retention: no record, STARTED
"""

from __future__ import annotations

import json
import sys
import time

import grpc
from google.protobuf import json_format

from dedup.v1 import dedup_pb2 as pb
from dedup.v1 import dedup_pb2_grpc as pb_grpc

# Long enough that nothing but the tombstones expires while the fixture is
# in use (the server runs with --max_ttl_s raised to allow it).
LONG_TTL_S = 3_000_000_000
# The largest lease the protocol carries (uint32 ms, about 49.7 days).
LONGEST_LEASE_MS = 4_294_967_295


def find_leader(targets: list[str], timeout_s: float = 30) -> pb_grpc.DedupStub:
    """The stub of the member that answers a Get (only a leader does)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for target in targets:
            stub = pb_grpc.DedupStub(grpc.insecure_channel(target))
            try:
                stub.Get(pb.GetRequest(namespace="probe", key="probe"), timeout=2)
                return stub
            except grpc.RpcError:
                continue
        time.sleep(0.2)
    raise TimeoutError(f"no member of {targets} answers")


def compact(target: str) -> None:
    """Admin.Compact on one member (per node; the stubs here are dedup.proto's
    only, and an empty CompactRequest is empty bytes)."""
    call = grpc.insecure_channel(target).unary_unary(
        "/dedup.v1.Admin/Compact", request_serializer=lambda _: b"",
        response_deserializer=lambda raw: raw)
    call(None, timeout=30)


class Writer:
    def __init__(self, stub: pb_grpc.DedupStub) -> None:
        self.stub = stub
        self.records: list[dict] = []

    def begin(self, ns: str, key: str, owner: str, **kw) -> pb.BeginResponse:
        reply = self.stub.Begin(pb.BeginRequest(
            namespace=ns, key=key, args_hash=f"args:{key}".encode(), owner=owner,
            **kw), timeout=10)
        if reply.status != pb.BeginResponse.STARTED:
            raise SystemExit(f"{ns}/{key}: Begin answered {reply}")
        return reply

    def complete(self, ns: str, key: str, fence: int, outcome: int, result: bytes,
                 ttl_s: int = 0) -> None:
        reply = self.stub.Complete(pb.CompleteRequest(
            namespace=ns, key=key, fence=fence, outcome=outcome, result=result,
            ttl_s=ttl_s), timeout=10)
        if reply.status != pb.CompleteResponse.OK:
            raise SystemExit(f"{ns}/{key}: Complete answered {reply}")

    def note(self, kind: str, ns: str, key: str, **extra) -> None:
        self.records.append({"kind": kind, "namespace": ns, "key": key,
                             "args_hash": f"args:{key}", **extra})

    def write(self, targets: list[str]) -> None:
        """The records; the first ones are compacted into table files (the
        expired ones dropped or shrunk to tombstones), the rest stay in the
        WAL (single node) or the Raft log and WAL (group)."""
        # Completed with a 1 s TTL: expired before the compaction.
        # mail: keeps a tombstone (the server's retention); billing: keeps
        # none (its policy).
        for ns, key, kind in [("mail:out", "tombstone", "tombstone"),
                              ("billing:eu", "expired", "expired")]:
            fence = self.begin(ns, key, "worker-f", ttl_s=1).fence
            self.complete(ns, key, fence, pb.SUCCESS, b'{"done":true}', ttl_s=1)
            self.note(kind, ns, key, fence=fence)
        for i in range(40):
            ns = ("billing:eu", "mail:out", "jobs:nightly")[i % 3]
            key = f"bulk-{i:03d}"
            fence = self.begin(ns, key, f"w{i}", ttl_s=LONG_TTL_S).fence
            result = json.dumps({"n": i, "pad": "x" * (i * 7)}).encode()
            if ns.startswith("jobs:"):
                result = json.dumps({"name": "Busy", "message": f"n={i}"}).encode()
            outcome = pb.ERROR if ns.startswith("jobs:") else pb.SUCCESS
            self.complete(ns, key, fence, outcome, result)
            self.note("error_retry" if ns.startswith("jobs:") else "completed",
                      ns, key, fence=fence)
        time.sleep(2.5)
        for target in targets:
            compact(target)
        error = b'{"name":"CardDeclined","message":"insufficient funds","code":"51"}'
        for ns, key, outcome, result in [
                ("billing:eu", "charge-ok", pb.SUCCESS, b'{"charged":1250}'),
                ("billing:eu", "charge-declined", pb.ERROR, error),
                ("mail:out", "sent", pb.SUCCESS, b"\x00raw bytes\xff")]:
            fence = self.begin(ns, key, "payer", ttl_s=LONG_TTL_S).fence
            self.complete(ns, key, fence, outcome, result)
            self.note("completed", ns, key, fence=fence)
        fence = self.begin("mail:out", "in-flight", "worker-a", ttl_s=LONG_TTL_S,
                           lease_ms=LONGEST_LEASE_MS).fence
        self.note("in_flight", "mail:out", "in-flight", fence=fence, owner="worker-a")
        fence = self.begin("mail:out", "lease-gone", "worker-b", ttl_s=LONG_TTL_S,
                           lease_ms=100).fence
        self.note("lease_expired", "mail:out", "lease-gone", fence=fence)
        fence = self.begin("jobs:nightly", "checkpointed", "worker-c",
                           ttl_s=LONG_TTL_S, lease_ms=100).fence
        reply = self.stub.Checkpoint(pb.CheckpointRequest(
            namespace="jobs:nightly", key="checkpointed", fence=fence,
            step="charged", data=b"\x00\x01step-data"), timeout=10)
        if reply.status != pb.CheckpointResponse.OK:
            raise SystemExit(f"Checkpoint answered {reply}")
        self.note("lease_expired", "jobs:nightly", "checkpointed", fence=fence,
                  checkpoint={"step": "charged", "data": "AAFzdGVwLWRhdGE="})
        fence = self.begin("billing:eu", "released", "worker-d").fence
        self.stub.Release(pb.ReleaseRequest(
            namespace="billing:eu", key="released", fence=fence), timeout=10)
        self.note("released", "billing:eu", "released", fence=fence)
        fence = self.begin("mail:out", "forgotten", "worker-e").fence
        self.complete("mail:out", "forgotten", fence, pb.SUCCESS, b"gone")
        self.stub.Forget(pb.ForgetRequest(namespace="mail:out", key="forgotten"),
                         timeout=10)
        self.note("forgotten", "mail:out", "forgotten", fence=fence)

    def read_back(self) -> None:
        """Adds what Get answers for each record: the upgrade test expects
        exactly this."""
        for record in self.records:
            reply = self.stub.Get(pb.GetRequest(
                namespace=record["namespace"], key=record["key"]), timeout=10)
            record["get"] = json_format.MessageToDict(reply)
        tomb = next(r for r in self.records if r["kind"] == "tombstone")
        reply = self.stub.Begin(pb.BeginRequest(
            namespace=tomb["namespace"], key=tomb["key"],
            args_hash=tomb["args_hash"].encode()), timeout=10)
        if reply.status != pb.BeginResponse.EXPIRED:
            raise SystemExit(f"tombstone: Begin answered {reply}")
        tomb["begin"] = json_format.MessageToDict(reply)


def main() -> None:
    targets = sys.argv[1].split(",")
    writer = Writer(find_leader(targets))
    writer.write(targets)
    writer.read_back()
    json.dump({"records": writer.records}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
