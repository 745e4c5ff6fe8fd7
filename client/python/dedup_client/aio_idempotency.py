"""with_idempotency_async and @idempotent on `async def`: the asyncio form of
dedup_client.idempotency, for AsyncClient and AsyncCoalescingClient.

The flow, answers, stored payloads and errors are those of with_idempotency
(the Begin loop and the answer mapping are shared: idempotency.BeginLoop,
failure_action, success_complete, check_complete); waits are awaited, never
blocking the event loop. While the function runs its lease is renewed by an
asyncio task every third of the lease (dedup_client.claim); if a renewal
learns the claim is lost, current_claim().lost (an asyncio.Event) is set and
current_claim().check() raises ClaimLost. `await
current_claim().checkpoint(step, data)` records progress (an AsyncClaim).

    dedup = AsyncCoalescingClient("127.0.0.1:50051")

    @mcp.tool()
    @idempotent(dedup, "billing:send_invoice", key_from=lambda a: a["invoice_id"])
    async def send_invoice(invoice_id: str, email: str) -> dict: ...

The decorated function is an `async def` with the wrapped one's signature
(frameworks such as FastMCP inspect both); `await send_invoice.with_outcome(...)`
returns the IdempotentResult.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Awaitable, Callable, Optional, TypeVar, Union

from dedup_client._proto import dedup_pb2
from dedup_client.claim import AsyncLeaseRenewer, Claim, _current_claim, claim_of, renew_interval_s
from dedup_client.idempotency import (
    RECORD,
    RELEASE,
    STARTED,
    BeginLoop,
    IdempotentResult,
    arguments_of,
    check_complete,
    encode_error,
    failure_action,
    is_async_client,
    note_not_recorded,
    stop_renewing,
    success_complete,
)

T = TypeVar("T")

# AsyncClient or AsyncCoalescingClient (any client whose calls are coroutines).
AsyncAnyClient = Any


async def with_idempotency_async(
    client: AsyncAnyClient,
    namespace: str,
    args: Any,
    fn: Callable[[], Union[Awaitable[T], T]],
    key: Optional[str] = None,
    *,
    lease_ms: int = 0,
    ttl_s: int = 0,
    wait_per_call_s: float = 10.0,
    deadline_s: float = 120.0,
    is_retryable: Optional[Callable[[Exception], bool]] = None,
    renew: bool = True,
    accept_rerun: bool = False,
) -> IdempotentResult[T]:
    """with_idempotency for asyncio: runs `await fn()` (fn may also return a
    plain value) at most once for (namespace, key). Same arguments, answers
    and errors as with_idempotency; client is an AsyncClient or
    AsyncCoalescingClient."""
    if not is_async_client(client):
        raise TypeError(
            "with_idempotency_async needs an AsyncClient or AsyncCoalescingClient "
            f"(not {type(client).__name__}); use with_idempotency with a Client")
    loop = BeginLoop(namespace, args, key, lease_ms=lease_ms, ttl_s=ttl_s,
                     wait_per_call_s=wait_per_call_s, deadline_s=deadline_s,
                     accept_rerun=accept_rerun)
    while True:
        sent = time.monotonic()
        begin = await client.begin(namespace, loop.key, loop.args_hash, **loop.next_begin())
        done = loop.answer(begin)
        if done is STARTED:
            return await _execute(client, loop, begin, fn, is_retryable, renew)
        if done is not None:
            return done
        pause = loop.pause_s(begin, sent)
        if pause > 0:
            await asyncio.sleep(pause)
        loop.wait_more(begin)


async def _execute(
    client: AsyncAnyClient,
    loop: BeginLoop,
    begin: dedup_pb2.BeginResponse,
    fn: Callable[[], Union[Awaitable[T], T]],
    is_retryable: Optional[Callable[[Exception], bool]],
    renew: bool,
) -> IdempotentResult[T]:
    claim = claim_of(loop.namespace, loop.key, begin, lost=asyncio.Event(),
                     client=client, lease_ms=loop.lease_ms)
    interval = renew_interval_s(begin, loop.lease_ms) if renew else None
    renewer = AsyncLeaseRenewer(client, claim, loop.lease_ms, interval) if interval else None
    token = _current_claim.set(claim)
    if renewer is not None:
        renewer.start()
    try:
        value = fn()
        if inspect.isawaitable(value):
            value = await value
    except Exception as error:
        lost = stop_renewing(renewer, claim)
        action = failure_action(error, is_retryable, lost)
        if action == RELEASE:
            await _release_quietly(client, claim)
        elif action == RECORD:
            await _record_error(client, claim, error)
        raise
    except BaseException:  # e.g. the task was cancelled: the claim lapses
        if renewer is not None:
            renewer.stop()
        raise
    finally:
        _current_claim.reset(token)

    lost = stop_renewing(renewer, claim)
    complete_args = success_complete(claim, value, lost)
    if isinstance(complete_args, Exception):  # the error was recorded instead
        await _record_error(client, claim, complete_args)
        raise complete_args
    complete = await client.complete(*complete_args)
    check_complete(claim, complete, value)
    return IdempotentResult(
        result=value, duplicate=False, fence=claim.fence, takeover=claim.takeover,
        rerun=claim.rerun,
    )


async def _release_quietly(client: AsyncAnyClient, claim: Claim) -> None:
    # Best effort, as in with_idempotency.
    try:
        await client.release(claim.namespace, claim.key, claim.fence)
    except Exception:  # noqa: BLE001 - deliberately best effort
        pass


async def _record_error(client: AsyncAnyClient, claim: Claim, error: Exception) -> None:
    try:
        complete = await client.complete(
            claim.namespace, claim.key, claim.fence, dedup_pb2.ERROR, encode_error(error)
        )
        check_complete(claim, complete, None)
    except Exception as recording:  # noqa: BLE001 - reported as a note
        note_not_recorded(error, recording)


def idempotent_async(
    fn: Callable[..., Any],
    client: AsyncAnyClient,
    namespace: str,
    key_from: Optional[Callable[[dict[str, Any]], str]],
    options: dict[str, Any],
) -> Callable[..., Any]:
    """What @idempotent returns for an `async def` (or for any function given
    an async client): an `async def` with fn's name, docstring and signature
    (functools.wraps), plus .with_outcome(...) (a coroutine returning the
    IdempotentResult) and .arguments_of(...)."""
    if not is_async_client(client):
        raise TypeError(
            f"@idempotent on async def {getattr(fn, '__name__', fn)!r} needs an "
            "AsyncClient or AsyncCoalescingClient, not "
            f"{type(client).__name__}")
    signature = inspect.signature(fn)

    async def with_outcome(*args: Any, **kwargs: Any) -> IdempotentResult[Any]:
        arguments = arguments_of(signature, *args, **kwargs)
        key = key_from(arguments) if key_from else None
        return await with_idempotency_async(
            client, namespace, arguments, lambda: fn(*args, **kwargs), key, **options)

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        return (await with_outcome(*args, **kwargs)).result

    call.with_outcome = with_outcome  # type: ignore[attr-defined]
    call.arguments_of = functools.partial(arguments_of, signature)  # type: ignore[attr-defined]
    return call
