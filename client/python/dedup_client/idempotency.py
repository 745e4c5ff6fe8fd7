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
  - EXPIRED   -> ExpiredError: it ran (completed_at_ms, outcome, fence) so
                 long ago that its record expired and only a tombstone is
                 left; its result is gone. fn not run: never a silent re-run,
                 never a duplicate. With accept_rerun=True the server answers
                 STARTED instead (a higher fence) and fn runs again
                 (claim.rerun, result.rerun).
  Complete refused (STALE_FENCE -> StaleFenceError; NOT_FOUND or
  ALREADY_COMPLETED -> OutcomeNotRecordedError): fn ran, outcome NOT recorded.

Stored payloads (shared with other clients, so they must stay JSON):
- success: the UTF-8 JSON text of fn's return value (json.dumps, compact);
  a duplicate gets json.loads of it, so tuples come back as lists, etc.
- error: {"name": "<Class>", "message": "<str(exc)>"} as JSON (the
  TypeScript client writes {name, message, code?}; extra fields are kept in
  ReplayedError.stored).

While fn runs, its lease is renewed in the background every third of its
length (dedup_client.claim), so fn may run longer than the lease; renew=False
turns that off. If a renewal learns the claim is lost (another caller took
over, the record was forgotten), current_claim().lost is set and
current_claim().check() raises ClaimLost; the outcome is then not reported as
a success (ClaimLost, with fn's return value, instead of a Complete).
current_claim().checkpoint(step, data) records progress (data: a JSON value)
that a takeover finds in current_claim().last_checkpoint; a refused
checkpoint loses the claim the same way (ClaimLost, call "Checkpoint"). If fn
raises a BaseException that is not an Exception (KeyboardInterrupt,
SystemExit), the claim is left to lapse at the end of its lease: whether the
side effect happened is unknown, so it is neither released nor completed.

with_idempotency_async and @idempotent on an `async def` (with an
AsyncClient or AsyncCoalescingClient) are the asyncio form:
dedup_client.aio_idempotency. The Begin loop and the answer mapping below are
shared with it.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, TypeVar, Union

from dedup_client._proto import dedup_pb2
from dedup_client.args_hash import args_hash as compute_args_hash
from dedup_client.claim import (
    Claim,
    LeaseRenewer,
    _current_claim,
    claim_of,
    encode_json,
    current_claim,  # noqa: F401 - re-exported (dedup_client.current_claim)
    renew_interval_s,
)
from dedup_client.client import Client
from dedup_client.coalescing import CoalescingClient
from dedup_client.enums import Outcome
from dedup_client.errors import (
    ClaimLost,
    ConflictError,
    ExpiredError,
    InUseTimeoutError,
    OutcomeNotRecordedError,
    ReplayedError,
    RetryableError,
    StaleFenceError,
)

# Either client works: CoalescingClient batches Begin/Complete (and
# claim.checkpoint's Checkpoints) and sends the rest through its Client.
AnyClient = Union[Client, CoalescingClient]

T = TypeVar("T")

# The server never waits longer than this per Begin.
_MAX_WAIT_PER_CALL_S = 60.0


@dataclass(frozen=True)
class IdempotentResult(Generic[T]):
    """What with_idempotency returns: always a SUCCESS outcome (ERROR
    outcomes raise), as Outcome.SUCCESS (an IntEnum, equal to
    dedup_pb2.SUCCESS). On a duplicate, result is the stored JSON decoded."""

    result: T
    duplicate: bool  # True when replayed: fn was not called.
    fence: int
    takeover: bool = False  # fn ran as a takeover (see Claim).
    outcome: Outcome = Outcome.SUCCESS
    rerun: bool = False  # fn ran again after its completion expired (accept_rerun).


def encode_result(value: Any) -> bytes:
    """Default success payload: compact UTF-8 JSON (NaN refused)."""
    return encode_json(value)


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
    # Compact separators: byte for byte what TypeScript and C++ write.
    return json.dumps(
        {"name": name, "message": str(error)}, ensure_ascii=False,
        separators=(",", ":")
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


class BeginLoop:
    """The Begin side of with_idempotency, shared by the blocking and the
    asyncio forms: what each Begin sends and what its answer means.

        loop = BeginLoop(namespace, args, key, ...)
        while True:
            sent = time.monotonic()
            begin = client.begin(namespace, loop.key, loop.args_hash, **loop.next_begin())
            done = loop.answer(begin)      # raises Conflict/Replayed
            if done is STARTED: run fn ...
            elif done is not None: return done   # a duplicate's result
            else: sleep(loop.pause_s(begin, sent)); loop.wait_more(begin)  # may raise
    """

    def __init__(
        self, namespace: str, args: Any, key: Optional[str], *, lease_ms: int,
        ttl_s: int, wait_per_call_s: float, deadline_s: float,
        accept_rerun: bool = False,
    ) -> None:
        self.namespace = namespace
        self.args_hash = compute_args_hash(args)
        self.key = key if key is not None else self.args_hash.hex()
        self.lease_ms = lease_ms
        self.ttl_s = ttl_s
        self.accept_rerun = accept_rerun
        self._wait_per_call_s = wait_per_call_s
        self._deadline = time.monotonic() + deadline_s
        self._wait_ms = 0

    def next_begin(self) -> dict[str, Any]:
        """The Begin's options. A fresh owner per claim attempt; the client's
        UNAVAILABLE retries reuse it, so a lost answer is re-entered rather
        than seen as IN_USE."""
        options: dict[str, Any] = dict(
            owner=str(uuid.uuid4()), lease_ms=self.lease_ms, ttl_s=self.ttl_s,
            wait_ms=self._wait_ms)
        if self.accept_rerun:  # (only when set: duck-typed clients may lack it)
            options["accept_rerun"] = True
        return options

    def answer(self, begin: dedup_pb2.BeginResponse) -> Any:
        """STARTED for STARTED, the IdempotentResult of a DUPLICATE SUCCESS,
        None for IN_USE; raises for the other answers."""
        status = begin.status
        if status == dedup_pb2.BeginResponse.STARTED:
            return STARTED
        if status == dedup_pb2.BeginResponse.DUPLICATE:
            if begin.outcome == dedup_pb2.ERROR:
                raise replayed_error(begin.result, begin.fence)
            return IdempotentResult(
                result=decode_result(begin.result), duplicate=True, fence=begin.fence
            )
        if status == dedup_pb2.BeginResponse.CONFLICT:
            raise ConflictError(self.namespace, self.key, begin.fence)
        if status == dedup_pb2.BeginResponse.EXPIRED:
            raise ExpiredError(
                self.namespace, self.key, begin.fence, begin.outcome,
                _outcome_name(begin.outcome), begin.created_at,
                begin.completed_at, begin.attempts, begin.tombstone_expires_at)
        if status != dedup_pb2.BeginResponse.IN_USE:
            raise RuntimeError(f"dedup: Begin answered unknown status {status}")
        return None

    def pause_s(self, begin: dedup_pb2.BeginResponse, sent: float) -> float:
        """After IN_USE: a server that answered well before the wait we asked
        for is not waiting (e.g. an older build); pause so we do not spin on
        it."""
        now = time.monotonic()
        if self._wait_ms > 0 and now - sent < self._wait_ms / 2000.0:
            return min(max(begin.retry_after_ms, 10) / 1000.0, max(self._deadline - now, 0))
        return 0.0

    def wait_more(self, begin: dedup_pb2.BeginResponse) -> None:
        """The next Begin waits for the other owner's outcome, up to the
        deadline; raises InUseTimeoutError once it is reached."""
        remaining = self._deadline - time.monotonic()
        self._wait_ms = int(min(self._wait_per_call_s, remaining, _MAX_WAIT_PER_CALL_S) * 1000)
        if self._wait_ms < 1:
            raise InUseTimeoutError(self.namespace, self.key, begin.fence)


STARTED = object()  # BeginLoop.answer: the caller owns the execution


def _outcome_name(outcome: int) -> str:
    try:
        return dedup_pb2.Outcome.Name(outcome)
    except ValueError:  # a newer server's outcome
        return str(outcome)


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
    renew: bool = True,
    accept_rerun: bool = False,
) -> IdempotentResult[T]:
    """Runs fn at most once for (namespace, key); see the module docstring.

    args: the tool arguments (any JSON value); their canonical args_hash makes
    a reuse of the key with other arguments a ConflictError. key defaults to
    the hash in hex, i.e. "same arguments = same operation".
    lease_ms/ttl_s: 0 means the server default. wait_per_call_s: how long each
    Begin asks the server to wait for another owner; deadline_s bounds the
    whole wait (not fn itself). is_retryable: besides RetryableError, which
    exceptions mean "certainly did not happen, run again next time".
    renew: renew the lease in the background while fn runs (every third of
    the lease; see dedup_client.claim).
    accept_rerun: when the operation completed so long ago that its record
    expired (a tombstone is left), run fn again instead of raising
    ExpiredError. Only where a second side effect is acceptable.

    Raises ConflictError, ReplayedError, ExpiredError, InUseTimeoutError,
    StaleFenceError, ClaimLost, OutcomeNotRecordedError, grpc.RpcError, or
    whatever fn raised.
    """
    loop = BeginLoop(namespace, args, key, lease_ms=lease_ms, ttl_s=ttl_s,
                     wait_per_call_s=wait_per_call_s, deadline_s=deadline_s,
                     accept_rerun=accept_rerun)
    while True:
        sent = time.monotonic()
        begin = client.begin(namespace, loop.key, loop.args_hash, **loop.next_begin())
        done = loop.answer(begin)
        if done is STARTED:
            return _execute(client, loop, begin, fn, is_retryable, renew)
        if done is not None:
            return done
        pause = loop.pause_s(begin, sent)
        if pause > 0:
            time.sleep(pause)
        loop.wait_more(begin)


def _execute(
    client: AnyClient,
    loop: BeginLoop,
    begin: dedup_pb2.BeginResponse,
    fn: Callable[[], T],
    is_retryable: Optional[Callable[[Exception], bool]],
    renew: bool,
) -> IdempotentResult[T]:
    claim = claim_of(loop.namespace, loop.key, begin, client=client, lease_ms=loop.lease_ms)
    interval = renew_interval_s(begin, loop.lease_ms) if renew else None
    renewer = LeaseRenewer(client, claim, loop.lease_ms, interval) if interval else None
    token = _current_claim.set(claim)
    if renewer is not None:
        renewer.start()
    try:
        value = fn()
    except Exception as error:
        lost = stop_renewing(renewer, claim)
        action = failure_action(error, is_retryable, lost)
        if action == RELEASE:
            _release_quietly(client, claim)
        elif action == RECORD:
            _record_error(client, claim, error)
        raise
    except BaseException:
        if renewer is not None:
            renewer.stop()
        raise
    finally:
        _current_claim.reset(token)

    lost = stop_renewing(renewer, claim)
    complete_args = success_complete(claim, value, lost)
    if isinstance(complete_args, Exception):  # the error was recorded instead
        _record_error(client, claim, complete_args)
        raise complete_args
    complete = client.complete(*complete_args)
    check_complete(claim, complete, value)
    return IdempotentResult(
        result=value, duplicate=False, fence=claim.fence, takeover=claim.takeover,
        rerun=claim.rerun,
    )


def stop_renewing(renewer: Any, claim: Claim) -> bool:
    """Stops the renewer (if any); True if the claim was lost, by a renewal
    or a checkpoint."""
    if renewer is not None:
        renewer.stop()
    return claim.lost.is_set()


# failure_action's answers.
RELEASE, RECORD, PROPAGATE = "release", "record", "propagate"


def failure_action(
    error: Exception, is_retryable: Optional[Callable[[Exception], bool]], lost: bool
) -> str:
    """What to do when fn raised `error`: RELEASE (it certainly did not
    happen), RECORD (Complete ERROR, so duplicates replay it) or, when the
    claim was lost, PROPAGATE only (neither would be accepted now; a note
    says so)."""
    if lost:
        if not isinstance(error, ClaimLost) and hasattr(error, "add_note"):
            error.add_note("dedup: the claim was lost while the function ran "
                           "(a lease renewal or checkpoint was refused); nothing "
                           "was recorded")
        return PROPAGATE
    if isinstance(error, RetryableError) or (is_retryable and is_retryable(error)):
        return RELEASE
    return RECORD


def success_complete(claim: Claim, value: Any, lost: bool) -> Any:
    """The Complete(SUCCESS) arguments for fn's return value; raises
    ClaimLost (with the value) if the claim was lost. Returns the exception
    to record instead when the value cannot be stored as JSON: the side
    effect ran, so the claim must not lapse (a takeover would run it again);
    the failure is recorded so duplicates see it, not re-run."""
    if lost:
        raise claim.lost_error(value)
    try:
        payload = encode_result(value)
    except (TypeError, ValueError) as error:
        return error
    return (claim.namespace, claim.key, claim.fence, dedup_pb2.SUCCESS, payload)


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
        check_complete(claim, complete, None)
    except Exception as recording:  # noqa: BLE001 - reported as a note
        note_not_recorded(error, recording)


def note_not_recorded(error: Exception, recording: Exception) -> None:
    note = f"dedup: the error outcome was NOT recorded: {recording}"
    if hasattr(error, "add_note"):  # Python 3.11+
        error.add_note(note)


def check_complete(
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
        """The arguments as hashed: by parameter name, defaults filled in,
        with **kwargs flattened in (see the function arguments_of)."""
        return arguments_of(self._signature, *args, **kwargs)


def arguments_of(signature: inspect.Signature, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A call's arguments by parameter name, with the defaults of those not
    passed filled in: send("inv-9"), send("inv-9", 100) (100 the default)
    and send(invoice="inv-9") are the same call, with the same hash (a
    client such as an MCP host may send a default explicitly or not).
    **kwargs are flattened in; *args appear (as a list) only if non-empty."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL or value:
            arguments[name] = value
    return arguments


def is_async_client(client: Any) -> bool:
    """True for an AsyncClient, an AsyncCoalescingClient, or any client
    whose begin is a coroutine function."""
    return inspect.iscoroutinefunction(getattr(type(client), "begin", None))


def idempotent(
    client: AnyClient,
    namespace: str,
    *,
    key_from: Optional[Callable[[dict[str, Any]], str]] = None,
    **options: Any,
) -> Callable[[Callable[..., T]], IdempotentFunction[T]]:
    """Decorator form of with_idempotency for functions (e.g. MCP tools).

    The function's arguments, by parameter name, are the hashed args;
    key_from(arguments) picks the key (e.g. lambda a: a["invoice_id"]); without
    it the key is the args hash. options go to with_idempotency (lease_ms,
    ttl_s, wait_per_call_s, deadline_s, is_retryable, renew, accept_rerun).

    An `async def` (or any function, given an AsyncClient or
    AsyncCoalescingClient) becomes an `async def` running
    with_idempotency_async (dedup_client.aio_idempotency); an `async def`
    with a blocking client raises TypeError.
    """

    def wrap(fn: Callable[..., T]) -> IdempotentFunction[T]:
        if is_async_client(client) or inspect.iscoroutinefunction(fn):
            from dedup_client.aio_idempotency import idempotent_async  # (a cycle)

            return idempotent_async(fn, client, namespace, key_from, options)
        return IdempotentFunction(fn, client, namespace, key_from, options)

    return wrap
