// dedupd as an object: Start (flags to serving), Serve (signals), Stop
// (hand-off, lame duck, drain, close). main() only parses the command line,
// runs these three and ends the process (process_exit.h).
#ifndef DEDUP_SERVER_DAEMON_H_
#define DEDUP_SERVER_DAEMON_H_

#include <signal.h>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "replication/group_router.h"
#include "replication/replicated_store.h"
#include "server/admin_service.h"
#include "server/auth.h"
#include "server/bench_service.h"
#include "server/cluster_config.h"
#include "server/cluster_service.h"
#include "server/dedup_service.h"
#include "server/event_log.h"
#include "server/forwarder.h"
#include "server/group_directory.h"
#include "server/health_watch.h"
#include "server/leader_balancer.h"
#include "server/liveness_watch.h"
#include "server/metrics.h"
#include "server/metrics_exposer.h"
#include "server/namespace_policy.h"
#include "server/ready_file.h"
#include "server/sd_notify.h"
#include "server/security_config.h"
#include "server/server_config.h"
#include "server/shard_map_publish.h"
#include "server/shard_map_watch.h"
#include "storage/store.h"

namespace dedup {

// Thread-compatible: Start, Serve and Stop are called in that order, once,
// from the main thread (the one that takes the signals). Every failure is
// logged by the caller (the status' message) and carries the exit code
// (exit_status.h). Members are declared in the order they are made, so that
// they are destroyed in the reverse order whatever step failed.
//
// Hosting (--groups > 1): the node opens and closes replicas while it
// serves (GroupHosting, for Cluster.HostGroup / DropGroup / MoveReplica),
// one at a time under hosting_mu_. A closed replica's store object is kept
// until the daemon goes: a caller may still hold the pointer it read.
class Daemon final : public GroupHosting {
 public:
  struct Build {
    std::string version;
    std::string git_sha;
  };

  explicit Daemon(Build build);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Reads the flags (after absl::ParseCommandLine), blocks the signals
  // Serve takes in this and every later thread, opens the store, starts the
  // services and listeners, logs "listening on ..." (event "listening"),
  // writes --ready_file, then tells systemd READY=1 (sd_notify.h).
  [[nodiscard]] absl::Status Start();

  // Waits for SIGINT or SIGTERM; each SIGHUP before reloads the tenants and
  // policy files.
  void Serve();

  // Stops: leadership hand-off (a leader), lame duck, drain, then closes
  // the store and removes --ready_file. OK: a clean stop. The client
  // listener stays open, answering UNAVAILABLE: the caller then ends the
  // process (ExitProcess) without destroying this object, so that the
  // kernel closes the connections and a call in transit fails UNAVAILABLE
  // rather than CANCELLED (see Drain). Only calls still running after
  // --shutdown_grace_ms are cancelled.
  [[nodiscard]] absl::Status Stop();

  // GroupHosting (daemon_hosting.cc).
  [[nodiscard]] absl::Status Host(uint32_t group_id) override;
  [[nodiscard]] absl::Status Drop(uint32_t group_id) override;

 private:
  // Start's steps, in order.
  absl::Status ReadConfig();
  void BlockSignals();
  absl::Status LoadTenants();
  absl::Status OpenStore();
  // Cluster mode: every hosted group's store, then (--groups > 1) the
  // router over them.
  absl::Status OpenGroups();
  absl::Status OpenEventLog();
  absl::Status StartMetrics();
  absl::Status StartServer();
  // Cluster mode with --forward_to_leader: makes forwarder_ and gives it to
  // service_ (before the server serves).
  void StartForwarding();
  absl::Status StartHealthServer();
  absl::Status AnnounceReady();
  void WatchHealth();
  void WatchLiveness();
  // Tells systemd `state` when it listens; a failure is only logged.
  void Notify(absl::string_view state) const;
  // Names the services that health checks may ask about on `health` (a
  // listener's) and adds it to health_, so every listener answers alike.
  void AddHealthService(grpc::HealthCheckServiceInterface* health);
  std::vector<std::string> ReadinessServices() const;
  // The replicas hosted now (the directory's), in group order; none for a
  // single node.
  std::vector<ReplicatedStore*> HostedGroups() const;
  // Routes to replicas opened while serving once they are voters that know
  // their leader (until then their refusals would name no one): every
  // 100 ms on activator_'s thread.
  void ActivateJoined();
  // Stops hosting `group_id` (hosting_mu_ held): directory, router, store,
  // directories.
  absl::Status CloseAndDelete(uint32_t group_id, ReplicatedStore* store,
                              const v1::ClusterStatusResponse& leader)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(hosting_mu_);
  // What group 0's store calls when it applied a new shard map.
  std::function<void()> ShardMapChanged() const;
  // Stop's steps.
  void HandOffLeadership();
  void Drain();

  const Build build_;
  const SdNotifier notifier_;
  ServerConfig config_;
  SecurityConfig security_;
  ClusterConfig cluster_;
  sigset_t signals_;
  int stop_signal_ = 0;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Authorizer> auth_;
  // Serializes opening and closing replicas while serving; guards the
  // lists below once the server runs (Start fills them alone).
  absl::Mutex hosting_mu_;
  // --groups > 1: the hosted groups' stores (store_ routes to them), and
  // those closed since (kept: see the class comment).
  std::vector<std::unique_ptr<ReplicatedStore>> owned_groups_;
  std::vector<std::unique_ptr<ReplicatedStore>> retired_groups_;
  // Groups opened while serving and not routed to yet (ActivateJoined).
  std::set<uint32_t> joining_ ABSL_GUARDED_BY(hosting_mu_);
  std::unique_ptr<Store> store_;
  GroupRouter* router_ = nullptr;  // store_ with --groups > 1
  // Cluster mode: every hosted group's store, ascending by group id (one
  // group: store_ itself), and the first of them (group 0 with one group),
  // whose dedup_raft_* metrics and backups this node serves.
  std::vector<ReplicatedStore*> groups_;
  ReplicatedStore* replicated_ = nullptr;
  std::unique_ptr<GroupDirectory> directory_;
  // Cluster mode: wakes map_watch_ when group 0 applied a new shard map
  // (shared with group 0's store, which may outlive the watch), and writes
  // groups' new replicas into that map.
  std::shared_ptr<ShardMapWake> map_wake_;
  std::unique_ptr<ShardMapPublisher> map_publisher_;
  // Stops the tenants' stored_bytes watch before the store goes.
  struct StoredBytesWatch {
    Authorizer* auth = nullptr;
    ~StoredBytesWatch();
  } stored_bytes_watch_;
  std::unique_ptr<EventLog> events_;
  std::string durability_;
  std::unique_ptr<MetricsExposer> exposer_;
  std::string metrics_address_;  // as bound
  std::unique_ptr<PolicyFile> policies_;
  // Cluster mode with --forward_to_leader; outlives the service's calls.
  std::unique_ptr<Forwarder> forwarder_;
  std::unique_ptr<DedupService> service_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<ClusterService> cluster_service_;
  BenchService bench_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> health_server_;
  std::string health_address_;  // as bound
  // One per listener.
  std::vector<grpc::HealthCheckServiceInterface*> health_;
  ReadyInfo ready_;
  std::unique_ptr<HealthWatch> health_watch_;
  std::unique_ptr<StoreProbe> store_probe_;  // single node
  std::unique_ptr<LivenessWatch> liveness_watch_;
  std::unique_ptr<LeaderBalancer> balancer_;  // --groups > 1
  // Cluster mode: keeps directory_'s copy of the shard map current.
  std::unique_ptr<ShardMapWatch> map_watch_;
  // Runs ActivateJoined (--groups > 1); stopped first.
  struct Activator {
    absl::Notification stop;
    std::thread thread;
    ~Activator() {
      stop.Notify();
      if (thread.joinable()) thread.join();
    }
  };
  std::unique_ptr<Activator> activator_;
};

}  // namespace dedup

#endif  // DEDUP_SERVER_DAEMON_H_
