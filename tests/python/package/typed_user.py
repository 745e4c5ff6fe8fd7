"""A user's program of the installed dedup_client, type-checked with
`mypy --strict` (test_typecheck.py) and run against dedupd: it reads
DEDUP_ADDRESS, imports nothing from grpc (no type information there), and
uses the package's enums, errors and helpers as the README shows."""

from __future__ import annotations

import asyncio
import sys

from dedup_client import (
    AsyncClient,
    BeginStatus,
    Client,
    FenceStatus,
    IdempotentResult,
    Outcome,
    RpcError,
    StatusCode,
    __version__,
    args_hash,
    idempotent,
    with_idempotency,
)

client = Client()  # DEDUP_ADDRESS


@idempotent(client, "typed:send")
def send(invoice_id: str, amount: int = 100) -> dict[str, int]:
    return {"amount": amount}


def sync_part() -> list[str]:
    begun = client.begin("typed:raw", "k1", args_hash({"a": 1}))
    status = BeginStatus(begun.status)
    done = client.complete("typed:raw", "k1", begun.fence, Outcome.SUCCESS, b"{}")
    fence_status: FenceStatus = FenceStatus(done.status)
    result: IdempotentResult[dict[str, int]] = with_idempotency(
        client, "typed:wi", {"n": 1}, lambda: {"n": 1})
    outcome: Outcome = result.outcome
    first = send("inv-1")
    again = send("inv-1", 100)  # the default given explicitly: the same call
    try:
        client.begin("", "k", b"")
        code = "none"
    except RpcError as error:
        code = error.code().name if error.code() != StatusCode.OK else "OK"
    return [status.name, fence_status.name, outcome.name, str(first["amount"]),
            str(first == again), code]


async def async_part() -> str:
    aio = AsyncClient()
    try:
        got = await aio.get("typed:raw", "k1")
        return "found" if got.found else "missing"
    finally:
        await aio.close()


def main() -> int:
    try:
        print(" ".join([__version__, *sync_part(), asyncio.run(async_part())]))
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
