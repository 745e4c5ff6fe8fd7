#include "server/liveness_watch.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace dedup {
namespace {

// Distinct probe keys: enough that the slots they hash to cover every shard.
constexpr uint64_t kProbeKeys = 64;

}  // namespace

LivenessWatch::LivenessWatch(
    std::function<uint64_t()> heartbeat,
    std::vector<grpc::HealthCheckServiceInterface*> health,
    LivenessOptions options)
    : heartbeat_(std::move(heartbeat)),
      health_(std::move(health)),
      options_(std::move(options)) {
  Set(true);
  thread_ = std::thread([this] { Run(); });
}

LivenessWatch::~LivenessWatch() {
  stop_.Notify();
  thread_.join();
}

void LivenessWatch::Set(bool serving) {
  for (grpc::HealthCheckServiceInterface* h : health_) {
    h->SetServingStatus(kLivenessService, serving);
  }
}

void LivenessWatch::Run() {
  uint64_t last = heartbeat_();
  absl::Time progressed = absl::Now();
  absl::Time pinged = absl::InfinitePast();
  const bool pings = options_.on_alive != nullptr &&
                     options_.alive_every > absl::ZeroDuration();
  do {
    const absl::Time now = absl::Now();
    if (const uint64_t beat = heartbeat_(); beat != last) {
      last = beat;
      progressed = now;
    }
    const bool wedged = now - progressed > options_.wedged_after;
    if (wedged != wedged_.load()) {
      wedged_.store(wedged);
      Set(!wedged);
      if (wedged) {
        LogError("liveness NOT_SERVING: no progress of the storage loop for ",
                 absl::FormatDuration(now - progressed),
                 " (wedged; a supervisor should restart this process)");
      } else {
        LogInfo("liveness SERVING: the storage loop progresses again");
      }
    }
    if (pings && !wedged && now - pinged >= options_.alive_every) {
      options_.on_alive();
      pinged = now;
    }
  } while (!stop_.WaitForNotificationWithTimeout(options_.interval));
}

StoreProbe::StoreProbe(Store* store, absl::Duration interval)
    : store_(store), interval_(interval) {
  thread_ = std::thread([this] { Run(); });
}

StoreProbe::~StoreProbe() {
  stop_.Notify();
  thread_.join();
}

void StoreProbe::Run() {
  uint64_t sent = 0;
  do {
    if (shared_->pending.exchange(true)) continue;  // still unanswered
    store_->Get("", absl::StrCat("liveness-", sent++ % kProbeKeys),
                [shared = shared_](absl::StatusOr<std::optional<Record>>) {
                  shared->answered.fetch_add(1);
                  shared->pending.store(false);
                });
  } while (!stop_.WaitForNotificationWithTimeout(interval_));
}

}  // namespace dedup
