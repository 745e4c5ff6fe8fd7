"""Run a side effect at most once per (namespace, key): with_idempotency and
the @idempotent decorator.

Flow (the same as the C++ RunOnce):
  Begin (fresh uuid4 owner per claim attempt)
  - STARTED   -> run fn; Complete(SUCCESS, JSON of its return value).
                 fn raised a retryable error -> Release, re-raise it.
                 fn raised anything else     -> Complete(ERROR, encode_error),
                                                re-raise it.
  - DUPLICATE -> SUCCESS: return the stored result (duplicate=True), fn not run.
                 ERROR: raise ReplayedError, fn not run.
  - IN_USE    -> Begin again with wait_ms (the server waits for the other
                 owner's outcome) until deadline_s; then InUseTimeoutError.
  - CONFLICT  -> ConflictError (same key, different arguments), fn not run.
  Complete refused (STALE_FENCE -> StaleFenceError; NOT_FOUND or
  ALREADY_COMPLETED -> OutcomeNotRecordedError): fn ran, outcome NOT recorded.

Stored payloads (shared with other clients, so they must stay JSON):
- success: the UTF-8 JSON text of fn's return value (json.dumps, compact);
  a duplicate gets json.loads of it, so tuples come back as lists, etc.
- error: {"name": "<Class>", "message": "<str(exc)>"} as JSON (the
  TypeScript client writes {name, message, code?}; extra fields are kept in
  ReplayedError.stored).

fn runs under its lease (default 60 s server-side); a longer fn should pass
lease_ms or call client.renew with current_claim().fence. If fn raises a
BaseException that is not an Exception (KeyboardInterrupt, SystemExit), the
claim is left to lapse at the end of its lease: whether the side effect
happened is unknown, so it is neither released nor completed.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, TypeVar, Union

from dedup_client._proto import dedup_pb2
from dedup_client.args_hash import args_hash as compute_args_hash
from dedup_client.client import Client
from dedup_client.coalescing import CoalescingClient
from dedup_client.errors import (
    ConflictError,
    InUseTimeoutError,
    OutcomeNotRecordedError,
    ReplayedError,
    RetryableError,
    StaleFenceError,
)

# Either client works: CoalescingClient batches Begin/Complete and sends the
# rest through its Client.
AnyClient = Union[Client, CoalescingClient]

T = TypeVar("T")

# The server never waits longer than this per Begin.
_MAX_WAIT_PER_CALL_S = 60.0


@dataclass(frozen=True)
class Claim:
    """The execution fn owns, readable inside fn through current_claim()."""

    namespace: str
    key: str
    fence: int
    # A previous owner's lease ran out: its attempt may have partly run the
    # side effect, so fn may want to check before repeating it.
    takeover: bool
    attempts: int
    lease_expires_at_ms: int  # Server clock, Unix ms.


@dataclass(frozen=True)
class IdempotentResult(Generic[T]):
    """What with_idempotency returns: always a SUCCESS outcome (ERROR
    outcomes raise). On a duplicate, result is the stored JSON decoded."""

    result: T
    duplicate: bool  # True when replayed: fn was not called.
    fence: int
    takeover: bool = False  # fn ran as a takeover (see Claim).
    outcome: int = dedup_pb2.SUCCESS


_current_claim: contextvars.ContextVar[Optional[Claim]] = contextvars.ContextVar(
    "dedup_current_claim", default=None
)


def current_claim() -> Optional[Claim]:
    """The Claim of the idempotent function running in this context, if any."""
    return _current_claim.get()


def encode_result(value: Any) -> bytes:
    """Default success payload: compact UTF-8 JSON (NaN refused)."""
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def decode_result(payload: bytes) -> Any:
    """Default decoding of a stored success payload (JSON)."""
    return json.loads(payload.decode("utf-8"))


def encode_error(error: BaseException) -> bytes:
    """Default error payload: {"name": "<Class>", "message": str(error)} as
    JSON, the shape the TypeScript client writes too. Builtin exceptions are
    named bare ("ValueError"), others with their module ("billing.Declined")."""
    cls = type(error)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    return json.dumps(
        {"name": name, "message": str(error)}, ensure_ascii=False
    ).encode("utf-8")


def replayed_error(payload: bytes, fence: int) -> ReplayedError:
    """The ReplayedError for a stored ERROR payload. Payloads that are not a
    {"name", "message"} object (e.g. raw text from the C++ client) become the
    message."""
    try:
        stored = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        stored = None
    if isinstance(stored, dict) and isinstance(stored.get("message"), str):
        name = stored.get("name")
        return ReplayedError(
            name if isinstance(name, str) else "Error", stored["message"],
            payload, fence, stored,
        )
    return ReplayedError("Error", payload.decode("utf-8", "replace"), payload, fence)


def with_idempotency(
    client: AnyClient,
    namespace: str,
    args: Any,
    fn: Callable[[], T],
    key: Optional[str] = None,
    *,
    lease_ms: int = 0,
    ttl_s: int = 0,
    wait_per_call_s: float = 10.0,
    deadline_s: float = 120.0,
    is_retryable: Optional[Callable[[Exception], bool]] = None,
) -> IdempotentResult[T]:
    """Runs fn at most once for (namespace, key); see the module docstring.

    args: the tool arguments (any JSON value); their canonical args_hash makes
    a reuse of the key with other arguments a ConflictError. key defaults to
    the hash in hex, i.e. "same arguments = same operation".
    lease_ms/ttl_s: 0 means the server default. wait_per_call_s: how long each
    Begin asks the server to wait for another owner; deadline_s bounds the
    whole wait (not fn itself). is_retryable: besides RetryableError, which
    exceptions mean "certainly did not happen, run again next time".

    Raises ConflictError, ReplayedError, InUseTimeoutError, StaleFenceError,
    OutcomeNotRecordedError, grpc.RpcError, or whatever fn raised.
    """
    hash_bytes = compute_args_hash(args)
    if key is None:
        key = hash_bytes.hex()
    deadline = time.monotonic() + deadline_s
    wait_ms = 0
    while True:
        # A fresh owner per claim attempt; the client's UNAVAILABLE retries
        # reuse it, so a lost answer is re-entered rather than seen as IN_USE.
        sent = time.monotonic()
        begin = client.begin(
            namespace, key, hash_bytes, owner=str(uuid.uuid4()),
            lease_ms=lease_ms, ttl_s=ttl_s, wait_ms=wait_ms,
        )
        status = begin.status
        if status == dedup_pb2.BeginResponse.STARTED:
            return _execute(client, namespace, key, begin, fn, is_retryable)
        if status == dedup_pb2.BeginResponse.DUPLICATE:
            if begin.outcome == dedup_pb2.ERROR:
                raise replayed_error(begin.result, begin.fence)
            return IdempotentResult(
                result=decode_result(begin.result), duplicate=True, fence=begin.fence
            )
        if status == dedup_pb2.BeginResponse.CONFLICT:
            raise ConflictError(namespace, key, begin.fence)
        if status != dedup_pb2.BeginResponse.IN_USE:
            raise RuntimeError(f"dedup: Begin answered unknown status {status}")

        now = time.monotonic()
        # A server that answered IN_USE well before the wait we asked for is
        # not waiting (e.g. an older build); pause so we do not spin on it.
        if wait_ms > 0 and now - sent < wait_ms / 2000.0:
            time.sleep(min(max(begin.retry_after_ms, 10) / 1000.0, max(deadline - now, 0)))
        remaining = deadline - time.monotonic()
        wait_ms = int(min(wait_per_call_s, remaining, _MAX_WAIT_PER_CALL_S) * 1000)
        if wait_ms < 1:
            raise InUseTimeoutError(namespace, key, begin.fence)


def _execute(
    client: AnyClient,
    namespace: str,
    key: str,
    begin: dedup_pb2.BeginResponse,
    fn: Callable[[], T],
    is_retryable: Optional[Callable[[Exception], bool]],
) -> IdempotentResult[T]:
    claim = Claim(
        namespace=namespace, key=key, fence=begin.fence, takeover=begin.takeover,
        attempts=begin.attempts, lease_expires_at_ms=begin.lease_expires_at,
    )
    token = _current_claim.set(claim)
    try:
        value = fn()
    except Exception as error:
        if isinstance(error, RetryableError) or (is_retryable and is_retryable(error)):
            _release_quietly(client, claim)
            raise
        _record_error(client, claim, error)
        raise
    finally:
        _current_claim.reset(token)

    try:
        payload = encode_result(value)
    except (TypeError, ValueError) as error:
        # The side effect ran, so the claim must not lapse (a takeover would
        # run it again): record the failure so duplicates see it, not re-run.
        _record_error(client, claim, error)
        raise
    complete = client.complete(namespace, key, claim.fence, dedup_pb2.SUCCESS, payload)
    _check_complete(claim, complete, value)
    return IdempotentResult(
        result=value, duplicate=False, fence=claim.fence, takeover=claim.takeover
    )


def _release_quietly(client: AnyClient, claim: Claim) -> None:
    # Best effort: if this fails the lease simply runs out, and the caller's
    # own exception is the more useful thing to report.
    try:
        client.release(claim.namespace, claim.key, claim.fence)
    except Exception:  # noqa: BLE001 - deliberately best effort
        pass


def _record_error(client: AnyClient, claim: Claim, error: Exception) -> None:
    """Completes with ERROR; on failure notes it on `error` (re-raised by the
    caller, since the function's own exception is what callers handle)."""
    try:
        complete = client.complete(
            claim.namespace, claim.key, claim.fence, dedup_pb2.ERROR, encode_error(error)
        )
        _check_complete(claim, complete, None)
    except Exception as recording:  # noqa: BLE001 - reported as a note
        note = f"dedup: the error outcome was NOT recorded: {recording}"
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(note)


def _check_complete(
    claim: Claim, complete: dedup_pb2.CompleteResponse, result: object
) -> None:
    if complete.status == dedup_pb2.CompleteResponse.OK:
        return
    answer = dedup_pb2.CompleteResponse.Status.Name(complete.status)
    cls = (StaleFenceError if complete.status == dedup_pb2.CompleteResponse.STALE_FENCE
           else OutcomeNotRecordedError)
    raise cls(claim.namespace, claim.key, claim.fence, answer, complete.fence, result)


class IdempotentFunction(Generic[T]):
    """A function wrapped by @idempotent. Calling it returns what the function
    returns (or the replayed result); with_outcome() returns the full
    IdempotentResult, duplicate flag included."""

    def __init__(
        self,
        fn: Callable[..., T],
        client: AnyClient,
        namespace: str,
        key_from: Optional[Callable[[dict[str, Any]], str]],
        options: dict[str, Any],
    ) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._signature = inspect.signature(fn)
        self._client = client
        self._namespace = namespace
        self._key_from = key_from
        self._options = options

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        return self.with_outcome(*args, **kwargs).result

    def with_outcome(self, *args: Any, **kwargs: Any) -> IdempotentResult[T]:
        """Like calling the function, but returns the IdempotentResult."""
        arguments = self.arguments_of(*args, **kwargs)
        key = self._key_from(arguments) if self._key_from else None
        return with_idempotency(
            self._client, self._namespace, arguments,
            lambda: self._fn(*args, **kwargs), key, **self._options,
        )

    def arguments_of(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The arguments as hashed: by parameter name, as passed (defaults not
        filled in, so adding a defaulted parameter keeps old hashes), with
        **kwargs flattened in."""
        bound = self._signature.bind(*args, **kwargs)
        arguments: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self._signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            else:
                arguments[name] = value
        return arguments


def idempotent(
    client: AnyClient,
    namespace: str,
    *,
    key_from: Optional[Callable[[dict[str, Any]], str]] = None,
    **options: Any,
) -> Callable[[Callable[..., T]], IdempotentFunction[T]]:
    """Decorator form of with_idempotency for plain functions (e.g. MCP tools).

    The function's arguments, by parameter name, are the hashed args;
    key_from(arguments) picks the key (e.g. lambda a: a["invoice_id"]); without
    it the key is the args hash. options go to with_idempotency (lease_ms,
    ttl_s, wait_per_call_s, deadline_s, is_retryable).
    """

    def wrap(fn: Callable[..., T]) -> IdempotentFunction[T]:
        return IdempotentFunction(fn, client, namespace, key_from, options)

    return wrap
