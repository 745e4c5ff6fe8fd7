#!/usr/bin/python3
"""dedupd's metrics port under hostile clients: with 300 idle connections and
20 slowloris connections (a request head trickled byte by byte) open, every
scrape is answered within 1 s; malformed requests get precise answers (400,
405, 414, 431, 505, 408 for the slowloris) and are counted; the process
survives; a --metrics_token_file still guards the page.

usage: metrics_http_test.py DEDUPD
"""

import os
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from promtest_util import Cleanup, Scrape, fail, log, start_dedupd

IDLE = 300
SLOW = 20
SCRAPE_BUDGET_S = 1.0
# server/metrics_http_server.h: MetricsHttpOptions defaults.
MAX_CONNECTIONS = 256
REQUEST_TIMEOUT_S = 5


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# Bytes read past an answer, per socket.
_unread = {}


def read_response(s, deadline, head=False):
    """(status, {header: value}, body) of one answer on `s` (to a HEAD
    request: no body); None on EOF or reset before a whole answer, or at the
    deadline. Bytes past the answer (a pipelined next answer that arrived in
    the same read) are kept for the next call on `s`."""
    data = _unread.pop(s, b"")
    while True:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            lines = data[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = 0 if head else int(headers.get("content-length", "0"))
            if len(data) >= head_end + 4 + length:
                body = data[head_end + 4:head_end + 4 + length]
                if len(data) > head_end + 4 + length:
                    _unread[s] = data[head_end + 4 + length:]
                return int(lines[0].split()[1]), headers, body
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return None
        if not chunk:
            return None
        data += chunk


def exchange(port, raw, timeout=SCRAPE_BUDGET_S):
    """Sends `raw` on a new connection; (answer, seconds taken)."""
    head = raw.startswith(b"HEAD ")
    start = time.monotonic()
    with connect(port) as s:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before all of it was sent
        answer = read_response(s, start + timeout, head)
    return answer, time.monotonic() - start


def get(port, path="/metrics", extra=""):
    return ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n"
            % (path, extra)).encode()


def timed_scrape(port, what):
    answer, took = exchange(port, get(port))
    if answer is None or answer[0] != 200:
        fail("%s: scrape answered %r after %.2fs, expected 200 within %ss"
             % (what, answer and answer[:2], took, SCRAPE_BUDGET_S))
    if b"dedup_begin_total" not in answer[2]:
        fail("%s: the page lacks dedup_begin_total" % what)
    log("%s: 200 in %.3fs" % (what, took))
    return Scrape(answer[2].decode())


class Slowloris:
    """Connections that send a request head one header line at a time,
    never finishing it."""

    def __init__(self, port, n):
        self.socks = [connect(port) for _ in range(n)]
        for s in self.socks:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self):
        while not self.stop.wait(0.5):
            for s in self.socks:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass  # answered 408 and closed

    def answers(self, deadline):
        self.stop.set()
        self.thread.join()
        return [read_response(s, deadline) for s in self.socks]


MALFORMED = [
    # (what, raw request, expected status)
    ("not HTTP", b"garbage\r\n\r\n", 400),
    ("a TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),
    ("HTTP/1.1 without Host", b"GET /metrics HTTP/1.1\r\n\r\n", 400),
    ("header line without colon",
     b"GET /metrics HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", 400),
    ("obsolete line folding",
     b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", 400),
    ("bad Content-Length",
     b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    ("GET with a body",
     b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 400),
    ("POST", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
             b"\r\nabc", 405),
    ("DELETE", b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ("unknown path", get(0, "/nope"), 404),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    ("request line of 20 KiB", get(0, "/" + "a" * 20000), 414),
    ("headers of 20 KiB", get(0, extra="X-Big: %s\r\n" % ("b" * 20000)), 431),
    ("400 header lines", get(0, extra="X-Many: 1234567890123456789\r\n" * 400),
     431),
]


def check_malformed(port):
    sent = {}
    for what, raw, want in MALFORMED:
        answer, took = exchange(port, raw)
        if answer is None or answer[0] != want:
            fail("%s: answered %r after %.2fs, expected %d"
                 % (what, answer and answer[:2], took, want))
        if want == 405 and answer[1].get("allow") != "GET, HEAD":
            fail("%s: 405 without Allow: GET, HEAD (%r)" % (what, answer[1]))
        sent[want] = sent.get(want, 0) + 1
        log("%s: %d in %.3fs" % (what, want, took))
    return sent


def check_keep_alive_and_head(port):
    with connect(port) as s:
        for i in range(3):
            s.sendall(get(port))
            answer = read_response(s, time.monotonic() + SCRAPE_BUDGET_S)
            if answer is None or answer[0] != 200:
                fail("keep-alive scrape %d: %r" % (i, answer and answer[:2]))
        # Two pipelined requests in one write: two answers, in order.
        s.sendall(get(port) + get(port, "/nope"))
        first = read_response(s, time.monotonic() + SCRAPE_BUDGET_S)
        second = read_response(s, time.monotonic() + SCRAPE_BUDGET_S)
        if (first and first[0], second and second[0]) != (200, 404):
            fail("pipelined: %r, %r; expected 200 then 404"
                 % (first and first[0], second and second[0]))
    answer, _ = exchange(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    if answer is None or answer[0] != 200 or \
            int(answer[1].get("content-length", 0)) < 1000:
        fail("HEAD /metrics: %r" % (answer and answer[:2]))
    log("keep-alive, pipelining and HEAD: OK")


def check_counters(s, sent, slow_408):
    for code, n in sent.items():
        got = s.value("dedup_metrics_http_requests_total", code=str(code))
        if got != n:
            fail("dedup_metrics_http_requests_total{code=%d} = %s, expected "
                 "%d" % (code, got, n))
    if s.value("dedup_metrics_http_requests_total", code="408") != slow_408:
        fail("408s not counted")
    evicted = s.value("dedup_metrics_http_connections_closed_total",
                      reason="evicted")
    if evicted < IDLE + SLOW - MAX_CONNECTIONS:
        fail("evicted %s connections, expected >= %d"
             % (evicted, IDLE + SLOW - MAX_CONNECTIONS))
    open_now = s.value("dedup_metrics_http_connections")
    if not 1 <= open_now <= MAX_CONNECTIONS:
        fail("dedup_metrics_http_connections = %s" % open_now)
    log("counters: %s; evicted %d; open %d"
        % (sorted(sent.items()), evicted, open_now))


def hostile_clients(dedupd):
    with Cleanup("dedup-metrics-http-") as c:
        _grpc, port = start_dedupd(c, dedupd, ["--event_log=off"])
        proc = c.procs[-1][1]
        timed_scrape(port, "no other connection")
        idle = [connect(port) for _ in range(IDLE)]
        slow = Slowloris(port, SLOW)
        time.sleep(0.2)
        opened = time.monotonic()
        for i in range(5):
            timed_scrape(port, "%d idle + %d slowloris open, scrape %d"
                         % (IDLE, SLOW, i + 1))
        check_keep_alive_and_head(port)
        sent = check_malformed(port)
        # 1 + 5 timed scrapes, 3 kept alive, 1 pipelined (and a 404), a HEAD.
        sent[200] = 11
        sent[404] += 1
        answers = slow.answers(opened + REQUEST_TIMEOUT_S + 3)
        timed_out = [a for a in answers if a is not None and a[0] == 408]
        if len(timed_out) != SLOW:
            fail("slowloris: %d of %d answered 408 within %ss: %r"
                 % (len(timed_out), SLOW, REQUEST_TIMEOUT_S + 3,
                    [a and a[0] for a in answers]))
        log("slowloris: %d answered 408 and closed" % SLOW)
        if proc.poll() is not None:
            fail("dedupd exited %s" % proc.returncode)
        check_counters(timed_scrape(port, "after the hostile clients"), sent,
                       SLOW)
        for s in idle + slow.socks:
            s.close()


def bearer_token(dedupd):
    with Cleanup("dedup-metrics-token-") as c:
        token_file = os.path.join(c.dir, "token")
        with open(token_file, "w") as f:
            f.write("s3cret\n")
        _grpc, port = start_dedupd(c, dedupd, [
            "--event_log=off", "--metrics_token_file=" + token_file])
        for extra in ("", "Authorization: Bearer wrong\r\n"):
            answer, _ = exchange(port, get(port, extra=extra))
            if answer is None or answer[0] != 401 or \
                    "bearer" not in answer[1].get("www-authenticate",
                                                  "").lower():
                fail("no or wrong token: %r, expected 401 with "
                     "WWW-Authenticate" % (answer and answer[:2]))
        answer, _ = exchange(port, get(port, extra="Authorization: Bearer "
                                                   "s3cret\r\n"))
        if answer is None or answer[0] != 200:
            fail("right token: %r" % (answer and answer[:2]))
        log("--metrics_token_file: 401 without the token, 200 with it")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    hostile_clients(sys.argv[1])
    bearer_token(sys.argv[1])
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
