#include "client/session_pool.h"

#include <memory>
#include <utility>

#include "client/batch_answers.h"

namespace dedup {
namespace {

// gRPC 1.51 runs client callbacks on a process-wide completion queue that
// the channels which used it hold by reference; releasing the last of them
// while a stream's final reaction is still returning aborts the process
// ("prior > 0"), which a client destroyed right after its last answer
// does. So the first channel that carries a stream is kept for the
// process's life (an idle channel: its connection closes when idle), in a
// static that is never destroyed: still reachable at exit, so not a leak.
void PinCallbackQueue(const std::shared_ptr<grpc::Channel>& channel) {
  static const std::shared_ptr<grpc::Channel>* const pinned =
      new std::shared_ptr<grpc::Channel>(channel);
  (void)pinned;
}

}  // namespace

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
    PinCallbackQueue(endpoint->channel);
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
