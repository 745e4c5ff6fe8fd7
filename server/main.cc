// dedupd: the idempotency authority on one node.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/exit_codes.h"
#include "common/flag_syntax.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "prometheus/exposer.h"
#include "replication/replicated_store.h"
#include "server/admin_service.h"
#include "server/auth.h"
#include "server/bench_service.h"
#include "server/cluster_collector.h"
#include "server/cluster_config.h"
#include "server/cluster_service.h"
#include "server/collectors.h"
#include "server/dedup_service.h"
#include "server/event_log.h"
#include "server/health_watch.h"
#include "server/metrics.h"
#include "server/ready_file.h"
#include "server/security_config.h"
#include "server/server_config.h"
#include "server/tls.h"
#include "server/transport_limits.h"
#include "server/unparseable_requests.h"
#include "server/usage.h"
#include "storage/store.h"

ABSL_DECLARE_FLAG(std::string, durability);

namespace {

using dedup::exit_code::kBadFlags;
using dedup::exit_code::kDataDir;
using dedup::exit_code::kListen;
using dedup::exit_code::kStopError;

// How often the tenants file is checked for a change (SIGHUP reloads at
// once).
constexpr int kTenantsFileCheckSeconds = 2;

// How often a node's health status follows its storage's.
constexpr int64_t kHealthWatchIntervalMs = 250;

// Headroom over the result limit for the rest of a CompleteRequest.
constexpr int kMessageOverheadBytes = 64 << 10;

void Log(const std::string& line) {
  std::fprintf(stderr, "dedupd: %s\n", line.c_str());
  std::fflush(stderr);
}

// Refuses a data dir that exists but is not a directory, or cannot be made.
bool PrepareDataDir(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) &&
      !std::filesystem::is_directory(path, ec)) {
    Log(absl::StrCat("data dir ", path, " exists and is not a directory"));
    return false;
  }
  std::filesystem::create_directories(path, ec);
  if (ec) {
    Log(absl::StrCat("cannot create data dir ", path, ": ", ec.message()));
    return false;
  }
  return true;
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// Serves /metrics: the counters, the store's gauges and process metrics.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetrics(
    const std::string& address, const dedup::Metrics& metrics,
    dedup::Store* store, dedup::ReplicatedStore* replicated) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Several workers and a short read timeout: an idle connection holds one
    // worker for a few seconds, not every scrape for civetweb's default 30 s.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", "8", "request_timeout_ms",
        "3000", "keep_alive_timeout_ms", "3000"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  // The exposer keeps weak pointers; these collectors live as long as it.
  static auto* const collectors =
      new std::vector<std::shared_ptr<prometheus::Collectable>>();
  collectors->push_back(metrics.registry());
  collectors->push_back(std::make_shared<dedup::StoreCollector>(store));
  collectors->push_back(
      std::make_shared<dedup::ProcessCollector>(DEDUP_VERSION, DEDUP_GIT_SHA));
  if (replicated != nullptr) {
    collectors->push_back(
        std::make_shared<dedup::ClusterCollector>(replicated));
  }
  for (const auto& collector : *collectors) {
    exposer->RegisterCollectable(collector);
  }
  return exposer;
}

}  // namespace

int main(int argc, char** argv) {
  dedup::ConfigureUsage();
  // ParseCommandLine would exit 1 on a bad flag; we promise 2.
  if (absl::Status s = dedup::CheckFlagSyntax(argc, argv); !s.ok()) {
    Log(absl::StrCat(s.message(), " (see --help)"));
    return kBadFlags;
  }
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every mutex acquisition for lock-order cycles;
  // that costs a few percent of each request and the tests cover ordering.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<dedup::ServerConfig> config = dedup::ServerConfigFromFlags();
  if (!config.ok()) {
    Log(std::string(config.status().message()));
    return kBadFlags;
  }
  absl::StatusOr<dedup::SecurityConfig> security =
      dedup::SecurityConfigFromFlags(config->address);
  if (!security.ok()) {
    Log(std::string(security.status().message()));
    return kBadFlags;
  }
  if (absl::Status s = dedup::CheckTlsFiles(*security); !s.ok()) {
    Log(std::string(s.message()));
    return kBadFlags;
  }

  // Signals are taken synchronously by main (sigwait), so every thread
  // started from here on must have them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // reloads the tenants file
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Log(dedup::RaiseOpenFileLimit());
  dedup::Metrics metrics(config->metrics_namespaces);
  std::unique_ptr<dedup::Authorizer> auth;
  if (security->tenants_file.empty()) {
    auth = std::make_unique<dedup::Authorizer>(metrics.registry().get());
  } else {
    absl::StatusOr<std::unique_ptr<dedup::Authorizer>> loaded =
        dedup::Authorizer::FromFile(security->tenants_file,
                                    metrics.registry().get());
    if (!loaded.ok()) {
      Log(absl::StrCat("--tenants_file: ", loaded.status().message()));
      return kBadFlags;
    }
    auth = *std::move(loaded);
    auth->WatchFile(absl::Seconds(kTenantsFileCheckSeconds));
  }

  absl::StatusOr<dedup::ClusterConfig> cluster =
      dedup::ClusterConfigFromFlags(config->store, *security);
  if (!cluster.ok()) {
    Log(std::string(cluster.status().message()));
    return kBadFlags;
  }

  if (!PrepareDataDir(config->store.path)) return kDataDir;

  config->store.observer = &metrics;
  // Cluster mode: the same services over a replicated store.
  dedup::ReplicatedStore* replicated = nullptr;
  absl::StatusOr<std::unique_ptr<dedup::Store>> store;
  if (cluster->enabled) {
    absl::StatusOr<std::unique_ptr<dedup::ReplicatedStore>> opened =
        dedup::ReplicatedStore::Open(cluster->store);
    if (opened.ok()) replicated = opened->get();
    store =
        opened.ok()
            ? absl::StatusOr<std::unique_ptr<dedup::Store>>(*std::move(opened))
            : opened.status();
  } else {
    store = dedup::Store::Open(config->store);
  }
  if (!store.ok()) {
    Log(std::string(store.status().message()));
    return kDataDir;
  }
  // The tenants' stored_bytes limits, measured every second; the watch stops
  // before the store goes (this is declared after it).
  auth->WatchStoredBytes(
      [s = store->get()] { return s->StoredBytesByNamespace(); },
      absl::Seconds(1));
  absl::Cleanup stop_bytes_watch = [&auth] { auth->StopStoredBytesWatch(); };
  // After the store: in single-node mode the data dir is RocksDB's own, and
  // a first start must find it empty.
  if (config->event_log.destination != "off" && !config->event_log.raw_keys) {
    absl::StatusOr<std::string> secret = dedup::LoadOrCreateEventLogSecret(
        config->event_log.key_file.empty()
            ? config->store.path + "/event-log.key"
            : config->event_log.key_file);
    if (!secret.ok()) {
      Log(std::string(secret.status().message()));
      return kBadFlags;
    }
    config->event_log.key_hash_secret = *std::move(secret);
  }
  absl::StatusOr<std::unique_ptr<dedup::EventLog>> events =
      dedup::EventLog::Open(config->event_log, &metrics);
  if (!events.ok()) {
    Log(absl::StrCat("--event_log: ", events.status().message()));
    return kBadFlags;
  }
  const std::string durability =
      cluster->enabled ? "raft" : absl::GetFlag(FLAGS_durability);

  std::unique_ptr<prometheus::Exposer> exposer;
  std::string metrics_address;  // as bound
  if (!config->metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<prometheus::Exposer>> started = StartMetrics(
        config->metrics_address, metrics, store->get(), replicated);
    if (!started.ok()) {
      Log(std::string(started.status().message()));
      return kListen;
    }
    exposer = *std::move(started);
    const std::vector<int> ports = exposer->GetListeningPorts();
    metrics_address = absl::StrCat(HostOf(config->metrics_address), ":",
                                   ports.empty() ? 0 : ports.front());
    std::fprintf(stderr, "dedupd metrics on %s\n", metrics_address.c_str());
  }

  dedup::PolicyFile policies(config->policy_file, config->limits);
  if (absl::Status loaded = policies.Reload(); !loaded.ok()) {
    Log(absl::StrCat("--policy_file: ", loaded.message()));
    return kBadFlags;
  }
  dedup::DedupService service(store->get(), config->limits, &metrics,
                              auth.get(), events->get(), &policies);
  dedup::AdminService admin(store->get(), &metrics, auth.get(),
                            {DEDUP_VERSION, DEDUP_GIT_SHA, durability},
                            &policies);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config->address,
                           dedup::ServerCredentialsFor(*security), &port);
  builder.RegisterService(&service);
  builder.RegisterService(&admin);
  std::unique_ptr<dedup::ClusterService> cluster_service;
  if (replicated != nullptr) {
    cluster_service =
        std::make_unique<dedup::ClusterService>(replicated, auth.get());
    builder.RegisterService(cluster_service.get());
  }
  dedup::BenchService bench;
  if (config->enable_bench_service) builder.RegisterService(&bench);
  dedup::ApplyTransportLimits(config->transport, &builder);
  dedup::QuietProtobufParseErrors();
  {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(dedup::UnparseableRequestInterceptor(&metrics));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  builder.SetMaxReceiveMessageSize(
      std::max<int>(4 << 20, static_cast<int>(config->limits.max_result_bytes) +
                                 kMessageOverheadBytes));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    Log(absl::StrCat("cannot listen on ", config->address,
                     " (address in use or invalid?)"));
    return kListen;
  }
  // Probes that cannot speak TLS get the same health status in plaintext,
  // on a listener that serves nothing else.
  std::vector<grpc::HealthCheckServiceInterface*> health = {
      server->GetHealthCheckService()};
  std::unique_ptr<grpc::Server> health_server;
  std::string health_address;  // as bound
  if (!config->health_address.empty()) {
    grpc::ServerBuilder health_builder;
    int health_port = 0;
    health_builder.AddListeningPort(config->health_address,
                                    grpc::InsecureServerCredentials(),
                                    &health_port);
    health_server = health_builder.BuildAndStart();
    if (health_server == nullptr || health_port == 0) {
      Log(absl::StrCat("cannot listen on ", config->health_address,
                       " (--health_address: in use or invalid?)"));
      server->Shutdown();
      return kListen;
    }
    // It serves none of them, so it must be told their names.
    for (const char* name : {dedup::v1::Dedup::service_full_name(),
                             dedup::v1::Admin::service_full_name()}) {
      health_server->GetHealthCheckService()->SetServingStatus(name, true);
    }
    if (cluster_service != nullptr) {
      health_server->GetHealthCheckService()->SetServingStatus(
          dedup::v1::Cluster::service_full_name(), true);
    }
    health.push_back(health_server->GetHealthCheckService());
    health_address =
        absl::StrCat(HostOf(config->health_address), ":", health_port);
    Log(absl::StrCat("health (plaintext, grpc.health.v1 only) on ",
                     health_address));
  }

  // For people; programs read --ready_file.
  std::fprintf(stderr,
               "dedupd listening on %s:%d (data_dir=%s durability=%s tls=%s "
               "auth=%s%s)\n",
               HostOf(config->address).c_str(), port,
               config->store.path.c_str(), durability.c_str(),
               !security->tls()                       ? "off"
               : security->tls_client_ca_file.empty() ? "on"
                                                      : "mtls",
               auth->enabled() ? "tenants" : "off",
               cluster->enabled
                   ? absl::StrCat(" node=", cluster->store.raft.id,
                                  " raft=", cluster->store.raft.raft_address)
                         .c_str()
                   : "");
  std::fflush(stderr);
  dedup::ReadyInfo ready;
  ready.pid = getpid();
  ready.mode = cluster->enabled ? "cluster" : "single";
  ready.node_id = cluster->enabled ? cluster->store.raft.id : 0;
  ready.address = absl::StrCat(HostOf(config->address), ":", port);
  ready.metrics_address = metrics_address;
  ready.health_address = health_address;
  ready.raft_address = cluster->enabled ? cluster->store.raft.raft_address : "";
  ready.data_dir = config->store.path;
  ready.durability = durability;
  ready.tls = !security->tls()                       ? "off"
              : security->tls_client_ca_file.empty() ? "on"
                                                     : "mtls";
  ready.auth = auth->enabled() ? "tenants" : "off";
  ready.version = DEDUP_VERSION;
  if (!config->ready_file.empty()) {
    if (absl::Status s = dedup::WriteReadyFile(config->ready_file, ready);
        !s.ok()) {
      Log(std::string(s.message()));
      server->Shutdown();
      return kListen;
    }
  }

  // A node that cannot write says so to health checks (in a group, only for
  // want of disk space: a follower's refusals are normal).
  std::function<absl::Status()> storage_check;
  if (replicated == nullptr) {
    storage_check = [s = store->get()] { return s->CheckServing(); };
  } else {
    storage_check = [replicated] { return replicated->CheckDiskSpace(); };
  }
  auto health_watch = std::make_unique<dedup::HealthWatch>(
      std::move(storage_check), health,
      absl::Milliseconds(kHealthWatchIntervalMs));

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) == 0 &&
         signal_number == SIGHUP) {
    if (auth->enabled()) {
      Log("received SIGHUP, reloading the tenants file");
      auth->Reload().IgnoreError();  // logged; the old tenants stay
    }
    if (!policies.path().empty()) {
      if (absl::Status s = policies.Reload(); s.ok()) {
        Log(absl::StrCat("received SIGHUP, reloaded the policy file (",
                         policies.Current()->size(), " policies)"));
      } else {
        Log(absl::StrCat("policy file not reloaded, the old policy stays: ",
                         s.message()));
      }
    }
  }
  Log(absl::StrCat("received ", strsignal(signal_number),
                   ", draining in-flight calls"));
  health_watch.reset();
  for (grpc::HealthCheckServiceInterface* h : health) h->Shutdown();
  // A leader hands over first, so the group elects no one while this node
  // drains: clients see one redirect instead of an election's silence.
  if (replicated != nullptr &&
      replicated->GetClusterStatus().consensus.role == dedup::Role::kLeader) {
    absl::Notification transferred;
    replicated->TransferLeadership(0, [&transferred](absl::Status s) {
      if (!s.ok()) Log(absl::StrCat("leadership transfer: ", s.message()));
      transferred.Notify();
    });
    transferred.WaitForNotificationWithTimeout(absl::Seconds(3));
  }
  // Stopping the metrics endpoint takes over a second (civetweb polls); do it
  // while the calls drain. Its collectors read the store, so it must be gone
  // before the store closes.
  std::thread stop_metrics([&exposer] { exposer.reset(); });
  // Lame duck: new calls are answered UNAVAILABLE (retryable: clients go
  // to another node or come back later) while those in flight finish; only
  // then do connections close, which would cancel whatever is on them.
  service.EnterLameDuck();
  // Parked Begins would otherwise hold the drain for up to their wait_ms.
  (*store)->DrainWaiters();
  const auto drain_start = std::chrono::steady_clock::now();
  const auto grace_end =
      drain_start + std::chrono::milliseconds(config->shutdown_grace_ms);
  const auto lame_duck_end =
      drain_start + std::chrono::milliseconds(config->lame_duck_ms);
  while (std::chrono::steady_clock::now() < grace_end &&
         (metrics.calls_in_flight() > 0 ||
          std::chrono::steady_clock::now() < lame_duck_end)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server->Shutdown(std::chrono::system_clock::now() +
                   std::max(std::chrono::steady_clock::duration::zero(),
                            grace_end - std::chrono::steady_clock::now()));
  server->Wait();
  if (health_server != nullptr) health_server->Shutdown();
  stop_metrics.join();
  if (absl::Status s = (*store)->Close(); !s.ok()) {
    Log(absl::StrCat("error closing the store: ", s.message()));
    return kStopError;
  }
  if (!config->ready_file.empty()) {
    dedup::RemoveReadyFile(config->ready_file, ready.pid);
  }
  Log("stopped cleanly");
  return dedup::exit_code::kCleanStop;
}
