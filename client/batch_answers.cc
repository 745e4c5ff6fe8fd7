#include "client/batch_answers.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "client/dedup_client.h"
#include "client/outcome_unknown.h"

namespace dedup {

absl::Status ToAbslStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status ItemStatus(const v1::ItemError& error) {
  // A code outside the canonical range, or OK (which StatusOr cannot hold),
  // would only come from a broken server: keep the message, flag the code.
  if (error.code() <= 0 ||
      error.code() > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(
        absl::StrCat("item error code ", error.code(), ": ", error.message()));
  }
  absl::Status status(static_cast<absl::StatusCode>(error.code()),
                      error.message());
  if (!error.reason().empty()) {
    status.SetPayload(kItemErrorReasonPayload, absl::Cord(error.reason()));
  }
  return status;
}

bool IsResultBudgetRefusal(const absl::Status& status) {
  // Only UNAVAILABLE says that nothing happened.
  if (!absl::IsUnavailable(status)) return false;
  if (absl::optional<absl::Cord> reason =
          status.GetPayload(kItemErrorReasonPayload)) {
    return *reason == "RESULT_BUDGET";
  }
  // An older server: storage/store.h ResultBudgetExceeded's message.
  return absl::StrContains(status.message(), "ask for this item again");
}

absl::Status RenumberItem(const absl::Status& status, int from, int to) {
  if (from == to) return status;
  absl::string_view message = status.message();
  if (!absl::ConsumePrefix(&message, absl::StrCat("items[", from, "]"))) {
    return status;
  }
  absl::Status renumbered(status.code(),
                          absl::StrCat("items[", to, "]", message));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    renumbered.SetPayload(url, payload);
  });
  return renumbered;
}

absl::Status SettledItemError(absl::string_view what, bool was_unknown,
                              const absl::Status& last) {
  if (!was_unknown || IsOutcomeUnknown(last)) return last;
  return OutcomeUnknownError(what, last);
}

void ToProto(const BeginBatchItem& item, v1::BeginRequest* request) {
  request->set_namespace_(item.ns);
  request->set_key(item.key);
  request->set_args_hash(item.args_hash);
  request->set_owner(item.owner);
  request->set_accept_rerun(item.accept_rerun);
  request->set_lease_ms(item.lease_ms);
  request->set_ttl_s(item.ttl_s);
}

void ToProto(const CompleteBatchItem& item, v1::CompleteRequest* request) {
  request->set_namespace_(item.ns);
  request->set_key(item.key);
  request->set_fence(item.fence);
  request->set_outcome(item.outcome);
  request->set_result(item.result);
  request->set_ttl_s(item.ttl_s);
}

void ToProto(const CheckpointBatchItem& item, v1::CheckpointRequest* request) {
  request->set_namespace_(item.ns);
  request->set_key(item.key);
  request->set_fence(item.fence);
  request->set_step(item.step);
  request->set_data(item.data);
  request->set_lease_ms(item.lease_ms);
}

bool IsUnparsedRequestReply(const absl::Status& status) {
  // server/unparseable_requests.cc's message.
  return absl::IsInvalidArgument(status) &&
         absl::StartsWith(status.message(),
                          "request: cannot be parsed as the request of ");
}

bool IsValidUtf8(absl::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte (Unicode 15,
    // table 3-7): the narrower ranges exclude overlong forms, surrogates and
    // code points past U+10FFFF.
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

bool StringsAreValidUtf8(const v1::BeginRequest& request) {
  return IsValidUtf8(request.namespace_()) && IsValidUtf8(request.key()) &&
         IsValidUtf8(request.owner());
}

bool StringsAreValidUtf8(const v1::CompleteRequest& request) {
  return IsValidUtf8(request.namespace_()) && IsValidUtf8(request.key());
}

bool StringsAreValidUtf8(const v1::CheckpointRequest& request) {
  return IsValidUtf8(request.namespace_()) && IsValidUtf8(request.key()) &&
         IsValidUtf8(request.step());
}

}  // namespace dedup
