// The lame duck of a stopping server: once entered, new calls are answered
// UNAVAILABLE (retryable: clients go to another node or come back later)
// while the calls in flight finish.
#ifndef DEDUP_SERVER_LAME_DUCK_H_
#define DEDUP_SERVER_LAME_DUCK_H_

#include <atomic>

#include "absl/status/status.h"

namespace dedup {

// Thread-safe; one-way (a server does not come back from it).
class LameDuck {
 public:
  void Enter() { entered_.store(true); }

  // UNAVAILABLE once entered, OK before.
  [[nodiscard]] absl::Status Check() const {
    if (!entered_.load()) return absl::OkStatus();
    return absl::UnavailableError(
        "the server is shutting down; retry with backoff (another node of "
        "the group, or this one once it is back)");
  }

 private:
  std::atomic<bool> entered_{false};
};

}  // namespace dedup

#endif  // DEDUP_SERVER_LAME_DUCK_H_
