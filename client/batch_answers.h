// How the C++ client turns gRPC statuses and batch responses into the
// absl::Status values it returns; shared by Client and CoalescingClient so a
// coalesced call answers exactly as a direct one would. Stateless.
#ifndef DEDUP_CLIENT_BATCH_ANSWERS_H_
#define DEDUP_CLIENT_BATCH_ANSWERS_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "dedup/v1/dedup.pb.h"
#include "grpcpp/support/status.h"

namespace dedup {

struct BeginBatchItem;
struct CheckpointBatchItem;
struct CompleteBatchItem;

// Same code and message: grpc::StatusCode and absl::StatusCode share the
// canonical numbering.
[[nodiscard]] absl::Status ToAbslStatus(const grpc::Status& status);

// The payload (type URL) under which ItemStatus keeps a non-empty
// ItemError.reason, e.g. "RESULT_BUDGET".
inline constexpr char kItemErrorReasonPayload[] = "dedup.v1.ItemError.reason";

// An item the server refused, as the status returned for it; its reason, if
// any, as the payload kItemErrorReasonPayload.
[[nodiscard]] absl::Status ItemStatus(const v1::ItemError& error);

// True for a BeginBatch item the server refused only because the answer
// already held its --max_batch_response_bytes of stored results: nothing
// happened, and the item fits a later, smaller batch. The server says so
// with code UNAVAILABLE and ItemError.reason "RESULT_BUDGET" (the payload
// ItemStatus keeps); a status with another reason is not one. Servers older
// than that field leave it empty and say it only in the message ("...; ask
// for this item again, ..."), which is read then. The one place that
// decides.
[[nodiscard]] bool IsResultBudgetRefusal(const absl::Status& status);

// Item `from` of a batch that re-sent some items is the caller's item `to`:
// a message "items[from]..." (the server names items by position in the
// RPC) becomes "items[to]...". Payloads are kept.
[[nodiscard]] absl::Status RenumberItem(const absl::Status& status, int from,
                                        int to);

// The final error of a batch item (`what` names it) whose last answer was
// `last`: as is, unless an earlier round's outcome was unknown, in which case
// the item may have taken effect and the error says so (OutcomeUnknownError).
[[nodiscard]] absl::Status SettledItemError(absl::string_view what,
                                            bool was_unknown,
                                            const absl::Status& last);

// The request item a batch sends for `item`.
void ToProto(const BeginBatchItem& item, v1::BeginRequest* request);
void ToProto(const CompleteBatchItem& item, v1::CompleteRequest* request);
void ToProto(const CheckpointBatchItem& item, v1::CheckpointRequest* request);

// True when a whole RPC was refused as "request: cannot be parsed as the
// request of <method>" (INVALID_ARGUMENT). dedupd answers so for a request
// it cannot parse (e.g. a string field that is not valid UTF-8); builds from
// before CheckpointBatch also answered so for a dedup.v1 method they did not
// have (their interceptor took every UNIMPLEMENTED for an unparsed request),
// so from them a CheckpointBatch gets this answer, not UNIMPLEMENTED.
[[nodiscard]] bool IsUnparsedRequestReply(const absl::Status& status);

// True when `text` is structurally valid UTF-8 (no overlong forms, no
// surrogates, nothing past U+10FFFF), as a protobuf string field must be for
// the server to parse the request.
[[nodiscard]] bool IsValidUtf8(absl::string_view text);

// True when every string field of the request (namespace, key, and owner or
// step) is valid UTF-8 (IsValidUtf8), so that the server can parse it: one
// item that is not makes the server refuse its whole batch request as
// unparseable (IsUnparsedRequestReply).
[[nodiscard]] bool StringsAreValidUtf8(const v1::BeginRequest& request);
[[nodiscard]] bool StringsAreValidUtf8(const v1::CompleteRequest& request);
[[nodiscard]] bool StringsAreValidUtf8(const v1::CheckpointRequest& request);

// Maps a batch response to one StatusOr per request item. The pairing is by
// position, so a response with a different item count cannot be trusted at
// all and fails the whole call.
template <typename Answer, typename BatchResponse>
absl::StatusOr<std::vector<absl::StatusOr<Answer>>> FromBatchResponse(
    absl::string_view method, int request_items,
    absl::StatusOr<BatchResponse> response) {
  if (!response.ok()) return response.status();
  if (response->items_size() != request_items) {
    return absl::InternalError(absl::StrCat(method, ": the server answered ",
                                            response->items_size(),
                                            " items for ", request_items));
  }
  std::vector<absl::StatusOr<Answer>> results;
  results.reserve(request_items);
  for (int i = 0; i < request_items; ++i) {
    auto& item = *response->mutable_items(i);
    if (item.has_response()) {
      results.emplace_back(std::move(*item.mutable_response()));
    } else if (item.has_error()) {
      results.emplace_back(ItemStatus(item.error()));
    } else {
      results.emplace_back(absl::InternalError(
          absl::StrCat("items[", i, "]: the server sent no answer")));
    }
  }
  return results;
}

}  // namespace dedup

#endif  // DEDUP_CLIENT_BATCH_ANSWERS_H_
