// Readiness: keeps the standard gRPC health status (grpc.health.v1, service
// "" and the dedup.v1 services it serves) in step with a check of the node's
// storage: for a single
// node whether its store can write (NOT_SERVING while writes are stopped: a
// nearly full disk, a RocksDB error; storage/write_health.h), for a group
// member only whether its disk has room (a follower refuses writes too, it
// names the leader, and probes must not fail the followers of a healthy
// group). SERVING again once the cause is gone. A load balancer or
// orchestrator then stops sending calls to a node that can only refuse
// them, and an alert on the health check fires. Liveness, which must not
// fail for any of these, has a service name of its own (liveness_watch.h)
// that this watch leaves alone.
//
// Thread safety: construct and destroy on one thread; the watch runs on its
// own thread.
#ifndef DEDUP_SERVER_HEALTH_WATCH_H_
#define DEDUP_SERVER_HEALTH_WATCH_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"

namespace dedup {

class HealthWatch {
 public:
  // No pointer is owned; all must outlive this object. Runs `check` every
  // `interval` (on the watch's thread), sets the status of "" and of each
  // of `services` on every `health` (one per listener) and logs each change.
  HealthWatch(std::function<absl::Status()> check,
              std::vector<grpc::HealthCheckServiceInterface*> health,
              std::vector<std::string> services, absl::Duration interval);
  // Stops the watch (the status stays as last set).
  ~HealthWatch();
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;

 private:
  void Run();

  const std::function<absl::Status()> check_;
  const std::vector<grpc::HealthCheckServiceInterface*> health_;
  const std::vector<std::string> services_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_HEALTH_WATCH_H_
