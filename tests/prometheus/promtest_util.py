"""Helpers for the Prometheus end-to-end tests (Python standard library only).

Starts the real dedupd and Prometheus as child processes that die with the
test (PR_SET_PDEATHSIG) and are stopped by Cleanup, drives dedupd with
dedupctl, scrapes /metrics and parses the text exposition format.
"""

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

# tests/, for the ready-file reader all Python harnesses share.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from history.ready import NotReady, wait_ready  # noqa: E402

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # Runs in the child between fork and exec: if the test is killed (ctest
    # timeout), the kernel sends the child SIGKILL.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def fail(message):
    print("FAIL: " + message, file=sys.stderr, flush=True)
    raise SystemExit(1)


def log(message):
    print(message, flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cleanup:
    """Context manager owning a temp dir and the child processes."""

    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.procs = []  # (name, Popen, log path)
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, _frame):
        raise SystemExit(128 + signum)

    def spawn(self, name, argv):
        log_path = os.path.join(self.dir, name + ".log")
        out = open(log_path, "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
        out.close()
        self.procs.append((name, proc, log_path))
        return proc, log_path

    def dump_logs(self):
        for name, _proc, path in self.procs:
            try:
                with open(path, "r", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            tail = "\n".join(text.splitlines()[-40:])
            print("---- last lines of %s log ----\n%s" % (name, tail),
                  file=sys.stderr)

    def __exit__(self, exc_type, exc, tb):
        failed = exc_type is not None and not (
            exc_type is SystemExit and exc.code in (0, None))
        if failed:
            self.dump_logs()
        for _name, proc, _path in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


def start_dedupd(cleanup, dedupd, extra_args=(), timeout=20):
    """Starts dedupd on free ports; returns (grpc_port, metrics_port), read
    from its --ready_file (JSON with the bound addresses, server/ready_file.h)."""
    data_dir = os.path.join(cleanup.dir, "data")
    ready_path = os.path.join(cleanup.dir, "dedupd.ready.json")
    if os.path.exists(ready_path):
        os.remove(ready_path)  # an earlier dedupd's
    argv = [dedupd, "--data_dir=" + data_dir, "--address=127.0.0.1:0",
            "--metrics_address=127.0.0.1:0", "--durability=none",
            "--ready_file=" + ready_path]
    argv += list(extra_args)
    log("starting " + " ".join(argv))
    proc, _log_path = cleanup.spawn("dedupd", argv)
    try:
        ready = wait_ready(ready_path, proc, timeout, poll_s=0.05)
    except NotReady as e:
        fail(str(e))
    if not ready["metrics_address"]:
        fail("dedupd's ready file names no metrics address: %r" % ready)
    return (int(ready["address"].rsplit(":", 1)[1]),
            int(ready["metrics_address"].rsplit(":", 1)[1]))


class Ctl:
    """Runs dedupctl against one server; parses its 'field: value' lines."""

    def __init__(self, dedupctl, grpc_port):
        self.dedupctl = dedupctl
        self.address = "127.0.0.1:%d" % grpc_port

    def run(self, *args, expect_rc=0):
        argv = [self.dedupctl, "--address=" + self.address] + list(args)
        res = subprocess.run(argv, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=20)
        if res.returncode != expect_rc:
            fail("%s exited %d (expected %d)\nstdout:\n%s\nstderr:\n%s"
                 % (" ".join(argv), res.returncode, expect_rc, res.stdout,
                    res.stderr))
        fields = {}
        for line in res.stdout.splitlines():
            name, sep, value = line.partition(": ")
            if sep:
                fields[name.strip()] = value.strip()
        return fields

    def begin(self, ns, key, *flags, expect_status=None, expect_rc=0):
        fields = self.run("begin", ns, key, *flags, expect_rc=expect_rc)
        if expect_status is not None and fields.get("status") != expect_status:
            fail("begin %s %s %s: status %r, expected %s (output %r)"
                 % (ns, key, " ".join(flags), fields.get("status"),
                    expect_status, fields))
        return fields

    def complete(self, ns, key, fence, *flags, expect_rc=0):
        return self.run("complete", ns, key, str(fence), *flags,
                        expect_rc=expect_rc)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode("utf-8", errors="replace")


def scrape(metrics_port, host="127.0.0.1"):
    status, body = http_get("http://%s:%d/metrics" % (host, metrics_port))
    if status != 200:
        fail("GET /metrics answered %d" % status)
    return body


_SAMPLE_RE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_exposition(text):
    """Returns (types {family: type}, samples [(name, {labels}, value)])."""
    types, samples = {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            fail("unparsable exposition line: %r" % line)
        labels = {}
        rest = m.group(2) or ""
        pos = 0
        while pos < len(rest):
            lm = _LABEL_RE.match(rest, pos)
            if not lm:
                fail("unparsable labels in line: %r" % line)
            labels[lm.group(1)] = re.sub(r'\\(.)', r'\1', lm.group(2))
            pos = lm.end()
        samples.append((m.group(1), labels, float(m.group(3))))
    return types, samples


class Scrape:
    def __init__(self, text):
        self.text = text
        self.types, self.samples = parse_exposition(text)

    def find(self, name, **labels):
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == x for k, x in labels.items())]

    def value(self, name, **labels):
        """The value of the single series `name` whose labels include
        `labels`; fails if there is not exactly one."""
        found = self.find(name, **labels)
        if len(found) != 1:
            fail("expected exactly one series %s%s in /metrics, found %d: %r"
                 % (name, labels, len(found), found))
        return found[0][1]


def promtool_check_metrics(promtool, text):
    res = subprocess.run([promtool, "check", "metrics"], input=text,
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        fail("promtool check metrics exited %d:\n%s%s"
             % (res.returncode, res.stdout, res.stderr))
    log("promtool check metrics: OK %s" % (res.stdout + res.stderr).strip())
