"""The execution an idempotent function owns (Claim), and the renewal of its
lease in the background while the function runs.

with_idempotency (blocking) and with_idempotency_async renew the lease every
third of its length, from a daemon thread (LeaseRenewer) or an asyncio task
(AsyncLeaseRenewer), so a function may run longer than its lease without
another caller taking the key over. A renewal the server refuses means the
claim is lost (STALE_FENCE: another caller took over; NOT_FOUND: the record
was forgotten or expired; ALREADY_COMPLETED): the renewer sets claim.lost
and stops; claim.check() then raises ClaimLost, and the outcome is not
reported as a success. A renewal that fails (UNAVAILABLE after the client's
retries, a deadline) is not a loss: the next one is tried a third of the
lease later, so one failure still leaves a renewal before the lease ends.

A claim.checkpoint() the server refuses loses the claim the same way (and
raises ClaimLost at once). Checkpoints (claim.checkpoint(step, data),
claim.last_checkpoint): data is any JSON value, stored as UTF-8 JSON like
results (encode_json), so every dedup client's helpers read each other's.

The lease length is lease_ms when given, else what the server granted: for a
fresh claim lease_expires_at - created_at (both the server's clock); for a
takeover under the server's default lease, lease_expires_at against this
machine's clock (at least 1 s). An answer without a lease (lease_expires_at
0) is not renewed.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from dedup_client._proto import dedup_pb2
from dedup_client.errors import ClaimLost

_LOCAL_CLOCK_FLOOR_MS = 1000


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON (NaN refused): how the helpers store results and
    checkpoint data."""
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


@dataclass(frozen=True)
class ClaimCheckpoint:
    """The last progress an earlier execution recorded (BeginResponse's
    checkpoint), as fn sees it in claim.last_checkpoint."""

    step: str
    raw: bytes  # The stored bytes.
    fence: int  # The fence of the execution that recorded it.
    recorded_at_ms: int  # Server clock, Unix ms.

    @property
    def data(self) -> Any:
        """The data JSON-decoded (what claim.checkpoint stored). Raises
        ValueError when the bytes are not JSON (written by another tool
        with Client.checkpoint): use raw then."""
        return json.loads(self.raw.decode("utf-8"))


@dataclass
class _Loss:
    answer: str = ""
    current_fence: int = 0
    call: str = "Renew"
    lock: threading.Lock = field(default_factory=threading.Lock)


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
    lease_expires_at_ms: int  # Server clock, Unix ms, as Begin granted it.
    # Set when the claim is found lost (a background renewal or a checkpoint
    # was refused): a threading.Event in with_idempotency, an asyncio.Event
    # in with_idempotency_async (`await claim.lost.wait()`). With renewal
    # off, only a checkpoint can set it.
    lost: Any = field(default_factory=threading.Event, compare=False, repr=False)
    _loss: _Loss = field(default_factory=_Loss, compare=False, repr=False)
    # The operation had completed and expired, and accept_rerun made it run
    # again.
    rerun: bool = False
    # The last checkpoint of an earlier execution (a takeover: resume from
    # it), or None.
    last_checkpoint: Optional[ClaimCheckpoint] = None
    # What checkpoint() sends with: the client, and the lease to renew to.
    _client: Any = field(default=None, compare=False, repr=False)
    _lease_ms: int = field(default=0, compare=False, repr=False)

    def check(self) -> None:
        """Raises ClaimLost if the claim was lost: call it between steps of a
        long function (before each side effect) to stop early."""
        if self.lost.is_set():
            raise self.lost_error()

    def checkpoint(self, step: str, data: Any = None) -> None:
        """Records progress: step names it (1..128 printable ASCII bytes),
        data (any JSON value) is stored as UTF-8 JSON, at most 64 KiB. A
        later owner (a takeover) gets it as claim.last_checkpoint. Also
        renews the lease when lease_ms was given. Refused (STALE_FENCE,
        NOT_FOUND, ALREADY_COMPLETED): the claim is lost, claim.lost is set
        and ClaimLost (call "Checkpoint") is raised; let it propagate.
        Already lost: raises ClaimLost without sending. Other failures
        (grpc.RpcError after the client's retries) propagate without losing
        the claim. In with_idempotency_async: `await claim.checkpoint(...)`.
        Sent by the helper's client: with a (Async)CoalescingClient it joins
        that client's CheckpointBatch calls."""
        self.check()
        payload = encode_json(data)
        response = self._client.checkpoint(
            self.namespace, self.key, self.fence, step, payload, lease_ms=self._lease_ms)
        self._after_checkpoint(response)

    def lost_error(self, result: object = None) -> ClaimLost:
        return ClaimLost(self.namespace, self.key, self.fence, self._loss.answer,
                         self._loss.current_fence, result, call=self._loss.call)

    def _after_checkpoint(self, response: dedup_pb2.CheckpointResponse) -> None:
        if response.status == dedup_pb2.CheckpointResponse.OK:
            return
        self._lose(dedup_pb2.CheckpointResponse.Status.Name(response.status),
                   response.fence, "Checkpoint")
        raise self.lost_error()

    def _lose(self, answer: str, current_fence: int, call: str = "Renew") -> None:
        """The first loss is kept: fences never go back, so later refusals
        say nothing new."""
        with self._loss.lock:
            if self.lost.is_set():
                return
            self._loss.answer = answer
            self._loss.current_fence = current_fence
            self._loss.call = call
            self.lost.set()


class AsyncClaim(Claim):
    """The Claim of with_idempotency_async: checkpoint() is a coroutine."""

    async def checkpoint(self, step: str, data: Any = None) -> None:  # type: ignore[override]
        """Claim.checkpoint, awaited."""
        self.check()
        payload = encode_json(data)
        response = await self._client.checkpoint(
            self.namespace, self.key, self.fence, step, payload, lease_ms=self._lease_ms)
        self._after_checkpoint(response)


def checkpoint_of(begin: dedup_pb2.BeginResponse) -> Optional[ClaimCheckpoint]:
    """The checkpoint a STARTED answer carries, if any."""
    if not begin.HasField("checkpoint"):
        return None
    info = begin.checkpoint
    return ClaimCheckpoint(step=info.step, raw=info.data, fence=info.fence,
                           recorded_at_ms=info.recorded_at)


def claim_of(
    namespace: str, key: str, begin: dedup_pb2.BeginResponse, lost: Any = None,
    *, client: Any = None, lease_ms: int = 0,
) -> Claim:
    """The Claim of a STARTED answer (an AsyncClaim when `lost` is an
    asyncio.Event). client and lease_ms: what claim.checkpoint() uses."""
    cls = AsyncClaim if isinstance(lost, asyncio.Event) else Claim
    return cls(
        namespace=namespace, key=key, fence=begin.fence, takeover=begin.takeover,
        attempts=begin.attempts, lease_expires_at_ms=begin.lease_expires_at,
        lost=lost if lost is not None else threading.Event(),
        rerun=begin.rerun, last_checkpoint=checkpoint_of(begin),
        _client=client, _lease_ms=lease_ms,
    )


_current_claim: contextvars.ContextVar[Optional[Claim]] = contextvars.ContextVar(
    "dedup_current_claim", default=None
)


def current_claim() -> Optional[Claim]:
    """The Claim of the idempotent function running in this context (thread
    or asyncio task), if any."""
    return _current_claim.get()


def lease_length_ms(
    begin: dedup_pb2.BeginResponse, lease_ms: int, now_ms: Optional[int] = None
) -> Optional[int]:
    """The lease a STARTED answer granted, in ms (see the module docstring),
    or None when it carries none."""
    if begin.lease_expires_at <= 0:
        return None
    lengths = [lease_ms] if lease_ms > 0 else []
    if begin.attempts <= 1 and 0 < begin.created_at < begin.lease_expires_at:
        lengths.append(begin.lease_expires_at - begin.created_at)
    elif not lengths:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        lengths.append(max(begin.lease_expires_at - now, _LOCAL_CLOCK_FLOOR_MS))
    return min(lengths)


def renew_interval_s(begin: dedup_pb2.BeginResponse, lease_ms: int) -> Optional[float]:
    """Seconds between renewals (a third of the lease), or None."""
    length = lease_length_ms(begin, lease_ms)
    return None if length is None else length / 3000.0


def _refusal(response: dedup_pb2.RenewResponse) -> Optional[str]:
    """The answer's name when a Renew says the claim is lost, else None."""
    if response.status == dedup_pb2.RenewResponse.OK:
        return None
    return dedup_pb2.RenewResponse.Status.Name(response.status)


class LeaseRenewer:
    """Renews `claim` from a daemon thread every interval_s until stop()."""

    def __init__(self, client: Any, claim: Claim, lease_ms: int, interval_s: float) -> None:
        self._client = client
        self._claim = claim
        self._lease_ms = lease_ms
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"dedup-renew {claim.key}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> bool:
        """Stops renewing (an answer still on its way is ignored); True if
        the claim was lost before."""
        with self._lock:
            self._stopped.set()
            return self._claim.lost.is_set()

    def _run(self) -> None:
        claim = self._claim
        while not self._stopped.wait(self._interval_s):
            if claim.lost.is_set():  # a checkpoint found out
                return
            try:
                response = self._client.renew(
                    claim.namespace, claim.key, claim.fence, lease_ms=self._lease_ms)
            except Exception:  # noqa: BLE001 - not a loss; try again later
                continue
            answer = _refusal(response)
            if answer is None:
                continue
            with self._lock:
                if not self._stopped.is_set():
                    claim._lose(answer, response.fence)  # noqa: SLF001
            return


class AsyncLeaseRenewer:
    """Renews `claim` from an asyncio task every interval_s until stop()
    (claim.lost must be an asyncio.Event)."""

    def __init__(self, client: Any, claim: Claim, lease_ms: int, interval_s: float) -> None:
        self._client = client
        self._claim = claim
        self._lease_ms = lease_ms
        self._interval_s = interval_s
        self._task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"dedup-renew {self._claim.key}")

    def stop(self) -> bool:
        """Stops renewing (cancels the task); True if the claim was lost
        before."""
        if self._task is not None:
            self._task.cancel()
        return self._claim.lost.is_set()

    async def _run(self) -> None:
        claim = self._claim
        while True:
            await asyncio.sleep(self._interval_s)
            if claim.lost.is_set():  # a checkpoint found out
                return
            try:
                response = await self._client.renew(
                    claim.namespace, claim.key, claim.fence, lease_ms=self._lease_ms)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - not a loss; try again later
                continue
            answer = _refusal(response)
            if answer is not None:
                claim._lose(answer, response.fence)  # noqa: SLF001
                return
