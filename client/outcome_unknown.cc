#include "client/outcome_unknown.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

constexpr char kOutcomeUrl[] = "dedup.v1/outcome";

}  // namespace

absl::Status OutcomeUnknownError(absl::string_view what,
                                 const absl::Status& last) {
  absl::Status status = absl::AbortedError(absl::StrCat(
      what,
      ": outcome unknown: the leader lost leadership after proposing it, so "
      "it may or may not have taken effect, and retrying did not settle it "
      "(last error: ",
      last.ToString(), ")"));
  status.SetPayload(kOutcomeUrl, absl::Cord("unknown"));
  return status;
}

bool IsOutcomeUnknown(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kAborted) return false;
  const auto payload = status.GetPayload(kOutcomeUrl);
  return payload.has_value() && *payload == "unknown";
}

}  // namespace dedup
