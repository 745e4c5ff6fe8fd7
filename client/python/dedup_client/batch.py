"""How batch answers become per-item results; shared by Client.begin_batch /
complete_batch / checkpoint_batch and the coalescing clients, so a coalesced
call answers exactly as a direct one would. Stateless."""

from __future__ import annotations

from typing import Sequence, TypeVar, Union

import grpc

from dedup_client.errors import DedupRpcError

_Answer = TypeVar("_Answer")
_Item = TypeVar("_Item")

# ItemError.code is a google.rpc.Code number; grpc.StatusCode values are
# (number, name) pairs of the same numbering.
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}

# gRPC's default message limit is 4 MiB on both sides: a batch closes before
# its requests reach this many bytes.
MAX_BATCH_BYTES = 3 << 20


# How dedupd marks a BeginBatch item it refused only because the answer
# already held its --max_batch_response_bytes of stored results:
# ItemError.reason, and before that field existed only the message
# (storage/store.h ResultBudgetExceeded). is_result_budget_refusal is the one
# place that reads them.
RESULT_BUDGET_REASON = "RESULT_BUDGET"
_RESULT_BUDGET_MARK = "ask for this item again"


def is_result_budget_refusal(error: object) -> bool:
    """True for an item refused only for the answer's result budget: nothing
    happened, and it fits a later, smaller batch. UNAVAILABLE with reason
    RESULT_BUDGET; an error with another reason is not one. An older server
    gives no reason: then its message says so."""
    if not isinstance(error, DedupRpcError) or error.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    if error.reason:
        return error.reason == RESULT_BUDGET_REASON
    return _RESULT_BUDGET_MARK in error.details()


def holds_result(answer: object) -> bool:
    """True for an answer that spent some of its batch's result budget (a
    DUPLICATE Begin carrying a stored result)."""
    return not isinstance(answer, BaseException) and bool(getattr(answer, "result", b""))


def refit(items: Sequence[_Item], fitted: int) -> list[list[_Item]]:
    """Items refused for the result budget of an answer that held `fitted`
    results, in groups of at most that many: about what one answer fits (a
    key's results have one size). A group still too large splits again."""
    return [list(items[i:i + fitted]) for i in range(0, len(items), fitted)]


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
            results.append(DedupRpcError(status_code(error.code), error.message,
                                         reason=error.reason))
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
    return DedupRpcError(error.code(), f"items[{index}].{details[len(prefix):]}",
                         reason=error.reason)


def as_unary_error(error: DedupRpcError, index: int) -> DedupRpcError:
    """The refusal of item `index` as its unary call would have raised it: the
    server names the field "items[i].key: ..."; a lone call sent "key: ..."."""
    prefix = f"items[{index}]."
    details = error.details()
    if details.startswith(prefix):
        return DedupRpcError(error.code(), details[len(prefix):], reason=error.reason)
    return error
