"""dedupd's stderr against real processes: every line is one JSON object
with ts (RFC 3339 UTC, microseconds), level, component and msg, whatever
wrote it (dedupd, gRPC, protobuf, RocksDB, libraft), through start, traffic
with bad requests and refused tokens, a bad tenants-file reload and SIGTERM,
for a single node and a 3-node group; with --log_format=text no line is JSON
and each has a level; the event log's lines are on stdout, never on stderr.

Usage: structured_logs_test.py DEDUPD (PYTHONPATH: the Python client and its
generated stubs, as for tests/python)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Optional

import grpc

from dedup_client._proto import dedup_pb2, dedup_pb2_grpc

DEDUPD = ""
TOKEN = "logs-token-5e1f"
OPS_TOKEN = "logs-ops-token-9a2c"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LEVELS = {"debug", "info", "warning", "error"}
TEXT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (DEBUG|INFO|WARNING|ERROR) "
    r"[a-z]+: ")
EVENTS = {"duplicate", "takeover", "stale_fence", "conflict"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tenants_json(valid: bool = True) -> str:
    if not valid:
        return '{"tenants": [ {"name": '
    def digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()
    return json.dumps({"tenants": [
        {"name": "billing", "token_sha256": [digest(TOKEN)],
         "namespace_prefixes": ["billing:"], "roles": ["client"]},
        {"name": "ops", "token_sha256": [digest(OPS_TOKEN)],
         "namespace_prefixes": [""], "roles": ["operator"]}]})


class Node:
    """One dedupd with its stdout and stderr in files of their own."""

    def __init__(self, work: Path, name: str, flags: list[str],
                 env: Optional[dict[str, str]] = None) -> None:
        self.name = name
        self.ready = work / f"{name}.ready.json"
        self.stdout_path = work / f"{name}.stdout"
        self.stderr_path = work / f"{name}.stderr"
        with open(self.stdout_path, "wb") as out, \
                open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                [DEDUPD, f"--data_dir={work / name}", "--metrics_address=",
                 f"--ready_file={self.ready}", *flags],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env={**os.environ, **(env or {})})
        self.address = ""

    def wait_ready(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready.exists():
                ready = json.loads(self.ready.read_text())
                if ready.get("pid") == self.process.pid:
                    self.address = ready["address"]
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name} did not start:\n{self.stderr()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")


def call(address: str, method: str, request, token: Optional[str] = TOKEN):
    """The response, or the grpc.RpcError (refusals are expected here)."""
    with grpc.insecure_channel(address) as channel:
        stub = dedup_pb2_grpc.DedupStub(channel)
        metadata = [("authorization", f"Bearer {token}")] if token else []
        try:
            return getattr(stub, method)(request, metadata=metadata,
                                         timeout=10)
        except grpc.RpcError as error:
            return error


def drive_traffic(address: str, tag: str) -> None:
    """Events (takeover, stale fence, duplicate, conflict), bad requests
    (invalid fields, bytes that are no protobuf, a method that does not
    exist) and refused tokens."""
    ns, key = "billing:logs", f"k-{tag}"
    first = call(address, "Begin", dedup_pb2.BeginRequest(
        namespace=ns, key=key, owner="o1", lease_ms=100))
    assert first.status == dedup_pb2.BeginResponse.STARTED, first
    time.sleep(0.2)
    taken = call(address, "Begin",
                 dedup_pb2.BeginRequest(namespace=ns, key=key, owner="o2"))
    assert taken.takeover, taken
    call(address, "Complete", dedup_pb2.CompleteRequest(
        namespace=ns, key=key, fence=first.fence, outcome=dedup_pb2.SUCCESS))
    done = call(address, "Complete", dedup_pb2.CompleteRequest(
        namespace=ns, key=key, fence=taken.fence, outcome=dedup_pb2.SUCCESS,
        result=b"ok"))
    assert not isinstance(done, grpc.RpcError), done
    call(address, "Begin", dedup_pb2.BeginRequest(namespace=ns, key=key))
    call(address, "Begin", dedup_pb2.BeginRequest(
        namespace=ns, key=key, args_hash=b"other"))
    bad = call(address, "Begin", dedup_pb2.BeginRequest(namespace=ns))
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
    for token in ("wrong-token", None):
        refused = call(address, "Begin", dedup_pb2.BeginRequest(
            namespace=ns, key=key), token=token)
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, refused
    with grpc.insecure_channel(address) as channel:
        for method, payload in (("/dedup.v1.Dedup/Begin", b"\xff\xff\xff"),
                                ("/dedup.v1.Dedup/Begin", b"\x0a\x02\xff\xfe"),
                                ("/dedup.v1.Dedup/Nope", b"")):
            raw = channel.unary_unary(method, request_serializer=None,
                                      response_deserializer=None)
            try:
                raw(payload, timeout=10,
                    metadata=[("authorization", f"Bearer {TOKEN}")])
            except grpc.RpcError:
                pass


def json_lines(test: unittest.TestCase, text: str, where: str) -> list[dict]:
    lines = text.splitlines()
    test.assertTrue(lines, f"{where}: nothing written")
    parsed = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            test.fail(f"{where}: not JSON: {line!r}")
        test.assertIsInstance(obj, dict, f"{where}: {line!r}")
        test.assertRegex(obj.get("ts", ""), TS, f"{where}: {line!r}")
        test.assertIn(obj.get("level"), LEVELS, f"{where}: {line!r}")
        test.assertRegex(obj.get("component", ""), r"^[a-z]+$",
                         f"{where}: {line!r}")
        test.assertIsInstance(obj.get("msg"), str, f"{where}: {line!r}")
        test.assertNotIn(obj.get("event"), EVENTS,
                         f"{where}: an event on stderr: {line!r}")
        parsed.append(obj)
    return parsed


class StructuredLogsTest(unittest.TestCase):

    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="dedup-logs-")
        self.work = Path(self._dir.name)
        self.tenants = self.work / "tenants.json"
        self.tenants.write_text(tenants_json())
        self.nodes: list[Node] = []

    def tearDown(self) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.kill()
                node.process.wait()
        self._dir.cleanup()

    def start(self, name: str, flags: list[str],
              env: Optional[dict[str, str]] = None) -> Node:
        node = Node(self.work, name,
                    [f"--tenants_file={self.tenants}", *flags], env)
        self.nodes.append(node)
        return node

    def assert_events_on_stdout(self, nodes: list[Node]) -> None:
        seen = set()
        for node in nodes:
            for line in node.stdout().splitlines():
                seen.add(json.loads(line)["event"])
        self.assertTrue({"takeover", "stale_fence", "duplicate",
                         "conflict"} <= seen, seen)

    def test_single_node_writes_json_lines(self) -> None:
        # gRPC's own debug lines too (GRPC_VERBOSITY): they must come
        # through dedupd's log, not gRPC's format.
        node = self.start("single", [f"--address=127.0.0.1:{free_port()}",
                                     "--durability=none", "--log_level=debug"],
                          env={"GRPC_VERBOSITY": "debug"})
        node.wait_ready()
        drive_traffic(node.address, "single")
        # A tenants file that does not parse, reloaded: a warning.
        self.tenants.write_text(tenants_json(valid=False))
        node.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "not reloaded" not in node.stderr() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(node.stop(), 0, node.stderr())

        lines = json_lines(self, node.stderr(), "single")
        components = {line["component"] for line in lines}
        self.assertTrue({"server", "auth", "grpc", "protobuf"} <= components,
                        components)
        listening = [line for line in lines if line.get("event") == "listening"]
        self.assertEqual(len(listening), 1, lines)
        self.assertEqual(listening[0]["address"], node.address)
        self.assertTrue(any(line["component"] == "auth" and
                            line["level"] == "warning" for line in lines))
        self.assertTrue(any(line["msg"] == "stopped cleanly" for line in lines))
        self.assert_events_on_stdout([node])

    def test_group_writes_json_lines(self) -> None:
        ids = (1, 2, 3)
        raft = {n: f"127.0.0.1:{free_port()}" for n in ids}
        client = {n: f"127.0.0.1:{free_port()}" for n in ids}
        peers = ",".join(f"{n}={raft[n]}={client[n]}" for n in ids)
        peer_token = self.work / "peer-token"
        peer_token.write_text(OPS_TOKEN + "\n")
        nodes = [self.start(f"n{n}", [f"--node_id={n}", f"--peers={peers}",
                                      f"--address={client[n]}",
                                      f"--peer_token_file={peer_token}"],
                            # libraft's own trace lines, through dedupd's log.
                            env={"LIBRAFT_TRACE": "1"} if n == 3 else None)
                 for n in ids]
        for node in nodes:
            node.wait_ready()
        deadline = time.monotonic() + 30
        leader = None
        while leader is None and time.monotonic() < deadline:
            for node in nodes:
                answer = call(node.address, "Begin", dedup_pb2.BeginRequest(
                    namespace="billing:logs", key="probe"))
                if not isinstance(answer, grpc.RpcError):
                    leader = node
                    break
            time.sleep(0.1)
        self.assertIsNotNone(leader, "no leader answered")
        drive_traffic(leader.address, "group")
        for node in nodes:
            self.assertEqual(node.stop(), 0, node.stderr())

        for node in nodes:
            lines = json_lines(self, node.stderr(), node.name)
            self.assertEqual(
                sum(line.get("event") == "listening" for line in lines), 1)
            # A fresh node's first start is normal: no RocksDB error.
            self.assertEqual([line for line in lines
                              if line["component"] == "rocksdb" and
                              line["level"] == "error"], [])
        traced = json_lines(self, nodes[2].stderr(), "n3")
        self.assertTrue(any(line["component"] == "raft" for line in traced))
        self.assert_events_on_stdout(nodes)

    def test_refused_starts_write_json_lines(self) -> None:
        # An address in use: gRPC says why at its default verbosity (error),
        # then dedupd; a flag that does not exist is refused before any.
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            in_use = subprocess.run(
                [DEDUPD, f"--address=127.0.0.1:{port}", "--metrics_address=",
                 f"--data_dir={self.work / 'in-use'}"],
                capture_output=True, text=True, timeout=30)
        self.assertEqual(in_use.returncode, 4, in_use.stderr)
        lines = json_lines(self, in_use.stderr, "address in use")
        self.assertIn(("grpc", "error"),
                      {(line["component"], line["level"]) for line in lines})
        unknown = subprocess.run([DEDUPD, "--no_such_flag"],
                                 capture_output=True, text=True, timeout=30)
        self.assertEqual(unknown.returncode, 2, unknown.stderr)
        self.assertIn("--no_such_flag",
                      json_lines(self, unknown.stderr, "unknown flag")[0]["msg"])

    def test_text_format_is_for_people(self) -> None:
        node = self.start("text", [f"--address=127.0.0.1:{free_port()}",
                                   "--durability=none", "--log_format=text"],
                          env={"GRPC_VERBOSITY": "info"})
        node.wait_ready()
        drive_traffic(node.address, "text")
        self.assertEqual(node.stop(), 0, node.stderr())
        lines = node.stderr().splitlines()
        self.assertTrue(any("listening on " + node.address in line
                            for line in lines), lines)
        for line in lines:
            self.assertRegex(line, TEXT_LINE)
            with self.assertRaises(ValueError, msg=line):
                json.loads(line)
        self.assert_events_on_stdout([node])
        # Refused flags are reported in the format asked for too.
        bad = subprocess.run([DEDUPD, "--log_format=text", "--log_level=loud"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertRegex(bad.stderr, TEXT_LINE)
        self.assertIn("--log_level", bad.stderr)


if __name__ == "__main__":
    DEDUPD = sys.argv.pop(1)
    unittest.main(verbosity=2)
