#include "client/session_pool.h"

#include <utility>

#include "client/batch_answers.h"

namespace dedup {

SessionPool::~SessionPool() {
  absl::flat_hash_map<const Endpoint*, Entry> sessions;
  {
    absl::MutexLock lock(&mu_);
    sessions.swap(sessions_);
  }
  // Each session's destructor cancels its stream and waits for it.
  sessions.clear();
}

Session& SessionPool::For(const std::shared_ptr<const Endpoint>& endpoint) {
  absl::MutexLock lock(&mu_);
  Entry& entry = sessions_[endpoint.get()];
  if (entry.session == nullptr) {
    entry.endpoint = endpoint;
    entry.session = std::make_unique<Session>(*endpoint->stub);
  }
  return *entry.session;
}

bool SessionPool::NoteMissing(const absl::Status& status) {
  if (!absl::IsUnimplemented(status) && !IsUnparsedRequestReply(status)) {
    return false;
  }
  enabled_.store(false, std::memory_order_relaxed);
  return true;
}

}  // namespace dedup
