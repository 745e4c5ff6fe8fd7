#include "server/health_watch.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace dedup {

HealthWatch::HealthWatch(std::function<absl::Status()> check,
                         std::vector<grpc::HealthCheckServiceInterface*> health,
                         std::vector<std::string> services,
                         absl::Duration interval)
    : check_(std::move(check)),
      health_(std::move(health)),
      services_(std::move(services)),
      interval_(interval) {
  thread_ = std::thread([this] {
    NameThisThread("dedup-health");
    Run();
  });
}

HealthWatch::~HealthWatch() {
  stop_.Notify();
  thread_.join();
}

void HealthWatch::Run() {
  bool serving = true;  // what gRPC's health service starts with
  do {
    const absl::Status status = check_();
    if (status.ok() == serving) continue;
    serving = status.ok();
    // By name: the overload without one would set liveness too. Ignored
    // after Shutdown.
    for (grpc::HealthCheckServiceInterface* h : health_) {
      h->SetServingStatus("", serving);
      for (const std::string& service : services_) {
        h->SetServingStatus(service, serving);
      }
    }
    if (serving) {
      LogInfo("health SERVING: storage writes again");
    } else {
      LogWarning("health NOT_SERVING: ", status.message());
    }
  } while (!stop_.WaitForNotificationWithTimeout(interval_));
}

}  // namespace dedup
