// The daemon's health and liveness watches and its sd_notify messages
// (server/daemon.h).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/log.h"
#include "server/daemon.h"

namespace dedup {
namespace {

// How often a node's health status follows its storage's.
constexpr int64_t kHealthWatchIntervalMs = 250;

// Liveness (liveness_watch.h): how often the store is probed, and how long
// without progress is a wedge (longer than any RocksDB write stall).
constexpr int64_t kStoreProbeIntervalMs = 1000;
constexpr int64_t kWedgedAfterMs = 60'000;

// Tests shorten the limit to see the heartbeat move (not a flag: operators
// have no reason to change it).
absl::Duration WedgedAfter() {
  int64_t ms = 0;
  const char* env = std::getenv("DEDUP_TEST_WEDGED_AFTER_MS");
  if (env != nullptr && absl::SimpleAtoi(env, &ms) && ms > 0) {
    return absl::Milliseconds(ms);
  }
  return absl::Milliseconds(kWedgedAfterMs);
}

}  // namespace

// A node that cannot write says so to health checks (in a group, only for
// want of disk space: a follower's refusals are normal).
void Daemon::WatchHealth() {
  std::function<absl::Status()> storage_check;
  if (!cluster_.enabled) {
    storage_check = [s = store_.get()] { return s->CheckServing(); };
  } else {
    storage_check = [this] {
      for (ReplicatedStore* group : HostedGroups()) {
        if (absl::Status s = group->CheckDiskSpace(); !s.ok()) return s;
      }
      return absl::OkStatus();
    };
  }
  health_watch_ = std::make_unique<HealthWatch>(
      std::move(storage_check), health_, ReadinessServices(),
      absl::Milliseconds(kHealthWatchIntervalMs));
}

// Liveness follows the storage loop's heartbeat, and so do systemd's
// watchdog keepalives when it asks for them.
void Daemon::WatchLiveness() {
  std::function<uint64_t()> heartbeat;
  if (!cluster_.enabled) {
    store_probe_ = std::make_unique<StoreProbe>(
        store_.get(), absl::Milliseconds(kStoreProbeIntervalMs));
    heartbeat = [p = store_probe_.get()] { return p->answered(); };
  } else {
    // Any group's progress: they share one node, its disks and threads.
    // A node hosting none (every group moved away) counts the watch's own
    // calls: nothing of its can wedge.
    heartbeat = [this, calls = uint64_t{0}]() mutable {
      const std::vector<ReplicatedStore*> groups = HostedGroups();
      if (groups.empty()) return ++calls;
      uint64_t ticks = 0;
      for (ReplicatedStore* group : groups) {
        ticks += group->GetClusterStatus().consensus.ticks;
      }
      return ticks;
    };
  }
  LivenessOptions options;
  options.wedged_after = WedgedAfter();
  if (const absl::Duration watchdog = notifier_.watchdog_timeout();
      watchdog > absl::ZeroDuration()) {
    options.interval = std::min(options.interval, watchdog / 4);
    options.alive_every = watchdog / 2;
    options.on_alive = [this] { Notify("WATCHDOG=1"); };
  }
  liveness_watch_ =
      std::make_unique<LivenessWatch>(std::move(heartbeat), health_, options);
}

std::vector<ReplicatedStore*> Daemon::HostedGroups() const {
  std::vector<ReplicatedStore*> groups;
  if (directory_ == nullptr) return groups;  // single node
  for (const auto& [id, store] : directory_->hosted()) groups.push_back(store);
  return groups;
}

void Daemon::Notify(absl::string_view state) const {
  if (absl::Status s = notifier_.Notify(state); !s.ok()) {
    LogWarning("sd_notify: ", s.message());
  }
}

}  // namespace dedup
