"""How soon the channels a Client opens reconnect to a server that went away.

gRPC's own reconnect backoff waits 1 s after the first failed connection
attempt, then 1.6x longer each time (20 % jitter) up to 120 s: a client whose
dedupd restarted (a crash, a deploy, a node of a group coming back) kept
failing for seconds after it listened again, the longer the outage the
longer. Here attempts start 100 ms apart and never more than 1 s apart; on
loopback a refused attempt costs microseconds, on a network one SYN.

grpc.min_reconnect_backoff_ms is left alone on purpose: despite its name,
gRPC core reads it as the least time a connection attempt is given (20 s by
default; the attempt's deadline is the later of that and the next backoff
time). 100 ms there would cut off, after about 1 s at most, any connect
plus TLS handshake slower than that, e.g. a server busy with the handshakes
of all its clients at once after a restart, which would then never connect.

Measured with tests/python/integration/test_reconnect.py (grpcio 1.51, the
server SIGKILLed, the client calling every 50 ms, then a restart on the same
port), time from the server listening again to the first call it answered:
after a 0.25 s outage 0.62-0.72 s with gRPC's backoff, 0.15-0.17 s with
this one; after a 3 s outage 1.6-2.6 s, now 0.1-0.8 s (three runs each).
The channels must also be watched for this (routing.py): nothing else
drives a reconnect attempt while calls fail fast.
"""

from __future__ import annotations

from typing import Any, Sequence

RECONNECT_BACKOFF_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def with_reconnect_backoff(options: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """`options` and, for each of RECONNECT_BACKOFF_OPTIONS it does not set,
    that option: what a caller sets explicitly wins."""
    given = {name for name, _ in options}
    return list(options) + [o for o in RECONNECT_BACKOFF_OPTIONS if o[0] not in given]
