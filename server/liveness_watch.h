// Liveness, kept apart from readiness (health_watch.h). The health service
// named kLivenessService is SERVING unless this process is wedged, whatever
// its disk space, leadership or load; "" and dedup.v1.* stay readiness.
// Supervisors restart on liveness (Kubernetes' livenessProbe, systemd's
// WatchdogSec= through `on_alive`): a node that cannot write for want of
// disk space, or has no leader, would come back just as unable, only
// offline for the restart, and in a loop. Those are readiness matters.
//
// Wedged means: the thread every call of this node depends on has shown no
// progress for `wedged_after`. Its heartbeat is a counter the watch reads:
// - single node: probe reads answered by the store (StoreProbe below). A
//   read passes through a shard's queue and, with --durability=sync, waits
//   for the WAL syncer, so a shard thread or an fsync that hangs stops the
//   count; a full disk does not (reads are answered while writes stop).
// - cluster member: the consensus thread's ticks (ConsensusStatus::ticks),
//   which advance every few milliseconds while its loop runs; an Apply or
//   a log write that hangs stops them, a lost majority does not.
// Nothing outside the process stops either for long; only a bug or a hung
// disk does, and a restart is the one remedy a supervisor has. The limit is
// generous (RocksDB write stalls can hold a shard's queue for seconds).
// gRPC's own threads are not watched: a probe that cannot reach the health
// service fails by itself.
//
// Thread safety: construct and destroy on one thread; the watch runs on its
// own thread; wedged() from any thread.
#ifndef DEDUP_SERVER_LIVENESS_WATCH_H_
#define DEDUP_SERVER_LIVENESS_WATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"
#include "storage/store.h"

namespace dedup {

// The grpc.health.v1 service name that answers liveness.
inline constexpr char kLivenessService[] = "dedup.v1.Liveness";

struct LivenessOptions {
  // How often the heartbeat is read.
  absl::Duration interval = absl::Milliseconds(250);
  // No progress for this long is a wedge.
  absl::Duration wedged_after = absl::Seconds(60);
  // Called on the watch's thread at most this often while not wedged (a
  // systemd watchdog keepalive); null or zero: never.
  std::function<void()> on_alive;
  absl::Duration alive_every = absl::ZeroDuration();
};

class LivenessWatch {
 public:
  // No pointer is owned; all must outlive this object. `heartbeat` must not
  // block: it returns a number that changes while the process makes
  // progress. Sets kLivenessService SERVING on every `health` at once.
  LivenessWatch(std::function<uint64_t()> heartbeat,
                std::vector<grpc::HealthCheckServiceInterface*> health,
                LivenessOptions options);
  // Stops the watch (the status stays as last set).
  ~LivenessWatch();
  LivenessWatch(const LivenessWatch&) = delete;
  LivenessWatch& operator=(const LivenessWatch&) = delete;

  [[nodiscard]] bool wedged() const { return wedged_.load(); }

 private:
  void Run();
  void Set(bool serving);

  const std::function<uint64_t()> heartbeat_;
  const std::vector<grpc::HealthCheckServiceInterface*> health_;
  const LivenessOptions options_;
  std::atomic<bool> wedged_{false};
  absl::Notification stop_;
  std::thread thread_;
};

// The single-node heartbeat: a read of a key no client can name (the empty
// namespace), sent every `interval` once the previous one was answered,
// with any answer counted. Keys vary so that every shard is probed in turn.
// Thread safety: answered() from any thread.
class StoreProbe {
 public:
  // `store` is not owned and must outlive this object.
  StoreProbe(Store* store, absl::Duration interval);
  // Joins the prober (which may wait on a wedged store); a probe still
  // unanswered may be answered later, touching only state it shares.
  ~StoreProbe();
  StoreProbe(const StoreProbe&) = delete;
  StoreProbe& operator=(const StoreProbe&) = delete;

  [[nodiscard]] uint64_t answered() const { return shared_->answered.load(); }

 private:
  struct Shared {
    std::atomic<uint64_t> answered{0};
    std::atomic<bool> pending{false};
  };
  void Run();

  Store* const store_;
  const absl::Duration interval_;
  const std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_LIVENESS_WATCH_H_
