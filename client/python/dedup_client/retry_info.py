"""The server's "retry after" on a refusal (the same rule as
client/retry_delay.h).

dedupd refuses a tenant that is over its limits (--tenants_file "limits")
with RESOURCE_EXHAUSTED and a `grpc-status-details-bin` trailer: a
serialized google.rpc.Status whose details hold an Any
"type.googleapis.com/google.rpc.RetryInfo" (proto/dedup/v1/
error_details.proto has the same fields). The clients wait that long and try
again, as an attempt like any other. A RESOURCE_EXHAUSTED without it (a
message size limit) is not a "come back later" and keeps its own handling.
"""

from __future__ import annotations

from typing import Optional

import grpc
from google.protobuf.message import DecodeError

from dedup_client._proto import error_details_pb2
from dedup_client.errors import rpc_code

STATUS_DETAILS_KEY = "grpc-status-details-bin"
RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo"
# So a wrong server cannot park a client for hours.
MAX_SERVER_RETRY_DELAY_S = 30.0


def server_retry_delay_s(
    error: BaseException, cap_s: float = MAX_SERVER_RETRY_DELAY_S
) -> Optional[float]:
    """Seconds a RESOURCE_EXHAUSTED `error` asks the client to wait (its
    RetryInfo, clamped to [0, cap_s]), or None: another code, no trailer, no
    RetryInfo in it, or one that does not parse."""
    if rpc_code(error) != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    details = _trailer_bytes(error, STATUS_DETAILS_KEY)
    if not details:
        return None
    status = error_details_pb2.RpcStatus()
    try:
        status.ParseFromString(details)
        for any_detail in status.details:
            if any_detail.type_url != RETRY_INFO_TYPE_URL:
                continue
            info = error_details_pb2.RetryInfo()
            info.ParseFromString(any_detail.value)
            delay = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
            return min(max(delay, 0.0), cap_s)
    except DecodeError:
        return None
    return None


def _trailer_bytes(error: BaseException, key: str) -> Optional[bytes]:
    """The binary trailing metadata `key` of a failed call's error, or None
    (also for errors without metadata, such as test doubles)."""
    getter = getattr(error, "trailing_metadata", None)
    if not callable(getter):
        return None
    try:
        metadata = getter()
    except Exception:  # noqa: BLE001 - no metadata is the answer then
        return None
    for item in metadata or ():
        if item[0] == key:
            value = item[1]
            return value if isinstance(value, bytes) else None
    return None
