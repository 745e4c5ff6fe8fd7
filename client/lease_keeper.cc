#include "client/lease_keeper.h"

#include <utility>

namespace dedup {

LeaseKeeper::LeaseKeeper(const Client& client, std::string ns, std::string key,
                         uint64_t fence, uint32_t lease_ms,
                         absl::Duration interval)
    : client_(client),
      ns_(std::move(ns)),
      key_(std::move(key)),
      fence_(fence),
      lease_ms_(lease_ms),
      interval_(interval),
      thread_([this] { Run(); }) {}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // Wakes early on Stop(): the condition is re-checked on every change.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
      if (stopping_) return;
    }
    absl::StatusOr<v1::RenewResponse> renewed =
        client_.Renew(ns_, key_, fence_, lease_ms_);
    if (!renewed.ok()) continue;  // not a loss; try again an interval later
    if (renewed->status() == v1::RenewResponse::OK) {
      renewals_.fetch_add(1);
      continue;
    }
    lost_.store(true);
    return;
  }
}

}  // namespace dedup
