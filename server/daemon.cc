// Daemon::Start: from the flags to serving.
#include "server/daemon.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/backup_restore.h"
#include "server/cluster_collector.h"
#include "server/daemon_hosting.h"
#include "server/data_format_check.h"
#include "server/exit_status.h"
#include "server/forward_config.h"
#include "server/groups_collector.h"
#include "server/metrics_exposer.h"
#include "server/recovery.h"
#include "server/serving_priority.h"
#include "server/tls.h"
#include "server/transport_limits.h"
#include "server/unparseable_requests.h"
#include "storage/durable_dir.h"

ABSL_DECLARE_FLAG(std::string, durability);

namespace dedup {
namespace {

// How often the tenants file is checked for a change (SIGHUP reloads at
// once).
constexpr int kTenantsFileCheckSeconds = 2;

// Headroom over the result limit for the rest of a CompleteRequest.
constexpr int kMessageOverheadBytes = 64 << 10;

// Refuses a data dir that exists but is not a directory, or cannot be made.
absl::Status PrepareDataDir(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) &&
      !std::filesystem::is_directory(path, ec)) {
    return ExitWith(
        exit_code::kDataDir,
        absl::StrCat("data dir ", path, " exists and is not a directory"));
  }
  // Durably: a data dir whose own name is lost in a power cut takes every
  // acknowledged write with it.
  if (absl::Status s = CreateDirectoriesDurably(path); !s.ok()) {
    return ExitWith(exit_code::kDataDir,
                    absl::StrCat("cannot create data dir: ", s.message()));
  }
  return absl::OkStatus();
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// --restore_from fills the data dir first; a restore cut short is refused.
absl::Status RestoreIfAsked(const std::string& data_dir,
                            const ClusterConfig& cluster) {
  if (const std::string backup = RestoreFromFlag(); !backup.empty()) {
    if (absl::Status s = RestoreFromBackup(backup, data_dir, cluster);
        !s.ok()) {
      return s;
    }
  }
  return CheckNoUnfinishedRestore(data_dir);
}

// A failed step's error as it ends the process: `prefix` and its message.
absl::Status Fail(int code, const absl::Status& error,
                  absl::string_view prefix = "") {
  return ExitWith(code, absl::StrCat(prefix, error.message()));
}

}  // namespace

Daemon::StoredBytesWatch::~StoredBytesWatch() {
  if (auth != nullptr) auth->StopStoredBytesWatch();
}

Daemon::Daemon(Build build)
    : build_(std::move(build)), notifier_(SdNotifier::FromEnvironment()) {
  sigemptyset(&signals_);
}

// The peer plane checks credentials with auth_, which goes first.
Daemon::~Daemon() {
  if (cluster_.peer_plane != nullptr) cluster_.peer_plane->Stop();
}

absl::Status Daemon::Start() {
  if (absl::Status s = ReadConfig(); !s.ok()) return s;
  BlockSignals();
  LogInfo(RaiseOpenFileLimit());
  metrics_ = std::make_unique<Metrics>(config_.metrics_namespaces);
  if (absl::Status s = LoadTenants(); !s.ok()) return s;
  absl::StatusOr<ClusterConfig> cluster =
      ClusterConfigFromFlags(config_.store, security_, auth_.get());
  if (!cluster.ok()) return Fail(exit_code::kBadFlags, cluster.status());
  cluster_ = *std::move(cluster);
  if (absl::Status s = RestoreIfAsked(config_.store.path, cluster_); !s.ok()) {
    return s;
  }
  // Before anything touches the dir: a newer release's dir stays as it was.
  absl::StatusOr<storage::DataFormat> format =
      CheckDataDirFormat(config_.store.path);
  if (!format.ok()) return format.status();
  if (absl::Status s = PrepareDataDir(config_.store.path); !s.ok()) return s;
  if (absl::Status s = PrepareRecovery(cluster_, cluster_.open_peer); !s.ok()) {
    return s;
  }
  Notify("STATUS=opening the store");
  if (absl::Status s = OpenStore(); !s.ok()) return s;
  if (absl::Status s = RecordDataDirFormat(config_.store.path, *format);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = OpenEventLog(); !s.ok()) return s;
  durability_ = cluster_.enabled ? "raft" : absl::GetFlag(FLAGS_durability);
  if (absl::Status s = StartMetrics(); !s.ok()) return s;
  policies_ = std::make_unique<PolicyFile>(config_.policy_file, config_.limits);
  if (absl::Status s = policies_->Reload(); !s.ok()) {
    return Fail(exit_code::kBadFlags, s, "--policy_file: ");
  }
  if (absl::Status s = StartServer(); !s.ok()) return s;
  if (absl::Status s = StartHealthServer(); !s.ok()) return s;
  if (absl::Status s = AnnounceReady(); !s.ok()) return s;
  WatchHealth();
  WatchLiveness();
  return absl::OkStatus();
}

absl::Status Daemon::ReadConfig() {
  absl::StatusOr<ServerConfig> config = ServerConfigFromFlags();
  if (!config.ok()) return Fail(exit_code::kBadFlags, config.status());
  config_ = *std::move(config);
  SetLogLevel(config_.log_level);
  SetLogFormat(config_.log_format);
  absl::StatusOr<SecurityConfig> security =
      SecurityConfigFromFlags(config_.address);
  if (!security.ok()) return Fail(exit_code::kBadFlags, security.status());
  security_ = *std::move(security);
  if (absl::Status s = CheckTlsFiles(security_); !s.ok()) {
    return Fail(exit_code::kBadFlags, s);
  }
  return absl::OkStatus();
}

// Signals are taken synchronously by Serve (sigwait), so every thread
// started from here on must have them blocked.
void Daemon::BlockSignals() {
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGHUP);  // reloads the tenants file
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

absl::Status Daemon::LoadTenants() {
  if (security_.tenants_file.empty()) {
    auth_ = std::make_unique<Authorizer>(metrics_->registry().get());
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Authorizer>> loaded =
      Authorizer::FromFile(security_.tenants_file, metrics_->registry().get(),
                           security_.auth_failures);
  if (!loaded.ok()) {
    return Fail(exit_code::kBadFlags, loaded.status(), "--tenants_file: ");
  }
  auth_ = *std::move(loaded);
  auth_->WatchFile(absl::Seconds(kTenantsFileCheckSeconds));
  return absl::OkStatus();
}

// Cluster mode: the same services over a replicated store.
absl::Status Daemon::OpenStore() {
  config_.store.observer = metrics_.get();
  if (cluster_.enabled) {
    if (absl::Status s = OpenGroups(); !s.ok()) return s;
  } else {
    absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(config_.store);
    if (!opened.ok()) return Fail(exit_code::kDataDir, opened.status());
    store_ = *std::move(opened);
  }
  // The tenants' stored_bytes limits, measured every second; the watch stops
  // before the store goes (stored_bytes_watch_ is declared after it).
  auth_->WatchStoredBytes(
      [s = store_.get()] { return s->StoredBytesByNamespace(); },
      absl::Seconds(1));
  stored_bytes_watch_.auth = auth_.get();
  return absl::OkStatus();
}

absl::Status Daemon::OpenGroups() {
  if (cluster_.group_count > 1) RemoveDroppedLeftovers(config_.store.path);
  map_wake_ = std::make_shared<ShardMapWake>();
  for (ClusterStoreOptions& options : cluster_.groups) {
    const uint32_t id = options.raft.group_id;
    if (id == 0) options.shard_map_changed = ShardMapChanged();
    if (id != 0) {
      if (absl::Status s =
              CreateDirectoriesDurably(GroupDir(config_.store.path, id));
          !s.ok()) {
        return Fail(exit_code::kDataDir, s, "cannot create a group's dir: ");
      }
    }
    absl::StatusOr<std::unique_ptr<ReplicatedStore>> opened =
        ReplicatedStore::Open(options);
    if (!opened.ok()) {
      return Fail(exit_code::kDataDir, opened.status(),
                  id == 0 ? "" : absl::StrCat("group ", id, ": "));
    }
    groups_.push_back(opened->get());
    owned_groups_.push_back(*std::move(opened));
  }
  // After the founding replicas exist: from now on the node hosts the
  // groups it has directories of (the restart rule, cluster_config.h), even
  // once every group has moved away.
  if (cluster_.group_count > 1) {
    if (absl::Status s = CreateFileDurably(
            (std::filesystem::path(config_.store.path) / kFoundedMarker)
                .string(),
            "replicas hosted: the groups with a raft directory\n", 0644);
        !s.ok()) {
      return Fail(exit_code::kDataDir, s, "cannot mark the data dir founded: ");
    }
  }
  // None after every group hosted here moved away (--groups > 1).
  replicated_ = groups_.empty() ? nullptr : groups_.front();
  std::map<uint32_t, ReplicatedStore*> hosted;
  std::map<uint32_t, Store*> routed;
  for (size_t i = 0; i < groups_.size(); ++i) {
    hosted[cluster_.groups[i].raft.group_id] = groups_[i];
    routed[cluster_.groups[i].raft.group_id] = groups_[i];
  }
  directory_ = std::make_unique<GroupDirectory>(
      cluster_.node_id, cluster_.layout, cluster_.peers, std::move(hosted));
  map_publisher_ = std::make_unique<ShardMapPublisher>(
      directory_.get(), cluster_.open_peer,
      [wake = map_wake_](uint64_t) { wake->Notify(); });
  ShardMapWatchOptions watch;
  watch.directory = directory_.get();
  watch.open = cluster_.open_peer;
  watch.wake = map_wake_;
  watch.publish = [publisher = map_publisher_.get()](
                      uint32_t group_id, const std::vector<uint64_t>& voters) {
    return publisher->Publish(group_id, voters, absl::Seconds(5));
  };
  map_watch_ = std::make_unique<ShardMapWatch>(std::move(watch));
  if (cluster_.group_count == 1) {
    store_ = std::move(owned_groups_.front());
    owned_groups_.clear();
    return absl::OkStatus();
  }
  GroupRouter::Options router;
  router.layout = cluster_.layout;
  router.hosted = std::move(routed);
  router.not_hosted = [d = directory_.get()](uint32_t group_id) {
    return d->NotHosted(group_id);
  };
  absl::StatusOr<std::unique_ptr<GroupRouter>> created =
      GroupRouter::Create(std::move(router));
  if (!created.ok()) return Fail(exit_code::kDataDir, created.status());
  router_ = created->get();
  store_ = *std::move(created);
  balancer_ =
      std::make_unique<LeaderBalancer>(directory_.get(), absl::Seconds(1));
  activator_ = std::make_unique<Activator>();
  // Not through activator_, which Stop resets while this thread runs.
  activator_->thread = std::thread([this, stop = &activator_->stop] {
    while (!stop->WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      ActivateJoined();
    }
  });
  return absl::OkStatus();
}

std::function<void()> Daemon::ShardMapChanged() const {
  return [wake = map_wake_] { wake->Notify(); };
}

// After the store: in single-node mode the data dir is RocksDB's own, and a
// first start must find it empty.
absl::Status Daemon::OpenEventLog() {
  if (config_.event_log.destination != "off" && !config_.event_log.raw_keys) {
    absl::StatusOr<std::string> secret =
        LoadOrCreateEventLogSecret(config_.event_log.key_file.empty()
                                       ? config_.store.path + "/event-log.key"
                                       : config_.event_log.key_file);
    if (!secret.ok()) return Fail(exit_code::kBadFlags, secret.status());
    config_.event_log.key_hash_secret = *std::move(secret);
  }
  absl::StatusOr<std::unique_ptr<EventLog>> events =
      EventLog::Open(config_.event_log, metrics_.get());
  if (!events.ok()) {
    return Fail(exit_code::kBadFlags, events.status(), "--event_log: ");
  }
  events_ = *std::move(events);
  return absl::OkStatus();
}

absl::Status Daemon::StartMetrics() {
  if (config_.metrics_address.empty()) return absl::OkStatus();
  std::string token;
  if (!config_.metrics_token_file.empty()) {
    absl::StatusOr<std::string> read =
        ReadMetricsToken(config_.metrics_token_file);
    if (!read.ok()) return Fail(exit_code::kBadFlags, read.status());
    token = *std::move(read);
  }
  std::vector<std::shared_ptr<prometheus::Collectable>> extra;
  const bool many_groups = cluster_.enabled && cluster_.group_count > 1;
  if (cluster_.enabled) {
    auto hosted = [directory = directory_.get()] {
      return directory->hosted();
    };
    extra.push_back(std::make_shared<GroupsCollector>(
        hosted, cluster_.group_count, cluster_.layout.ReplicationFactor()));
    // dedup_raft_* summed over the hosted groups (cluster_collector.h).
    if (many_groups)
      extra.push_back(std::make_shared<ClusterCollector>(hosted));
  }
  absl::StatusOr<std::unique_ptr<MetricsExposer>> started = StartMetricsExposer(
      config_.metrics_address, *metrics_, store_.get(),
      many_groups ? nullptr : replicated_, cluster_.peer_plane, build_.version,
      build_.git_sha, token, std::move(extra));
  if (!started.ok()) return Fail(exit_code::kListen, started.status());
  exposer_ = *std::move(started);
  metrics_address_ =
      absl::StrCat(HostOf(config_.metrics_address), ":", exposer_->port());
  LogAnnouncement(kLogComponent, "metrics",
                  absl::StrCat("metrics on ", metrics_address_),
                  {{"address", metrics_address_}});
  return absl::OkStatus();
}

void Daemon::StartForwarding() {
  ForwardConfig forward = ForwardConfigFromFlags(security_);
  if (!cluster_.enabled || !forward.enabled) return;
  ForwarderOptions options;
  options.node_id = cluster_.node_id;
  for (const ClusterNode& node : cluster_.peers) {
    if (node.id == options.node_id) options.self_address = node.client_address;
  }
  options.open = std::move(forward.open);
  options.auth_enabled = auth_->enabled();
  options.registry = metrics_->registry().get();
  if (directory_ != nullptr) {
    options.shard_epoch = [directory = directory_.get()] {
      return directory->epoch();
    };
  }
  forwarder_ = std::make_unique<Forwarder>(std::move(options));
  service_->EnableForwarding(forwarder_.get());
}

absl::Status Daemon::StartServer() {
  service_ = std::make_unique<DedupService>(store_.get(), config_.limits,
                                            metrics_.get(), auth_.get(),
                                            events_.get(), policies_.get());
  StartForwarding();
  admin_ = std::make_unique<AdminService>(
      store_.get(), metrics_.get(), auth_.get(),
      BuildInfo{build_.version, build_.git_sha, durability_}, policies_.get());
  BackupSource backup;
  backup.store = store_.get();
  backup.replicated = replicated_;
  if (cluster_.group_count > 1) {
    backup.refusal = "a backup is not yet supported with --groups > 1";
  }
  backup.scratch_dir = config_.store.path + "/backup-checkpoint";
  backup.clock =
      config_.store.clock != nullptr ? config_.store.clock : RealClock();
  backup.version = build_.version;
  backup.git_sha = build_.git_sha;
  admin_->EnableBackup(std::move(backup));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.address, ServerCredentialsFor(security_),
                           &port_);
  builder.RegisterService(service_.get());
  builder.RegisterService(admin_.get());
  if (directory_ != nullptr) {
    cluster_service_ = std::make_unique<ClusterService>(
        directory_.get(), auth_.get(), metrics_.get());
    if (router_ != nullptr) {
      cluster_service_->EnableHosting(this, cluster_.open_peer);
    }
    cluster_service_->EnableMapPublishing(map_publisher_.get());
    builder.RegisterService(cluster_service_.get());
  }
  if (config_.enable_bench_service) builder.RegisterService(&bench_);
  ApplyTransportLimits(config_.transport, &builder);
  QuietProtobufParseErrors();
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  std::vector<std::string> served = {v1::Dedup::service_full_name(),
                                     v1::Admin::service_full_name()};
  if (cluster_service_ != nullptr) {
    served.push_back(v1::Cluster::service_full_name());
  }
  if (config_.enable_bench_service) {
    served.push_back(v1::Bench::service_full_name());
  }
  interceptors.push_back(
      UnparseableRequestInterceptor(metrics_.get(), std::move(served)));
  if (auto lower = ServingPriorityInterceptor(config_.serving_thread_nice)) {
    interceptors.push_back(std::move(lower));
  }
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(
      std::max<int>(4 << 20, static_cast<int>(config_.limits.max_result_bytes) +
                                 kMessageOverheadBytes));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return ExitWith(exit_code::kListen,
                    absl::StrCat("cannot listen on ", config_.address,
                                 " (address in use or invalid?)"));
  }
  AddHealthService(server_->GetHealthCheckService());
  return absl::OkStatus();
}

// gRPC's default health service knows only "" until told the names the
// README lists; the watch then sets all of them on every listener.
void Daemon::AddHealthService(grpc::HealthCheckServiceInterface* health) {
  for (const std::string& service : ReadinessServices()) {
    health->SetServingStatus(service, true);
  }
  health->SetServingStatus(kLivenessService, true);
  health_.push_back(health);
}

// The names besides "" whose status is readiness.
std::vector<std::string> Daemon::ReadinessServices() const {
  std::vector<std::string> names = {v1::Dedup::service_full_name(),
                                    v1::Admin::service_full_name()};
  if (cluster_service_ != nullptr) {
    names.push_back(v1::Cluster::service_full_name());
  }
  return names;
}

// Probes that cannot speak TLS get the same health status in plaintext, on
// a listener that serves nothing else.
absl::Status Daemon::StartHealthServer() {
  if (config_.health_address.empty()) return absl::OkStatus();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.health_address,
                           grpc::InsecureServerCredentials(), &port);
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr || port == 0) {
    server_->Shutdown();
    return ExitWith(exit_code::kListen,
                    absl::StrCat("cannot listen on ", config_.health_address,
                                 " (--health_address: in use or invalid?)"));
  }
  // It serves none of them, but answers for them.
  AddHealthService(health_server_->GetHealthCheckService());
  health_address_ = absl::StrCat(HostOf(config_.health_address), ":", port);
  LogInfo("health (plaintext, grpc.health.v1 only) on ", health_address_);
  return absl::OkStatus();
}

// The listening line is for people; programs read --ready_file, written
// after it.
absl::Status Daemon::AnnounceReady() {
  ready_.pid = getpid();
  ready_.mode = cluster_.enabled ? "cluster" : "single";
  ready_.node_id = cluster_.node_id;
  ready_.address = absl::StrCat(HostOf(config_.address), ":", port_);
  ready_.metrics_address = metrics_address_;
  ready_.health_address = health_address_;
  ready_.raft_address = cluster_.raft_address;
  ready_.data_dir = config_.store.path;
  ready_.durability = durability_;
  ready_.tls = !security_.tls()                       ? "off"
               : security_.tls_client_ca_file.empty() ? "on"
                                                      : "mtls";
  ready_.auth = auth_->enabled() ? "tenants" : "off";
  ready_.version = build_.version;
  // Recorded in the dir by now (RecordDataDirFormat).
  ready_.data_format = storage::kDataFormatVersion;
  LogAnnouncement(kLogComponent, "listening",
                  absl::StrCat("listening on ", ready_.address,
                               " (data_dir=", ready_.data_dir,
                               " durability=", ready_.durability,
                               " tls=", ready_.tls, " auth=", ready_.auth,
                               cluster_.enabled
                                   ? absl::StrCat(" node=", ready_.node_id,
                                                  " raft=", ready_.raft_address)
                                   : "",
                               ")"),
                  {{"address", ready_.address}});
  if (!config_.ready_file.empty()) {
    if (absl::Status s = WriteReadyFile(config_.ready_file, ready_); !s.ok()) {
      server_->Shutdown();
      return Fail(exit_code::kListen, s);
    }
  }
  Notify(absl::StrCat(
      "READY=1\nSTATUS=serving on ", ready_.address,
      cluster_.enabled ? absl::StrCat(" as node ", ready_.node_id) : ""));
  return absl::OkStatus();
}

}  // namespace dedup
