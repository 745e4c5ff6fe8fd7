// Daemon::Serve and Daemon::Stop: signals, then the orderly stop.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "server/daemon.h"
#include "server/exit_status.h"

namespace dedup {

void Daemon::Serve() {
  while (sigwait(&signals_, &stop_signal_) == 0 && stop_signal_ == SIGHUP) {
    if (auth_->enabled()) {
      LogInfo("received SIGHUP, reloading the tenants file");
      auth_->Reload().IgnoreError();  // logged; the old tenants stay
    }
    if (!policies_->path().empty()) {
      if (absl::Status s = policies_->Reload(); s.ok()) {
        LogInfo("received SIGHUP, reloaded the policy file (",
                policies_->Current()->size(), " policies)");
      } else {
        LogWarning("policy file not reloaded, the old policy stays: ",
                   s.message());
      }
    }
  }
  LogInfo("received ", strsignal(stop_signal_), ", draining in-flight calls");
}

absl::Status Daemon::Stop() {
  Notify("STOPPING=1\nSTATUS=stopping: draining in-flight calls");
  activator_.reset();
  map_watch_.reset();
  liveness_watch_.reset();
  store_probe_.reset();
  health_watch_.reset();
  for (grpc::HealthCheckServiceInterface* h : health_) h->Shutdown();
  HandOffLeadership();
  // Stop the metrics endpoint while the calls drain. Its collectors read the
  // store, so it must be gone before the store closes.
  std::thread stop_metrics([this] { exposer_.reset(); });
  Drain();
  if (health_server_ != nullptr) health_server_->Shutdown();
  stop_metrics.join();
  // The threads of calls served off gRPC's threads (compactions, digests,
  // checkpoint streams) have finished their calls; they use the store.
  admin_->JoinTasks();
  if (cluster_service_ != nullptr) cluster_service_->JoinTasks();
  if (absl::Status s = store_->Close(); !s.ok()) {
    return ExitWith(exit_code::kStopError,
                    absl::StrCat("error closing the store: ", s.message()));
  }
  // --groups > 1: store_ was the router; the groups close after it.
  absl::MutexLock hosting(&hosting_mu_);
  for (std::unique_ptr<ReplicatedStore>& group : owned_groups_) {
    if (absl::Status s = group->Close(); !s.ok()) {
      return ExitWith(exit_code::kStopError,
                      absl::StrCat("error closing a group: ", s.message()));
    }
  }
  if (!config_.ready_file.empty()) {
    RemoveReadyFile(config_.ready_file, ready_.pid);
  }
  LogInfo("stopped cleanly");
  return absl::OkStatus();
}

namespace {

// Hand-offs not answered yet; shared with their callbacks, which may run
// after Stop stopped waiting.
struct PendingHandOffs {
  absl::Mutex mu;
  int remaining ABSL_GUARDED_BY(mu) = 0;
};

// Asks `group` to hand leadership to another voter when this node leads
// it and another voter exists (a sole voter has no one to hand over to:
// asking would only log a warning at every stop).
void AskHandOff(ReplicatedStore* group,
                const std::shared_ptr<PendingHandOffs>& pending) {
  const ConsensusStatus status = group->GetClusterStatus().consensus;
  if (status.role != Role::kLeader) return;
  const bool other_voter = std::any_of(
      status.members.begin(), status.members.end(), [&](const Member& m) {
        return m.id != status.id && m.role == MemberRole::kVoter;
      });
  if (!other_voter) return;
  {
    absl::MutexLock lock(&pending->mu);
    ++pending->remaining;
  }
  group->TransferLeadership(0, [pending](absl::Status s) {
    if (!s.ok()) LogWarning("leadership transfer: ", s.message());
    absl::MutexLock lock(&pending->mu);
    --pending->remaining;
  });
}

}  // namespace

// A leader hands over first, so the group elects no one while this node
// drains: clients see one redirect instead of an election's silence. Every
// group this node leads hands over at once; the wait is bounded for all.
void Daemon::HandOffLeadership() {
  balancer_.reset();  // it would hand leadership back
  auto pending = std::make_shared<PendingHandOffs>();
  for (ReplicatedStore* group : HostedGroups()) AskHandOff(group, pending);
  absl::MutexLock lock(&pending->mu);
  pending->mu.AwaitWithTimeout(
      absl::Condition(
          +[](int* remaining) { return *remaining == 0; }, &pending->remaining),
      absl::Seconds(3));
}

// Lame duck: new calls are answered UNAVAILABLE (retryable: clients go to
// another node or come back later) while those in flight finish. The client
// listener is not shut down after: gRPC's Server::Shutdown answers CANCELLED,
// which clients do not retry, to every call that reaches it once it has
// begun, however briefly (grpc/grpc#41785). It stays open, answering
// UNAVAILABLE, until the process exits and the kernel closes its
// connections: a call then in transit fails UNAVAILABLE too.
void Daemon::Drain() {
  service_->EnterLameDuck();
  admin_->EnterLameDuck();
  if (cluster_service_ != nullptr) cluster_service_->EnterLameDuck();
  // Parked Begins would otherwise hold the drain for up to their wait_ms.
  store_->DrainWaiters();
  const auto drain_start = std::chrono::steady_clock::now();
  const auto grace_end =
      drain_start + std::chrono::milliseconds(config_.shutdown_grace_ms);
  const auto lame_duck_end =
      drain_start + std::chrono::milliseconds(config_.lame_duck_ms);
  while (std::chrono::steady_clock::now() < grace_end &&
         (metrics_->calls_in_flight() > 0 ||
          std::chrono::steady_clock::now() < lame_duck_end)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (const int64_t running = metrics_->calls_in_flight(); running > 0) {
    // Only calls that outlive the grace are cancelled: they would
    // otherwise hold the store open.
    LogWarning(running, " calls still running after --shutdown_grace_ms (",
               config_.shutdown_grace_ms, " ms); cancelling them");
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
}

}  // namespace dedup
