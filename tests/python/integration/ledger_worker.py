"""One competing process for the concurrency test.

usage: ledger_worker.py TARGET NAMESPACE KEY LEDGER
Prints "ready", waits for a line on stdin (so every worker starts at once),
runs the idempotent append, and prints its IdempotentResult as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time

from dedup_client import Client, with_idempotency


def main() -> None:
    target, namespace, key, ledger = sys.argv[1:5]
    client = Client(target)

    def append() -> str:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(f"charged by {os.getpid()}\n")
        # Hold the claim a while, so the others really find it IN_USE.
        time.sleep(0.5)
        return f"receipt-{os.getpid()}"

    print("ready", flush=True)
    sys.stdin.readline()
    out = with_idempotency(client, namespace, {"amount": 5}, append, key=key)
    print(json.dumps({"result": out.result, "duplicate": out.duplicate}), flush=True)
    client.close()


if __name__ == "__main__":
    main()
