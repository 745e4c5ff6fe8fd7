// The Session streams of one CoalescingClient: one per server address
// (Endpoint), opened on first use and shared by its lanes, and whether the
// servers have Session at all. A server that answered a stream UNIMPLEMENTED
// or "request: cannot be parsed" (IsUnparsedRequestReply: dedupd builds from
// before Session) turns the pool off for the client's life: its calls then
// go as batch RPCs.
//
// Thread-safe. Sessions live as long as the pool; the pool must outlive
// every call made on its sessions (its destructor cancels their streams and
// waits for their callbacks).
#ifndef DEDUP_CLIENT_SESSION_POOL_H_
#define DEDUP_CLIENT_SESSION_POOL_H_

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/leader_router.h"
#include "client/session.h"

namespace dedup {

class SessionPool {
 public:
  explicit SessionPool(bool enabled) : enabled_(enabled) {}
  ~SessionPool();

  SessionPool(const SessionPool&) = delete;
  SessionPool& operator=(const SessionPool&) = delete;

  // False once a server was found without Session (or when built off).
  [[nodiscard]] bool enabled() const {
    return enabled_.load(std::memory_order_relaxed);
  }

  // The session to `endpoint`'s server, opened if needed.
  [[nodiscard]] Session& For(const std::shared_ptr<const Endpoint>& endpoint);

  // True when `status` (a stream's end) says the server has no Session; the
  // pool is then off for good.
  bool NoteMissing(const absl::Status& status);

 private:
  struct Entry {
    std::shared_ptr<const Endpoint> endpoint;  // keeps the stub alive
    std::unique_ptr<Session> session;
  };
  std::atomic<bool> enabled_;
  absl::Mutex mu_;
  absl::flat_hash_map<const Endpoint*, Entry> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup

#endif  // DEDUP_CLIENT_SESSION_POOL_H_
