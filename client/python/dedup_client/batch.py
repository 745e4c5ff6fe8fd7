"""How batch answers become per-item results; shared by Client.begin_batch /
complete_batch and CoalescingClient, so a coalesced call answers exactly as a
direct one would. Stateless."""

from __future__ import annotations

from typing import Sequence, TypeVar, Union

import grpc

from dedup_client.errors import DedupRpcError

_Answer = TypeVar("_Answer")

# ItemError.code is a google.rpc.Code number; grpc.StatusCode values are
# (number, name) pairs of the same numbering.
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}

# gRPC's default message limit is 4 MiB on both sides: a batch closes before
# its requests reach this many bytes.
MAX_BATCH_BYTES = 3 << 20


def status_code(number: int) -> grpc.StatusCode:
    return _STATUS_CODES.get(number, grpc.StatusCode.UNKNOWN)


def item_results(
    method: str, request_items: int, response_items: Sequence[object]
) -> list[Union[_Answer, DedupRpcError]]:
    """One answer or DedupRpcError per request item, in request order.

    The pairing is by position, so an answer with another item count cannot
    be trusted at all: it raises DedupRpcError(INTERNAL) for the whole call.
    """
    if len(response_items) != request_items:
        raise DedupRpcError(
            grpc.StatusCode.INTERNAL,
            f"{method}: the server answered {len(response_items)} items for "
            f"{request_items}",
        )
    results: list[Union[_Answer, DedupRpcError]] = []
    for index, item in enumerate(response_items):
        which = item.WhichOneof("result")  # type: ignore[attr-defined]
        if which == "response":
            results.append(item.response)  # type: ignore[attr-defined]
        elif which == "error":
            error = item.error  # type: ignore[attr-defined]
            results.append(DedupRpcError(status_code(error.code), error.message))
        else:
            results.append(DedupRpcError(
                grpc.StatusCode.INTERNAL, f"items[{index}]: the server sent no answer"
            ))
    return results


def renumber(error: DedupRpcError, position: int, index: int) -> DedupRpcError:
    """The refusal of item `position` of a resent batch as item `index` of
    the caller's: "items[position]. ..." becomes "items[index]. ..."."""
    prefix = f"items[{position}]."
    details = error.details()
    if position == index or not details.startswith(prefix):
        return error
    return DedupRpcError(error.code(), f"items[{index}].{details[len(prefix):]}")


def as_unary_error(error: DedupRpcError, index: int) -> DedupRpcError:
    """The refusal of item `index` as its unary call would have raised it: the
    server names the field "items[i].key: ..."; a lone call sent "key: ..."."""
    prefix = f"items[{index}]."
    details = error.details()
    if details.startswith(prefix):
        return DedupRpcError(error.code(), details[len(prefix):])
    return error
