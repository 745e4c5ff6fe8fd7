"""Python client for dedup, the idempotency authority (dedup.v1 over gRPC).

    from dedup_client import Client, with_idempotency, idempotent

- Client: typed calls (begin/complete/release/renew/get/forget) returning the
  protobuf responses; deadlines on every call; retries UNAVAILABLE with
  exponential backoff and full jitter. Given the addresses of a replicated
  group it follows the leader, and retries a call whose outcome is unknown
  only the safe way (DedupRpcError with outcome_unknown=True when that runs
  out).
- CoalescingClient: wraps a Client; concurrent begin/complete/checkpoint
  calls go as BeginBatch/CompleteBatch/CheckpointBatch RPCs
  (Client.begin_batch / complete_batch / checkpoint_batch send batches by
  hand).
- with_idempotency / @idempotent: Begin -> your function -> Complete (or
  Release on RetryableError), waiting out IN_USE and replaying duplicates.
  The lease is renewed in the background while the function runs; a lost
  claim sets current_claim().lost (check() raises ClaimLost). A completion
  whose record expired raises ExpiredError (accept_rerun=True runs it
  again); current_claim().checkpoint(step, data) records progress that a
  takeover finds in last_checkpoint.
- AsyncClient, AsyncCoalescingClient, with_idempotency_async: the same on
  grpc.aio for asyncio; @idempotent on an `async def` uses them.
- TlsConfig, token=/token_file=: TLS, mTLS and a bearer token on every
  call (Client(..., tls=TlsConfig(root_ca="ca.pem"), token=...));
  open_channel() secures a channel the same way for dedupd's other services.
- args_hash: SHA-256 of the RFC 8785 canonical JSON of the tool arguments,
  identical in every dedup client.

Needs grpcio and protobuf. An installed package (pip install ./client/python)
carries the generated dedup.v1 stubs; from the source tree they must be on
sys.path (see client/python/README.md).
"""

# The distribution's version: pyproject.toml reads it from here (setuptools
# dynamic metadata), so this line is the one place it is set.
__version__ = "0.1.0"

from dedup_client._proto import dedup_pb2, dedup_pb2_grpc
from dedup_client.args_hash import (
    CanonicalJsonError,
    args_hash,
    args_hash_hex,
    args_hash_of_json_text,
    canonicalize,
    canonicalize_json_text,
)
from dedup_client.aio_client import AsyncClient
from dedup_client.aio_coalescing import AsyncCoalescingClient
from dedup_client.aio_idempotency import with_idempotency_async
from dedup_client.backoff import Backoff
from dedup_client.client import Client, is_retryable_rpc_error
from dedup_client.coalescing import CoalescingClient
from dedup_client.enums import BeginStatus, FenceStatus, Outcome, RecordState
from dedup_client.errors import (
    ClaimLost,
    ConflictError,
    DedupError,
    DedupRpcError,
    ExpiredError,
    InUseTimeoutError,
    OutcomeNotRecordedError,
    ReplayedError,
    RetryableError,
    StaleFenceError,
)
from dedup_client.claim import ClaimCheckpoint
from dedup_client.idempotency import (
    Claim,
    IdempotentFunction,
    IdempotentResult,
    current_claim,
    idempotent,
    with_idempotency,
)
from dedup_client.outcome import is_outcome_unknown
from dedup_client.rpc import RpcError, StatusCode
from dedup_client.security import BearerToken, TlsConfig, open_channel
from dedup_client.shard_routing import ShardGroup, ShardMap
from dedup_client.slot import SLOT_COUNT, slot_of

__all__ = [
    "__version__",
    "AsyncClient",
    "AsyncCoalescingClient",
    "Backoff",
    "BearerToken",
    "BeginStatus",
    "CanonicalJsonError",
    "Claim",
    "ClaimCheckpoint",
    "ClaimLost",
    "Client",
    "CoalescingClient",
    "ConflictError",
    "DedupError",
    "DedupRpcError",
    "ExpiredError",
    "FenceStatus",
    "IdempotentFunction",
    "IdempotentResult",
    "InUseTimeoutError",
    "Outcome",
    "OutcomeNotRecordedError",
    "RecordState",
    "ReplayedError",
    "RetryableError",
    "RpcError",
    "SLOT_COUNT",
    "ShardGroup",
    "ShardMap",
    "StaleFenceError",
    "StatusCode",
    "TlsConfig",
    "args_hash",
    "args_hash_hex",
    "args_hash_of_json_text",
    "canonicalize",
    "canonicalize_json_text",
    "current_claim",
    "dedup_pb2",
    "dedup_pb2_grpc",
    "idempotent",
    "is_outcome_unknown",
    "is_retryable_rpc_error",
    "open_channel",
    "slot_of",
    "with_idempotency",
    "with_idempotency_async",
]
