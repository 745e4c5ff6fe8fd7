#!/usr/bin/python3
"""Begin+Complete pairs/s from N Python threads, through the Python Client
(one unary RPC per call) and through a CoalescingClient on the same channel,
back to back against one running dedupd; prints both and their ratio.

    PYTHONPATH=client/python:build/client/python/gen \\
        bench/load/python_pairs.py --address=127.0.0.1:50051 --threads=32

Unique keys per run, so every pair is a STARTED then an OK (a fresh record
written twice); any other answer counts as an error and is printed.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

from dedup_client import Client, CoalescingClient, dedup_pb2


def run(api, label: str, threads: int, seconds: float) -> float:
    prefix = f"py-bench-{label}-{uuid.uuid4()}"
    stop = time.monotonic() + seconds
    counts = [0] * threads
    errors = [0] * threads

    def worker(t: int) -> None:
        i = 0
        while time.monotonic() < stop:
            key = f"{prefix}/{t}/{i}"
            i += 1
            try:
                begun = api.begin("bench", key, b"h", owner=key)
                done = api.complete("bench", key, begun.fence, dedup_pb2.SUCCESS, b"ok")
                if begun.status == dedup_pb2.BeginResponse.STARTED and \
                        done.status == dedup_pb2.CompleteResponse.OK:
                    counts[t] += 1
                else:
                    errors[t] += 1
            except Exception:  # noqa: BLE001 - counted and reported
                errors[t] += 1

    started = time.monotonic()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.monotonic() - started
    rate = sum(counts) / elapsed
    print(f"{label:>10}: {rate:9.0f} pairs/s ({sum(counts)} pairs, "
          f"{sum(errors)} errors, {threads} threads, {elapsed:.1f} s)")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with Client(args.address) as client:
        coalescing = CoalescingClient(client)
        for _ in range(args.rounds):
            unary = run(client, "unary", args.threads, args.seconds)
            coalesced = run(coalescing, "coalesced", args.threads, args.seconds)
            print(f"coalesced / unary = {coalesced / max(unary, 1e-9):.2f}")
        coalescing.close()


if __name__ == "__main__":
    main()
