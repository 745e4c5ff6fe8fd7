#include "server/item_error.h"

#include <utility>

#include "storage/store.h"

namespace dedup {

void FillItemError(const absl::Status& status, std::string message,
                   v1::ItemError* out) {
  out->set_code(static_cast<int>(status.code()));
  out->set_message(std::move(message));
  if (status.GetPayload(kOutcomeUnknownPayload).has_value()) {
    out->set_reason(kItemErrorOutcomeUnknown);
  }
  if (auto leader = status.GetPayload(kLeaderAddressPayload)) {
    out->set_leader(std::string(*leader));
  }
}

}  // namespace dedup
